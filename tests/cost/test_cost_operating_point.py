"""A sweep is priced at one load — its operating point — never at the blend of its stages."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cost_runs import MakeRun, Stage

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost import cost_of_run, load_profile
from gpuledger.cost.estimate.estimate import estimate_run
from gpuledger.errors import NotFoundError, UsageError
from gpuledger.records import RunInfo


def sweep(make_run: MakeRun, stages: list[Stage], run_id: str = "sweep001") -> RunInfo:
    """A sweep run: each stage 200 requests over 10 s (20 requests/s), one after the other, summarised by
    the real metrics; stages given a met share had a TTFT SLO of 500 ms."""
    return make_run(run_id, stages=stages)


SWEEP = [
    Stage("c=1", 100.0, 1.0),
    Stage("c=4", 350.0, 1.0),
    Stage("c=16", 900.0, 0.995),
    Stage("c=64", 1400.0, 0.7),
]


def test_without_slos_a_sweep_is_priced_at_its_throughput_ceiling(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, [Stage("c=1", 100.0), Stage("c=4", 350.0), Stage("c=16", 900.0)])
    cost = cost_of_run(run, load_profile("h100-sxm-own", catalog), catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point.stage == "c=16"
    assert "throughput ceiling" in cost.operating_point.rule
    assert cost.inputs.rate("output_token") == 900.0 and cost.inputs.rate("input_token") == 450.0
    hourly, u = cost.evaluation.hourly.total, cost.inputs.utilisation
    assert cost.evaluation.cost_per("output_token") == pytest.approx(hourly / (900 * 3600 * u) * 1e6)
    # Every stage's cost under the same hourly cost: cost falls as the load rises.
    per_stage = [r.price.value for r in cost.operating_point.stages]
    assert per_stage == pytest.approx([hourly / (t * 3600 * u) * 1e6 for t in (100.0, 350.0, 900.0)])
    doc = cost.document().model_dump(mode="json")
    assert doc["operating_point"]["stage"] == "c=16"
    assert doc["throughput"]["source"] == "stage c=16 of the sweep (measured)"
    assert any("priced at stage c=16 of the sweep" in a for a in doc["assumptions"])


def test_with_slos_the_fastest_stage_that_meets_them_at_p99_is_priced(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, SWEEP)
    prof = load_profile("h100-sxm-own", catalog)
    cost = cost_of_run(run, prof, catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point.stage == "c=16"
    assert "≥ 99% of requests met the SLOs (ttft_ms ≤ 500)" in cost.operating_point.rule
    # the stage's own request rate (200 requests in 10 s) and the share of them that met the SLO
    assert cost.inputs.rate("request") == pytest.approx(20.0)
    assert cost.inputs.rate("good_request") == pytest.approx(0.995 * 20.0)
    looser = cost_of_run(run, prof, catalog=catalog, slo_attainment=0.7)
    assert looser.operating_point is not None and looser.operating_point.stage == "c=64"


def test_no_stage_meeting_the_slos_prices_the_closest_and_says_so(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = sweep(make_run, [Stage("c=8", 500.0, 0.6), Stage("c=32", 1200.0, 0.4)])
    cost = cost_of_run(run, load_profile("h100-sxm-own", catalog), catalog=catalog)
    assert cost.operating_point is not None and cost.operating_point.stage == "c=8"
    assert any("no load of the sweep met the SLOs" in w and "60% met" in w for w in cost.warnings)


def test_a_named_stage_is_priced_and_an_unknown_one_is_not_found(make_run: MakeRun, catalog: Catalog) -> None:
    run = sweep(make_run, SWEEP)
    prof = load_profile("h100-sxm-own", catalog)
    cost = cost_of_run(run, prof, catalog=catalog, stage="c=4")
    assert cost.operating_point is not None and cost.operating_point.rule == "chosen with --stage"
    assert cost.inputs.rate("output_token") == 350.0
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
    assert cost.operating_point is None and cost.inputs.rate("output_token") == 800.0
    assert "operating_point" not in cost.document().model_dump(mode="json")
    assert cost.document().model_dump(mode="json")["throughput"]["source"] == "run summary (measured)"


def test_an_estimate_of_a_sweep_scales_the_priced_stage(make_run: MakeRun, catalog: Catalog) -> None:
    run = sweep(make_run, [Stage("c=1", 100.0), Stage("c=16", 900.0)])
    est = estimate_run(run, "H200", catalog=catalog)
    doc = est.document().model_dump(mode="json")
    assert doc["measured_throughput"]["output_tokens_per_s"] == 900.0
    assert any("scaled from stage c=16 of the sweep" in a for a in doc["assumptions"])


def test_cost_cli_names_the_stage_and_lists_every_stage(
    make_run: MakeRun, store_run: Callable[[RunInfo], str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(sweep(make_run, SWEEP))
    assert main(["cost", run_id, "--profile", "h100-sxm-own", "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "priced at stage c=16 of the sweep" in out and "Every stage under the same hourly cost" in out
    assert main(["cost", run_id, "--profile", "h100-sxm-own", "--no-save", "--stage", "c=64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["operating_point"]["stage"] == "c=64" and doc["throughput"]["output_tokens_per_s"] == 1400.0
    assert main(["cost", run_id, "--no-save", "--stage", "c=3"]) == 3
