"""Estimate: roofline scaling of a measured run to a catalog GPU, always labelled an estimate."""

from __future__ import annotations

import pytest
from cost_runs import MakeRun

from gpuledger.catalog import Catalog, roofline_scale
from gpuledger.cost import CostProfile, estimate_run
from gpuledger.errors import InvalidInputError, NotFoundError


def test_pure_decode_scales_by_the_bandwidth_ratio(catalog: Catalog) -> None:
    s = roofline_scale(catalog.get("h100-sxm"), catalog.get("h200"), 0.0, "bf16")
    assert s.speedup == pytest.approx(4.8 / 3.35)


def test_pure_prefill_scales_by_the_compute_ratio_at_the_runs_dtype(catalog: Catalog) -> None:
    s = roofline_scale(catalog.get("a100-sxm4-80gb"), catalog.get("h100-sxm"), 1.0, "bf16")
    assert s.speedup == pytest.approx(989 / 312)
    fp8 = roofline_scale(catalog.get("h100-sxm"), catalog.get("b200"), 1.0, "fp8")
    assert fp8.speedup == pytest.approx(4500 / 1979) and "FP8" in fp8.compute_basis


def test_mixed_time_split_combines_both_rooflines(catalog: Catalog) -> None:
    s = roofline_scale(catalog.get("a100-sxm4-80gb"), catalog.get("h100-sxm"), 0.25, None)
    expected = 1 / (0.25 * 312 / 989 + 0.75 * 2.039 / 3.35)
    assert s.speedup == pytest.approx(expected)
    assert any("assumed 16-bit" in a for a in s.assumptions)


def test_fp8_on_a_part_without_fp8_falls_back_and_says_so(catalog: Catalog) -> None:
    s = roofline_scale(catalog.get("h100-sxm"), catalog.get("a100-sxm4-80gb"), 1.0, "float8_e4m3fn")
    assert s.speedup == pytest.approx(312 / 1979)
    assert "no FP8 figure" in s.compute_basis


def test_estimate_scales_throughput_and_prices_the_target(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(
        output_tps=1000, input_tps=500, ttft_ms=None, power_w=560.0, gpu="NVIDIA H100 80GB HBM3"
    )
    est = estimate_run(run, "NVIDIA H200", CostProfile(rental_per_gpu_hour=4.0), catalog=catalog)
    d = est.to_dict()
    assert d["estimate"] is True and "ESTIMATE" in d["label"]
    assert d["target_gpu"]["key"] == "h200" and d["source_gpu"]["key"] == "h100-sxm"
    ratio = 4.8 / 3.35  # decode-only: no TTFT/E2E in the run, said so
    assert d["estimated_throughput"]["output_tokens_per_s"] == pytest.approx(1000 * ratio)
    assert any("decode-only" in a for a in d["assumptions"])
    cost = d["cost"]
    assert cost["usd_per_1m_output_tokens"] == pytest.approx(4.0 / (1000 * ratio * 3600) * 1e6)
    # power: the run drew 560 W of a 700 W TDP (80 %) -> 80 % of the H200's 700 W
    assert cost["power"]["serving_w"] == pytest.approx(560.0)
    assert cost["power"]["power_source"].startswith("estimate: target TDP")
    assert cost["run_id"] == f"{run.id}@h200"
    assert any(w.startswith("ESTIMATE") for w in d["warnings"])


def test_estimate_uses_the_targets_catalog_preset_by_default(make_run: MakeRun, catalog: Catalog) -> None:
    est = estimate_run(make_run(gpu="NVIDIA A100-SXM4-80GB"), "mi300x", catalog=catalog)
    assert est.cost.profile.name == "mi300x-own"
    assert est.scale.prefill_share == pytest.approx(0.1)  # TTFT 200 ms / E2E 2000 ms


def test_estimate_warns_when_the_model_may_not_fit(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(gpu="NVIDIA H100 80GB HBM3")
    run.telemetry_summary[0]["peak_memory_bytes"] = 70e9
    est = estimate_run(run, "NVIDIA L4", CostProfile(rental_per_gpu_hour=0.6), catalog=catalog)
    assert any("may not fit" in w for w in est.warnings)


def test_estimate_reports_mbu_and_mfu_when_the_model_size_is_recorded(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = make_run(
        output_tps=3200,
        input_tps=1600,
        config={"engine": "torch", "batch_size": 32, "num_parameters": 7_600_000_000, "dtype": "bfloat16"},
    )
    eff = estimate_run(run, "h200", CostProfile(rental_per_gpu_hour=4.0), catalog=catalog).efficiency
    # MFU = 2 x 7.6e9 x 4800 tok/s / 989e12; MBU = 7.6e9 x 2 bytes x (3200 / 32 steps/s) / 3.35e12
    assert eff["mfu"] == pytest.approx(2 * 7.6e9 * 4800 / 989e12)
    assert eff["mbu"] == pytest.approx(7.6e9 * 2 * 100 / 3.35e12)
    load = {"kind": "concurrency", "stages": [{"stage": "c=8", "concurrency": 8}]}
    missing = estimate_run(
        make_run(config={"load": load}), "h200", CostProfile(rental_per_gpu_hour=4.0), catalog=catalog
    ).efficiency
    assert missing["mfu"] is None and "parameter count" in missing["reason"]


def test_unknown_target_and_unknown_source_gpus_are_not_found(make_run: MakeRun, catalog: Catalog) -> None:
    with pytest.raises(NotFoundError) as err:
        estimate_run(make_run(), "H100", catalog=catalog)
    assert err.value.hint and "h100-sxm" in err.value.hint
    with pytest.raises(NotFoundError, match="not in the GPU catalog"):
        estimate_run(make_run(gpu="NVIDIA Tesla T4"), "h200", catalog=catalog)


def test_a_cpu_run_cannot_be_scaled_to_a_gpu(make_run: MakeRun, catalog: Catalog) -> None:
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": 20.0}
    with pytest.raises(InvalidInputError, match="no GPU telemetry"):
        estimate_run(make_run(devices=[cpu]), "h200", catalog=catalog)
