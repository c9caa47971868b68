"""The throughput ratio taken apart (cost/comparison/decomposition.py): hardware x precision x software x
load multiply to the measured or published ratio exactly; what cannot be computed is an unexplained
remainder named as such (issue 28, "Done when")."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cost_runs import build_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuledger.catalog import load_catalog
from gpuledger.catalog.roofline import kv_bytes, weight_bytes
from gpuledger.cost.comparison.decomposition import DecompositionError, decompose_throughput
from gpuledger.cost.pricing.modelarch import find_known
from gpuledger.cost.published.published import PublishedRow, public_points, run_of
from gpuledger.records import RunInfo

CATALOG = load_catalog()
MODEL = "Qwen/Qwen2.5-7B-Instruct"  # the built-in dummy:qwen2.5-7b architecture
GPUS_WITH_PEAKS = sorted(
    s.key for s in CATALOG
    if s.figure("bandwidth_tb_s").value and s.figure("fp16_tflops").value and s.figure("fp8_tflops").value
)


def point(run_id: str, gpu: str = "h200", **row: object) -> RunInfo:
    """A published point as import-results stores it (the real row model and run_of)."""
    fields: dict[str, object] = {"gpu": gpu, "gpus": 1, "model": MODEL, "input_len": 1024, "output_len": 256,
                                 "output_tokens_per_s": 2000.0, "tokens_per_s_per_user": 40.0,
                                 "precision": "bf16", "source": "test point", **row}
    checked = PublishedRow.model_validate(fields)
    spec = CATALOG.resolve(str(fields["gpu"]))
    return replace(run_of(checked, spec, "test"), id=run_id)


def factors(d: object) -> dict[str, float]:
    return {p.part: p.factor for p in d.throughput_parts}  # type: ignore[attr-defined]


def test_identical_gpus_with_a_2x_mbu_difference_put_2x_into_software() -> None:
    # Same GPU, model, precision, lengths and sequences in flight (output tok/s / tok/s per user = 50): A's
    # decode steps run twice as fast, so its stack reads the same bytes at twice the share of peak.
    a = point("a", output_tokens_per_s=4000.0, tokens_per_s_per_user=80.0)
    b = point("b", output_tokens_per_s=2000.0, tokens_per_s_per_user=40.0)
    d = decompose_throughput(a, b, catalog=CATALOG)
    f = factors(d)
    assert d.throughput_ratio == pytest.approx(2.0)
    assert f["software"] == pytest.approx(2.0, rel=1e-12)
    assert f["hardware"] == pytest.approx(1.0) and f["precision"] == pytest.approx(1.0)
    assert f["load"] == pytest.approx(1.0, rel=1e-12) and "the same load" in d.part("load").what  # type: ignore[union-attr]
    mbu = d.part("software").inputs[0]  # type: ignore[union-attr]
    assert float(mbu.a.value) == pytest.approx(2 * float(mbu.b.value))  # type: ignore[arg-type]
    assert mbu.a.origin == "derived" and "test point" in mbu.a.source


def test_two_points_differing_only_in_precision_put_the_difference_into_precision_and_hardware() -> None:
    # B serves bf16 weights; A the same model at fp8 on the same GPU, at the same MBU, prefill MFU, lengths
    # and sequences in flight: its decode step reads fewer bytes (precision) and its prefill runs at the FP8
    # peak (hardware: the peak dense FLOP/s at each run's precision).
    arch = find_known(MODEL)
    assert arch is not None
    seqs, i, o = 32, 1024, 256
    context = i + o / 2

    def step_bytes(dtype: str) -> float:
        wb, _ = weight_bytes(dtype)
        kb, _ = kv_bytes(dtype)
        return arch.read_params_per_step(seqs) * wb + arch.kv_elements_per_token * kb * context * seqs

    h200 = CATALOG.get("h200")
    flops = {"bf16": h200.figure("fp16_tflops").value, "fp8": h200.figure("fp8_tflops").value}
    ttft_b, tpot_b = 400.0, 25.0
    out_b = seqs * o / (ttft_b / 1e3 + tpot_b / 1e3 * (o - 1))
    bytes_ratio = step_bytes("fp8") / step_bytes("bf16")
    flops_ratio = flops["bf16"] / flops["fp8"]  # type: ignore[operator]
    ttft_a, tpot_a = ttft_b * flops_ratio, tpot_b * bytes_ratio
    p_b = ttft_b / (ttft_b + tpot_b * (o - 1))
    out_a = out_b / ((1 - p_b) * bytes_ratio + p_b * flops_ratio)
    same: dict[str, Any] = {"concurrency": seqs, "tokens_per_s_per_user": None, "gpus": 2, "input_len": i,
                            "output_len": o}
    b = point("b", precision="bf16", ttft_ms=ttft_b, tpot_ms=tpot_b, output_tokens_per_s=out_b, **same)
    a = point("a", precision="fp8", ttft_ms=ttft_a, tpot_ms=tpot_a, output_tokens_per_s=out_a, **same)
    d = decompose_throughput(a, b, catalog=CATALOG)
    f = factors(d)
    assert f["software"] == pytest.approx(1.0, rel=1e-9) and f["load"] == pytest.approx(1.0, rel=1e-9)
    assert f["precision"] * f["hardware"] == pytest.approx(d.throughput_ratio, rel=1e-9)
    assert f["hardware"] == pytest.approx(1.0 / ((1 - p_b) + p_b * flops_ratio), rel=1e-9)
    assert f["precision"] > 1.0 and f["hardware"] > 1.0
    weights = d.part("precision").inputs[0]  # type: ignore[union-attr]
    assert (weights.a.value, weights.b.value) == (1.0, 2.0) and weights.a.origin == "published"


def test_a_pair_the_model_cannot_split_names_the_remainder_and_why() -> None:
    # MLPerf publishes no input length, and Llama 2 70B is not a known architecture: only the hardware is
    # split off; the rest is the unexplained remainder, said to be so, never folded into another part.
    runs = {r.label: r for r in public_points("mlperf-v5.1-llama2-70b")}
    def quanta(gpu: str) -> RunInfo:
        return next(r for k, r in runs.items() if "Quanta" in k and gpu in k and "Offline" in k)

    a, b = replace(quanta("H200"), id="a"), replace(quanta("MI325X"), id="b")
    d = decompose_throughput(a, b, catalog=CATALOG)
    assert [p.part for p in d.throughput_parts] == ["hardware", "remainder"]
    assert {n.part for n in d.not_computed} == {"precision", "software", "load"}
    assert all("no known config" in n.reason for n in d.not_computed)
    rest = d.part("remainder")
    assert rest is not None and rest.what.startswith("unexplained remainder: precision, software, load")
    assert d.product() == pytest.approx(d.throughput_ratio, rel=1e-12)
    assert d.part("hardware").factor == pytest.approx(4.8 / 6.0)  # type: ignore[union-attr]  # decode only


def test_without_the_gpus_peaks_the_whole_ratio_is_the_remainder(tmp_path: Path) -> None:
    a, b = point("a", gpu="h200"), point("b", gpu="mi300x", output_tokens_per_s=1000.0)
    mine = tmp_path / "gpus.yaml"  # the user's own entry for the part, without its figures
    mine.write_text("gpus:\n  h200:\n    vendor: nvidia\n    name: NVIDIA H200\n")
    d = decompose_throughput(a, b, catalog=load_catalog(mine))
    assert [p.part for p in d.throughput_parts] == ["remainder"]
    assert d.throughput_parts[0].factor == pytest.approx(2.0)
    assert "memory bandwidth" in d.not_computed[0].reason and d.not_computed[0].part == "hardware"


def test_a_run_that_is_not_text_generation_has_no_decomposition() -> None:
    a = point("a")
    with pytest.raises(DecompositionError, match="models text generation .* not 'image'"):
        decompose_throughput(a, a, unit="image", catalog=CATALOG)


def test_the_shipped_headline_pair_is_split_with_every_input_sourced() -> None:
    points = public_points("inferencex-deepseek-r1-b200-vs-mi300x")
    runs = [replace(r, id=f"r{i}") for i, r in enumerate(points)]
    d = decompose_throughput(runs[0], runs[3], catalog=CATALOG)
    assert [p.part for p in d.throughput_parts] == ["hardware", "precision", "software", "load"]
    assert d.product() == pytest.approx(d.throughput_ratio, rel=1e-12)
    assert d.throughput_ratio == pytest.approx(5856.9 / 725.2)
    hw = d.part("hardware")
    assert hw is not None and hw.factor == pytest.approx(8.0 / 5.3)  # no TTFT published: all decode
    bw = next(i for i in hw.inputs if i.name.startswith("peak memory bandwidth"))
    assert bw.a.origin == "catalog" and "NVIDIA HGX B200" in bw.a.source
    share = next(i for i in hw.inputs if i.name.startswith("prefill share"))
    assert share.b.origin == "assumption" and "no TTFT" in share.b.source
    assert d.part("precision").factor == pytest.approx(1.0)  # type: ignore[union-attr]  # fp8 on both


# ---- the parts multiply to the ratio, whatever the runs -------------------------------------------
def _measured(run_id: str, gpu: str, output_tps: float, input_share: float, ttft_ms: float,
              e2e_ms: float, devices: int) -> RunInfo:
    spec = CATALOG.get(gpu)
    base = build_run(run_id, output_tps=output_tps, input_tps=output_tps * input_share, window_s=10.0,
                     num_ok=50, gpu=spec.name, vendor=spec.vendor, ttft_ms=ttft_ms, e2e_ms=e2e_ms)
    one = base.telemetry_summary[0]
    telemetry = [one.model_copy(update={"device": f"{spec.vendor}:{k}", "index": k}) for k in range(devices)]
    return replace(base, telemetry_summary=telemetry)


runs_of_any_shape = st.one_of(
    st.builds(
        lambda gpu, out, upu, prec, conc, i, o, ttft, n: point(
            "x", gpu=gpu, gpus=n, output_tokens_per_s=out, tokens_per_s_per_user=upu, precision=prec,
            input_len=i, output_len=o, ttft_ms=ttft, tpot_ms=(1000.0 / upu) if ttft else None,
            concurrency=conc),
        st.sampled_from(GPUS_WITH_PEAKS), st.floats(10.0, 1e5), st.floats(1.0, 500.0),
        st.sampled_from(["bf16", "fp8", "fp16", "int4", "fp4"]), st.one_of(st.none(), st.integers(1, 512)),
        st.integers(1, 16_000), st.integers(2, 4_000), st.one_of(st.none(), st.floats(1.0, 5_000.0)),
        st.integers(1, 16)),
    st.builds(
        lambda gpu, out, share, ttft, extra, n: _measured("x", gpu, out, share, ttft, ttft + extra, n),
        st.sampled_from(GPUS_WITH_PEAKS), st.integers(1, 500).map(lambda k: k * 10.0),
        st.sampled_from([0.1, 0.5, 2.0, 8.0]), st.floats(5.0, 2_000.0), st.floats(10.0, 7_000.0),
        st.integers(1, 8)),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs_of_any_shape, runs_of_any_shape, st.sampled_from(["output_token", "token"]))
def test_the_parts_multiply_to_the_throughput_ratio_exactly(a: RunInfo, b: RunInfo, unit: str) -> None:
    a, b = replace(a, id="a"), replace(b, id="b")
    d = decompose_throughput(a, b, unit=unit, catalog=CATALOG)
    assert d.throughput_ratio == pytest.approx(d.throughput_a / d.throughput_b, rel=1e-12)
    assert math.prod(p.factor for p in d.throughput_parts) == pytest.approx(d.throughput_ratio, rel=1e-9)
    names = [p.part for p in d.throughput_parts]
    assert names in (["hardware", "precision", "software", "load"], ["hardware", "remainder"], ["remainder"])
    assert ("remainder" in names) == bool(d.not_computed)
    for p in d.throughput_parts:
        for i in p.inputs:
            assert i.a.origin and i.b.origin and i.a.source and i.b.source
