"""Estimate: roofline scaling of a measured run to a catalog GPU, always labelled an estimate."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cost_runs import MakeRun
from typer.testing import CliRunner

from gpuledger.catalog import Catalog, roofline_scale
from gpuledger.cli.main import app, main
from gpuledger.cost import CostProfile, estimate_run
from gpuledger.cost.estimate.estimate_model import (
    efficiency_pool,
    estimate_cpu_run,
    estimate_model,
    shipped_points,
)
from gpuledger.cost.estimate.roofline_estimate import Workload
from gpuledger.cost.pricing.efficiency import run_efficiency
from gpuledger.cost.pricing.modelarch import find_known
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records import RunInfo
from gpuledger.report import fmt


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
    d = est.document().model_dump(mode="json")
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


def test_the_estimates_devices_on_the_target_say_what_is_known_of_them_and_no_more(
    make_run: MakeRun, catalog: Catalog
) -> None:
    est = estimate_run(make_run(gpu="NVIDIA H100 80GB HBM3"), "mi300x", catalog=catalog)
    target = catalog.resolve("mi300x").name
    assert [d.to_dict() for d in est.cost.run.telemetry_summary] == [
        {"device": "amd:0", "vendor": "amd", "name": target, "mean_power_w": None, "energy_j": None,
         "peak_util_ratio": None}
    ]


def test_estimate_warns_when_the_model_may_not_fit(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(gpu="NVIDIA H100 80GB HBM3")
    run.telemetry_summary[0] = run.telemetry_summary[0].model_copy(update={"peak_memory_bytes": 70e9})
    est = estimate_run(run, "NVIDIA L4", CostProfile(rental_per_gpu_hour=0.6), catalog=catalog)
    assert any("may not fit" in w for w in est.warnings)


def test_estimate_carries_the_runs_measured_mbu_and_mfu_and_labels_them_an_estimate(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run = make_run(
        output_tps=1000, input_tps=500, e2e_ms=20180.0, model="dummy:qwen2.5-7b",
        config={"engine": "torch", "batch_size": 32, "dtype": "bfloat16"},
    )
    est = estimate_run(run, "h200", CostProfile(rental_per_gpu_hour=4.0), catalog=catalog)
    measured = run_efficiency(run, catalog=catalog)
    assert est.efficiency.mbu == pytest.approx(measured.mbu) and est.efficiency.origin == "measured"
    carried = est.document().model_dump(mode="json")["cost"]["efficiency"]
    assert carried["origin"] == "estimate" and carried["mbu"] == pytest.approx(measured.mbu)
    assert "carried to NVIDIA H200" in carried["label"]
    unknown = estimate_run(make_run(model="test-model"), "h200", CostProfile(rental_per_gpu_hour=4.0),
                           catalog=catalog).efficiency
    assert unknown.mbu is None and "no known config" in unknown.reasons["mbu"]


def test_unknown_target_and_unknown_source_gpus_are_not_found(make_run: MakeRun, catalog: Catalog) -> None:
    with pytest.raises(NotFoundError) as err:
        estimate_run(make_run(), "H100", catalog=catalog)
    assert err.value.hint and "h100-sxm" in err.value.hint
    with pytest.raises(NotFoundError, match="not in the GPU catalog"):
        estimate_run(make_run(gpu="NVIDIA Tesla T4"), "h200", catalog=catalog)


def test_a_cpu_run_is_not_scaled_by_the_measured_roofline(make_run: MakeRun, catalog: Catalog) -> None:
    # estimate_run carries a GPU run's efficiency; a CPU run has none (the CLI takes the model's roofline:
    # estimate_cpu_run, below)
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": 20.0}
    with pytest.raises(InvalidInputError, match="no GPU telemetry"):
        estimate_run(make_run(devices=[cpu]), "h200", catalog=catalog)


CPU = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": 20.0}


def test_a_cpu_run_is_carried_to_a_gpu_by_its_models_roofline(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(devices=[CPU], gpu=None, model="dummy:qwen2.5-7b",
                   config={"engine": "torch", "batch_size": 8, "dtype": "fp32"})
    est = estimate_cpu_run(run, catalog.get("mi300x"), profile=CostProfile(rental_per_gpu_hour=2.0))
    d = est.document().model_dump(mode="json")
    assert d["estimate"] is True and "ESTIMATE" in d["label"] and d["basis"] == f"CPU run {run.id}"
    # the run's mean lengths and batch: 500 in / 1000 out tokens per request, 8 in flight
    assert d["workload"] == {"input_len": 500, "output_len": 1000, "concurrency": 8,
                             "source": f"run {run.id}'s mean lengths and concurrency"}
    assert d["roofline"]["dtype"] == "bf16"  # a GPU serves bf16; the CPU's fp32 is not carried
    for key in ("output_tokens_per_s", "tokens_per_s_per_user", "ttft_ms", "tpot_ms"):
        assert d["roofline"][key]["origin"] == "estimate"
    assert d["cost"]["usd_per_1m_output_tokens"]["origin"] == "estimate"
    assert d["efficiency"]["origin"] == "estimate" and "default" in d["efficiency"]["label"]


def test_a_no_run_estimate_is_the_roofline_by_hand(catalog: Catalog) -> None:
    """Decode step = bytes / (B x MBU) (memory-bound here); prefill = FLOPs / (F x MFU); the C slots each
    run one prefill and O steps: output tok/s = C x O / (O x step + C x prefill)."""
    arch = find_known("dummy:qwen2.5-7b")
    assert arch is not None
    spec = catalog.get("mi300x")
    est = estimate_model(arch, spec, Workload(1024, 256, 16), profile=CostProfile(rental_per_gpu_hour=2.0))
    point = est.point
    bytes_step = (arch.params - arch.embedding_params) * 2 + 16 * 2 * 28 * 4 * 128 * 2 * (1024 + 128)
    step = bytes_step / (5.3e12 * 0.5)
    prefill = arch.prefill_flops(1024) / (1307.4e12 * 0.4)
    assert point.step_bound == "memory bandwidth" and point.step_s == pytest.approx(step)
    assert point.output_tokens_per_s == pytest.approx(16 * 256 / (256 * step + 16 * prefill))
    assert point.tpot_ms == pytest.approx((step + 15 * prefill / 256) * 1000)
    assert est.cost.per_1m_output == pytest.approx(2.0 / (point.output_tokens_per_s * 3600) * 1e6)


def test_a_no_run_estimate_owned_prices_the_host_and_idle_power_as_a_measured_run_would(
    catalog: Catalog,
) -> None:
    """An ownership profile's host_power_w and idle_power_w enter an estimate's energy the same way they enter
    a measured run's (cost.power): serving = TDP x devices + host, idle = idle x devices + host, and the
    average at the profile's utilisation is what the electricity is paid for."""
    arch = find_known("dummy:qwen2.5-7b")
    assert arch is not None
    spec = catalog.get("mi300x")
    profile = CostProfile(gpu_price=15000, electricity_per_kwh=0.2, pue=1.5, utilisation=0.5,
                          host_power_w=300, idle_power_w=150)
    est = estimate_model(arch, spec, Workload(1024, 256, 16), profile=profile)
    tdp = spec.device_figure("tdp_w").value
    assert tdp == 750
    average = 0.5 * (750 + 300) + 0.5 * (150 + 300)  # 750 W
    hourly = est.cost.hourly
    assert hourly.power_w == pytest.approx(average)
    assert hourly.energy == pytest.approx(average / 1000 * 1.5 * 0.2)
    assert "host_power_w 300 W added" in est.cost.power_source and "catalog TDP" in est.cost.power_source


def test_the_efficiency_comes_from_your_runs_then_published_points_then_the_default(
    make_run: MakeRun, catalog: Catalog
) -> None:
    arch = find_known("dummy:qwen2.5-7b")
    assert arch is not None
    mi300x, h200 = catalog.get("mi300x"), catalog.get("h200")
    own = make_run("own00001", model="qwen2.5-7b", e2e_ms=20180.0, gpu="AMD Instinct MI300X", vendor="amd")
    nvidia = make_run("own00002", model="qwen2.5-7b", e2e_ms=20180.0, gpu="NVIDIA H200")
    published = shipped_points(catalog)
    pool = efficiency_pool([own, nvidia, *published], catalog)
    assert pool.carried(mi300x).origin == "measured" and "own00001" in pool.carried(mi300x).label
    # an NVIDIA run's efficiency is never carried to AMD: without the MI300X run, published MI300X points
    only_nvidia = efficiency_pool([nvidia, *published], catalog).carried(mi300x)
    assert only_nvidia.origin == "derived from published" and "MI300X" in only_nvidia.label
    assert "published by SemiAnalysis InferenceX" in only_nvidia.label
    assert efficiency_pool([nvidia], catalog).carried(h200).runs == ("own00002",)
    default = efficiency_pool([], catalog).carried(mi300x)
    assert default.origin == "estimate" and default.mbu == 0.5 and "not a measurement" in default.label


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})
    return result.exit_code, result.stdout


def test_estimate_from_no_run_on_the_command_line_is_labelled_an_estimate() -> None:
    args = ("estimate", "--model", "dummy:qwen2.5-7b", "--gpu", "MI300X", "--input-len", "1024",
            "--output-len", "256", "--concurrency", "16")
    code, out = _cli(*args, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["estimate"] is True and doc["basis"] == "no run" and doc["target_gpu"]["key"] == "mi300x"
    assert doc["workload"]["concurrency"] == 16 and doc["model"]["origin"] == "published config"
    price = doc["cost"]["usd_per_1m_output_tokens"]["value"]
    code, text = _cli(*args)
    lines = text.splitlines()
    assert code == 0 and lines[0].startswith("ESTIMATE: dummy:qwen2.5-7b on 1 x AMD Instinct MI300X (no run)")
    assert lines[1].startswith(f"{fmt.num(price, 3)} USD per 1M output tokens (estimate)")
    # every figure says where it comes from
    for label in ("output tok/s", "tok/s per user", "TTFT", "efficiency", "setup labour"):
        line = next(line for line in lines if line.strip().startswith(label + ":"))
        assert "estimate" in line or "measured" in line or "published" in line or "essay" in line, line


def test_estimate_from_a_cpu_run_on_the_command_line(
    make_run: MakeRun, store_run: Callable[[RunInfo], str]
) -> None:
    run_id = store_run(make_run(devices=[CPU], gpu=None, model="dummy:smollm2-135m",
                                config={"engine": "torch", "batch_size": 4, "dtype": "fp32"}))
    code, out = _cli("estimate", run_id, "--gpu", "H200", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["estimate"] is True and doc["basis"] == f"CPU run {run_id}"
    assert doc["workload"]["concurrency"] == 4
    code, text = _cli("estimate", run_id, "--gpu", "H200", "--output-len", "64")
    assert code == 0
    assert text.startswith(f"ESTIMATE: dummy:smollm2-135m on 1 x NVIDIA H200 (CPU run {run_id})")
    assert "64 out tokens" in text


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("estimate", "--model", "dummy:qwen2.5-7b", "--input-len", "8", "--output-len", "8"), 2, "--gpu"),
        (("estimate", "--gpu", "h200", "--input-len", "8", "--output-len", "8"), 2, "--model"),
        (("estimate", "--gpu", "h200", "--model", "dummy:qwen2.5-7b"), 2, "--input-len"),
        (("estimate", "--gpu", "h200", "--model", "no-such-model", "--input-len", "8", "--output-len", "8"),
         3, "no known config"),
        (("estimate", "--gpu", "h200", "--model", "dummy:qwen2.5-7b", "--input-len", "8", "--output-len", "8",
          "--setup-hours", "intel=3"), 2, "--setup-hours"),
    ],
)
def test_estimate_refuses_what_it_cannot_do_with_one_line(
    args: tuple[str, ...], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(list(args)) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def test_a_gpu_run_is_scaled_as_measured_and_refuses_the_no_run_flags(
    make_run: MakeRun, store_run: Callable[[RunInfo], str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(make_run())
    assert main(["estimate", run_id, "--gpu", "h200", "--model", "dummy:qwen2.5-7b"]) == 2
    assert "scaled as measured" in capsys.readouterr().err
