"""Which power a run is priced at: measured where it was valid, else a stated figure (the profile's, a
catalog TDP, or an estimate of the CPU's draw), always with where it came from.

Under a rental profile energy is in the price: power is then only reported (when it was measured, for
J per unit), never estimated — ``PowerResolution.needed`` is False and the figures are None unless
measured. Under an ownership profile the price needs power: measured, the profile's ``power_w``, a
catalog TDP (of the GPUs the run used, or of the GPU the profile/``--gpu`` names for a run without
telemetry of its devices — a server measured from another machine), or an estimate of the CPU's draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuledger.catalog import Catalog
from gpuledger.cost.pricing.document import DevicePower
from gpuledger.cost.pricing.presets import cpu_defaults
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runview import DeviceView, cpu_device, cpu_threads
from gpuledger.errors import InvalidInputError
from gpuledger.records import Origin, RunInfo

NOT_NEEDED = "not measured — not needed for the price: rental includes energy"


@dataclass(frozen=True, slots=True)
class PowerResolution:
    serving_w: float
    idle_w: float
    source: str  # e.g. "measured (nvml; counter)", "catalog TDP (not measured)"
    estimate: bool
    measured: bool
    per_device: list[DevicePower] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    needed: bool = True  # False under a rental profile: energy is in the price
    published: bool = False  # the publisher's figure (a published point), not measured here

    @property
    def known(self) -> bool:
        """A power figure exists (measured, published, given or estimated)."""
        return self.needed or self.measured or self.published


def _measured_source(devs: Sequence[DeviceView]) -> str:
    sources = sorted({s for d in devs for s in d.sources})
    methods = sorted({d.energy_method for d in devs if d.energy_method})
    inner = "; ".join(p for p in (", ".join(sources), ", ".join(methods)) if p)
    return f"measured ({inner})" if inner else "measured"


def _gpu_power(
    run: RunInfo, profile: CostProfile, used: list[DeviceView], n: int, catalog: Catalog
) -> PowerResolution:
    per_device: list[DevicePower] = []
    notes: list[str] = []
    measured: list[float] = []
    tdp_used = False
    tdp_estimate = False
    not_valid: list[float] = []  # issue 20: a measurement that is not valid is priced as a labelled estimate
    missing: list[DeviceView] = []
    for d in used:
        if d.mean_power_w is not None and d.power_valid:
            measured.append(d.mean_power_w)
            per_device.append(DevicePower(device=d.key, name=d.name, power_w=d.mean_power_w,
                                          power_source=_measured_source([d])))
            continue
        if d.mean_power_w is not None:
            not_valid.append(d.mean_power_w)
            label = f"estimate: measured, not valid ({', '.join(d.reasons) or 'not valid'})"
            per_device.append(DevicePower(device=d.key, name=d.name, power_w=d.mean_power_w,
                                          power_source=f"{label}; {_measured_source([d])}",
                                          why=f"measured power not valid: {d.validity_reason}"))
            continue
        why = f"power not measured: {d.unavailable_power or 'no power readings in the telemetry'}"
        spec = catalog.find(d.name)
        tdp = spec.device_figure("tdp_w") if spec is not None else None
        if (tdp is None or tdp.value is None) and d.missing:
            missing.append(d)
            continue
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
        per_device.append(DevicePower(device=d.key, name=d.name, power_w=tdp.value, why=why,
                                      power_source=f"catalog TDP (not measured): {tdp.provenance()}"))
    if missing:  # an expected device without samples: the others' mean, an estimate
        if not per_device:
            raise InvalidInputError(f"run {run.id}: no device that served it has power readings: no power to "
                                    "price", hint="set power_w (W, all devices) in the cost profile")
        fill = sum(x.power_w for x in per_device) / len(per_device)
        per_device.extend(DevicePower(device=d.key, name=d.name, power_w=fill, why="device_missing",
                                      power_source=f"estimate: no samples of the device; the mean of the "
                                                   f"others, {fill:.1f} W") for d in missing)
    per_dev_values = [x.power_w for x in per_device]
    serving = sum(per_dev_values)
    if n != len(used) and used:
        mean = serving / len(used)
        serving = mean * n
        notes.append(
            f"profile gpu_count = {n} but the run used {len(used)} GPU(s): serving power scaled to "
            f"{n} x {mean:.1f} W"
        )
    guessed = bool(not_valid or missing)
    if guessed:
        parts = [p for p, on in (("measured", measured), ("estimate: measured but not valid", not_valid),
                                 ("catalog TDP (not measured)", tdp_used),
                                 ("estimate: the others' mean for a device without samples", missing)) if on]
        source = parts[0] if len(parts) == 1 else "mixed: " + "; ".join(parts)
    elif tdp_used and measured:
        source = "mixed: measured where available, catalog TDP (not measured) for the rest"
    elif tdp_used:
        source = "catalog TDP (not measured)"
    else:
        source = _measured_source(used)
    return PowerResolution(
        serving, serving, source, tdp_estimate or tdp_used or guessed, not (tdp_used or guessed), per_device,
        notes,
    )


def _cpu_power(run: RunInfo, profile: CostProfile, cpu: DeviceView | None) -> PowerResolution:
    if cpu is not None and cpu.mean_power_w is not None and cpu.power_valid:
        return PowerResolution(
            cpu.mean_power_w,
            cpu.mean_power_w,
            _measured_source([cpu]),
            False,
            True,
            [DevicePower(device=cpu.key, name=cpu.name, power_w=cpu.mean_power_w)],
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
            f"estimate: {watts:g} W = {frac:.0%} of the profile's CPU TDP of {profile.cpu_tdp_w:g} W "
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
            f"estimate: {watts:g} W = {frac:.0%} of an assumed CPU TDP of {tdp:g} W "
            f"({defaults.tdp_w_per_thread:g} W x {threads} threads; {defaults.tdp_source})"
        )
    name = cpu.name if cpu is not None else "cpu"
    return PowerResolution(
        watts, watts, src, True, False, [DevicePower(device="cpu", name=name, power_w=watts, why=why)]
    )


def _measured_only(
    run: RunInfo, kind: str, used: list[DeviceView], cpu: DeviceView | None = None
) -> PowerResolution:
    """A rental profile: the measured power when every device has a valid reading, else none."""
    devs = list(used) if kind == "gpu" else ([d] if kind == "cpu" and (d := cpu or cpu_device(run)) else [])
    if devs and all(d.mean_power_w is not None and d.power_valid for d in devs):
        watts = sum(d.mean_power_w or 0.0 for d in devs)
        per = [DevicePower(device=d.key, name=d.name, power_w=d.mean_power_w or 0.0,
                           power_source=_measured_source([d])) for d in devs]
        return PowerResolution(watts, watts, _measured_source(devs), False, True, per, [], needed=False)
    return PowerResolution(0.0, 0.0, NOT_NEEDED, False, False, [], [], needed=False)


def published_power(origin: Origin, n: int, catalog: Catalog) -> PowerResolution:
    """A published point's power: the power per GPU its publisher gave, x its GPUs — never "measured"."""
    per = origin.power_w_per_gpu or 0.0
    name = catalog.resolve(origin.gpu).name if origin.gpu else "GPU"
    note = f"; {origin.power_note}" if origin.power_note else ""
    source = f"{origin.label}: {per:g} W per GPU x {n}{note}"
    devs = [DevicePower(device=f"published:{i}", name=name, power_w=per, power_source=source)
            for i in range(n)]
    return PowerResolution(per * n, per * n, source, True, False, devs, [], published=True)


def named_gpu_power(
    run: RunInfo, gpu: str, n: int, catalog: Catalog, why: str | None = None
) -> PowerResolution:
    """A run without telemetry of its devices, on ``n`` of the GPU the user named: its catalog TDP
    (``why``: why no power was measured; default: the run has no telemetry of its devices)."""
    spec = catalog.resolve(gpu)
    tdp = spec.device_figure("tdp_w")
    if tdp.value is None:
        raise InvalidInputError(
            f"run {run.id}: {spec.name} has no TDP in the catalog ({tdp.reason}): no power to price",
            hint="set power_w (W, all devices) in the cost profile",
        )
    per = [DevicePower(device=f"{spec.vendor}:{i}", name=spec.name, power_w=tdp.value,
                       power_source=f"catalog TDP (not measured): {tdp.provenance()}") for i in range(n)]
    source = (
        f"estimate: catalog TDP of {spec.name} x {n} (not measured: "
        f"{why or 'the run has no telemetry of its devices'})"
    )
    return PowerResolution(tdp.value * n, tdp.value * n, source, True, False, per, [])


def resolve_power(
    run: RunInfo,
    profile: CostProfile,
    kind: str,
    used: list[DeviceView],
    n: int,
    catalog: Catalog,
    given: PowerResolution | None = None,
    gpu: str | None = None,
    origin: Origin | None = None,
    cpu: DeviceView | None = None,
) -> PowerResolution:
    """Serving and idle power of the run's devices, with where the figures came from. ``given``: device
    power already worked out by the caller (the estimate), used unless the profile sets ``power_w``;
    ``gpu``: the GPU a run without telemetry of its devices ran on (``--gpu``, else the profile's);
    ``origin``: a published point's provenance (its published power per GPU, if any); ``cpu``: the CPU's
    view to use (a sweep stage's), else the run's."""
    named = gpu or profile.gpu
    if profile.power_w is not None:
        res = PowerResolution(
            profile.power_w, profile.power_w, "profile power_w (user figure)", False, False, [], []
        )
    elif given is not None:
        res = given
    elif origin is not None and origin.power_w_per_gpu is not None:
        res = published_power(origin, max(n, 1), catalog)
        if profile.mode == "rental":
            return replace(res, needed=False)
    elif profile.mode == "rental":
        return _measured_only(run, kind, used, cpu)
    elif kind == "gpu":
        res = _gpu_power(run, profile, used, n, catalog)
    elif kind == "cpu":
        res = _cpu_power(run, profile, cpu or cpu_device(run))
    elif named is not None:
        why = f"a point {origin.by}, published without its power" if origin is not None else None
        res = named_gpu_power(run, named, max(n, 1), catalog, why)
    else:
        raise InvalidInputError(
            f"run {run.id} has no telemetry of the devices that served it (a server measured from another "
            f"machine?): an ownership profile needs their power",
            hint="set power_w (W, all devices) in the profile, or name the GPU with --gpu NAME (or `gpu:` in "
            "the profile) to price it at its catalog TDP, an estimate",
        )
    return with_host_and_idle(res, profile, n)


def with_host_and_idle(res: PowerResolution, profile: CostProfile, n: int) -> PowerResolution:
    """``res`` (the power of ``n`` devices) with the profile's ``host_power_w`` added and its idle power:
    ``idle_power_w`` per device (plus the host), else the serving power, an upper bound that is said."""
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
