"""A report is composed of the sections every run has and, for each kind its runs are of, that kind's own
sections (its ``report`` facet, through the registry), each showing only its kind's runs: a comparison of an
inference run and an image run has a latency section with the inference run alone and an image section with
the image run alone, and one overview table in which a column one kind does not have is "—"."""

from __future__ import annotations

import json

import pytest
from report_factory import make_run, synth_requests

from gpuledger.cli.main import main
from gpuledger.kinds.image import report as image_report
from gpuledger.kinds.text import report as text_report
from gpuledger.kinds.train import report as train_report
from gpuledger.records.kinds import kind_named
from gpuledger.report import build_report, fmt
from gpuledger.report.kinds import report_of
from gpuledger.store import Store


def test_each_kinds_report_part_is_the_REPORT_of_its_report_facet() -> None:
    for name, module in (("text", text_report), ("image", image_report), ("train", train_report)):
        assert kind_named(name).facet("report") is module
        assert module.REPORT.name == name


def test_a_text_runs_report_has_the_text_sections_and_its_unit_stays_token(store: Store) -> None:
    run = make_run(store, synth_requests(40), label="text")
    data = build_report(store, [run])
    keys = [s.key for s in data.sections]
    assert keys[:6] == ["answer", "overview", "cost", "latency", "throughput", "telemetry"]
    assert store.get_run(run).unit == "token"
    assert report_of(store.get_run(run)) is text_report.REPORT


@pytest.mark.slow
def test_a_comparison_of_two_kinds_shows_each_kinds_sections_with_its_own_runs(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    text = make_run(store, synth_requests(40), label="text")
    code = main([
        "bench", "--task", "image", "--engine", "diffusers", "--model", "dummy:tiny-sd", "--steps", "2",
        "--height", "64", "--width", "64", "--num-images", "2", "--no-telemetry", "--label", "image",
        "--json",
    ])
    out = capsys.readouterr()
    assert code == 0, out.err
    image = json.loads(out.out)["id"]

    data = build_report(store, [text, image])
    keys = [s.key for s in data.sections]
    assert keys.index("latency") < keys.index("throughput") < keys.index("images") < keys.index("telemetry")
    assert {row[0] for t in data.section("latency").tables for row in t.rows} == {"text"}
    assert {row[0] for t in data.section("throughput").tables for row in t.rows} == {"text"}
    assert {row[0] for t in data.section("images").tables for row in t.rows} == {"image"}
    assert not any("image" in line for line in data.section("latency").not_measured)

    overview = data.section("overview").tables[0]
    rows = {row[0]: dict(zip(overview.columns, row, strict=True)) for row in overview.rows}
    assert rows["text"]["images/s"] == fmt.MISSING and rows["image"]["output tok/s"] == fmt.MISSING
    assert rows["image"]["images"] == "2" and rows["text"]["output tok/s"] != fmt.MISSING
    how = data.section("how_measured").tables[0]
    units = {row[0]: dict(zip(how.columns, row, strict=True))["unit of work"] for row in how.rows}
    assert units == {"text": "token", "image": "image"}
