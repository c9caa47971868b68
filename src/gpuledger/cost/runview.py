"""Reading what the cost model needs out of a stored run (``RunInfo``), tolerant of what is missing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuledger.records import RunInfo

GPU_VENDORS = ("nvidia", "amd")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One device of the run's telemetry summary."""

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

    @property
    def is_gpu(self) -> bool:
        return self.vendor in GPU_VENDORS

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceView:
        unavailable = d.get("unavailable") if isinstance(d.get("unavailable"), Mapping) else {}
        reason = None
        if isinstance(unavailable, Mapping):
            for metric in ("power_w", "energy_j", "power"):
                if metric in unavailable:
                    reason = str(unavailable[metric])
                    break
        raw_sources = d.get("sources")
        if isinstance(raw_sources, Mapping):
            sources = tuple(sorted({str(v) for v in raw_sources.values()}))
        elif isinstance(raw_sources, list | tuple):
            sources = tuple(str(s) for s in raw_sources)
        else:
            sources = ()
        valid = d.get("valid")
        return cls(
            key=str(d.get("device") or d.get("key") or ""),
            vendor=str(d.get("vendor") or ""),
            name=str(d.get("name") or ""),
            mean_power_w=_num(d.get("mean_power_w")),
            energy_j=_num(d.get("energy_j")),
            energy_method=d.get("energy_method") if isinstance(d.get("energy_method"), str) else None,
            power_valid=valid is not False,
            validity_reason=str(d.get("validity_reason")) if d.get("validity_reason") else None,
            peak_util_ratio=_num(d.get("peak_util_ratio")),
            peak_memory_bytes=_num(d.get("peak_memory_bytes")),
            sources=sources,
            unavailable_power=reason,
        )


def devices(run: RunInfo) -> list[DeviceView]:
    return [DeviceView.from_dict(d) for d in run.telemetry_summary if isinstance(d, Mapping)]


def gpu_devices(run: RunInfo) -> tuple[list[DeviceView], list[DeviceView]]:
    """(GPUs the run used, GPUs that stayed idle). A GPU whose peak utilisation stayed exactly 0 during
    the window is counted as not used; when every GPU stayed idle all are kept (and the cost model warns:
    the run may have fallen back to the CPU)."""
    gpus = [d for d in devices(run) if d.is_gpu]
    used = [d for d in gpus if d.peak_util_ratio != 0.0]
    if not used:
        return gpus, []
    return used, [d for d in gpus if d.peak_util_ratio == 0.0]


def cpu_device(run: RunInfo) -> DeviceView | None:
    for d in devices(run):
        if d.vendor == "cpu":
            return d
    return None


_THREAD_KEYS = ("logical_cpus", "cpu_count", "cpu_threads", "cpus", "threads", "logical", "count", "nproc")


def cpu_threads(run: RunInfo) -> int | None:
    """Logical CPUs the run's machine had, if the run recorded it (environment or client info)."""
    for where in (run.environment, run.client, run.server):
        if not isinstance(where, Mapping):
            continue
        for key in _THREAD_KEYS[:4]:
            value = _num(where.get(key))
            if value and value >= 1:
                return int(value)
        for nest in ("cpu", "host", "machine", "system"):
            inner = where.get(nest)
            if isinstance(inner, Mapping):
                for key in _THREAD_KEYS:
                    value = _num(inner.get(key))
                    if value and value >= 1:
                        return int(value)
    return None


def machine_name(run: RunInfo) -> str | None:
    """The host the run was measured on, if recorded (to match the doctor's setup-labour ledger)."""
    for where in (run.environment, run.client):
        if not isinstance(where, Mapping):
            continue
        for key in ("machine", "hostname", "host", "node"):
            value = where.get(key)
            if isinstance(value, str) and value:
                return value
        for nest in ("host", "machine", "system"):
            inner = where.get(nest)
            if isinstance(inner, Mapping):
                for key in ("hostname", "name", "node"):
                    value = inner.get(key)
                    if isinstance(value, str) and value:
                        return value
    return None


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
