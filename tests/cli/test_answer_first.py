"""The answer comes first on the terminal too: `bench` (of a sweep: the rate of the stage `cost` prices, with
the rule, never the blend of all stages), `show`, `cost`, `compare`, `report` and `run` open with the same
headline the HTML report opens with, and fit 80 and 120 columns.

The runs are the golden store's (real bench runs against the loopback server, an in-process torch run, an
H200 run and an MI300X sweep); `run` is a real `gpuledger run --quick` on this machine's CPU.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from termcheck import cut_numbers, missing_whole, split_in_cells, too_wide
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.kinds.pipeline import RunResult
from gpuledger.report import fmt
from gpuledger.store import Store, open_store

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
IDS: dict[str, str] = json.loads((GOLDEN / "ids.json").read_text())


@pytest.fixture(scope="module")
def golden_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("golden-answer")
    shutil.copy(GOLDEN / "store-v1.sqlite", d / "store.sqlite")
    return f"sqlite:///{d / 'store.sqlite'}"


@pytest.fixture()
def golden_store(golden_db: str) -> Iterator[Store]:
    store = open_store(golden_db)
    try:
        yield store
    finally:
        store.close()


def _invoke(args: list[str], columns: int, db: str) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "GPULEDGER_DB": db})
    assert result.exit_code == 0, result.output
    return result.stdout


def _bench_text(store: Store, run_id: str, columns: int, capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> str:
    """What `gpuledger bench` printed at the end of this run (its renderer, on the stored run)."""
    from gpuledger.cli.bench_render import render_run

    monkeypatch.setenv("COLUMNS", str(columns))
    capsys.readouterr()
    render_run(store.get_run(run_id))
    return capsys.readouterr().out


def test_bench_of_a_sweep_leads_with_the_priced_stage_not_the_blend_of_all_stages(
    golden_store: Store, golden_db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = IDS["srv_sweep"]
    args = ["cost", run_id, "--profile", "cpu-cloud", "--no-save", "--json"]
    cost = json.loads(_invoke(args, 200, golden_db))
    op = cost["operating_point"]
    priced = next(s for s in op["stages"] if s["stage"] == op["stage"])
    blend = golden_store.get_run(run_id).summary
    assert blend is not None
    out = _bench_text(golden_store, run_id, 120, capsys, monkeypatch)
    lines = out.splitlines()
    # the first lines: the priced stage's rate, named, and the rule that priced it
    assert lines[1] == f"{fmt.num(priced['output_tokens_per_s'])} output tok/s at stage {op['stage']}  " \
                       "(the stage gpuledger cost prices)"
    head = "\n".join(lines[:15]).replace("\n    ", " ")  # the answer: its facts (MBU / MFU too), then why
    assert f"priced at stage {op['stage']}: the highest output tok/s among the stages" in head
    assert "blends 3 loads: no load runs at that rate" in head
    # every stage side by side, the priced one marked; the blend is labelled as such, further down
    for st in op["stages"]:
        mark = " ◀ priced" if st["stage"] == op["stage"] else ""
        assert any(line.startswith(f"│ {st['stage']}{mark}") for line in lines), st["stage"]
    blended = next(line for line in lines if "output throughput" in line)
    assert "every stage together" in blended and f"{blend.rate('output_token'):,.1f} tok/s" in blended
    assert lines.index(blended) > next(i for i, line in enumerate(lines) if "◀ priced" in line)


@pytest.mark.parametrize("run", ["srv_sweep", "srv_c4", "srv_faults", "srv_interrupted", "srv_chat", "torch",
                                 "h200", "mi300x_sweep"])
def test_bench_output_fits_80_and_120_columns(
    run: str, golden_store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    info = golden_store.get_run(IDS[run])
    assert info.summary is not None
    figures = [fmt.num(info.summary.rate("output_token"))] if not info.summary.stage_summaries() else []
    wide = _bench_text(golden_store, IDS[run], 1000, capsys, monkeypatch)
    for width in (80, 120):
        out = _bench_text(golden_store, IDS[run], width, capsys, monkeypatch)
        assert not too_wide(out, width), too_wide(out, width)
        assert not cut_numbers(out, wide), cut_numbers(out, wide)
        assert not split_in_cells(out), split_in_cells(out)
        assert not missing_whole(out, figures), out


@pytest.mark.parametrize(
    ("args", "first"),
    [
        (["cost", IDS["h200"], "--profile", "h200-own", "--no-save"], "h200-vllm (run {h200})"),
        (["report", IDS["h200"], "--profile", "h200-own"], "h200-vllm"),
        (["estimate", IDS["h200"], "--gpu", "MI300X"], None),
    ],
)
def test_cost_report_and_estimate_open_with_the_price_of_the_headline_unit(
    args: list[str], first: str | None, golden_db: str
) -> None:
    doc = json.loads(_invoke([*args, "--json"], 200, golden_db))
    cost: dict[str, Any] = (
        doc["numbers"]["runs"][0]["cost"] if args[0] == "report" else doc.get("cost", doc)
    )
    price = f"{fmt.num(cost['usd_per_1m_output_tokens'])} USD per 1M output tokens"
    lines = [line for line in _invoke(args, 80, golden_db).splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(price))
    assert at <= 4, lines[:6]  # after the title (the report's name; the ESTIMATE label and its scale)
    assert not any("┃" in line for line in lines[:at]), "a table before the answer"
    if first is not None:
        assert lines[at - 1] == first.format(**IDS)


def test_compare_opens_with_the_ratio(golden_db: str) -> None:
    args = ["compare", IDS["h200"], IDS["mi300x_sweep"], "--profile", f"{IDS['h200']}=h200-own",
            "--profile", f"{IDS['mi300x_sweep']}=mi300x-own"]
    doc = json.loads(_invoke([*args, "--json"], 200, golden_db))
    lines = _invoke(args, 80, golden_db).splitlines()
    assert lines[0] == f"{IDS['h200']} vs {IDS['mi300x_sweep']}"
    assert lines[1].startswith(f"{fmt.num(doc['pairs'][0]['ratio'])}x the output tokens per USD")
    assert any(line.startswith("  why: = throughput ") for line in lines[2:8]), lines[:8]


def test_show_opens_with_the_measured_headline_and_the_last_price(golden_db: str) -> None:
    run_id = IDS["mi300x_sweep"]
    cost = json.loads(_invoke(["cost", run_id, "--profile", "mi300x-own", "--json"], 200, golden_db))  # saved
    lines = _invoke(["show", run_id], 80, golden_db).splitlines()
    op = cost["operating_point"]
    assert lines[0] == f"run {run_id} (mi300x-vllm-sweep)"
    assert lines[1].startswith(f"{fmt.num(cost['throughput']['output_tokens_per_s'])} output tok/s at stage "
                               f"{op['stage']}")
    text = "\n".join(lines)
    assert f"last priced: {fmt.num(cost['usd_per_1m_output_tokens'])} USD per 1M output tokens (profile " \
           "mi300x-own" in text
    assert text.index("last priced") < text.index("Per stage of the sweep") < text.index(f"run {run_id} ─")


def _run_pipeline(tmp_path: Path, *, task: str, profile: str, model: str | None = None) -> RunResult:
    """`gpuledger run --quick` on this CPU through the library (the pipeline the command calls), the report
    written with the command's own file writer."""
    from gpuledger.cli import files
    from gpuledger.kinds.pipeline import PipelineHooks, RunOptions, run_pipeline

    options = RunOptions(task=task, device="cpu", model=model, quick=True, profile=profile,
                         html=tmp_path / "r.html", db=f"sqlite:///{tmp_path / 'runs.sqlite'}")
    return run_pipeline(options, PipelineHooks(files=files))


@pytest.mark.slow
def test_run_opens_with_the_price_and_prints_its_power_rule_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpuledger run` on this CPU: priced as owned hardware (no power reading here: the CodeCarbon TDP
    rule is what the price rests on), the answer first, the rule once, 80 and 120 columns."""
    pytest.importorskip("torch", reason="`gpuledger run` needs torch")
    from gpuledger.cli import run_cmd

    box = tmp_path / "cpu-box.yaml"
    box.write_text("name: cpu-box\nhost_price: 1500\nelectricity_per_kwh: 0.14\npue: 1.0\n")
    result = _run_pipeline(tmp_path, task="text", model="dummy:smollm2-135m", profile=str(box))
    doc = result.document()
    assert doc["cost"] is not None
    price = f"{fmt.num(doc['cost']['per_1m_output_tokens'])} USD per 1M output tokens"
    monkeypatch.setenv("COLUMNS", "1000")
    run_cmd.render(result)
    wide = capsys.readouterr().out
    for width in (80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        run_cmd.render(result)
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if line.strip()]
        # the header (what ran where: one line or more, by the CPU's name), the run id, then the price
        head = next(i for i, line in enumerate(lines) if line.startswith("run "))
        assert lines[head + 1].startswith(price), lines[:head + 2]
        assert not too_wide(out, width) and not cut_numbers(out, wide) and not split_in_cells(out), out
        if doc["power"]["measured_w"] is None:  # no RAPL here: the price rests on the TDP rule
            assert out.count("CodeCarbon") == 1, out


@pytest.mark.slow
@pytest.mark.parametrize(("task", "unit", "key", "prices"), [
    ("train", "USD per 1M training tokens", "usd_per_1m_training_tokens",
     {"usd_per_1k_steps", "usd_per_1k_samples", "training_tokens_per_usd"}),
    ("image", "USD per 1,000 images", "usd_per_1k_images",
     {"usd_per_1m_denoising_steps", "usd_per_request", "images_per_usd"}),
])
def test_run_of_a_training_or_image_task_opens_with_the_price_like_a_text_run(
    task: str, unit: str, key: str, prices: set[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`gpuledger run --task train|image --quick` on this CPU: the same answer as `cost` and `report` first
    (the price of the task's unit, the verdict, the key figures, the why lines), then the task's own line;
    80 and 120 columns without a number cut."""
    pytest.importorskip("torch", reason="`gpuledger run` needs torch")
    if task == "image":
        pytest.importorskip("diffusers", reason="`gpuledger run --task image` needs diffusers")
    from gpuledger.cli.run_cmd import render

    result = _run_pipeline(tmp_path, task=task, profile="cpu-cloud")
    doc = result.document()
    assert doc["cost"] is not None, doc
    price = f"{fmt.num(doc['cost'][key])} {unit}"
    assert doc["answer"]["headline"] == price
    # the price of every unit the run is priced in, and what one USD buys of what it yields (cost's keys)
    assert set(doc["cost"]) == {"currency", "document", key, *prices}
    assert all(doc["cost"][k] == doc["cost"]["document"][k] for k in (key, *prices))
    monkeypatch.setenv("COLUMNS", "1000")
    render(result)
    wide = capsys.readouterr().out
    for width in (80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        render(result)
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if line.strip()]
        start = next(i for i, line in enumerate(lines) if line.startswith(f"run {doc['run_id']}"))
        assert lines[start + 1] == price, lines[: start + 3]
        assert out.index(price) < out.index("doctor:") < out.index("run id:")
        assert "validity:" in out and "why:" in out and "_per_" not in out  # no raw JSON keys
        assert not too_wide(out, width) and not cut_numbers(out, wide) and not split_in_cells(out), out
