"""``gpuledger report --trend LABEL`` (issue 29): a figure over time across stored runs made by the real
bench path, each stack change from the fingerprints marked — on the plot (HTML), in the Markdown and on the
terminal."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuledger.cli.main import main

Serve = Callable[..., Any]
Run = Callable[..., dict[str, Any]]
QUICK = ("--num-requests", "6", "--label", "nightly")


def figures_of(html: str) -> list[dict[str, Any]]:
    found = re.search(r'<script type="application/json" id="gl-figures">(.*?)</script>', html, re.S)
    assert found is not None
    figures: list[dict[str, Any]] = json.loads(found.group(1))
    return figures


def test_a_trend_over_5_runs_with_one_stack_change_draws_one_marker(
    serve: Serve, bench: Run, upgraded_torch: Callable[[str], None], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    srv = serve(ttft_s=0.005, itl_s=0.002)
    ids = [bench(srv.url, *QUICK)["id"] for _ in range(3)]
    upgraded_torch("2.99.0+cpu")
    ids += [bench(srv.url, *QUICK)["id"] for _ in range(2)]
    bench(srv.url, "--num-requests", "6", "--label", "other")  # not on this trend

    html, md = tmp_path / "trend.html", tmp_path / "trend.md"
    assert main(["report", "--trend", "nightly", "--json", "--html", str(html), "--md", str(md)]) == 0
    trend = json.loads(capsys.readouterr().out)
    assert [p["run_id"] for p in trend["points"]] == ids  # oldest first, the label's runs only
    assert all(p["value"] is not None and p["value"] > 0 for p in trend["points"])
    assert trend["metric"] == "throughput" and trend["unit"] == "output tok/s"
    (change,) = trend["changes"]
    assert change["index"] == 3 and change["run_id"] == ids[3] and change["before_run_id"] == ids[2]
    (drift,) = change["drifts"]
    assert drift["key"] == "torch" and drift["after"] == "2.99.0+cpu" and drift["matters"] is True

    (figure,) = figures_of(html.read_text())
    markers = [t for t in figure["data"] if t.get("legendgroup") == "stack-change"]
    assert len(markers) == 1
    (marker,) = markers
    line = next(t for t in figure["data"] if t.get("legendgroup") != "stack-change")
    assert len(line["y"]) == 5 and marker["x"][0] == marker["x"][1] == line["x"][3]
    assert "torch" in marker["name"] and marker["line"]["dash"] == "dot"

    text = md.read_text()
    assert text.count("◆ 1: torch") == 1 and "2.99.0+cpu" in text

    assert main(["report", "--trend", "nightly"]) == 0
    assert "◆ 1" in capsys.readouterr().out


def test_a_trend_of_a_key_figure_and_its_refusals(serve: Serve, bench: Run,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(ttft_s=0.005, itl_s=0.002)
    run = bench(srv.url, *QUICK)
    assert main(["report", "--model", run["model"], "--metric", "tpot_p50", "--json"]) == 0
    trend = json.loads(capsys.readouterr().out)
    assert trend["metric_label"] == "TPOT p50" and trend["unit"] == "ms" and trend["changes"] == []
    assert trend["points"][0]["value"] == pytest.approx(run["summary"]["tpot_ms"]["p50"])

    assert main(["report", "--trend", "nightly", "--metric", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --metric 'nope' is not a figure of these runs") and "tpot_p99" in err
    assert main(["report", "--trend", "no-such-label"]) == 3
    assert "no stored runs with label 'no-such-label'" in capsys.readouterr().err
    assert main(["report", run["id"], "--metric", "cost"]) == 2
    assert "--metric is the figure of a trend" in capsys.readouterr().err
    # A cost trend without a profile the runs can be priced under says why each point has no value.
    assert main(["report", "--trend", "nightly", "--metric", "cost", "--json"]) == 0
    (point,) = json.loads(capsys.readouterr().out)["points"]
    assert point["value"] is None and "no telemetry summary" in point["reason"]
