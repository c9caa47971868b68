"""Roofline helpers: peak figures per dtype, bytes per weight and per KV element, and scaling a measured run
to another GPU (MBU and MFU themselves: ``gpuledger.cost.pricing.efficiency``).

The model (docs/design.md, "Productive vs theoretical compute"):

- decode is memory-bound: its time scales with peak memory bandwidth;
- prefill is compute-bound: its time scales with peak dense FLOP/s at the run's dtype;
- the software stack's efficiency (MBU, MFU) measured on the real run is carried over unchanged.

So a run whose time splits into a prefill share ``p`` and a decode share ``1 - p`` takes, on the target,
``p * F_src / F_dst + (1 - p) * B_src / B_dst`` of its measured time; throughput scales by the inverse.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuledger.catalog.model import Figure, GpuSpec
from gpuledger.errors import InvalidInputError

TB = 1e12  # catalog bandwidth is in TB/s (1e12 bytes/s); TFLOPS are 1e12 FLOP/s

_DTYPE_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "fp32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float8": "fp8",
    "fp8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp8_e4m3": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "int4": "int4",
    "q4": "int4",
    "awq": "int4",
    "gptq": "int4",
    "fp4": "fp4",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5,
}
# The share of a device's memory a server can fill with weights and KV cache (the rest: activations, the
# CUDA/HIP context, fragmentation) -- vLLM's default --gpu-memory-utilization.
USABLE_MEMORY_FRACTION = 0.9


def normalise_dtype(dtype: str | None) -> str | None:
    """``"torch.bfloat16"`` -> ``"bf16"``; unknown or empty -> None."""
    if not dtype:
        return None
    text = dtype.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(text)


def peak_bandwidth(spec: GpuSpec) -> Figure:
    """Peak memory bandwidth of one logical device (TB/s)."""
    return spec.device_figure("bandwidth_tb_s")


def peak_compute(spec: GpuSpec, dtype: str | None) -> tuple[Figure, str]:
    """Peak dense TFLOPS of one logical device for ``dtype``, and a note on which catalog figure stands
    for it (FP8 figure for fp8; the FP16/BF16 tensor figure otherwise, said so when that is a proxy)."""
    kind = normalise_dtype(dtype)
    if kind == "fp8":
        fp8 = spec.device_figure("fp8_tflops")
        if fp8.available:
            return fp8, "FP8 dense TFLOPS"
        return spec.device_figure("fp16_tflops"), (
            f"FP16/BF16 dense TFLOPS ({spec.name} has no FP8 figure: {fp8.reason})"
        )
    fig = spec.device_figure("fp16_tflops")
    if kind in (None, "fp16", "bf16"):
        note = "FP16/BF16 dense TFLOPS" + ("" if kind else " (run dtype not recorded: assumed 16-bit)")
        return fig, note
    return fig, f"FP16/BF16 dense TFLOPS as a proxy for {kind} (no {kind} figure in the catalog)"


def weight_bytes(dtype: str | None) -> tuple[float, str]:
    """Bytes per weight at ``dtype``, and what that rests on (16-bit when the dtype is not known)."""
    kind = normalise_dtype(dtype)
    if kind is None:
        return 2.0, "dtype not recorded: 16-bit weights assumed (2 bytes)"
    return DTYPE_BYTES[kind], f"{kind} weights ({DTYPE_BYTES[kind]:g} bytes)"


def kv_bytes(dtype: str | None) -> tuple[float, str]:
    """Bytes per KV-cache element: the compute dtype's for 32/16-bit runs; 16-bit for 8- and 4-bit weights
    (the servers' default KV cache dtype follows the activations, not the quantised weights)."""
    kind = normalise_dtype(dtype)
    if kind in ("fp32", "fp16", "bf16"):
        return DTYPE_BYTES[kind], f"{kind} KV cache ({DTYPE_BYTES[kind]:g} bytes)"
    return 2.0, "16-bit KV cache assumed (2 bytes; the servers' default beside quantised weights)"


def kv_cache_bytes(
    elements_per_token: float, bytes_per_element: float, context: float, sequences: float
) -> float:
    """KV cache of ``sequences`` sequences of ``context`` tokens: elements per token (2 x layers x KV heads
    x head dim, or an MLA latent) x bytes x context x sequences."""
    return elements_per_token * bytes_per_element * context * sequences


@dataclass(frozen=True, slots=True)
class RooflineScale:
    """How a measured run's throughput carries from ``source`` to ``target``."""

    source: str
    target: str
    bandwidth_ratio: float  # target / source
    compute_ratio: float  # target / source
    prefill_share: float
    speedup: float  # throughput on target / measured throughput
    compute_basis: str
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _need(fig: Figure, spec: GpuSpec, what: str) -> float:
    if fig.value is None:
        raise InvalidInputError(
            f"cannot scale with a roofline model: {spec.name} has no {what} in the catalog ({fig.reason})"
        )
    return fig.value


def roofline_scale(
    source: GpuSpec, target: GpuSpec, prefill_share: float, dtype: str | None
) -> RooflineScale:
    """Throughput factor from ``source`` to ``target`` for a run spending ``prefill_share`` of its time in
    (compute-bound) prefill and the rest in (memory-bound) decode, at the same MBU/MFU."""
    if not 0.0 <= prefill_share <= 1.0:
        raise InvalidInputError(f"prefill_share must be within [0, 1] (got {prefill_share})")
    bw_s = _need(peak_bandwidth(source), source, "memory bandwidth")
    bw_t = _need(peak_bandwidth(target), target, "memory bandwidth")
    fl_s_fig, basis_s = peak_compute(source, dtype)
    fl_t_fig, basis_t = peak_compute(target, dtype)
    fl_s = _need(fl_s_fig, source, "dense FLOPS figure")
    fl_t = _need(fl_t_fig, target, "dense FLOPS figure")
    time_factor = prefill_share * fl_s / fl_t + (1.0 - prefill_share) * bw_s / bw_t
    assumptions = [
        "decode is memory-bound: its time scales with peak memory bandwidth "
        f"({source.name} {bw_s:g} TB/s -> {target.name} {bw_t:g} TB/s per device)",
        "prefill is compute-bound: its time scales with peak dense FLOP/s "
        f"({fl_s:g} -> {fl_t:g} TFLOPS per device; source: {basis_s}; target: {basis_t})",
        "the software stack reaches the same fraction of peak (MBU/MFU) on the target as measured "
        "on the source",
        "the same number of devices, batch/concurrency and request mix as the measured run",
    ]
    for spec, fig in ((source, fl_s_fig), (target, fl_t_fig)):
        if fig.is_estimate or peak_bandwidth(spec).is_estimate:
            assumptions.append(f"{spec.name}: some peak figures are catalog estimates")
    return RooflineScale(
        source=source.key,
        target=target.key,
        bandwidth_ratio=bw_t / bw_s,
        compute_ratio=fl_t / fl_s,
        prefill_share=prefill_share,
        speedup=1.0 / time_factor,
        compute_basis=basis_t,
        assumptions=assumptions,
    )
