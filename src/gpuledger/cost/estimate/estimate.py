"""What-if for hardware you don't own: a measured run scaled to a catalog GPU with a roofline model.

Always an ESTIMATE. The run's throughput is carried to the target by
``speedup = 1 / (p x F_src/F_dst + (1 - p) x B_src/B_dst)`` (``p`` = prefill share of the time, ``F`` peak
dense FLOP/s at the run's dtype, ``B`` peak memory bandwidth), i.e. at the MBU/MFU measured on the real run.
Its latencies are carried from their parts: TPOT and ITL (decode, memory-bound) ÷ ``B_dst/B_src``, TTFT
(prefill, compute-bound) ÷ ``F_dst/F_src`` — every percentile, since one positive factor keeps the order of
the requests — and E2E = TTFT + TPOT x (output tokens - 1), of the means only (a percentile of a sum is not
the sum of its parts' percentiles, so E2E percentiles are not estimated).
Power on the target = the target's TDP x the fraction of TDP the source drew (when measured), else its TDP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import model_serializer

from gpuledger.catalog import Catalog, GpuSpec, RooflineScale, load_catalog, normalise_dtype, roofline_scale
from gpuledger.cost.estimate.roofline_estimate import step_floor
from gpuledger.cost.pricing.document import CostDocument, DevicePower, Doc, EfficiencyDoc, GpuRef, UnitRate
from gpuledger.cost.pricing.efficiency import Efficiency, model_of, run_efficiency
from gpuledger.cost.pricing.operating import operating_point
from gpuledger.cost.pricing.power import PowerResolution
from gpuledger.cost.pricing.presets import gpu_default_profile
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runcost import RunCost, cost_of_run
from gpuledger.cost.pricing.runview import DeviceView, gpu_devices
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import GPU_VENDORS, DeviceWindow, DoctorRunRecord, Latency, RunInfo, RunSummary

# The statistics of a latency block that one positive factor scales (percentiles keep the requests' order).
LATENCY_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "std", "min", "max")


def run_dtype(run: RunInfo) -> str | None:
    """The dtype the run's model computed in, when its spec records one the catalog knows."""
    value = run.config.precision()
    return value if value and normalise_dtype(value) else None


class LatencyFigures(Doc):
    """The statistics of a latency shown (ms)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, block: Latency) -> LatencyFigures:
        return cls(mean=block.mean, p50=block.p50, p90=block.p90, p95=block.p95, p99=block.p99)


class ScaledLatencyDoc(Doc):
    """One latency metric on the target: the estimated figures beside the measured ones, and how."""

    unit: Literal["ms"] = "ms"
    estimated: LatencyFigures
    measured: LatencyFigures
    n: int
    origin: Literal["estimate"] = "estimate"
    how: str


class NoLatency(Doc):
    reason: str


class Rates(Doc):
    """A summary's rates under its kind's keys; ``window_s`` the (estimated) window, when given."""

    rates: list[UnitRate]
    window_s: float | None = None
    with_window: bool = False

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {r.key: r.value for r in self.rates}
        return out | ({"window_s": self.window_s} if self.with_window else {})

    @classmethod
    def of(cls, summary: RunSummary, *, window: bool = False) -> Rates:
        return cls(rates=[UnitRate(unit=u, key=k, value=summary.rate(u)) for u, k in summary.rate_keys()],
                   window_s=summary.window_s if window else None, with_window=window)


class EstimateDocument(Doc):
    """``gpuledger estimate RUN --gpu NAME --json``: the run carried to another GPU by a roofline model —
    always labelled an estimate — its rates, latencies, MBU/MFU and its cost there."""

    estimate: Literal[True] = True
    label: str = "ESTIMATE from a roofline model, not a measurement"
    run_id: str
    source_gpu: GpuRef
    target_gpu: GpuRef
    roofline: RooflineScale
    estimated_throughput: Rates
    measured_throughput: Rates
    latency: dict[str, ScaledLatencyDoc] | NoLatency
    efficiency: EfficiencyDoc
    cost: CostDocument
    assumptions: list[str]
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class Estimate:
    run: RunInfo
    source: GpuSpec
    target: GpuSpec
    scale: RooflineScale
    cost: RunCost
    scaled_summary: RunSummary
    measured_summary: RunSummary
    efficiency: Efficiency
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    latency: LatencyEstimate | None = None

    def document(self) -> EstimateDocument:
        """The ``estimate --json`` document."""
        return EstimateDocument(
            run_id=self.run.id,
            source_gpu=GpuRef(key=self.source.key, name=self.source.name),
            target_gpu=GpuRef(key=self.target.key, name=self.target.name),
            roofline=self.scale,
            estimated_throughput=Rates.of(self.scaled_summary, window=True),
            measured_throughput=Rates.of(self.measured_summary),
            latency=self.latency.document() if self.latency is not None else NoLatency(
                reason="the run's work has no per-request latencies to carry (not text generation)"
            ),
            efficiency=self.efficiency.document(),
            cost=self.cost.document(),
            assumptions=self.assumptions,
            warnings=self.warnings,
        )


@dataclass(frozen=True, slots=True)
class ScaledLatency:
    """One latency metric on the target: the measured figures, the estimated ones, and how."""

    name: str  # "ttft_ms" | "tpot_ms" | "itl_ms" | "e2e_ms"
    measured: Latency
    estimated: Latency
    how: str

    def document(self) -> ScaledLatencyDoc:
        return ScaledLatencyDoc(estimated=LatencyFigures.of(self.estimated),
                                measured=LatencyFigures.of(self.measured), n=self.measured.n, how=self.how)


@dataclass(frozen=True, slots=True)
class LatencyEstimate:
    """The run's latencies carried to the target from their parts (module docstring)."""

    metrics: tuple[ScaledLatency, ...]

    def get(self, name: str) -> ScaledLatency | None:
        return next((m for m in self.metrics if m.name == name), None)

    def lines(self) -> list[str]:
        return [f"{m.name.removesuffix('_ms').upper()} on the target: {m.how}" for m in self.metrics]

    def document(self) -> dict[str, ScaledLatencyDoc]:
        return {m.name: m.document() for m in self.metrics}


def _divided(block: Latency, factor: float) -> Latency:
    """Every statistic of ``block`` ÷ ``factor`` (> 0), the count kept."""
    return block.model_copy(update={k: None if (v := block.get(k)) is None else v / factor
                                    for k in LATENCY_STATS})


def scale_latencies(
    summary: TextGenerationSummary, scale: RooflineScale, target: str
) -> tuple[TextGenerationSummary, LatencyEstimate]:
    """``summary`` (already at the target's rates) with its latencies carried to ``target`` from their parts:
    TPOT and ITL ÷ the bandwidth ratio, TTFT ÷ the compute ratio (every percentile), E2E = TTFT + TPOT x
    (output tokens - 1) of the means (its percentiles are not estimated)."""
    br, cr = scale.bandwidth_ratio, scale.compute_ratio
    every = "every percentile (one factor keeps the requests' order)"
    decode = f"÷ {br:.4g}, the bandwidth ratio to {target} (decode is memory-bound), {every}"
    ttft = _divided(summary.ttft_ms, cr)
    tpot = _divided(summary.tpot_ms, br)
    itl = _divided(summary.itl_ms, br)
    mean_out = summary.output_tokens_total / summary.num_ok if summary.num_ok else None
    e2e_m = summary.e2e_ms
    no_pct = ("; its percentiles are not estimated (a percentile of a sum is not the sum of its parts' "
              "percentiles)")
    if ttft.mean is not None and tpot.mean is not None and mean_out is not None:
        e2e_mean: float | None = ttft.mean + tpot.mean * max(mean_out - 1.0, 0.0)
        e2e_how = (f"mean only: TTFT mean {ttft.mean:.4g} ms + TPOT mean {tpot.mean:.4g} ms x (mean output "
                   f"tokens {mean_out:.6g} - 1) = {e2e_mean:.4g} ms (its parts on {target}){no_pct}")
    elif e2e_m.mean is not None:
        e2e_mean = e2e_m.mean / scale.speedup
        e2e_how = (f"mean only: the measured mean ÷ {scale.speedup:.4g}, the throughput factor (the run has "
                   f"no TTFT and TPOT to carry it from its parts){no_pct}")
    else:
        e2e_mean, e2e_how = None, "the run has no E2E"
    e2e = Latency(mean=e2e_mean, n=e2e_m.n if e2e_mean is not None else 0)
    metrics = (
        ScaledLatency("ttft_ms", summary.ttft_ms, ttft,
                      f"measured ÷ {cr:.4g}, the compute ratio to {target} (prefill is compute-bound; "
                      f"queueing in the TTFT is scaled alike), {every}"),
        ScaledLatency("tpot_ms", summary.tpot_ms, tpot, f"measured {decode}"),
        ScaledLatency("itl_ms", summary.itl_ms, itl, f"measured {decode}"),
        ScaledLatency("e2e_ms", e2e_m, e2e, e2e_how),
    )
    scaled = summary.model_copy(update={"ttft_ms": ttft, "tpot_ms": tpot, "itl_ms": itl, "e2e_ms": e2e})
    return scaled, LatencyEstimate(metrics)


def scale_published_latencies(
    summary: PublishedSummary, scale: RooflineScale, target: str
) -> tuple[PublishedSummary, list[str]]:
    """A published point's TTFT ÷ the compute ratio, TPOT ÷ the bandwidth ratio and tokens/s per user x the
    bandwidth ratio on ``target`` (its figures are single values, not percentiles)."""
    br, cr = scale.bandwidth_ratio, scale.compute_ratio
    update: dict[str, Any] = {}
    lines = []
    if summary.ttft_ms is not None:
        update["ttft_ms"] = summary.ttft_ms / cr
        lines.append(f"TTFT on the target: the published {summary.ttft_ms:g} ms ÷ {cr:.4g}, the compute "
                     f"ratio to {target} (prefill is compute-bound)")
    if summary.tpot_ms is not None:
        update["tpot_ms"] = summary.tpot_ms / br
        lines.append(f"TPOT on the target: the published {summary.tpot_ms:g} ms ÷ {br:.4g}, the bandwidth "
                     f"ratio to {target} (decode is memory-bound)")
    if summary.tokens_per_s_per_user is not None:
        update["tokens_per_s_per_user"] = summary.tokens_per_s_per_user * br
        lines.append(f"tok/s per user on the target: the published {summary.tokens_per_s_per_user:g} x "
                     f"{br:.4g}, the bandwidth ratio (1 ÷ TPOT)")
    return summary.model_copy(update=update), lines


def _floor_warning(run: RunInfo, latency: LatencyEstimate | None, target: GpuSpec) -> str | None:
    """A TPOT carried below the per-step overhead floor of the run's model (``roofline_estimate.step_floor``):
    its decode on the target would not be bandwidth-bound, so the bandwidth ratio overstates the speedup."""
    tpot = latency.get("tpot_ms") if latency is not None else None
    mean = tpot.estimated.mean if tpot is not None else None
    arch, _ = model_of(run)
    if mean is None or arch is None:
        return None
    floor = step_floor(arch)
    if mean >= floor.seconds * 1000.0:
        return None
    return (f"the estimated TPOT {mean:.3g} ms on {target.name} is below the per-step overhead floor of "
            f"{arch.name} ({floor.seconds * 1e3:.3g} ms: {floor.how}): so small a model's decode is not "
            "bandwidth-bound there, and the bandwidth ratio overstates its speedup — the TPOT is at least "
            "the floor, the throughput at most what is shown; bench it")


def _target_power(used: list[DeviceView], source: GpuSpec, target: GpuSpec, n: int) -> PowerResolution:
    tdp_t = target.device_figure("tdp_w")
    if tdp_t.value is None:
        raise InvalidInputError(
            f"estimate: {target.name} has no TDP in the catalog ({tdp_t.reason})",
            hint="set power_w in the cost profile",
        )
    tdp_s = source.device_figure("tdp_w")
    measured = [d.mean_power_w for d in used if d.mean_power_w is not None and d.power_valid]
    if measured and tdp_s.value is not None and len(measured) == len(used):
        fraction = sum(measured) / len(measured) / tdp_s.value
        per = tdp_t.value * fraction
        source_txt = (
            f"estimate: target TDP {tdp_t.value:g} W x {fraction:.0%} (the fraction of TDP the run "
            f"drew on {source.name}: {sum(measured) / len(measured):.0f} W of {tdp_s.value:g} W)"
        )
    else:
        per = tdp_t.value
        source_txt = f"estimate: catalog TDP of {target.name} (the run's power was not measured)"
    return PowerResolution(
        per * n,
        per * n,
        source_txt,
        True,
        False,
        [DevicePower(device=f"{target.key}:{i}", name=target.name, power_w=per) for i in range(n)],
        [],
    )


def estimate_run(
    run: RunInfo,
    target: str | GpuSpec,
    profile: CostProfile | None = None,
    *,
    catalog: Catalog | None = None,
    prefill_share: float | None = None,
    doctor_records: Sequence[DoctorRunRecord] | None = None,
) -> Estimate:
    """Scale ``run`` to the ``target`` GPU (same device count) and price it with ``profile`` (default: the
    target's catalog preset). NotFoundError for an unknown target or a source GPU not in the catalog."""
    cat = catalog if catalog is not None else load_catalog()
    tgt = cat.resolve(target) if isinstance(target, str) else target
    used, _ = gpu_devices(run)
    origin = run.summary.origin() if run.summary is not None and not used else None
    if not used and (origin is None or origin.gpu is None):
        raise InvalidInputError(
            f"estimate needs a run measured on a GPU the catalog knows; run {run.id} has no GPU telemetry "
            "(CPU-only or not recorded)"
        )
    # A published point carries the GPU it was published on instead of telemetry.
    src_name = origin.gpu if origin is not None and origin.gpu else used[0].name
    src = cat.find(src_name)
    if src is None:
        raise NotFoundError(
            f"run {run.id} ran on {src_name!r}, which is not in the GPU catalog: its peak "
            "figures are needed to carry the measured efficiency",
            hint="add the GPU to your catalog file (docs/cost.md)",
        )
    assumptions: list[str] = []
    if run.summary is None:
        raise InvalidInputError(
            f"run {run.id} has no metrics summary (status {run.status}): nothing to scale"
        )
    measured: RunSummary = run.summary
    op = operating_point(run)
    if op is not None:
        # A sweep is carried over at the load it is priced at, not at the blend of its stages.
        measured = op.summary.without_stages()
        run = replace(run, summary=measured)
        assumptions.append(f"scaled from stage {op.stage} of the sweep: {op.rule}")
    if prefill_share is None:
        share, how = measured.compute_share()
        if share is None:
            share = 0.0
            assumptions.append(
                f"prefill share unknown ({how}): the run is treated as decode-only (bandwidth ratio)"
            )
        else:
            assumptions.append(f"prefill share of the time = {share:.1%} ({how})")
    else:
        share = prefill_share
        assumptions.append(f"prefill share of the time = {share:.1%} (given)")
    dtype = run_dtype(run)
    scale = roofline_scale(src, tgt, share, dtype)
    assumptions.extend(scale.assumptions)
    n = len(used) or (origin.gpus if origin is not None and origin.gpus else 1)

    summary = measured.with_window(scale.speedup)
    latency: LatencyEstimate | None = None
    if isinstance(summary, TextGenerationSummary):
        summary, latency = scale_latencies(summary, scale, tgt.name)
        assumptions.extend(latency.lines())
    elif isinstance(summary, PublishedSummary):
        summary, lines = scale_published_latencies(summary, scale, tgt.name)
        assumptions.extend(lines)
    # The target's devices as telemetry would name them, nothing measured; a GPU of a vendor the telemetry
    # does not read (the catalog's intel, other) has none.
    telemetry = [
        DeviceWindow(device=f"{vendor}:{i}", vendor=vendor, name=tgt.name, mean_power_w=None, energy_j=None,
                     peak_util_ratio=None)
        for vendor in GPU_VENDORS if vendor == tgt.vendor
        for i in range(n)
    ]
    synthetic = replace(
        run,
        id=f"{run.id}@{tgt.key}",
        label=f"estimate of {run.label or run.id} on {tgt.name}",
        summary=summary,
        telemetry_summary=telemetry,
    )
    prof = profile if profile is not None else gpu_default_profile(tgt)
    power = _target_power(used, src, tgt, prof.gpu_count or n)
    cost = cost_of_run(
        synthetic,
        prof,
        catalog=cat,
        doctor_records=doctor_records,
        power=power,
        rate_source=f"estimate: the run's {'rates ' + origin.label if origin else 'measured rates'} x "
        f"{scale.speedup:.3g} (roofline {src.name} -> {tgt.name}), not measured",
    )
    warnings = [
        f"ESTIMATE: {src.name} -> {tgt.name} by a roofline model (x{scale.speedup:.3g} throughput); "
        "measure on the real hardware before buying"
    ]
    mem = tgt.device_figure("memory_gb")
    peaks = [d.peak_memory_bytes for d in used if d.peak_memory_bytes]
    if peaks and mem.value is not None and max(peaks) > mem.value * 1e9:
        warnings.append(
            f"the run peaked at {max(peaks) / 1e9:.1f} GB on one device; {tgt.name} has "
            f"{mem.value:g} GB per device: the model may not fit"
        )
    floor = _floor_warning(run, latency, tgt)
    if floor is not None:
        warnings.append(floor)
    if dtype and normalise_dtype(dtype) == "fp8" and not tgt.figure("fp8_tflops").available:
        warnings.append(
            f"the run used FP8 but {tgt.name} has no FP8: it would run at 16-bit (more memory, other speed)"
        )
    measured_eff = run_efficiency(run, measured, catalog=cat)
    # The roofline keeps the measured MBU/MFU on the target: that is what the estimate's price rests on.
    how = "measured by" if measured_eff.origin == "measured" else f"{measured_eff.provenance()}, of"
    carried = measured_eff.as_estimate(
        f"estimate: the MBU/MFU {how} run {run.id} on {src.name}, carried to {tgt.name} unchanged "
        "(the roofline's assumption)"
    )
    cost = replace(cost, efficiency=carried)
    return Estimate(
        run,
        src,
        tgt,
        scale,
        cost,
        summary,
        measured,
        measured_eff,
        assumptions,
        warnings + cost.warnings,
        latency,
    )
