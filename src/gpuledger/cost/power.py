"""Which power a run is priced at: measured where it was valid, else a stated figure (the profile's, a
catalog TDP, or an estimate of the CPU's draw), always with where it came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuledger.catalog import Catalog
from gpuledger.cost.presets import cpu_defaults
from gpuledger.cost.profile import CostProfile
from gpuledger.cost.runview import DeviceView, cpu_device, cpu_threads
from gpuledger.errors import InvalidInputError
from gpuledger.records import RunInfo


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
