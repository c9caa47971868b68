"""The cost model: hourly cost of a deployment and the cost of a measured run. Pure functions.

hourly cost  = hardware amortisation + energy + labour amortisation + other opex     (ownership)
             = rental + labour amortisation + other opex                             (rental)
hardware     = (gpu_price x gpus + host_price) / (amortisation_months x 730 h)
energy       = average W / 1000 x PUE x electricity_per_kwh
average W    = utilisation x serving W + (1 - utilisation) x idle W
labour       = setup_hours x labour_rate / (amortisation_months x 730 h)
               + maintenance_hours_per_month x labour_rate / 730 h
other        = (hosting_per_month + software_per_month) / 730 h
cost per 1M tokens = hourly cost / (tokens/s x 3600 x utilisation) x 1e6
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost.labour import resolve_setup_hours
from gpuledger.cost.operating import DEFAULT_ATTAINMENT, OperatingPoint, operating_point
from gpuledger.cost.presets import cpu_defaults
from gpuledger.cost.profile import HOURS_PER_MONTH, CostProfile, Mode
from gpuledger.cost.runview import (
    DeviceView,
    cpu_device,
    cpu_threads,
    gpu_devices,
    summary_mean,
    summary_number,
)
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord, RunInfo

MILLION = 1e6


def money_prefix(currency: str) -> str:
    """JSON key prefix for money: ``"USD"`` -> ``"usd"`` (``usd_per_hour``), ``"CNY"`` -> ``"cny"``."""
    return currency.lower()


@dataclass(frozen=True, slots=True)
class HourlyCost:
    """What one wall-clock hour of the deployment costs, by component, in ``currency``."""

    currency: str
    mode: Mode
    capex: float
    energy: float
    labour_setup: float
    labour_maintenance: float
    other: float
    rental: float
    power_w: float
    gpu_count: int

    @property
    def labour(self) -> float:
        return self.labour_setup + self.labour_maintenance

    @property
    def total(self) -> float:
        return self.capex + self.rental + self.energy + self.labour + self.other

    def components(self) -> dict[str, float]:
        return {
            "capex": self.capex,
            "rental": self.rental,
            "energy": self.energy,
            "labour": self.labour,
            "other": self.other,
        }

    def shares(self) -> dict[str, float]:
        total = self.total
        return {k: (v / total if total > 0 else 0.0) for k, v in self.components().items()}

    def to_dict(self) -> dict[str, Any]:
        p = money_prefix(self.currency)
        return {
            "currency": self.currency,
            "mode": self.mode,
            f"{p}_per_hour": self.total,
            f"capex_{p}_per_hour": self.capex,
            f"rental_{p}_per_hour": self.rental,
            f"energy_{p}_per_hour": self.energy,
            f"labour_{p}_per_hour": self.labour,
            f"labour_setup_{p}_per_hour": self.labour_setup,
            f"labour_maintenance_{p}_per_hour": self.labour_maintenance,
            f"other_{p}_per_hour": self.other,
            "shares": self.shares(),
            "priced_power_w": self.power_w,
            "gpu_count": self.gpu_count,
        }


def hourly_cost(
    profile: CostProfile, power_w: float, *, gpu_count: int | None = None, setup_hours: float | None = None
) -> HourlyCost:
    """Hourly cost of the deployment drawing ``power_w`` (device watts, before PUE) right now.

    For live accrual (the monitor) pass the measured instantaneous power: cost per second = ``.total / 3600``.
    ``gpu_count`` defaults to the profile's (else 1); ``setup_hours`` to the profile's ``setup_hours``.
    """
    if power_w < 0:
        raise InvalidInputError(f"power_w must be >= 0 (got {power_w})")
    n = gpu_count if gpu_count is not None else (profile.gpu_count or 1)
    if n < 0:
        raise InvalidInputError(f"gpu_count must be >= 0 (got {n})")
    life_h = profile.amortisation_months * HOURS_PER_MONTH
    setup = profile.setup_hours if setup_hours is None else setup_hours
    labour_setup = setup * profile.labour_rate_per_hour / life_h
    labour_maint = profile.maintenance_hours_per_month * profile.labour_rate_per_hour / HOURS_PER_MONTH
    other = (profile.hosting_per_month + profile.software_per_month) / HOURS_PER_MONTH
    capex = energy = rental = 0.0
    if profile.mode == "rental":
        if profile.rental_per_gpu_hour is not None:
            rental = profile.rental_per_gpu_hour * n
        else:
            rental = profile.rental_per_hour or 0.0
    else:
        capex = ((profile.gpu_price or 0.0) * n + profile.host_price) / life_h
        energy = power_w / 1000.0 * profile.pue * (profile.electricity_per_kwh or 0.0)
    return HourlyCost(
        profile.currency, profile.mode, capex, energy, labour_setup, labour_maint, other, rental, power_w, n
    )


@dataclass(frozen=True, slots=True)
class CostInputs:
    """Every number the cost of a run depends on, resolved (recomputation = ``evaluate(replace(...))``)."""

    profile: CostProfile
    gpu_count: int
    power_serving_w: float
    power_idle_w: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float | None = None
    goodput_requests_per_s: float | None = None
    setup_hours: float = 0.0
    prefill_share: float | None = None

    @property
    def utilisation(self) -> float:
        return self.profile.utilisation

    @property
    def total_tokens_per_s(self) -> float:
        return self.output_tokens_per_s + self.input_tokens_per_s

    @property
    def average_power_w(self) -> float:
        u = self.utilisation
        return u * self.power_serving_w + (1.0 - u) * self.power_idle_w

    def tokens_per_s(self, basis: str) -> float:
        return self.output_tokens_per_s if basis == "output" else self.total_tokens_per_s


@dataclass(frozen=True, slots=True)
class Evaluation:
    inputs: CostInputs
    hourly: HourlyCost

    def tokens_per_hour(self, basis: str = "output") -> float:
        """Tokens actually served per wall-clock hour: tokens/s x 3600 x utilisation."""
        return self.inputs.tokens_per_s(basis) * 3600.0 * self.inputs.utilisation

    def cost_per_million(self, basis: str = "output") -> float:
        return self.hourly.total / self.tokens_per_hour(basis) * MILLION

    def tokens_per_money(self, basis: str = "output") -> float:
        return self.tokens_per_hour(basis) / self.hourly.total

    def cost_per_request(self, good_only: bool = False) -> float | None:
        rps = self.inputs.goodput_requests_per_s if good_only else self.inputs.requests_per_s
        if not rps:
            return None
        return self.hourly.total / (rps * 3600.0 * self.inputs.utilisation)


def evaluate(inputs: CostInputs) -> Evaluation:
    """The hourly cost at the inputs' average power, with the run's throughput attached."""
    if inputs.output_tokens_per_s <= 0:
        raise InvalidInputError(f"output tokens/s must be > 0 (got {inputs.output_tokens_per_s})")
    if inputs.input_tokens_per_s < 0:
        raise InvalidInputError(f"input tokens/s must be >= 0 (got {inputs.input_tokens_per_s})")
    hourly = hourly_cost(
        inputs.profile, inputs.average_power_w, gpu_count=inputs.gpu_count, setup_hours=inputs.setup_hours
    )
    if hourly.total <= 0:
        raise InvalidInputError(
            f"profile {inputs.profile.name!r} gives a zero hourly cost: nothing to divide"
        )
    return Evaluation(inputs, hourly)


# ---------------------------------------------------------------------------------------------- power
@dataclass(frozen=True, slots=True)
class PowerResolution:
    serving_w: float
    idle_w: float
    source: str  # e.g. "measured (nvml; counter)", "catalog TDP (not measured)"
    estimate: bool
    measured: bool
    per_device: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _measured_source(devs: Sequence[DeviceView]) -> str:
    sources = sorted({s for d in devs for s in d.sources})
    methods = sorted({d.energy_method for d in devs if d.energy_method})
    inner = "; ".join(p for p in (", ".join(sources), ", ".join(methods)) if p)
    return f"measured ({inner})" if inner else "measured"


def _gpu_power(
    run: RunInfo, profile: CostProfile, used: list[DeviceView], n: int, catalog: Catalog
) -> PowerResolution:
    per_device: list[dict[str, Any]] = []
    notes: list[str] = []
    measured: list[float] = []
    tdp_used = False
    tdp_estimate = False
    for d in used:
        if d.mean_power_w is not None and d.power_valid:
            measured.append(d.mean_power_w)
            per_device.append(
                {
                    "device": d.key,
                    "name": d.name,
                    "power_w": d.mean_power_w,
                    "power_source": _measured_source([d]),
                }
            )
            continue
        why = (
            f"measured power invalid: {d.validity_reason}"
            if d.mean_power_w is not None
            else f"power not measured: {d.unavailable_power or 'no power readings in the telemetry'}"
        )
        spec = catalog.find(d.name)
        tdp = spec.device_figure("tdp_w") if spec is not None else None
        if tdp is None or tdp.value is None:
            raise InvalidInputError(
                f"run {run.id}: device {d.key} ({d.name!r}): {why}, and "
                + (
                    "it is not in the GPU catalog"
                    if spec is None
                    else f"the catalog has no TDP for it ({tdp.reason if tdp else ''})"
                )
                + ": no power to price",
                hint="set power_w (W, all devices) in the cost profile, or add the GPU with tdp_w to "
                "the catalog",
            )
        tdp_used = True
        tdp_estimate = tdp_estimate or tdp.is_estimate
        per_device.append(
            {
                "device": d.key,
                "name": d.name,
                "power_w": tdp.value,
                "power_source": f"catalog TDP (not measured): {tdp.provenance()}",
                "why": why,
            }
        )
    per_dev_values = [float(x["power_w"]) for x in per_device]
    serving = sum(per_dev_values)
    if n != len(used) and used:
        mean = serving / len(used)
        serving = mean * n
        notes.append(
            f"profile gpu_count = {n} but the run used {len(used)} GPU(s): serving power scaled to "
            f"{n} x {mean:.1f} W"
        )
    if tdp_used and measured:
        source = "mixed: measured where available, catalog TDP (not measured) for the rest"
    elif tdp_used:
        source = "catalog TDP (not measured)"
    else:
        source = _measured_source(used)
    return PowerResolution(
        serving, serving, source, tdp_estimate or tdp_used, not tdp_used, per_device, notes
    )


def _cpu_power(run: RunInfo, profile: CostProfile, cpu: DeviceView | None) -> PowerResolution:
    if cpu is not None and cpu.mean_power_w is not None and cpu.power_valid:
        return PowerResolution(
            cpu.mean_power_w,
            cpu.mean_power_w,
            _measured_source([cpu]),
            False,
            True,
            [{"device": cpu.key, "name": cpu.name, "power_w": cpu.mean_power_w}],
        )
    why = (
        "CPU power not measured: " + (cpu.unavailable_power or "no power readings")
        if cpu is not None
        else "no CPU telemetry in the run"
    )
    defaults = cpu_defaults()
    frac = defaults.power_fraction_of_tdp
    if profile.cpu_tdp_w is not None:
        watts = profile.cpu_tdp_w * frac
        src = (
            f"estimate: {frac:.0%} of CPU TDP {profile.cpu_tdp_w:g} W from the profile "
            f"({defaults.fraction_source})"
        )
    else:
        threads = cpu_threads(run)
        if threads is None:
            raise InvalidInputError(
                f"run {run.id}: {why}, and neither the profile (cpu_tdp_w) nor the run (logical CPU count) "
                "gives a CPU TDP: no power to price",
                hint="set power_w or cpu_tdp_w in the cost profile",
            )
        tdp = defaults.tdp_w_per_thread * threads
        watts = tdp * frac
        src = (
            f"estimate: {frac:.0%} of an assumed CPU TDP of {defaults.tdp_w_per_thread:g} W x {threads} "
            f"threads = {tdp:g} W ({defaults.tdp_source})"
        )
    name = cpu.name if cpu is not None else "cpu"
    return PowerResolution(
        watts, watts, src, True, False, [{"device": "cpu", "name": name, "power_w": watts, "why": why}]
    )


def resolve_power(
    run: RunInfo,
    profile: CostProfile,
    kind: str,
    used: list[DeviceView],
    n: int,
    catalog: Catalog,
    given: PowerResolution | None = None,
) -> PowerResolution:
    """Serving and idle power of the run's devices, with where the figures came from. ``given``: device
    power already worked out by the caller (the estimate), used unless the profile sets ``power_w``."""
    if profile.power_w is not None:
        res = PowerResolution(
            profile.power_w, profile.power_w, "profile power_w (user figure)", False, False, [], []
        )
    elif given is not None:
        res = given
    elif kind == "gpu":
        res = _gpu_power(run, profile, used, n, catalog)
    elif kind == "cpu":
        res = _cpu_power(run, profile, cpu_device(run))
    else:
        raise InvalidInputError(
            f"run {run.id} records no devices and no power (no telemetry summary)",
            hint="set power_w (and gpu_count) in the cost profile",
        )
    serving = res.serving_w + profile.host_power_w
    notes = list(res.notes)
    if profile.host_power_w:
        notes.append(f"host_power_w {profile.host_power_w:g} W added to the device power")
    if profile.idle_power_w is not None:
        idle = profile.idle_power_w * max(n, 1) + profile.host_power_w
        idle_note = f"idle power from the profile: {profile.idle_power_w:g} W per device"
    else:
        idle = serving
        idle_note = "idle power not given (idle_power_w): idle time priced at serving power, an upper bound"
    if profile.utilisation < 1.0 and profile.mode == "ownership":
        notes.append(idle_note)
    return replace(res, serving_w=serving, idle_w=idle, notes=notes)


# ---------------------------------------------------------------------------------------------- run cost
@dataclass(frozen=True, slots=True)
class RunCost:
    """The cost of one measured run under one profile (``to_dict()`` = the ``cost --json`` document)."""

    run: RunInfo
    profile: CostProfile
    inputs: CostInputs
    evaluation: Evaluation
    kind: str  # "gpu" | "cpu" | "unknown"
    device_names: list[str]
    idle_gpus: list[str]
    power: PowerResolution
    setup_source: str
    energy: dict[str, Any]
    split: dict[str, Any]
    assumptions: list[str]
    warnings: list[str]
    operating_point: dict[str, Any] | None = None  # the sweep stage priced (cost/operating.py)

    @property
    def currency(self) -> str:
        return self.profile.currency

    def recompute(self, **changes: Any) -> Evaluation:
        """Evaluate again with some inputs changed (profile fields go through ``profile=...``)."""
        return evaluate(replace(self.inputs, **changes))

    def to_dict(self) -> dict[str, Any]:
        p = money_prefix(self.currency)
        ev = self.evaluation
        inp = self.inputs
        slo_rps = inp.goodput_requests_per_s
        at_slo: float | None = None
        if slo_rps and inp.requests_per_s:
            at_slo = ev.cost_per_million("output") * inp.requests_per_s / slo_rps
        return {
            "run_id": self.run.id,
            "label": self.run.label,
            "model": self.run.model,
            "engine": self.run.engine,
            "status": self.run.status,
            "currency": self.currency,
            "profile": {
                "name": self.profile.name,
                "mode": self.profile.mode,
                "description": self.profile.description,
            },
            "devices": {
                "kind": self.kind,
                "count": inp.gpu_count if self.kind == "gpu" else len(self.device_names),
                "names": self.device_names,
                "idle_gpus": self.idle_gpus,
            },
            "utilisation": inp.utilisation,
            "power": {
                "serving_w": inp.power_serving_w,
                "idle_w": inp.power_idle_w,
                "average_w": inp.average_power_w,
                "power_source": self.power.source,
                "estimate": self.power.estimate,
                "per_device": self.power.per_device,
            },
            "hourly": ev.hourly.to_dict(),
            "throughput": {
                "output_tokens_per_s": inp.output_tokens_per_s,
                "input_tokens_per_s": inp.input_tokens_per_s,
                "total_tokens_per_s": inp.total_tokens_per_s,
                "requests_per_s": inp.requests_per_s,
                "goodput_requests_per_s": inp.goodput_requests_per_s,
                "served_output_tokens_per_hour": ev.tokens_per_hour("output"),
                "source": (
                    f"stage {self.operating_point['stage']} of the sweep (measured)"
                    if self.operating_point
                    else "run summary (measured)"
                ),
            },
            f"{p}_per_hour": ev.hourly.total,
            f"{p}_per_1m_tokens": ev.cost_per_million("total"),
            f"{p}_per_1m_output_tokens": ev.cost_per_million("output"),
            f"tokens_per_{p}": ev.tokens_per_money("total"),
            f"output_tokens_per_{p}": ev.tokens_per_money("output"),
            f"{p}_per_request": ev.cost_per_request(),
            f"{p}_per_good_request": ev.cost_per_request(good_only=True),
            f"{p}_per_1m_output_tokens_at_slo": at_slo,
            "split": self.split,
            "energy": self.energy,
            "labour": {
                "setup_hours": inp.setup_hours,
                "setup_hours_source": self.setup_source,
                "maintenance_hours_per_month": self.profile.maintenance_hours_per_month,
                f"labour_rate_{p}_per_hour": self.profile.labour_rate_per_hour,
            },
            **({"operating_point": self.operating_point} if self.operating_point else {}),
            "inputs": self.input_table(),
            "assumptions": self.assumptions,
            "warnings": self.warnings,
        }

    def input_table(self) -> dict[str, dict[str, Any]]:
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
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            out[name] = {
                "value": getattr(prof, name),
                "unit": prof.unit(name),
                "source": prof.source_of(name),
            }
        out["gpu_count"] = {
            "value": self.inputs.gpu_count,
            "unit": "GPUs",
            "source": "profile gpu_count" if prof.gpu_count else "run telemetry (devices used)",
        }
        out["setup_hours"] = {"value": self.inputs.setup_hours, "unit": "hours", "source": self.setup_source}
        out["power_serving_w"] = {
            "value": self.inputs.power_serving_w,
            "unit": "W",
            "source": self.power.source,
        }
        out["output_tokens_per_s"] = {
            "value": self.inputs.output_tokens_per_s,
            "unit": "tokens/s",
            "source": (
                f"stage {self.operating_point['stage']} of the sweep (measured)"
                if self.operating_point
                else "run summary (measured)"
            ),
        }
        return out


def _throughput(run: RunInfo) -> tuple[float, float, float | None, float | None]:
    if not run.summary:
        raise InvalidInputError(
            f"run {run.id} has no metrics summary (status {run.status}): nothing to price"
        )
    out_total = summary_number(run, "output_tokens_total")
    out_tps = summary_number(run, "output_tokens_per_s")
    if not out_total or not out_tps or out_total <= 0 or out_tps <= 0:
        raise InvalidInputError(
            f"run {run.id} has no output tokens (output_tokens_total={out_total}, output_tokens_per_s="
            f"{out_tps}): there is nothing to price per token"
        )
    in_tps = summary_number(run, "input_tokens_per_s") or 0.0
    if in_tps < 0:
        raise InvalidInputError(f"run {run.id}: input_tokens_per_s is negative ({in_tps})")
    rps = summary_number(run, "requests_per_s")
    good = summary_number(run, "goodput_requests_per_s") if run.summary.get("slo") else None
    return out_tps, in_tps, rps, good


def prefill_share_of(run: RunInfo) -> tuple[float | None, str]:
    """Share of request time spent before the first token (mean TTFT / mean E2E), the measured proxy for
    the prefill share of the work."""
    ttft, e2e = summary_mean(run, "ttft_ms"), summary_mean(run, "e2e_ms")
    if ttft is None or e2e is None or e2e <= 0:
        return None, "the run has no TTFT/E2E means"
    return min(max(ttft / e2e, 0.0), 1.0), f"mean TTFT {ttft:.1f} ms / mean E2E {e2e:.1f} ms"


def _split(ev: Evaluation, run: RunInfo, prefix: str) -> dict[str, Any]:
    inp = ev.inputs
    ratio = inp.profile.output_to_input_cost_ratio
    if ratio is not None:
        weight_in = inp.input_tokens_per_s
        share_in = weight_in / (weight_in + ratio * inp.output_tokens_per_s)
        rule = (
            f"user ratio: an output token costs {ratio:g} input tokens (profile output_to_input_cost_ratio)"
        )
    elif inp.prefill_share is not None:
        share_in = inp.prefill_share
        _, how = prefill_share_of(run)
        rule = f"time share: input (prefill) gets the share of request time before the first token ({how})"
    else:
        return {
            "rule": None,
            "reason": "no TTFT/E2E in the run and no output_to_input_cost_ratio in the profile",
            f"{prefix}_per_1m_input_tokens": None,
            f"{prefix}_per_1m_output_tokens": None,
        }
    cost_h = ev.hourly.total
    served = 3600.0 * inp.utilisation
    in_price = (
        cost_h * share_in / (inp.input_tokens_per_s * served) * MILLION
        if inp.input_tokens_per_s > 0
        else None
    )
    out_price = cost_h * (1.0 - share_in) / (inp.output_tokens_per_s * served) * MILLION
    return {
        "rule": rule,
        "input_cost_share": share_in,
        f"{prefix}_per_1m_input_tokens": in_price,
        f"{prefix}_per_1m_output_tokens": out_price,
    }


def _energy(run: RunInfo, kind: str, used: list[DeviceView], power: PowerResolution) -> dict[str, Any]:
    window = summary_number(run, "window_s")
    tokens = (summary_number(run, "input_tokens_total") or 0.0) + (
        summary_number(run, "output_tokens_total") or 0.0
    )
    out_tokens = summary_number(run, "output_tokens_total") or 0.0
    joules: float | None = None
    method: str
    estimate = power.estimate
    devs: list[DeviceView] = []
    if kind == "gpu":
        devs = list(used)
    elif kind == "cpu":
        cpu = cpu_device(run)
        devs = [cpu] if cpu is not None else []
    if power.measured and devs and all(d.energy_j is not None and d.power_valid for d in devs):
        joules = sum(d.energy_j or 0.0 for d in devs)
        methods = sorted({d.energy_method or "measured" for d in devs})
        method = f"measured energy in the window ({', '.join(methods)})"
    elif window:
        joules = (power.serving_w) * window
        method = f"power x window: {power.serving_w:.1f} W x {window:.2f} s ({power.source})"
    else:
        return {
            "joules": None,
            "reason": "the run has no window duration and no measured energy",
            "joules_per_token": None,
            "joules_per_output_token": None,
        }
    return {
        "joules": joules,
        "method": method,
        "estimate": estimate,
        "excludes": "facility overhead (PUE)",
        "joules_per_token": joules / tokens if tokens else None,
        "joules_per_output_token": joules / out_tokens if out_tokens else None,
    }


def cost_of_run(
    run: RunInfo,
    profile: CostProfile,
    *,
    catalog: Catalog | None = None,
    doctor_records: Sequence[DoctorRunRecord] | None = None,
    power: PowerResolution | None = None,
    stage: str | None = None,
    slo_attainment: float = DEFAULT_ATTAINMENT,
) -> RunCost:
    """Price a stored run under ``profile``. Raises InvalidInputError (one line naming what is missing)
    for runs with no tokens, no power and no TDP, or a profile that does not fit the run. ``power``
    overrides how device power is found (used by ``estimate``; the profile's ``power_w`` still wins).
    A sweep is priced at one stage (``stage``, else the rule of cost/operating.py)."""
    cat = catalog if catalog is not None else load_catalog()
    op = operating_point(run, stage, slo_attainment)
    priced = replace(run, summary=op.summary) if op is not None else run
    out_tps, in_tps, rps, good = _throughput(priced)
    used, idle = gpu_devices(run)
    cpu = cpu_device(run)
    kind = "gpu" if used else ("cpu" if cpu is not None else "unknown")
    warnings: list[str] = []
    assumptions: list[str] = []
    if kind == "gpu":
        n = profile.gpu_count or len(used)
        if all(d.peak_util_ratio == 0.0 for d in used):
            warnings.append(
                "every GPU stayed at 0 % utilisation during the run: it may have run on the CPU "
                "(e.g. an engine falling back to CPU); the GPUs are priced anyway"
            )
        if idle:
            assumptions.append(
                "GPUs idle during the run (peak utilisation 0) are not priced: "
                + ", ".join(f"{d.key} {d.name}" for d in idle)
            )
    elif kind == "cpu":
        n = 0
        for name in ("gpu_price", "rental_per_gpu_hour", "gpu_count"):
            if getattr(profile, name) is not None:
                raise InvalidInputError(
                    f"profile {profile.name!r}: {name} prices GPUs but run {run.id} used none (CPU-only run)",
                    hint="price a CPU run with host_price (ownership) or rental_per_hour",
                )
    else:
        n = profile.gpu_count or (1 if profile.rental_per_gpu_hour or profile.gpu_price else 0)
        warnings.append("the run has no telemetry summary: devices and power come from the profile only")
    power = resolve_power(run, profile, kind, used, n, cat, given=power)
    setup_hours, setup_source = resolve_setup_hours(profile, doctor_records, run)
    share, _ = prefill_share_of(priced)
    inputs = CostInputs(
        profile, n, power.serving_w, power.idle_w, out_tps, in_tps, rps, good, setup_hours, share
    )
    ev = evaluate(inputs)
    point = _operating_point_dict(op, inputs, profile) if op is not None else None
    if op is not None:
        assumptions.append(
            f"priced at stage {op.stage} of the sweep: {op.rule}; power and energy are the whole sweep's "
            "(telemetry is not split by stage)"
        )
        if op.warning:
            warnings.append(op.warning)
    assumptions.extend(power.notes)
    if power.estimate:
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
        if "estimate" in src and getattr(profile, name, None):
            warnings.append(f"{name} is an estimate: {src}")
    names = [d.name for d in used] if kind == "gpu" else ([cpu.name] if cpu is not None else [])
    p = money_prefix(profile.currency)
    return RunCost(
        run=run,
        profile=profile,
        inputs=inputs,
        evaluation=ev,
        kind=kind,
        device_names=names,
        idle_gpus=[f"{d.key} {d.name}" for d in idle],
        power=power,
        setup_source=setup_source,
        energy=_energy(run, kind, used, power),
        split=_split(ev, priced, p),
        assumptions=assumptions,
        warnings=warnings,
        operating_point=point,
    )


def _operating_point_dict(op: OperatingPoint, inputs: CostInputs, profile: CostProfile) -> dict[str, Any]:
    """The stage priced, the rule, and what each stage of the sweep would cost per 1M output tokens under
    the same hourly cost (same power: telemetry is not split by stage)."""
    p = money_prefix(profile.currency)
    rows: list[dict[str, Any]] = []
    for st in op.stages:
        tps = st.get("output_tokens_per_s")
        per_1m = None
        if isinstance(tps, int | float) and tps > 0:
            per_1m = evaluate(replace(inputs, output_tokens_per_s=float(tps))).cost_per_million("output")
        rows.append({**st, f"{p}_per_1m_output_tokens": per_1m})
    return {"stage": op.stage, "rule": op.rule, "stages": rows}
