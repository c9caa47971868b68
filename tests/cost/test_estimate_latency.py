"""Issue 33, item 1: ``estimate RUN --gpu X`` carries the run's latencies to the target from their parts, as
the roofline models them — TPOT and ITL (decode: memory bandwidth) ÷ the bandwidth ratio, TTFT (prefill:
compute) ÷ the compute ratio, every percentile; E2E = TTFT + TPOT x (output tokens - 1), of the means only —
and says so in the text and the --json. Before, the source GPU's TPOT was printed unchanged as the target's
"estimate" (an H200 run: the same TPOT p50 on a B200 and on an L40S)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cost_runs import MakeRun, text_summary
from typer.testing import CliRunner

from gpuledger.catalog import Catalog
from gpuledger.cli.main import app
from gpuledger.cost import CostProfile, estimate_run
from gpuledger.cost.estimate.estimate_model import shipped_points
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo
from gpuledger.report import fmt

# Peak memory bandwidth (TB/s) and dense FP16/BF16 TFLOPS per device, as the catalog has them.
BANDWIDTH = {"h200": 4.8, "b200": 8.0, "l40s": 0.864}
FP16 = {"h200": 989.0, "b200": 2250.0, "l40s": 362.0}
RENT = CostProfile(rental_per_gpu_hour=4.0)


def h200_run(make_run: MakeRun, run_id: str = "h200tpot") -> RunInfo:
    # 100 requests of 500 prompt and 1000 output tokens: first token after 200 ms, the last after 5200 ms,
    # so TPOT = 5000 / 999 ms for every request.
    return make_run(run_id, gpu="NVIDIA H200", model="dummy:qwen2.5-7b", ttft_ms=200.0, e2e_ms=5200.0,
                    output_tps=1000, input_tps=500)


@pytest.mark.parametrize("target", ["b200", "l40s"])
def test_tpot_scales_by_the_bandwidth_ratio_and_ttft_by_the_compute_ratio(
    make_run: MakeRun, catalog: Catalog, target: str
) -> None:
    run = h200_run(make_run)
    measured = text_summary(run)
    est = estimate_run(run, target, RENT, catalog=catalog)
    s = est.scaled_summary
    assert isinstance(s, TextGenerationSummary)
    bw = BANDWIDTH[target] / BANDWIDTH["h200"]
    fl = FP16[target] / FP16["h200"]
    for pct in ("mean", "p50", "p90", "p99"):
        assert s.tpot_ms.get(pct) == pytest.approx(measured.tpot_ms.get(pct) / bw), pct
        assert s.itl_ms.get(pct) == pytest.approx(measured.itl_ms.get(pct) / bw), pct
        assert s.ttft_ms.get(pct) == pytest.approx(measured.ttft_ms.get(pct) / fl), pct
    # E2E from its parts on the target: TTFT + TPOT x (output tokens - 1), 1000 output tokens per request
    assert s.e2e_ms.mean == pytest.approx(200.0 / fl + 5000.0 / 999 / bw * 999)
    assert s.e2e_ms.p50 is None and s.e2e_ms.p99 is None  # a percentile of a sum is not estimated
    doc = est.document().model_dump(mode="json")["latency"]
    assert doc["tpot_ms"]["estimated"]["p50"] == pytest.approx(5000.0 / 999 / bw)
    assert doc["tpot_ms"]["measured"]["p50"] == pytest.approx(5000.0 / 999)
    assert doc["tpot_ms"]["origin"] == "estimate" and "bandwidth ratio" in doc["tpot_ms"]["how"]
    assert "compute ratio" in doc["ttft_ms"]["how"]
    assert doc["e2e_ms"]["estimated"]["p50"] is None and "mean only" in doc["e2e_ms"]["how"]
    assert any(a.startswith("TPOT on the target: measured ÷ ") for a in est.assumptions)


def test_the_same_run_on_two_gpus_gets_two_tpots_in_the_ratio_of_their_bandwidths(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = h200_run(make_run)
    b200 = estimate_run(run, "b200", RENT, catalog=catalog).scaled_summary
    l40s = estimate_run(run, "l40s", RENT, catalog=catalog).scaled_summary
    assert isinstance(b200, TextGenerationSummary) and isinstance(l40s, TextGenerationSummary)
    assert b200.tpot_ms.p50 is not None and l40s.tpot_ms.p50 is not None
    assert l40s.tpot_ms.p50 / b200.tpot_ms.p50 == pytest.approx(BANDWIDTH["b200"] / BANDWIDTH["l40s"])


def test_the_terminal_and_the_json_show_the_targets_tpot_and_say_how(
    make_run: MakeRun, store_run: Callable[[RunInfo], str]
) -> None:
    run_id = store_run(h200_run(make_run))
    shown = {}
    for target in ("B200", "L40S"):
        result = CliRunner().invoke(app, ["estimate", run_id, "--gpu", target], env={"COLUMNS": "120"})
        assert result.exit_code == 0, result.output
        line = next(x for x in result.stdout.splitlines() if x.strip().startswith("TPOT p50:"))
        shown[target] = line
        key = target.lower()
        tpot = 5000.0 / 999 * BANDWIDTH["h200"] / BANDWIDTH[key]
        assert f"{fmt.num(tpot)} ms (estimate)" in line, line
        assert "TPOT on the target: measured ÷" in result.stdout
        assert "E2E on the target: mean only" in result.stdout
        doc = json.loads(CliRunner().invoke(app, ["estimate", run_id, "--gpu", target, "--json"]).stdout)
        assert doc["latency"]["tpot_ms"]["estimated"]["p50"] == pytest.approx(tpot)
    assert shown["B200"] != shown["L40S"]


def test_a_published_points_tpot_and_interactivity_are_carried_by_the_bandwidth_ratio(
    catalog: Catalog,
) -> None:
    point = next(r for r in shipped_points(catalog)
                 if isinstance(r.summary, PublishedSummary) and r.summary.gpu == "b200"
                 and r.summary.tokens_per_s_per_user)
    published = point.summary
    assert isinstance(published, PublishedSummary) and published.tokens_per_s_per_user is not None
    est = estimate_run(point, "h200", RENT, catalog=catalog)
    s = est.scaled_summary
    assert isinstance(s, PublishedSummary) and s.tokens_per_s_per_user is not None
    bw = BANDWIDTH["h200"] / BANDWIDTH["b200"]
    assert s.tokens_per_s_per_user == pytest.approx(published.tokens_per_s_per_user * bw)
    assert any("bandwidth ratio" in a and "tok/s per user" in a for a in est.assumptions)
