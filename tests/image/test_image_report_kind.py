"""An image run's report is an image report: made through ``gpuledger bench --task image --engine diffusers``
with the tiny pipeline, its terminal, Markdown and HTML reports show the image section and the run's counts
and rates in images, and nothing that belongs to inference (no latency, throughput or server-state part, no
TTFT, no token unit, no sweep advice)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from gpuledger.report import build_report
from gpuledger.store import open_store
from support.kind_reports import inference_words_in, report_texts

pytest.importorskip("diffusers", reason="the tiny pipeline needs diffusers (pip install '.[image]')")

CLI = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    monkeypatch.setenv("COLUMNS", "160")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def image_run(cli: CLI) -> str:
    code, out, err = cli(
        "bench", "--task", "image", "--engine", "diffusers", "--model", "dummy:tiny-sd", "--steps", "2",
        "--height", "64", "--width", "64", "--num-images", "4", "--no-telemetry", "--json",
    )
    assert code == 0, err
    run_id: str = json.loads(out)["id"]
    return run_id


@pytest.mark.slow
def test_an_image_runs_report_says_nothing_of_inference_in_any_format(
    cli: CLI, image_run: str, tmp_path: Path
) -> None:
    texts = report_texts(cli, [image_run], tmp_path)
    assert inference_words_in(texts) == {"terminal": [], "markdown": [], "html": []}
    for text in texts.values():
        assert "Per image (measured window)" in text  # the image section's table (its headers wrap)
    md = texts["markdown"]
    assert "| ok requests | failed | error rate (%) | window (s) | images | images/s | images/min |" in md
    assert "**Cost per run**" in md  # priced: the answer's and the cost's words are the kind's too
    assert "## Latency distributions" not in md and "## Throughput" not in md and "## Server state" not in md
    assert "What a unit of work (images) costs" in md


@pytest.mark.slow
def test_an_image_runs_report_is_built_of_the_image_kinds_sections(image_run: str) -> None:
    with open_store(None) as store:
        data = build_report(store, [image_run])
    keys = [s.key for s in data.sections]
    assert keys == [
        "answer", "overview", "cost", "images", "telemetry", "labour", "how_measured", "environment"
    ]
    how = data.section("how_measured")
    table = how.tables[0]
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert row["unit of work"] == "image" and row["timed by"] == "diffusers"
    assert [term for term, _ in how.definitions] == ["Energy", "Cost per unit of work", "Money"]
