"""``gpuledger import-results FILE``: one row per published point becomes one stored run of origin
"published"; a bad row is ONE error naming its row and column, and then nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import load_summary
from gpuledger.store import open_store

HEADER = "gpu,gpus,model,input_len,output_len,output_tokens_per_s,source,date"
GOOD = "b200,8,Llama 3 70B,1024,1024,12000,Vendor blog,2026-05-01"


def _csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "points.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _stored_runs() -> int:
    with open_store() as store:
        return len(store.list_runs())


def test_each_row_becomes_a_published_run_with_its_source(cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, GOOD, "mi300x,8,Llama 3 70B,1024,1024,9000,Vendor blog,2026-05-01")
    doc = cli("import-results", str(path))
    assert [r["gpu"] for r in doc["imported"]] == ["b200", "mi300x"]
    with open_store() as store:
        run = store.get_run(doc["imported"][0]["id"])
    summary = run.summary
    assert isinstance(summary, PublishedSummary)
    assert run.engine == "published" and run.status == "complete" and run.model == "Llama 3 70B"
    origin = summary.origin()
    assert (origin.kind, origin.source, origin.date) == ("published", "Vendor blog", "2026-05-01")
    assert origin.gpus == 8
    assert origin.label == "published by Vendor blog (2026-05-01), not measured here"
    # the rates as published, and the derived ones said to be derived
    assert summary.output_tokens_per_s == 12000
    assert summary.input_tokens_per_s == pytest.approx(12000 * 1024 / 1024)
    assert summary.published_rates == ["output_tokens_per_s"]
    assert "input tok/s = output tok/s x input_len 1024 / output_len 1024" in summary.derivation
    # the stored document is its own kind and reads back as it was
    stored = summary.to_dict()
    assert stored["kind"] == "published_inference"
    assert load_summary(stored) == summary


def test_a_published_total_rate_is_split_by_the_lengths_and_said_to_be_derived(cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, "b200,1,DeepSeek R1,8192,1024,5856.9",
                header="gpu,gpus,model,input_len,output_len,total_tokens_per_s")
    run_id = cli("import-results", str(path))["imported"][0]["id"]
    with open_store() as store:
        summary = store.get_run(run_id).summary
    assert isinstance(summary, PublishedSummary)
    assert summary.total_tokens_per_s == 5856.9
    assert summary.output_tokens_per_s == pytest.approx(5856.9 * 1024 / 9216)
    assert summary.input_tokens_per_s == pytest.approx(5856.9 * 8192 / 9216)
    figures = dict(summary.key_figures())
    assert figures["tokens"].source == "published by the file points.csv (undated), not measured here"
    assert figures["output tokens"].source.startswith("derived from the published total rate; published by")


def test_yaml_and_json_hold_the_same_rows(cli, tmp_path: Path) -> None:
    row = {"gpu": "H200", "gpus": 8, "model": "m", "input_len": 512, "output_len": 128,
           "output_tokens_per_s": 4000.5, "ttft_ms": 120, "tpot_ms": 20, "concurrency": 64}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"source": "Lab notes", "date": "2026-03-04",
                                                      "points": [row]}))
    (tmp_path / "p.json").write_text(__import__("json").dumps([{**row, "source": "Lab notes"}]))
    a = cli("import-results", str(tmp_path / "p.yaml"))["imported"][0]
    b = cli("import-results", str(tmp_path / "p.json"))["imported"][0]
    assert a["gpu"] == b["gpu"] == "h200"
    assert a["output_tokens_per_s"] == b["output_tokens_per_s"] == 4000.5
    assert a["published_by"] == "published by Lab notes (2026-03-04)"
    assert b["published_by"] == "published by Lab notes (undated)"


@pytest.mark.parametrize(
    ("rows", "header", "where"),
    [
        ((GOOD, "b200,8,m,1024,1024,-5,Vendor,2026-05-01"), HEADER,
         "row 2 (line 3), column output_tokens_per_s: Input should be greater than 0 (got '-5')"),
        ((GOOD, GOOD, "b200,8,m,1024,1024,inf,Vendor,2026-05-01"), HEADER,
         "row 3 (line 4), column output_tokens_per_s: Input should be a finite number"),
        (("b200,8,m,1024,1024,nan,Vendor,2026-05-01",), HEADER, "row 1 (line 2), column output_tokens_per_s"),
        (("B2000,8,m,1024,1024,10,Vendor,2026-05-01",), HEADER,
         "row 1 (line 2), column gpu: 'B2000' is not in the GPU catalog; did you mean:"),
        (("b200,0,m,1024,1024,10,Vendor,2026-05-01",), HEADER, "row 1 (line 2), column gpus:"),
        (("b200,8,m,1024,1024,,Vendor,2026-05-01",), HEADER,
         "row 1 (line 2), column output_tokens_per_s: required"),
        (("b200,8,,1024,1024,10,Vendor,2026-05-01",), HEADER, "row 1 (line 2), column model: required"),
        (("b200,8,m,1024,1024,10,Vendor,01/05/2026",), HEADER, "row 1 (line 2), column date:"),
        (("b200,8,m,1024,1024,10,Vendor,2026-05-01,extra",), HEADER,
         "row 1 (line 2): 9 cells but the header names 8 columns"),
        (("b200,8,m,1024,1024,10,5",), "gpu,gpus,model,input_len,output_len,output_tokens_per_s,"
         "total_tokens_per_s", "row 1 (line 2), column total_tokens_per_s: 5 is not more than"),
        (("b200,8,m,1024,1024,10,x",), "gpu,gpus,model,input_len,output_len,output_tokens_per_s,"
         "publisher_profile", "row 1 (line 2), column publisher_profile: 'x' is not a built-in preset"),
    ],
)
def test_a_bad_row_is_one_error_naming_row_and_column_and_nothing_is_stored(
    cli, tmp_path: Path, rows: tuple[str, ...], header: str, where: str
) -> None:
    result = cli("import-results", str(_csv(tmp_path, *rows, header=header)), json_out=False)
    assert result.exit_code == 4, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert where in result.output
    assert "nothing was imported" in lines[0]
    assert "Traceback" not in result.output
    assert _stored_runs() == 0


def test_an_unknown_column_is_refused_with_the_closest_name(cli, tmp_path: Path) -> None:
    result = cli("import-results", str(_csv(tmp_path, "b200,8,m,1,1,10", header="gpu,gpus,model,input_len,"
                                             "output_len,output_token_per_s")), json_out=False)
    assert result.exit_code == 4
    wanted = "column 6 'output_token_per_s': not a column (did you mean 'output_tokens_per_s'?)"
    assert wanted in result.output
    assert _stored_runs() == 0


def test_yaml_rows_refuse_booleans_control_characters_and_unknown_keys(cli, tmp_path: Path) -> None:
    base = {"gpu": "b200", "gpus": 1, "model": "m", "input_len": 1, "output_len": 1, "output_tokens_per_s": 1}
    for bad, message in (
        ({"gpus": True}, "row 2, column gpus: must be a number or a text, not true/false"),
        ({"label": "a\x1b[31mred"}, "row 2, column label: must not contain control characters"),
        ({"colour": "red"}, "row 2, column colour: not a column"),
        ({"url": "javascript:alert(1)"}, "row 2, column url: must be an http(s) address"),
    ):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump([base, {**base, **bad}]))
        result = cli("import-results", str(path), json_out=False)
        assert result.exit_code == 4 and message in result.output, result.output
    assert _stored_runs() == 0


def test_files_that_are_not_points_are_one_line_errors(cli, tmp_path: Path) -> None:
    missing = cli("import-results", str(tmp_path / "none.csv"), json_out=False)
    assert missing.exit_code == 3 and "no such file" in missing.output
    (tmp_path / "x.txt").write_text("hello")
    assert cli("import-results", str(tmp_path / "x.txt"), json_out=False).exit_code == 4
    (tmp_path / "b.csv").write_bytes(b"gpu,gpus\n\xff\xfe\x00")
    binary = cli("import-results", str(tmp_path / "b.csv"), json_out=False)
    assert binary.exit_code == 4 and "not UTF-8" in binary.output
    (tmp_path / "m.yaml").write_text("gpu: b200\n")
    mapping = cli("import-results", str(tmp_path / "m.yaml"), json_out=False)
    assert mapping.exit_code == 4 and "top-level key 'gpu' is not one of points" in mapping.output
    (tmp_path / "deep.yaml").write_text("[" * 5000)
    deep = cli("import-results", str(tmp_path / "deep.yaml"), json_out=False)
    assert deep.exit_code == 4 and "nested too deeply" in deep.output
    unknown = cli("import-results", "inferencex-no-such-set", json_out=False)
    assert unknown.exit_code == 3 and "gpuledger public" in unknown.output
    assert _stored_runs() == 0


def test_the_store_writes_all_runs_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """One transaction: when the second insert fails (its id is taken), the first is rolled back too."""
    import itertools

    from gpuledger.errors import StoreError
    from gpuledger.records import RunInfo
    from gpuledger.store import repository

    with open_store() as store:
        store.create_run(RunInfo(id="taken001", label="already here", status="complete"))
        ids = itertools.cycle(["fresh001", "taken001"])
        monkeypatch.setattr(repository, "new_run_id", lambda: next(ids))
        with pytest.raises(StoreError):
            store.create_runs([RunInfo(id="", label="a", status="complete"),
                               RunInfo(id="", label="b", status="complete")])
        assert [r.id for r in store.list_runs()] == ["taken001"]


def test_the_json_document_is_the_typed_import_and_the_table_shows_its_points(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuledger.cli.published_cmds import ImportDocument

    monkeypatch.setenv("COLUMNS", "200")
    path = _csv(tmp_path, GOOD, "mi300x,8,Llama 3 70B,1024,1024,9000,Vendor blog,2026-05-01")
    doc = ImportDocument.model_validate(cli("import-results", str(path)))
    assert doc.source == str(path) and [p.gpu for p in doc.imported] == ["b200", "mi300x"]
    with open_store() as store:
        for point in doc.imported:  # each point is the run it names, as stored
            run = store.get_run(point.id)
            assert (point.model, point.label) == (run.model, run.label)
            assert point.output_tokens_per_s == run.summary.rate("output_token")
    shown = cli("import-results", str(path), json_out=False)
    assert shown.exit_code == 0
    rows = [line for line in shown.stdout.splitlines() if "Vendor blog" in line]
    assert len(rows) == 2
    assert "8 x b200" in rows[0] and "12,000.0 output tok/s" in rows[0]
    assert "8 x mi300x" in rows[1] and "9,000.0 output tok/s" in rows[1]
