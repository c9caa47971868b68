"""`gpuledger run`, end to end on this machine's CPU: doctor → bench → cost → report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from gpuledger.store import open_store

pytest.importorskip("torch", reason="`gpuledger run` needs torch (pip install '.[torch]')")


def test_run_end_to_end_on_the_cpu_with_a_builtin_architecture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "report.html"
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    rc = main(["run", "--device", "cpu", "--model", "dummy:smollm2-135m", "--quick", "--html", str(html),
               "--db", db, "--json"])
    out, _err = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out)  # stdout is the JSON document and nothing else
    assert doc["status"] == "complete" and doc["model"]["name"] == "dummy:smollm2-135m"
    assert doc["device"]["type"] == "cpu" and doc["dtype"] == "fp32"
    m = doc["metrics"]
    assert m["output_tokens_per_s"] > 0 and m["ttft_ms_p50"] > 0 and m["num_requests"] == 2
    # power: measured, or the reason it is not (no RAPL on these VMs)
    p = doc["power"]
    assert p["measured_w"] is not None or p["reason"]
    assert doc["cost"] is not None and doc["cost"]["per_1m_tokens"] > 0
    # the same hour buys fewer output tokens than tokens in and out: output is priced higher per token
    assert doc["cost"]["per_1m_output_tokens"] > doc["cost"]["per_1m_tokens"]
    assert doc["cost"]["currency"] == "USD" and doc["cost"]["profile"].startswith("cpu-cloud")
    if p["measured_w"] is None:  # the cpu-cloud profile is a rental: its price includes the energy
        assert p["priced_w"] is None and "rental includes energy" in p["priced_source"]
    assert doc["report_html"] == str(html.resolve())
    assert html.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert doc["doctor"] is not None and doc["doctor"]["stored_id"] is not None
    assert doc["memory"]["peak"]["value"] > 0 and doc["memory"]["estimate"]["fits"] is True

    store = open_store(db)
    try:
        run = store.get_run(doc["run_id"])
        assert run.engine == "torch" and run.model == "dummy:smollm2-135m"
        assert len(store.get_requests(run.id)) == 2
        assert len(store.list_doctor_runs()) == 1
    finally:
        store.close()


def test_run_prints_the_summary_a_person_reads(
    tiny_llama_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "r.html"
    rc = main(["run", "--device", "cpu", "--model", str(tiny_llama_dir), "--quick", "--html", str(html),
               "--db", f"sqlite:///{tmp_path / 'runs.sqlite'}"])
    out, _err = capsys.readouterr()
    assert rc == 0
    assert "output tok/s" in out
    assert "TTFT" in out and " ms" in out
    assert "power" in out
    assert "per 1M tokens" in out
    assert str(html.resolve()) in out.replace("\n", "")


def test_a_model_that_cannot_fit_ends_with_one_line_and_exit_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["run", "--device", "cpu", "--model", "dummy:llama-3.1-8b", "--memory-budget", "4",
               "--db", f"sqlite:///{tmp_path / 'runs.sqlite'}", "--json"])
    out, err = capsys.readouterr()
    assert rc == 8
    assert out == ""
    assert "does not fit" in err and "Traceback" not in err


def test_without_torch_run_says_how_to_install_it_and_exits_7(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    rc = main(["run", "--db", f"sqlite:///{tmp_path / 'runs.sqlite'}"])
    out, err = capsys.readouterr()
    assert rc == 7
    assert "torch not installed: pip install 'gpuledger[torch]'" in err
    assert "Traceback" not in err and out == ""


def test_a_bad_profile_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["run", "--device", "cpu", "--profile", "no-such-profile",
               "--db", f"sqlite:///{tmp_path / 'runs.sqlite'}"])
    _out, err = capsys.readouterr()
    assert rc == 3 and "no-such-profile" in err
    store = open_store(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    try:
        assert store.list_runs() == []
    finally:
        store.close()
