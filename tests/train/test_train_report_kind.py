"""A training run's report is a training report: made through ``gpuledger bench --task train`` with a dummy
model on this CPU, its terminal, Markdown and HTML reports show the training section and the run's steps and
training tokens, and nothing that belongs to inference (no latency, throughput or server-state part, no
TTFT, no token-per-request figure, no sweep advice); its answer counts steps, not requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from gpuledger.report import build_report
from gpuledger.report.headline import measured_answer
from gpuledger.store import open_store
from support.kind_reports import inference_words_in, report_texts

torch = pytest.importorskip("torch", reason="the training tests need torch (pip install '.[torch]')")

CLI = Callable[..., tuple[int, str, str]]


@pytest.fixture
def wide_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    monkeypatch.setenv("COLUMNS", "160")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def training_run(wide_cli: CLI) -> str:
    code, out, err = wide_cli(
        "bench", "--task", "train", "--engine", "torch", "--model", "dummy:smollm2-135m", "--batch-size", "2",
        "--seq-len", "32", "--steps", "4", "--device", "cpu", "--no-telemetry", "--json",
    )
    assert code == 0, err
    run_id: str = json.loads(out)["id"]
    return run_id


@pytest.mark.slow
def test_a_training_runs_report_says_nothing_of_inference_in_any_format(
    wide_cli: CLI, training_run: str, tmp_path: Path
) -> None:
    texts = report_texts(wide_cli, [training_run], tmp_path)
    assert inference_words_in(texts) == {"terminal": [], "markdown": [], "html": []}
    for text in texts.values():
        assert "Training (measured window)" in text  # the training section's table (its headers wrap)
    md = texts["markdown"]
    header = "| ok steps | failed | error rate (%) | window (s) | training tokens | training tok/s |"
    assert header + " steps/s |" in md
    assert "**Cost per run**" in md  # priced: the answer's and the cost's words are the kind's too
    assert "## Latency distributions" not in md and "## Throughput" not in md and "## Server state" not in md
    assert "What a unit of work (training tokens) costs" in md


@pytest.mark.slow
def test_a_training_runs_report_and_answer_speak_of_steps_and_training_tokens(training_run: str) -> None:
    with open_store(None) as store:
        data = build_report(store, [training_run])
        info = store.get_run(training_run)
    keys = [s.key for s in data.sections]
    assert keys == [
        "answer", "overview", "cost", "training", "telemetry", "labour", "how_measured", "environment"
    ]
    table = data.section("how_measured").tables[0]
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert row["unit of work"] == "training token" and row["ranks"] == "1"
    assert info.unit == "training_token"
    facts = dict(measured_answer(info).facts)
    assert facts["steps ok / failed"] == "4 / 0" and "requests ok / failed" not in facts
