"""Reading what the cost model needs out of a stored run (``RunInfo``), tolerant of what is missing.

Which GPUs a run used: the devices its telemetry summary records as ``assigned`` (from
``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES``, the server's node named by ``--telemetry-from`` and its
selection, or ``telemetry import``: ``gpuledger.telemetry.assign``); a run stored before that record existed
keeps the older rule, non-zero peak utilisation (``gpu_devices``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuledger.records import GPU_VENDORS, DeviceWindow, RunInfo, StageWindow


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _unavailable_power(unavailable: Mapping[str, str]) -> str | None:
    """Why the device has no power figure, as its telemetry said (``power`` in documents made by hand)."""
    return next((unavailable[m] for m in ("power_w", "energy_j", "power") if m in unavailable), None)


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One device of the run's telemetry summary, as the cost model reads it."""

    key: str
    vendor: str
    name: str
    mean_power_w: float | None
    energy_j: float | None
    energy_method: str | None
    power_valid: bool
    validity_reason: str | None
    peak_util_ratio: float | None
    peak_memory_bytes: float | None
    sources: tuple[str, ...]
    unavailable_power: str | None
    reasons: tuple[str, ...] = ()  # energy validity codes (gpuledger.telemetry.energy.REASON_CODES)
    assigned: bool | None = None  # None: the run has no record of what it was assigned
    assigned_by: str | None = None
    samples: int | None = None
    stages: Mapping[str, StageWindow] | None = None  # each sweep stage's own power and energy

    @property
    def is_gpu(self) -> bool:
        return self.vendor in GPU_VENDORS

    @classmethod
    def of(cls, d: DeviceWindow) -> DeviceView:
        return cls(
            key=d.device,
            vendor=d.vendor,
            name=d.name,
            mean_power_w=_float(d.mean_power_w),
            energy_j=_float(d.energy_j),
            energy_method=d.energy_method,
            power_valid=d.valid is not False,
            validity_reason=d.validity_reason or None,
            peak_util_ratio=_float(d.peak_util_ratio),
            peak_memory_bytes=_float(d.peak_memory_bytes),
            sources=tuple(d.sources),
            unavailable_power=_unavailable_power(d.unavailable),
            reasons=tuple(d.reasons),
            assigned=d.assigned,
            assigned_by=d.assigned_by or None,
            samples=d.samples,
            stages=d.stages,
        )

    def for_stage(self, stage: str) -> DeviceView | None:
        """This device over one stage's window of a sweep (runs since the writer records it), else None."""
        part = (self.stages or {}).get(stage)
        if part is None:
            return None
        return replace(
            self,
            mean_power_w=_float(part.mean_power_w),
            energy_j=_float(part.energy_j),
            energy_method=part.energy_method,
            power_valid=part.valid is not False,
            validity_reason=part.validity_reason or None,
            reasons=tuple(part.reasons),
            stages=None,
        )

    @property
    def missing(self) -> bool:
        """Expected (assigned, selected, --gpus) but no sample arrived."""
        return "device_missing" in self.reasons and not self.samples


def devices(run: RunInfo) -> list[DeviceView]:
    return [DeviceView.of(d) for d in run.telemetry_summary]


def has_assignment(run: RunInfo) -> bool:
    """Does the run record which GPUs it was assigned (runs written since issue 20 may)?"""
    return any(d.assigned is not None for d in devices(run) if d.is_gpu)


def gpu_devices(run: RunInfo) -> tuple[list[DeviceView], list[DeviceView]]:
    """(GPUs the run used, GPUs it did not). With a record of what the run was assigned (module
    docstring): the assigned GPUs, and those recorded as not assigned. Without one (a run stored before
    the record existed): a GPU whose peak utilisation stayed exactly 0 during the window is counted as not
    used; when every GPU stayed idle all are kept (and the cost model warns: the run may have fallen back
    to the CPU)."""
    gpus = [d for d in devices(run) if d.is_gpu]
    if any(d.assigned is not None for d in gpus):
        return [d for d in gpus if d.assigned], [d for d in gpus if d.assigned is False]
    used = [d for d in gpus if d.peak_util_ratio != 0.0]
    if not used:
        return gpus, []
    return used, [d for d in gpus if d.peak_util_ratio == 0.0]


NO_TELEMETRY = "no_telemetry"  # the run has no telemetry of the devices that served it
NO_POWER = "no_power_readings"  # a device that served it has no power or energy readings
RECORDED_INVALID = "recorded_invalid"  # stored before the reason codes: see the device's validity_reason


class DeviceEnergy(BaseModel):
    """One device that served the run: its energy in the window (None: not measured), how, whether it is
    valid (``reasons``: why not), how it was found to serve the run, and its telemetry sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str
    name: str
    energy_j: float | None
    method: str | None
    valid: bool
    reasons: list[str]
    assigned_by: str | None
    sources: list[str]


class EnergyView(BaseModel):
    """The run's energy over the devices that served it (``show --json``'s ``energy``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    valid: bool
    reasons: list[str]
    details: list[str]
    joules: float | None
    unit: str = "J"
    methods: list[str]
    basis: str | None
    devices: list[DeviceEnergy]
    sources: list[str]


def energy_view(run: RunInfo) -> EnergyView:
    """The run's energy as ``show --json`` gives it (``energy``): over the devices that served it (the
    GPUs it used, else its CPU), ``valid`` (every one of them valid, none missing, every one measured),
    ``reasons`` (the codes of ``gpuledger.telemetry.energy.REASON_CODES``, plus ``no_telemetry``,
    ``no_power_readings``, ``recorded_invalid``), ``joules``, the devices and the sources."""
    used, _ = gpu_devices(run)
    cpu = cpu_device(run)
    devs = used or ([cpu] if cpu is not None else [])
    basis = ("assigned" if has_assignment(run) else "non-zero utilisation (no record of the assigned GPUs)"
             ) if used else ("cpu" if devs else None)
    reasons: list[str] = []
    details: list[str] = []
    per_device: list[DeviceEnergy] = []
    for d in devs:
        codes = list(d.reasons) or ([RECORDED_INVALID] if not d.power_valid else [])
        if d.energy_j is None and NO_POWER not in codes and "device_missing" not in codes:
            codes.append(NO_POWER)
        reasons.extend(c for c in codes if c not in reasons)
        if codes:
            details.append(f"{d.key}: {d.validity_reason or d.unavailable_power or ', '.join(codes)}")
        per_device.append(DeviceEnergy(device=d.key, name=d.name, energy_j=d.energy_j, method=d.energy_method,
                                       valid=not codes, reasons=codes, assigned_by=d.assigned_by,
                                       sources=list(d.sources)))
    if not devs:
        reasons.append(NO_TELEMETRY)
        details.append("the run has no telemetry of the devices that served it")
    energies = [d.energy_j for d in devs]
    joules = sum(e for e in energies if e is not None) if devs and all(e is not None for e in energies) \
        else None
    return EnergyView(
        valid=not reasons,
        reasons=reasons,
        details=details,
        joules=joules,
        methods=sorted({d.energy_method for d in devs if d.energy_method}),
        basis=basis,
        devices=per_device,
        sources=sorted({s for d in devs for s in d.sources}),
    )


def cpu_device(run: RunInfo) -> DeviceView | None:
    for d in devices(run):
        if d.vendor == "cpu":
            return d
    return None


def cpu_threads(run: RunInfo) -> int | None:
    """Logical CPUs the run's machine had, if the run recorded it: its environment fingerprint's
    ``cpu.logical_cpus``, else the in-process engine's record of the host (``server.cpu.logical_cpus``)."""
    if run.environment.logical_cpus:
        return run.environment.logical_cpus
    cpu = run.server.get("cpu") if isinstance(run.server, Mapping) else None
    value = _num(cpu.get("logical_cpus")) if isinstance(cpu, Mapping) else None
    return int(value) if value and value >= 1 else None


def machine_name(run: RunInfo) -> str | None:
    """The host the run was measured on (to match the doctor's setup-labour ledger): its environment's
    ``machine``, else the client's ``hostname``."""
    if run.environment.machine:
        return run.environment.machine
    host = run.client.get("hostname") if isinstance(run.client, Mapping) else None
    return host if isinstance(host, str) and host else None


def flat(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists kept as values)."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out
