"""The report's comparison takes the ratio apart and says what differs (issue 28): built by ``build_report``
from imported shipped points, its cost section holds the throughput ratio's parts (a table, and a bar figure
of each factor's log10), the like-for-like table with both sides of each difference, and its answer names
the biggest part — in the terminal, Markdown and HTML alike."""

from __future__ import annotations

import json
import math
import re

import pytest
from rich.console import Console

from gpuledger.cli.main import main
from gpuledger.report import build_report
from gpuledger.report.html import render_html
from gpuledger.report.markdown import render_markdown
from gpuledger.report.model import Table
from gpuledger.report.terminal import render_terminal
from gpuledger.store import Store


def imported(name: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``gpuledger import-results NAME``, as the user runs it: label -> run id."""
    assert main(["import-results", name, "--json"]) == 0
    return {row["label"]: row["id"] for row in json.loads(capsys.readouterr().out)["imported"]}


def one(runs: dict[str, str], *words: str) -> str:
    (found,) = [run_id for label, run_id in runs.items() if all(w in label for w in words)]
    return found


def table(tables: tuple[Table, ...], key: str) -> Table:
    return next(t for t in tables if t.key == key)


def test_the_b200_against_mi300x_report_takes_the_ratio_apart_and_names_the_generation_gap(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    ix = imported("inferencex-deepseek-r1-b200-vs-mi300x", capsys)
    b200, mi300x = one(ix, "B200", "23 tok/s"), one(ix, "MI300X", "23 tok/s")
    report = build_report(store, [b200, mi300x], {b200: "b200-own", mi300x: "mi300x-own"})
    cost = report.section("cost")
    parts = table(cost.tables, "throughput_parts")
    assert [row[2] for row in parts.rows] == ["hardware", "precision", "software", "load"]
    assert parts.rows[0][3] == "1.509" and parts.rows[3][3] == "5.189"  # 8 vs 5.3 TB/s; 226 vs 14 in flight
    assert "peak memory bandwidth per device (TB/s): 8 (catalog) vs 5.30 (catalog)" in parts.rows[0][5]
    like = table(cost.tables, "like_for_like")
    generation = next(row for row in like.rows if row[2] == "generation")
    assert generation[3:6] == ("differs", "NVIDIA B200: Blackwell, 2024?", "AMD Instinct MI300X: CDNA3, 2023")
    (figure,) = [f for f in cost.figures if f.key.startswith("ratio_parts_")]
    (series,) = figure.series
    assert series.x == ("hardware", "precision", "software", "load", "utilisation", "hourly cost (B/A)")
    pair = report.numbers.comparison.pairs[0]  # type: ignore[union-attr]
    assert sum(series.y) == pytest.approx(math.log10(pair.ratio))  # the bars add up to the ratio
    assert math.prod(p.factor for p in pair.decomposition.throughput_parts) == pytest.approx(
        pair.decomposition.throughput_ratio)
    answer = next(a for a in report.section("answer").answers if " vs " in a.title)
    assert any("the biggest part: load" in w for w in answer.why)
    assert any(w.startswith("not like for like: 2 differences (generation, framework?)") for w in answer.why)

    md = render_markdown(report)
    assert "**The throughput ratio taken apart: hardware × precision × software × load**" in md
    assert "| generation | differs | NVIDIA B200: Blackwell, 2024? | AMD Instinct MI300X: CDNA3, 2023 |" in md
    html = render_html(report)
    assert f'id="fig-{figure.key}"' in html and 'id="table-like_for_like"' in html
    console = Console(width=100, record=True)
    render_terminal(report, console)
    text = re.sub(r"\s+", " ", console.export_text())
    assert "The throughput ratio taken apart" in text and "Like for like: what differs" in text


def test_one_submitters_h200_and_mi325x_at_one_price_tier_report_like_for_like(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    v51 = imported("mlperf-v5.1-llama2-70b", capsys)
    h200, mi325x = one(v51, "Quanta", "H200", "Offline"), one(v51, "Quanta", "MI325X", "Offline")
    report = build_report(store, [h200, mi325x], {h200: "h200-inferencex-hyperscaler",
                                                  mi325x: "mi325x-inferencex-hyperscaler"})
    like = table(report.section("cost").tables, "like_for_like")
    (stack,) = like.rows  # each vendor's own framework: what a cross-vendor ratio measures
    assert stack[2:4] == ("framework", "expected (each vendor's own)")
    assert stack[4:6] == ("TensorRT 10.8", "vLLM 0.6.5.dev964+mlperf50")
    parts = table(report.section("cost").tables, "throughput_parts")
    assert [row[2] for row in parts.rows] == ["hardware", "remainder"]
    assert parts.rows[1][4].startswith("unexplained remainder: precision, software, load together, not split")
