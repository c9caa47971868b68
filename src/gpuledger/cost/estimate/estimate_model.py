"""``estimate`` from no run, or from a run that did not use a GPU (a CPU run): the roofline of the model's
config on the target GPU (``cost/estimate/roofline_estimate.py``) at an efficiency with its origin — your
own GPU runs', else published points' of that GPU, else gpuledger's default — priced with the target's
profile. Always labelled an ESTIMATE, every figure with its origin."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuledger.catalog import Catalog, GpuSpec, load_catalog, normalise_dtype
from gpuledger.cost.estimate.roofline_estimate import (
    CarriedEfficiency,
    RooflineDoc,
    RooflinePoint,
    Workload,
    choose_efficiency,
    roofline_point,
)
from gpuledger.cost.pricing.document import Doc, GpuRef
from gpuledger.cost.pricing.efficiency import DERIVED, Efficiency, model_of, run_efficiency
from gpuledger.cost.pricing.modelarch import ModelArch
from gpuledger.cost.pricing.pointcost import PointCost, PointCostDoc, price_point
from gpuledger.cost.pricing.presets import gpu_default_profile
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.setup_hours import SetupHours, setup_hours_for
from gpuledger.errors import InvalidInputError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, RunInfo

LABEL = "ESTIMATE from a roofline model (the model's config and the GPU's spec), not a measurement"
MAX_POOL_RUNS = 2_000


@dataclass(frozen=True, slots=True)
class EfficiencyPool:
    """What the efficiency of an estimate may come from: ``(run id, efficiency, vendor)`` of your GPU runs
    and of published points (stored or shipped)."""

    own: list[tuple[str, Efficiency, str]] = field(default_factory=list)
    published: list[tuple[str, Efficiency, str]] = field(default_factory=list)

    def carried(self, target: GpuSpec) -> CarriedEfficiency:
        return choose_efficiency(target, self.own, self.published)


def shipped_points(catalog: Catalog | None = None) -> list[RunInfo]:
    """Every point of the shipped public results, as runs (ids ``public:SET:N``)."""
    from dataclasses import replace

    from gpuledger.cost.published.published import public_points, public_sets

    out = []
    for name in public_sets():
        for i, run in enumerate(public_points(name, catalog), start=1):
            out.append(replace(run, id=f"public:{name}:{i}"))
    return out


def efficiency_pool(runs: Iterable[RunInfo], catalog: Catalog | None = None) -> EfficiencyPool:
    """The efficiencies of ``runs`` (your stored runs and published points) that have an MBU or MFU."""
    cat = catalog if catalog is not None else load_catalog()
    pool = EfficiencyPool()
    seen: set[tuple[Any, ...]] = set()
    for n, run in enumerate(runs):
        if n >= MAX_POOL_RUNS:
            break
        eff = run_efficiency(run, catalog=cat)
        if not eff.available or eff.gpu is None:
            continue
        spec = cat.get(eff.gpu)
        if eff.origin == DERIVED:  # a published point (shipped, or imported)
            s = run.summary
            key = (run.model, eff.gpu, getattr(s, "input_len", None), getattr(s, "output_len", None),
                   getattr(s, "tokens_per_s_per_user", None), getattr(s, "total_tokens_per_s", None))
            if key in seen:  # an imported copy of a shipped point
                continue
            seen.add(key)
            pool.published.append((run.id, eff, spec.vendor))
        else:
            pool.own.append((run.id, eff, spec.vendor))
    return pool


@dataclass(frozen=True, slots=True)
class ModelEstimate:
    arch: ModelArch
    target: GpuSpec
    point: RooflinePoint
    cost: PointCost
    setup: SetupHours
    basis: str  # "no run" or "CPU run ID"
    workload_source: str
    assumptions: list[str]
    warnings: list[str]

    def document(self) -> ModelEstimateDocument:
        """``estimate MODEL --gpu NAME --json`` (or of a CPU run)."""
        a = self.arch
        return ModelEstimateDocument(
            basis=self.basis,
            model=ModelRef(
                name=a.name, source=a.source, params=a.params, non_embedding_params=a.non_embedding_params,
                active_params=a.active_params, layers=a.layers, kv_heads=a.kv_heads, head_dim=a.head_dim,
                attention=a.attention, kv_elements_per_token=a.kv_elements_per_token,
            ),
            target_gpu=GpuRef(key=self.target.key, name=self.target.name),
            devices=self.point.devices,
            workload=WorkloadDoc(input_len=self.point.workload.input_len,
                                 output_len=self.point.workload.output_len,
                                 concurrency=self.point.workload.concurrency, source=self.workload_source),
            roofline=self.point.document(),
            efficiency=self.point.efficiency,
            cost=self.cost.document(),
            setup_labour=SetupLabour.of(self.setup),
            assumptions=self.assumptions,
            warnings=self.warnings,
        )


class ModelRef(Doc):
    """The model priced, from its published config."""

    name: str
    source: str
    params: int
    non_embedding_params: int
    active_params: float
    layers: int
    kv_heads: int
    head_dim: int
    attention: str
    kv_elements_per_token: int
    origin: Literal["published config"] = "published config"


class WorkloadDoc(Doc):
    input_len: int
    output_len: int
    concurrency: int
    source: str


class SetupLabour(Doc):
    """The setup hours priced, where they come from and what they are (stated, doctor ledger, the essay's)."""

    hours: float
    source: str
    origin: str

    @classmethod
    def of(cls, setup: SetupHours) -> SetupLabour:
        return cls(hours=setup.hours, source=setup.source, origin=setup.origin)


class ModelEstimateDocument(Doc):
    """A model nobody ran here priced on a GPU: the roofline of its config at an efficiency with its origin,
    the target's profile, the setup labour; always labelled an ESTIMATE."""

    estimate: Literal[True] = True
    label: str = LABEL
    basis: str
    model: ModelRef
    target_gpu: GpuRef
    devices: int
    workload: WorkloadDoc
    roofline: RooflineDoc
    efficiency: CarriedEfficiency
    cost: PointCostDoc
    setup_labour: SetupLabour
    assumptions: list[str]
    warnings: list[str]


def workload_of_run(run: RunInfo) -> tuple[Workload, str]:
    """The lengths and concurrency a run measured (means, rounded), to carry them to a GPU."""
    s = run.summary
    if not isinstance(s, TextGenerationSummary) or not s.num_ok or not s.output_tokens_total:
        raise InvalidInputError(
            f"run {run.id} has no text-generation requests with output tokens: nothing to carry to a GPU"
        )
    conc = run.config.fixed_concurrency() or getattr(s, "concurrency", None) or 1
    inp = max(1, round(s.input_tokens_total / s.num_ok))
    out = max(1, round(s.output_tokens_total / s.num_ok))
    return Workload(inp, out, int(conc)), f"run {run.id}'s mean lengths and concurrency"


def estimate_model(
    arch: ModelArch,
    target: GpuSpec,
    workload: Workload,
    *,
    devices: int = 1,
    dtype: str | None = None,
    profile: CostProfile | None = None,
    pool: EfficiencyPool | None = None,
    setup_hours: dict[str, float] | None = None,
    doctor_records: Sequence[DoctorRunRecord] | None = None,
    basis: str = "no run",
    workload_source: str = "given",
) -> ModelEstimate:
    """The roofline of ``arch`` doing ``workload`` on ``devices`` x ``target``, priced."""
    if devices < 1:
        raise InvalidInputError(f"--gpus must be at least 1 (got {devices})")
    if dtype is not None and normalise_dtype(dtype) is None:
        raise InvalidInputError(
            f"--dtype {dtype!r}: not a dtype gpuledger knows (bf16, fp16, fp32, fp8, int8, int4, fp4)"
        )
    kind = normalise_dtype(dtype) or "bf16"
    eff = (pool or EfficiencyPool()).carried(target)
    point = roofline_point(arch, target, devices, workload, kind, eff)
    prof = profile if profile is not None else gpu_default_profile(target)
    if prof.from_doctor_history or ("setup_hours" not in prof.sources and not prof.setup_hours):
        setup = setup_hours_for(target.vendor, setup_hours, doctor_records)
    else:
        setup = SetupHours(prof.setup_hours, prof.source_of("setup_hours"), "profile")
    cost = price_point(prof, target, devices, point.output_tokens_per_s, point.total_tokens_per_s,
                       setup_hours=setup.hours, setup_source=setup.source, rate_origin="estimate")
    assumptions = list(point.assumptions)
    if dtype is None:
        assumptions.append("dtype not given: bf16 (--dtype to choose)")
    warnings = [f"ESTIMATE: {arch.name} on {devices} x {target.name} by a roofline model at "
                f"{eff.text()}; measure on the real hardware before buying"]
    floor = point.floor_warning()
    if floor is not None:
        warnings.append(floor)
    if not point.memory.fits:
        warnings.append(f"does not fit: {point.memory.reason}")
    if eff.origin == "estimate":
        warnings.append(f"efficiency is {eff.label}")
    if arch.max_positions is not None and workload.input_len + workload.output_len > arch.max_positions:
        warnings.append(f"{arch.name} handles at most {arch.max_positions} positions; input + output "
                        f"{workload.input_len + workload.output_len} is longer")
    return ModelEstimate(arch, target, point, cost, setup, basis, workload_source, assumptions, warnings)


def estimate_cpu_run(
    run: RunInfo,
    target: GpuSpec,
    *,
    arch: ModelArch | None = None,
    workload: Workload | None = None,
    **kwargs: Any,
) -> ModelEstimate:
    """A run that used no GPU (a CPU run) carried to ``target``: its model's roofline (``arch`` overrides
    the run's) at its workload (``workload`` overrides)."""
    if arch is None:
        arch, why = model_of(run)
        if arch is None:
            raise InvalidInputError(f"estimate from run {run.id}: {why}",
                                    hint="give --model NAME or --model-config PATH")
    found, how = workload_of_run(run) if workload is None else (workload, "given")
    if kwargs.get("dtype") is None:
        measured = run.config.precision()
        kwargs["dtype"] = None if normalise_dtype(measured) == "fp32" else measured
    return estimate_model(arch, target, found, basis=f"CPU run {run.id}", workload_source=how, **kwargs)
