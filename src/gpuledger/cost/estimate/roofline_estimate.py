"""A workload on a GPU nobody measured it on: the roofline from the model's config and the GPU's spec, at a
stated efficiency (docs/advise.md, "The roofline").

For ``C`` sequences in flight, each a prompt of ``I`` tokens answered with ``O`` tokens, on ``n`` devices
serving one replica (tensor parallel: the weights and the KV cache split over them):

- a decode step reads ``bytes = weights read + KV cache of C sequences at context I + O/2`` and computes
  ``C x FLOPs per token``: it takes ``max(bytes / (n x B x MBU), C x FLOPs / (n x F x MFU), floor)``, where
  ``floor`` is the per-step overhead floor (``step_floor``): the kernels one decode step runs one after the
  other, each taking at least the GPU's minimum time per kernel — a model so small that its bytes take less
  than that is not bandwidth-bound, and its figures say so;
- a prefill takes ``prefill FLOPs(I) / (n x F x MFU)``;
- the C slots each run one prefill and O steps per request, the prefills one at a time: output tok/s =
  ``C x O / (O x t_step + C x t_prefill)``; TPOT = ``t_step + (C - 1) x t_prefill / O`` (the others'
  prefills land between a request's steps); TTFT = ``t_prefill`` (no queue: a lower bound).

``B`` and ``F`` are the catalog's peak bandwidth and dense FLOP/s at the dtype; MBU and MFU (the prefill's)
are the efficiency, which comes with its origin (``CarriedEfficiency``): the user's own runs, published
points, or gpuledger's default.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpuledger.catalog import GpuSpec, peak_bandwidth, peak_compute
from gpuledger.catalog.roofline import TB, USABLE_MEMORY_FRACTION, kv_bytes, kv_cache_bytes, weight_bytes
from gpuledger.cost.pricing.document import Doc
from gpuledger.cost.pricing.efficiency import DERIVED, Efficiency, FigureOrigin, pct_text
from gpuledger.cost.pricing.modelarch import ModelArch
from gpuledger.errors import InvalidInputError

# gpuledger's default efficiency when neither the user's runs nor published points of the GPU give one: a
# round figure, not a measurement (docs/advise.md says so and how to replace it).
DEFAULT_MBU = 0.5
DEFAULT_PREFILL_MFU = 0.4
DEFAULT_LABEL = (
    "gpuledger's default (MBU 50 %, prefill MFU 40 %: a round figure, not a measurement — bench your own "
    "run or import published points of this GPU to replace it)"
)
MAX_CONCURRENCY = 4096

# The per-step overhead floor of a decode step (docs/advise.md, "The roofline"): the kernels of one step run
# one after the other, and no kernel takes less than the GPU's minimum time per kernel, however few bytes it
# reads. A stated assumption: a Llama-style decoder layer runs 10 kernels per decode step (input norm, QKV
# projection, rotary embedding, KV-cache write, attention, output projection, post-attention norm, gate/up
# projection, activation, down projection), and a step 4 more (embedding lookup, final norm, LM head,
# sampling). The time per kernel is measured: 80 small kernels replayed as one CUDA graph took 70 µs on the
# GPU (CUDA.jl documentation, "Graphs", https://cuda.juliagpu.org/dev/usage/graphs/), 0.875 µs each — the
# launch cost a server's CUDA/HIP graphs leave. The server's own time per step (scheduling, sampling on the
# CPU) is not counted: the floor is a lower bound.
KERNELS_PER_LAYER = 10
KERNELS_PER_STEP = 4
KERNEL_FLOOR_S = 70e-6 / 80
FLOOR_SOURCE = (
    "CUDA.jl documentation, Graphs (https://cuda.juliagpu.org/dev/usage/graphs/): 80 small kernels replayed "
    "as one CUDA graph in 70 µs, 0.875 µs each"
)
FLOOR_BOUND = "per-step overhead floor"


@dataclass(frozen=True, slots=True)
class StepFloor:
    """The least time one decode step of a model takes, whatever its bytes: its kernels x the minimum time per
    kernel (an assumption with its source; a lower bound)."""

    seconds: float
    kernels: int
    how: str

    def document(self) -> StepFloorDoc:
        return StepFloorDoc(seconds=self.seconds, kernels=self.kernels, how=self.how)


class StepFloorDoc(Doc):
    seconds: float
    kernels: int
    seconds_per_kernel: float = KERNEL_FLOOR_S
    origin: Literal["estimate"] = "estimate"
    how: str
    source: str = FLOOR_SOURCE


def step_floor(arch: ModelArch) -> StepFloor:
    """The per-step overhead floor of ``arch``'s decode step (module docstring)."""
    kernels = arch.layers * KERNELS_PER_LAYER + KERNELS_PER_STEP
    seconds = kernels * KERNEL_FLOOR_S
    how = (f"{arch.layers} layers x {KERNELS_PER_LAYER} kernels + {KERNELS_PER_STEP} = {kernels} kernels one "
           f"after the other, at least {KERNEL_FLOOR_S * 1e6:g} µs each: {seconds * 1e3:.3g} ms (assumed "
           "kernels per layer; the time per kernel as measured in a CUDA graph; the server's own scheduling "
           "time is not counted: a lower bound)")
    return StepFloor(seconds, kernels, how)


@dataclass(frozen=True, slots=True)
class CarriedEfficiency:
    """The MBU and prefill MFU a roofline runs at, and where each comes from."""

    mbu: float
    prefill_mfu: float
    origin: FigureOrigin  # of the MBU: measured (your runs), derived from published, estimate (the default)
    label: str
    prefill_origin: FigureOrigin
    prefill_label: str
    runs: tuple[str, ...] = ()

    def text(self) -> str:
        return (f"MBU {pct_text(self.mbu)} ({self.origin}), prefill MFU {pct_text(self.prefill_mfu)} "
                f"({self.prefill_origin})")



def default_efficiency() -> CarriedEfficiency:
    return CarriedEfficiency(
        DEFAULT_MBU, DEFAULT_PREFILL_MFU, "estimate", DEFAULT_LABEL, "estimate", DEFAULT_LABEL
    )


def _pool(found: Sequence[tuple[str, Efficiency]]) -> tuple[float | None, float | None, list[str], list[str]]:
    mbus = [e.mbu for _, e in found if e.mbu is not None]
    exact = [(i, e) for i, e in found if e.prefill_mfu is not None and not e.prefill_mfu_lower_bound]
    pre = [e.prefill_mfu for _, e in exact if e.prefill_mfu is not None]
    ids_m = [i for i, e in found if e.mbu is not None]
    ids_p = [i for i, _ in exact]
    return (statistics.median(mbus) if mbus else None, statistics.median(pre) if pre else None, ids_m, ids_p)


def choose_efficiency(
    target: GpuSpec,
    own: Sequence[tuple[str, Efficiency, str]],
    published: Sequence[tuple[str, Efficiency, str]],
) -> CarriedEfficiency:
    """The efficiency for ``target``: ``own`` and ``published`` are ``(run id, efficiency, vendor)``.

    In order: your runs on this GPU, your runs on GPUs of its vendor, published points of this GPU,
    published points of its vendor, gpuledger's default (the median of the first tier that has a figure;
    MBU and prefill MFU each on their own; a prefill MFU that is only a lower bound is not carried).
    Efficiency is the vendor's software stack's (seed §1.3): a run on the other vendor's GPU is never
    carried over."""
    tiers: list[tuple[FigureOrigin, str, list[tuple[str, Efficiency]]]] = []
    kinds: tuple[tuple[FigureOrigin, Sequence[tuple[str, Efficiency, str]], str], ...] = (
        ("measured", own, "your runs"), (DERIVED, published, "published points"),
    )
    for origin, found, what in kinds:
        same = [(i, e) for i, e, _ in found if e.gpu == target.key]
        vendor = [(i, e) for i, e, v in found if v == target.vendor and e.gpu != target.key]
        tiers.append((origin, f"{what} on {target.name}", same))
        tiers.append((origin, f"{what} on other {target.vendor.upper()} GPUs", vendor))
    mbu: tuple[float, FigureOrigin, str, list[str]] = (DEFAULT_MBU, "estimate", DEFAULT_LABEL, [])
    pre: tuple[float, FigureOrigin, str, list[str]] = (DEFAULT_PREFILL_MFU, "estimate", DEFAULT_LABEL, [])
    mbu_found = pre_found = False
    for origin, where, rows in tiers:
        m, p, ids_m, ids_p = _pool(rows)
        if not mbu_found and m is not None:
            mbu, mbu_found = (m, origin, _label(origin, where, ids_m, rows), ids_m), True
        if not pre_found and p is not None:
            pre, pre_found = (p, origin, _label(origin, where, ids_p, rows), ids_p), True
    ids = tuple(dict.fromkeys(mbu[3] + pre[3]))
    return CarriedEfficiency(mbu[0], pre[0], mbu[1], mbu[2], pre[1], pre[2], ids)


def _label(origin: FigureOrigin, where: str, ids: list[str], rows: list[tuple[str, Efficiency]]) -> str:
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    used = [e for i, e in rows if i in ids]
    models = ", ".join(sorted({e.model for e in used if e.model}))
    how = "measured"
    if origin == DERIVED:
        premises = sorted({p for e in used for p in e.premises})
        how = (used[0].label + (f", assuming {', '.join(premises)}" if premises else "")) if used else DERIVED
    return f"median of {len(ids)} of {where} ({shown}; model {models}; {how})"


@dataclass(frozen=True, slots=True)
class Workload:
    input_len: int
    output_len: int
    concurrency: int

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "concurrency"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise InvalidInputError(f"{flag} must be at least 1 (got {getattr(self, name)})")


@dataclass(frozen=True, slots=True)
class Memory:
    weights_bytes: float
    kv_bytes: float
    usable_bytes: float | None
    fits: bool
    reason: str



@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """The roofline's figures for one workload on ``devices`` x ``gpu`` (every one an estimate)."""

    gpu: str
    gpu_name: str
    devices: int
    workload: Workload
    dtype: str | None
    step_s: float
    step_bound: str  # "memory bandwidth" | "compute" | FLOOR_BOUND
    prefill_s: float
    tpot_ms: float
    ttft_ms: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    tokens_per_s_per_user: float
    memory: Memory
    efficiency: CarriedEfficiency
    assumptions: list[str] = field(default_factory=list)
    memory_bound_s: float = 0.0  # the step's bytes / (n x B x MBU)
    compute_bound_s: float = 0.0  # the step's FLOPs / (n x F x MFU)
    floor: StepFloor | None = None

    @property
    def total_tokens_per_s(self) -> float:
        return self.output_tokens_per_s + self.input_tokens_per_s

    @property
    def e2e_ms(self) -> float:
        """A request's E2E from its parts: TTFT + TPOT x (output tokens - 1)."""
        return self.ttft_ms + self.tpot_ms * (self.workload.output_len - 1)

    @property
    def at_floor(self) -> bool:
        """The decode step is the per-step overhead floor: not bandwidth (nor compute) bound."""
        return self.step_bound == FLOOR_BOUND

    def floor_warning(self) -> str | None:
        """What a figure of a step at the floor must say, else None."""
        if not self.at_floor or self.floor is None:
            return None
        return (f"the decode step is at the per-step overhead floor ({self.step_s * 1e3:.3g} ms: "
                f"{self.floor.how}), not at the roofline's bandwidth bound ({self.memory_bound_s * 1e3:.3g} "
                "ms): the model is so small that kernel launches, not memory bandwidth, limit its decode — "
                "TPOT and throughput are bounds, not a roofline figure; bench it")

    def document(self) -> RooflineDoc:
        how = f"roofline at {self.efficiency.text()}"
        if self.at_floor:
            how += (f"; the decode step is the per-step overhead floor ({self.step_s * 1e3:.3g} ms), not the "
                    f"bandwidth bound ({self.memory_bound_s * 1e3:.3g} ms): a lower bound")

        def fig(value: float, unit: str, how: str = how) -> EstimatedFigure:
            return EstimatedFigure(value=value, unit=unit, how=how)
        return RooflineDoc(
            gpu=self.gpu,
            gpu_name=self.gpu_name,
            devices=self.devices,
            workload=self.workload,
            dtype=self.dtype,
            output_tokens_per_s=fig(self.output_tokens_per_s, "tokens/s (all devices)"),
            input_tokens_per_s=fig(self.input_tokens_per_s, "tokens/s (all devices)"),
            total_tokens_per_s=fig(self.total_tokens_per_s, "tokens/s (all devices)"),
            output_tokens_per_s_per_gpu=fig(self.output_tokens_per_s / self.devices, "tokens/s per GPU"),
            tokens_per_s_per_user=fig(self.tokens_per_s_per_user, "tokens/s per user"),
            tpot_ms=fig(self.tpot_ms, "ms"),
            ttft_ms=fig(self.ttft_ms, "ms (no queueing: a lower bound)"),
            e2e_ms=fig(self.e2e_ms, "ms (no queueing: a lower bound)",
                       f"TTFT + TPOT x (output tokens {self.workload.output_len} - 1); {how}"),
            decode_step=DecodeStep(seconds=self.step_s, bound=self.step_bound,
                                   memory_bound_s=self.memory_bound_s, compute_bound_s=self.compute_bound_s,
                                   floor=self.floor.document() if self.floor is not None else None,
                                   warning=self.floor_warning()),
            prefill_s=self.prefill_s,
            memory=self.memory,
            efficiency=self.efficiency,
            assumptions=list(self.assumptions),
        )


class EstimatedFigure(Doc):
    """A figure of the roofline: an estimate, with its unit and how it was made."""

    value: float
    unit: str
    origin: Literal["estimate"] = "estimate"
    how: str


class DecodeStep(Doc):
    seconds: float
    bound: str
    memory_bound_s: float
    compute_bound_s: float
    floor: StepFloorDoc | None
    warning: str | None


class RooflineDoc(Doc):
    """A roofline point as documents carry it (``estimate MODEL --json``'s ``roofline``): every rate and
    latency an estimate saying how, the decode step and what bounds it, the memory, the efficiency used."""

    gpu: str
    gpu_name: str
    devices: int
    workload: Workload
    dtype: str | None
    output_tokens_per_s: EstimatedFigure
    input_tokens_per_s: EstimatedFigure
    total_tokens_per_s: EstimatedFigure
    output_tokens_per_s_per_gpu: EstimatedFigure
    tokens_per_s_per_user: EstimatedFigure
    tpot_ms: EstimatedFigure
    ttft_ms: EstimatedFigure
    e2e_ms: EstimatedFigure
    decode_step: DecodeStep
    prefill_s: float
    memory: Memory
    efficiency: CarriedEfficiency
    assumptions: list[str]


def memory_of(arch: ModelArch, spec: GpuSpec, devices: int, workload: Workload, dtype: str | None) -> Memory:
    """Weights (every parameter) + the KV cache of every sequence at its full context, against the usable
    share of the devices' memory."""
    wb, _ = weight_bytes(dtype)
    kb, _ = kv_bytes(dtype)
    weights = arch.params * wb
    kv = kv_cache_bytes(arch.kv_elements_per_token, kb, workload.input_len + workload.output_len,
                        workload.concurrency)
    mem = spec.device_figure("memory_gb").value
    if mem is None:
        why = f"{spec.name} has no memory size in the catalog: fit not checked"
        return Memory(weights, kv, None, True, why)
    usable = devices * mem * 1e9 * USABLE_MEMORY_FRACTION
    need = weights + kv
    fits = need <= usable
    verb = "fit in" if fits else "exceed"
    text = (f"weights {weights / 1e9:.1f} GB + KV cache {kv / 1e9:.1f} GB ({workload.concurrency} "
            f"sequences of {workload.input_len + workload.output_len} tokens) {verb} "
            f"{usable / 1e9:.0f} GB ({devices} x {mem:g} GB x {USABLE_MEMORY_FRACTION:.0%} usable)")
    return Memory(weights, kv, usable, fits, text)


def roofline_point(
    arch: ModelArch,
    spec: GpuSpec,
    devices: int,
    workload: Workload,
    dtype: str | None,
    eff: CarriedEfficiency,
) -> RooflinePoint:
    """The figures of the module docstring."""
    bw = peak_bandwidth(spec).value
    peak, basis = peak_compute(spec, dtype)
    if bw is None or peak.value is None:
        raise InvalidInputError(f"{spec.name} lacks the peak bandwidth or dense FLOPS the roofline needs")
    wb, wb_how = weight_bytes(dtype)
    kb, kb_how = kv_bytes(dtype)
    c, i, o = workload.concurrency, workload.input_len, workload.output_len
    context = i + o / 2.0
    kv = kv_cache_bytes(arch.kv_elements_per_token, kb, context, c)
    step_bytes = arch.read_params_per_step(c) * wb + kv
    t_mem = step_bytes / (devices * bw * TB * eff.mbu)
    t_cmp = c * arch.flops_per_token(context) / (devices * peak.value * TB * eff.prefill_mfu)
    floor = step_floor(arch)
    step = max(t_mem, t_cmp, floor.seconds)
    bound = FLOOR_BOUND if floor.seconds > max(t_mem, t_cmp) else (
        "memory bandwidth" if t_mem >= t_cmp else "compute")
    prefill = arch.prefill_flops(i) / (devices * peak.value * TB * eff.prefill_mfu)
    out_tps = c * o / (o * step + c * prefill)
    tpot = step + (c - 1) * prefill / o
    assumptions = [
        f"model {arch.label}; {wb_how}; {kb_how}",
        f"{devices} x {spec.name} serve one replica (weights and KV cache split over them); peak "
        f"{bw:g} TB/s and {peak.value:g} TFLOPS ({basis}) per device",
        "every sequence asks the same lengths; prefills run one at a time between decode steps; "
        "no queueing (TTFT is a lower bound)",
        f"a decode step takes at least the per-step overhead floor: {floor.how}",
    ]
    if arch.moe is not None:
        assumptions.append("experts read per step: the expected distinct experts of the step's tokens under "
                           "uniform routing")
    return RooflinePoint(
        gpu=spec.key, gpu_name=spec.name, devices=devices, workload=workload, dtype=dtype, step_s=step,
        step_bound=bound, prefill_s=prefill,
        tpot_ms=tpot * 1000.0, ttft_ms=prefill * 1000.0, output_tokens_per_s=out_tps,
        input_tokens_per_s=out_tps * i / o, tokens_per_s_per_user=1.0 / tpot,
        memory=memory_of(arch, spec, devices, workload, dtype), efficiency=eff, assumptions=assumptions,
        memory_bound_s=t_mem, compute_bound_s=t_cmp, floor=floor,
    )


def best_at_interactivity(
    arch: ModelArch,
    spec: GpuSpec,
    devices: int,
    input_len: int,
    output_len: int,
    dtype: str | None,
    eff: CarriedEfficiency,
    *,
    min_tokens_per_s_per_user: float | None = None,
    max_ttft_ms: float | None = None,
    concurrency: int | None = None,
) -> RooflinePoint | None:
    """The roofline point of the highest concurrency (the most throughput) that still gives every user
    ``min_tokens_per_s_per_user``, keeps TTFT under ``max_ttft_ms`` and fits in memory; ``concurrency``
    fixes it instead. None: not even one sequence meets them."""
    def point(c: int) -> RooflinePoint:
        return roofline_point(arch, spec, devices, Workload(input_len, output_len, c), dtype, eff)

    def ok(p: RooflinePoint) -> bool:
        fast = min_tokens_per_s_per_user is None or p.tokens_per_s_per_user >= min_tokens_per_s_per_user
        return p.memory.fits and fast and (max_ttft_ms is None or p.ttft_ms <= max_ttft_ms)

    if concurrency is not None:
        return point(concurrency)
    if not ok(point(1)):
        return None
    lo, hi = 1, MAX_CONCURRENCY  # per-user speed falls and memory grows with concurrency: bisect
    if ok(point(hi)):
        return point(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(point(mid)):
            lo = mid
        else:
            hi = mid
    return point(lo)
