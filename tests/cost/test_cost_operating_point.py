"""A sweep is priced at one load — its operating point — never at the blend of its stages."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from cost_runs import MakeRun

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost import cost_of_run, load_profile
from gpuledger.cost.estimate import estimate_run
from gpuledger.errors import NotFoundError, UsageError
from gpuledger.records import RunInfo


def stage(name: str, tps: float, met: float | None = None, ttft: float = 100.0) -> dict[str, Any]:
    s: dict[str, Any] = {
        "stage": name,
        "concurrency": int(name.split("=")[1]),
        "window_s": 10.0,
        "num_requests": 100,
        "num_ok": 100,
        "output_tokens_total": tps * 10,
        "input_tokens_total": tps * 5,
        "output_tokens_per_s": tps,
        "input_tokens_per_s": tps / 2,
        "total_tokens_per_s": tps * 1.5,
        "requests_per_s": tps / 100,
        "ttft_ms": {"mean": ttft, "p50": ttft, "n": 100},
        "e2e_ms": {"mean": 10 * ttft, "p50": 10 * ttft, "n": 100},
    }
    if met is not None:
        s["slo"] = {"ttft_ms": 500.0, "met": int(met * 100), "met_ratio": met}
        s["goodput_requests_per_s"] = met * tps / 100
    return s


def sweep(
    make_run: MakeRun, stages: list[dict[str, Any]], slo: bool = False, run_id: str = "sweep001"
) -> RunInfo:
    run = make_run(run_id, output_tps=sum(s["output_tokens_per_s"] for s in stages) / len(stages))
    summary = {**run.summary, "stages": stages}
    if slo:
        summary["slo"] = {"ttft_ms": 500.0, "met": 1, "met_ratio": 0.5}
    return dataclasses.replace(run, summary=summary)


SWEEP = [
    stage("c=1", 100.0, 1.0),
    stage("c=4", 350.0, 1.0),
    stage("c=16", 900.0, 0.995),
    stage("c=64", 1400.0, 0.7),
]


def test_without_slos_a_sweep_is_priced_at_its_throughput_ceiling(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, [stage("c=1", 100.0), stage("c=4", 350.0), stage("c=16", 900.0)])
    cost = cost_of_run(run, load_profile("h100-sxm-own", catalog), catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point["stage"] == "c=16"
    assert "throughput ceiling" in cost.operating_point["rule"]
    assert cost.inputs.output_tokens_per_s == 900.0 and cost.inputs.input_tokens_per_s == 450.0
    hourly, u = cost.evaluation.hourly.total, cost.inputs.utilisation
    assert cost.evaluation.cost_per_million("output") == pytest.approx(hourly / (900 * 3600 * u) * 1e6)
    # Every stage's cost under the same hourly cost: cost falls as the load rises.
    per_stage = [r["usd_per_1m_output_tokens"] for r in cost.operating_point["stages"]]
    assert per_stage == pytest.approx([hourly / (t * 3600 * u) * 1e6 for t in (100.0, 350.0, 900.0)])
    doc = cost.to_dict()
    assert doc["operating_point"]["stage"] == "c=16"
    assert doc["throughput"]["source"] == "stage c=16 of the sweep (measured)"
    assert any("priced at stage c=16 of the sweep" in a for a in doc["assumptions"])


def test_with_slos_the_fastest_stage_that_meets_them_at_p99_is_priced(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, SWEEP, slo=True)
    prof = load_profile("h100-sxm-own", catalog)
    cost = cost_of_run(run, prof, catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point["stage"] == "c=16"
    assert "≥ 99% of requests met the SLOs (ttft_ms ≤ 500)" in cost.operating_point["rule"]
    assert cost.inputs.goodput_requests_per_s == pytest.approx(0.995 * 9)
    looser = cost_of_run(run, prof, catalog=catalog, slo_attainment=0.7)
    assert looser.operating_point is not None and looser.operating_point["stage"] == "c=64"


def test_no_stage_meeting_the_slos_prices_the_closest_and_says_so(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, [stage("c=8", 500.0, 0.6), stage("c=32", 1200.0, 0.4)], slo=True)
    cost = cost_of_run(run, load_profile("h100-sxm-own", catalog), catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point["stage"] == "c=8"
    assert any("no load of the sweep met the SLOs" in w and "60% met" in w for w in cost.warnings)


def test_a_named_stage_is_priced_and_an_unknown_one_is_not_found(make_run: MakeRun, catalog: Catalog) -> None:
    run = sweep(make_run, SWEEP, slo=True)
    prof = load_profile("h100-sxm-own", catalog)
    cost = cost_of_run(run, prof, catalog=catalog, stage="c=4")
    assert cost.operating_point is not None and cost.operating_point["rule"] == "chosen with --stage"
    assert cost.inputs.output_tokens_per_s == 350.0
    with pytest.raises(NotFoundError, match="no stage 'c=2'; its stages: c=1, c=4, c=16, c=64"):
        cost_of_run(run, prof, catalog=catalog, stage="c=2")
    with pytest.raises(UsageError, match="is not a sweep"):
        cost_of_run(make_run("single01"), prof, catalog=catalog, stage="c=4")
    with pytest.raises(UsageError, match="--slo-attainment"):
        cost_of_run(run, prof, catalog=catalog, slo_attainment=1.5)


def test_a_run_that_is_not_a_sweep_is_priced_over_its_window_as_before(
    make_run: MakeRun, catalog: Catalog
) -> None:
    cost = cost_of_run(
        make_run("single02", output_tps=800.0), load_profile("h100-sxm-own", catalog), catalog=catalog
    )
    assert cost.operating_point is None and cost.inputs.output_tokens_per_s == 800.0
    assert "operating_point" not in cost.to_dict()
    assert cost.to_dict()["throughput"]["source"] == "run summary (measured)"


def test_an_estimate_of_a_sweep_scales_the_priced_stage(make_run: MakeRun, catalog: Catalog) -> None:
    run = sweep(make_run, [stage("c=1", 100.0), stage("c=16", 900.0)])
    est = estimate_run(run, "H200", catalog=catalog)
    doc = est.to_dict()
    assert doc["measured_throughput"]["output_tokens_per_s"] == 900.0
    assert any("scaled from stage c=16 of the sweep" in a for a in doc["assumptions"])


def test_cost_cli_names_the_stage_and_lists_every_stage(
    make_run: MakeRun, store_run: Callable[[RunInfo], str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(sweep(make_run, SWEEP, slo=True))
    assert main(["cost", run_id, "--profile", "h100-sxm-own", "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "priced at stage c=16 of the sweep" in out and "Every stage under the same hourly cost" in out
    assert main(["cost", run_id, "--profile", "h100-sxm-own", "--no-save", "--stage", "c=64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["operating_point"]["stage"] == "c=64" and doc["throughput"]["output_tokens_per_s"] == 1400.0
    assert main(["cost", run_id, "--no-save", "--stage", "c=3"]) == 3
