"""The cost of one measured run under one profile: ``cost_of_run`` -> ``RunCost``.

The run's summary says what work it did (``RunSummary.work()``: a rate per unit) and which unit is its
headline; this module prices every unit the same way, with no knowledge of what a unit is. What only one
kind of workload has (the prefill/decode split of a token price, the price at an SLO) comes from that
workload kind's ``pricing`` facet (``kinds/<kind>/pricing.py``: its ``cost_extras``), found through the
registry (``records.kinds``) for the kind of the summary priced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost.pricing.document import (
    CostDocument,
    Devices,
    Energy,
    Hourly,
    InputRow,
    Labour,
    OperatingPointDoc,
    Power,
    PricingExtras,
    ProfileRef,
    StageRow,
    Throughput,
    UnitEnergy,
    UnitPrice,
    UnitRate,
    UnitYield,
)
from gpuledger.cost.pricing.efficiency import Efficiency, run_efficiency
from gpuledger.cost.pricing.labour import resolve_setup_hours
from gpuledger.cost.pricing.model import CostInputs, Evaluation, evaluate
from gpuledger.cost.pricing.operating import DEFAULT_ATTAINMENT, OperatingPoint, operating_point
from gpuledger.cost.pricing.power import PowerResolution, resolve_power
from gpuledger.cost.pricing.presets import run_arch
from gpuledger.cost.pricing.profile import HOURS_PER_MONTH, CostProfile, normalise_arch
from gpuledger.cost.pricing.runview import DeviceView, cpu_device, gpu_devices
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord, Origin, RunInfo, RunSummary, UnitInfo
from gpuledger.records.kinds import kind_of_summary

# Extra cost figures a kind of workload adds to its runs' cost documents (``RunCost.document``): the
# ``cost_extras`` of the kind's ``pricing`` facet.
PricingExtra = Callable[["RunCost"], PricingExtras | None]


def _extras(summary: RunSummary) -> PricingExtra | None:
    """The pricing of the summary's kind (its ``pricing`` facet's ``cost_extras``); None for a kind without
    one, or a summary no registered kind stores."""
    kind = kind_of_summary(summary.kind)
    facet = kind.facet("pricing") if kind is not None else None
    extra = getattr(facet, "cost_extras", None)
    return cast(PricingExtra, extra) if extra is not None else None


def kind_extras(summary: RunSummary) -> tuple[type[PricingExtras], ...]:
    """What the summary's kind adds to a cost document (its ``pricing`` facet's ``EXTRAS``), to read a stored
    one back; () for a kind without."""
    kind = kind_of_summary(summary.kind)
    facet = kind.facet("pricing") if kind is not None else None
    extras: tuple[type[PricingExtras], ...] = getattr(facet, "EXTRAS", ())
    return extras


def stored_cost(stored: Mapping[str, Any], summary: RunSummary) -> CostDocument:
    """A saved cost evaluation (``store.save_cost_evaluation``, ``cost --json``) of a run with ``summary``,
    read back as its document (``InvalidInputError`` when it is not one: another shape, another run's)."""
    return CostDocument.read(stored, summary, kind_extras(summary))


@dataclass(frozen=True, slots=True)
class RunCost:
    """The cost of one measured run under one profile (``document()``: the ``cost --json`` document).
    ``summary`` is what was priced: the run's, or the stage of a sweep chosen as its operating point."""

    run: RunInfo
    profile: CostProfile
    summary: RunSummary
    inputs: CostInputs
    evaluation: Evaluation
    kind: str  # "gpu" | "cpu" | "unknown"
    device_names: list[str]
    idle_gpus: list[str]
    power: PowerResolution
    setup_source: str
    energy: Energy
    assumptions: list[str]
    warnings: list[str]
    operating_point: OperatingPointDoc | None = None  # the sweep stage priced (cost/pricing/operating.py)
    rate_source: str = "run summary (measured)"
    efficiency: Efficiency | None = None  # MBU and MFU of what was priced (cost/pricing/efficiency.py)

    @property
    def currency(self) -> str:
        return self.profile.currency

    @property
    def headline(self) -> str:
        return self.inputs.headline

    def price_text(self, unit: str | None = None) -> str:
        """``"USD per 1M output tokens"``."""
        return f"{self.currency} {self.inputs.unit(unit or self.headline).per_text()}"

    def document(self) -> CostDocument:
        """The ``cost --json`` document of this cost (its dump is the document)."""
        ev, inp, s = self.evaluation, self.inputs, self.summary
        head = inp.unit(self.headline)
        known = self.power.known
        h = ev.hourly
        extra = _extras(s)
        return CostDocument(
            run_id=self.run.id,
            label=self.run.label,
            model=self.run.model,
            engine=self.run.engine,
            status=self.run.status,
            currency=self.currency,
            profile=ProfileRef(name=self.profile.name, mode=self.profile.mode,
                               description=self.profile.description),
            devices=Devices(kind=self.kind, count=inp.gpu_count or len(self.device_names),
                            names=self.device_names, idle_gpus=self.idle_gpus),
            utilisation=inp.utilisation,
            power=Power(
                serving_w=inp.power_serving_w if known else None,
                idle_w=inp.power_idle_w if known else None,
                average_w=inp.average_power_w if known else None,
                power_source=self.power.source,
                estimate=self.power.estimate,
                per_device=self.power.per_device,
            ),
            hourly=Hourly.of(h, power_known=known),  # not priced without power: rental includes energy
            throughput=Throughput(
                rates=[UnitRate(unit=u, key=key, value=inp.rate(u)) for u, key in s.rate_keys()],
                served_per_hour=UnitRate(unit=self.headline, key=served_key(head), value=ev.per_hour()),
                source=self.rate_source,
            ),
            efficiency=self.efficiency.document() if self.efficiency is not None else None,
            prices=[UnitPrice.of(u, inp.unit(u), ev.cost_per(u)) for u in s.price_units()],
            yields=[UnitYield.of(u, inp.unit(u), ev.per_money(u)) for u in s.yield_units()],
            extras=[e for e in (extra(self),) if e is not None] if extra is not None else [],
            energy=self.energy,
            labour=Labour(
                setup_hours=inp.setup_hours,
                setup_hours_source=self.setup_source,
                maintenance_hours_per_month=self.profile.maintenance_hours_per_month,
                labour_rate_per_hour=self.profile.labour_rate_per_hour,
                currency=self.currency,
            ),
            operating_point=self.operating_point,
            inputs=self.input_table(),
            assumptions=self.assumptions,
            warnings=self.warnings,
        )

    def input_table(self) -> dict[str, InputRow]:
        """Every priced input with unit and source."""
        prof = self.profile
        names = [
            "currency",
            "utilisation",
            "amortisation_months",
            "labour_rate_per_hour",
            "maintenance_hours_per_month",
            "software_per_month",
        ]
        if prof.mode == "rental":
            names += ["rental_per_gpu_hour" if prof.rental_per_gpu_hour is not None else "rental_per_hour"]
        else:
            names += ["gpu_price", "host_price", "electricity_per_kwh", "pue", "hosting_per_month"]
        out = {name: InputRow(value=getattr(prof, name), unit=prof.unit(name), source=prof.source_of(name))
               for name in names}
        origin = self.summary.origin() if self.kind == "unknown" else None
        out["gpu_count"] = InputRow(
            value=self.inputs.gpu_count,
            unit="GPUs",
            source=origin.label if origin is not None
            else "profile gpu_count" if prof.gpu_count else "run telemetry (devices used)",
        )
        out["setup_hours"] = InputRow(value=self.inputs.setup_hours, unit="hours", source=self.setup_source)
        out["power_serving_w"] = InputRow(
            value=self.inputs.power_serving_w if self.power.known else None,
            unit="W",
            source=self.power.source,
        )
        head = self.inputs.unit(self.headline)
        out[self.summary.rate_key(self.headline)] = InputRow(
            value=self.inputs.headline_rate,
            unit=f"{head.plural.split()[-1]}/s",
            source=self.rate_source,
        )
        return out


def served_key(head: UnitInfo) -> str:
    """``served_output_tokens_per_hour``: the key of the headline units served per wall-clock hour."""
    return f"served_{head.key}_per_hour"


def _priced_summary(run: RunInfo, op: OperatingPoint | None) -> RunSummary:
    if op is not None:
        return op.summary
    if run.summary is None:
        raise InvalidInputError(
            f"run {run.id} has no metrics summary (status {run.status}): nothing to price"
        )
    return run.summary


def _rates(run: RunInfo, summary: RunSummary) -> tuple[dict[str, float], str]:
    """The rate of every unit the summary measured, and the headline unit (which must have work)."""
    work = summary.work()
    head = summary.headline()
    info = summary.unit(head)
    w = work.get(head)
    if w is None or w.count <= 0 or not w.per_s or w.per_s <= 0:
        count = None if w is None else w.count
        rate = None if w is None else w.per_s
        raise InvalidInputError(
            f"run {run.id} has no {info.plural} ({info.key}_total={count}, "
            f"{summary.rate_key(head)}={rate}): there is nothing to price per {info.singular}"
        )
    return {u: float(x.per_s) for u, x in work.items() if x.per_s is not None}, head


def _energy(
    run: RunInfo, kind: str, used: list[DeviceView], power: PowerResolution, summary: RunSummary | None,
    published: bool = False, cpu: DeviceView | None = None,
) -> Energy:
    """Energy over the run's window (or the priced stage's: ``summary`` and the device views are then the
    stage's) and per unit of work (``joules_per_<unit>``)."""
    window = summary.window_s if summary is not None else None
    work = summary.work() if summary is not None else {}

    def per_unit(joules: float | None) -> list[UnitEnergy]:
        if summary is None:
            return []
        out = []
        for u in summary.yield_units():
            count = work[u].count if u in work else 0.0
            info = summary.unit(u)
            out.append(UnitEnergy(unit=u, singular=info.singular, singular_key=info.singular_key,
                                  value=joules / count if joules is not None and count else None))
        return out

    joules: float | None = None
    method: str
    devs: list[DeviceView] = []
    if kind == "gpu":
        devs = list(used)
    elif kind == "cpu":
        cpu = cpu or cpu_device(run)
        devs = [cpu] if cpu is not None else []
    if power.measured and devs and all(d.energy_j is not None and d.power_valid for d in devs):
        joules = sum(d.energy_j or 0.0 for d in devs)
        methods = sorted({d.energy_method or "measured" for d in devs})
        method = f"measured energy in the window ({', '.join(methods)})"
    elif window and power.known and published:
        joules = power.serving_w * window
        method = f"power ÷ the published rates: {power.serving_w:.1f} W ({power.source})"
    elif window and power.known:
        joules = power.serving_w * window
        method = f"power x window: {power.serving_w:.1f} W x {window:.2f} s ({power.source})"
    else:
        reason = (
            "power not measured, and not needed for the price (rental includes energy)"
            if not power.known
            else "the run has no window duration and no measured energy"
        )
        return Energy(joules=None, reason=reason, per_unit=per_unit(None))
    return Energy(
        joules=joules,
        method=method,
        estimate=power.estimate,
        basis="published" if power.published else None,
        excludes="facility overhead (PUE)",
        per_unit=per_unit(joules),
    )


def _stage_views(
    stage: str, kind: str, used: list[DeviceView], cpu: DeviceView | None
) -> tuple[list[DeviceView], DeviceView | None] | None:
    """The devices over one stage's window, when every device the price rests on recorded it."""
    if kind == "gpu":
        views = [d.for_stage(stage) for d in used]
        if views and all(v is not None for v in views):
            return [v for v in views if v is not None], cpu
        return None
    if kind == "cpu" and cpu is not None:
        view = cpu.for_stage(stage)
        return (used, view) if view is not None else None
    return None


def _enters_cost(profile: CostProfile, name: str, setup_hours: float) -> bool:
    """Does the profile's field ``name`` change this cost? (An estimate that does not is not warned.)"""
    if name == "labour_rate_per_hour":
        return bool(setup_hours or profile.maintenance_hours_per_month)
    if name in ("electricity_per_kwh", "pue", "gpu_price", "host_price", "hosting_per_month"):
        return profile.mode == "ownership"
    if name in ("rental_per_gpu_hour", "rental_per_hour"):
        return profile.mode == "rental"
    return True


def _device_count(run: RunInfo, profile: CostProfile, kind: str, used: list[DeviceView],
                  gpus: int | None, named: str | None) -> int:
    """How many GPUs are priced: ``--gpus``, else the profile's gpu_count, else the GPUs the run used.
    A run without telemetry of its devices must be told when its price is per GPU."""
    if gpus is not None and gpus < 1:
        raise InvalidInputError(f"--gpus must be 1 or more, got {gpus}")
    if kind == "gpu":
        return gpus or profile.gpu_count or len(used)
    if kind == "cpu":
        return 0
    count = gpus or profile.gpu_count
    per_gpu = profile.rental_per_gpu_hour is not None or profile.gpu_price is not None
    if count is None and per_gpu:
        what = "rental_per_gpu_hour" if profile.rental_per_gpu_hour is not None else "gpu_price"
        raise InvalidInputError(
            f"run {run.id} has no telemetry of the devices that served it (a server measured from another "
            f"machine?), and profile {profile.name or '(unnamed)'!r} prices per GPU ({what}): "
            "how many GPUs served it?",
            hint="pass --gpus N, or set gpu_count in the profile"
            + ("" if profile.mode == "rental" or named else "; an ownership profile also needs power_w or "
               "--gpu NAME"),
        )
    return count or 0


def _published_devices(
    run: RunInfo, profile: CostProfile, origin: Origin, catalog: Catalog, gpus: int | None,
    gpu: str | None, assumptions: list[str],
) -> tuple[int | None, str | None]:
    """(GPU count, GPU) a published point is priced on: its own. ``--gpus``/``--gpu`` that say otherwise
    are refused (they would price other hardware than produced its rates); a profile's are not used."""
    if origin.gpus is not None and gpus is not None and gpus != origin.gpus:
        raise InvalidInputError(
            f"run {run.id} is a point {origin.by} on {origin.gpus} GPU(s): --gpus {gpus} would price other "
            "GPUs than produced its rates"
        )
    spec = catalog.find(origin.gpu) if origin.gpu else None
    if gpu is not None and spec is not None and catalog.find(gpu) is not spec:
        raise InvalidInputError(
            f"run {run.id} is a point {origin.by} on {spec.name}: --gpu {gpu} would price another GPU than "
            "produced its rates",
            hint=f"gpuledger estimate {run.id} --gpu {gpu} carries it to another GPU (an estimate)",
        )
    for name, value in (("gpu_count", profile.gpu_count), ("gpu", profile.gpu)):
        if value is not None:
            assumptions.append(f"profile {name} {value} not used: the point was published on its own GPUs")
    if spec is not None and origin.gpus is not None:
        assumptions.append(f"{origin.gpus} x {spec.name}, as {origin.by}")
    return origin.gpus or gpus, (spec.key if spec is not None else gpu)


def cost_of_run(
    run: RunInfo,
    profile: CostProfile,
    *,
    catalog: Catalog | None = None,
    doctor_records: Sequence[DoctorRunRecord] | None = None,
    power: PowerResolution | None = None,
    stage: str | None = None,
    slo_attainment: float = DEFAULT_ATTAINMENT,
    rate_source: str | None = None,
    gpus: int | None = None,
    gpu: str | None = None,
) -> RunCost:
    """Price a stored run under ``profile``. Raises InvalidInputError (one line naming what is missing)
    for runs with no work, no power and no TDP, or a profile that does not fit the run. ``power``
    overrides how device power is found (used by ``estimate``; the profile's ``power_w`` still wins).
    A sweep is priced at one stage (``stage``, else the rule of cost/pricing/operating.py). ``rate_source``
    says where the rates came from when they were not measured by the run itself (an estimate). ``gpus`` and
    ``gpu`` (``cost --gpus N --gpu NAME``) say how many and which GPUs served a run that has no telemetry
    of its devices (they override the profile's ``gpu_count`` and ``gpu``)."""
    cat = catalog if catalog is not None else load_catalog()
    op = operating_point(run, stage, slo_attainment)
    priced = _priced_summary(run, op)
    rates, head = _rates(run, priced)
    used, idle = gpu_devices(run)
    cpu = cpu_device(run)
    kind = "gpu" if used else ("cpu" if cpu is not None else "unknown")
    warnings: list[str] = []
    assumptions: list[str] = []
    # A published point (no telemetry: someone else measured it) says which GPUs, how many.
    origin = priced.origin() if kind == "unknown" else None
    if origin is not None:
        gpus, gpu = _published_devices(run, profile, origin, cat, gpus, gpu, assumptions)
    named = gpu or profile.gpu
    n = _device_count(run, profile, kind, used, gpus, named)
    if kind == "gpu":
        if all(d.peak_util_ratio == 0.0 for d in used):
            warnings.append(
                "every GPU stayed at 0 % utilisation during the run: it may have run on the CPU "
                "(e.g. an engine falling back to CPU); the GPUs are priced anyway"
            )
        if idle and idle[0].assigned is False:  # issue 20: the run records what it was assigned
            assumptions.append("GPUs not assigned to the run are not priced: " + "; ".join(
                f"{d.key} {d.name} ({d.assigned_by})" for d in idle))
        elif idle:
            assumptions.append(
                "GPUs idle during the run (peak utilisation 0) are not priced: "
                + ", ".join(f"{d.key} {d.name}" for d in idle)
            )
    elif kind == "cpu":
        for name in ("gpu_price", "rental_per_gpu_hour", "gpu_count"):
            if getattr(profile, name) is not None:
                raise InvalidInputError(
                    f"profile {profile.name!r}: {name} prices GPUs but run {run.id} used none (CPU-only run)",
                    hint="price a CPU run with host_price (ownership) or rental_per_hour",
                )
        arch = normalise_arch(recorded) if (recorded := run_arch(run)) else None
        if profile.cpu_arch is not None and arch is not None and profile.cpu_arch != arch:
            warnings.append(
                f"profile {profile.name or '(unnamed)'!r} prices an {profile.cpu_arch} instance, but run "
                f"{run.id} ran on {arch}: the price is another architecture's (without --profile a CPU run "
                "is priced as a cloud instance of its own architecture)"
            )
    elif origin is None:
        assumptions.append(
            f"the run has no telemetry of the devices that served it: {n} GPU(s)"
            + (f" ({named})" if named else "")
            + " as the profile / command line say"
        )
    # A sweep priced at one stage: that stage's own power and energy, when the run recorded them per stage.
    staged = _stage_views(op.stage, kind, used, cpu) if op is not None else None
    if staged is not None:
        used, cpu = staged
    power = resolve_power(
        run, profile, kind, used, n, cat, given=power, gpu=named, origin=origin, cpu=cpu
    )
    setup_hours, setup_source = resolve_setup_hours(profile, doctor_records, run)
    units = {u: priced.unit(u) for u in rates}
    inputs = CostInputs(profile, n, power.serving_w, power.idle_w, rates, head, units, setup_hours)
    ev = evaluate(inputs)
    point = _operating_point_doc(op, inputs, priced) if op is not None else None
    if op is not None:
        assumptions.append(
            f"priced at stage {op.stage} of the sweep: {op.rule}; "
            + (
                f"power and energy are stage {op.stage}'s own (its window)"
                if staged is not None
                else "power and energy are the whole sweep's (the run did not record them per stage)"
            )
        )
        if op.warning:
            warnings.append(op.warning)
    assumptions.extend(power.notes)
    if power.estimate and power.needed:
        warnings.append(f"power is not measured: {power.source}")
    if profile.utilisation == 1.0:
        assumptions.append(
            "utilisation 100 %: the hardware serves this load all the time (best case); "
            "set `utilisation` in the profile"
        )
    assumptions.append(
        f"{HOURS_PER_MONTH:g} hours per month; hardware and setup labour amortised over "
        f"{profile.amortisation_months:g} months"
    )
    for name, src in sorted(profile.sources.items()):
        if "estimate" in src and getattr(profile, name, None) and _enters_cost(profile, name, setup_hours):
            warnings.append(f"{name} is an estimate: {src}")
    if kind == "gpu":
        names = [d.name for d in used]
    elif kind == "cpu":
        names = [cpu.name] if cpu is not None else []
    else:
        names = [cat.resolve(named).name] * n if named else []
    if rate_source is None and origin is not None:
        rate_source = origin.label
    if rate_source is None:
        rate_source = (
            f"stage {op.stage} of the sweep (measured)" if op is not None else "run summary (measured)"
        )
    return RunCost(
        run=run,
        profile=profile,
        summary=priced,
        inputs=inputs,
        evaluation=ev,
        kind=kind,
        device_names=names,
        idle_gpus=[f"{d.key} {d.name}" for d in idle],
        power=power,
        setup_source=setup_source,
        energy=_energy(
            run, kind, used, power, priced if staged is not None else run.summary,
            published=origin is not None, cpu=cpu,
        ),
        assumptions=assumptions,
        warnings=warnings,
        operating_point=point,
        rate_source=rate_source,
        efficiency=_efficiency(run, priced, cat, None if kind == "gpu" or origin else named, n, rate_source),
    )


def _efficiency(run: RunInfo, priced: RunSummary, cat: Catalog, gpu: str | None, n: int,
                rate_source: str) -> Efficiency:
    """MBU and MFU of what was priced; of an estimate's scaled run, labelled an estimate."""
    eff = run_efficiency(run, priced, catalog=cat, gpu=gpu, gpus=n)
    return eff.as_estimate(rate_source) if rate_source.startswith("estimate") else eff


def _operating_point_doc(op: OperatingPoint, inputs: CostInputs, summary: RunSummary) -> OperatingPointDoc:
    """The stage priced, the rule, and what each stage of the sweep would cost per headline unit under
    the same hourly cost (same power: telemetry is not split by stage)."""
    head = inputs.headline
    info = inputs.unit(head)
    rows = []
    for st in op.stages:
        price = None
        if st.rate is not None and st.rate > 0:
            factor = st.rate / inputs.headline_rate
            price = evaluate(inputs.scaled(factor)).cost_per()
        rows.append(StageRow(
            stage=st.stage, params=st.params,
            rate=UnitRate(unit=head, key=summary.rate_key(head), value=st.rate),
            slo_met_ratio=st.slo_met_ratio, num_ok=st.num_ok, price=UnitPrice.of(head, info, price),
            currency=inputs.profile.currency,
        ))
    return OperatingPointDoc(stage=op.stage, rule=op.rule, stages=rows)
