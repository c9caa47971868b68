"""Types shared by every telemetry source: devices, readings, source status, the source base class.

A *source* reads one vendor interface (NVML, amdsmi, a CLI, RAPL, psutil) and returns
:class:`Reading` objects in base units. Nothing here imports a vendor library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuledger.errors import ResourceError
from gpuledger.records import TelemetrySample, Vendor

# Every metric a source may emit, with its base unit. Names are part of the stored data: never rename.
METRIC_UNITS: dict[str, str] = {
    "util_ratio": "ratio",
    "mem_util_ratio": "ratio",
    "memory_used_bytes": "B",
    "memory_total_bytes": "B",
    "power_w": "W",
    "energy_j": "J",
    "temperature_c": "°C",
    "temperature_hotspot_c": "°C",
    "sm_clock_hz": "Hz",
    "mem_clock_hz": "Hz",
    "power_limit_w": "W",
    "cpu_util_ratio": "ratio",
    "ram_used_bytes": "B",
    "ram_total_bytes": "B",
    "process_memory_bytes": "B",
}

MIB = 1024 * 1024
MHZ = 1_000_000.0
# The most devices one source (an exporter, a Prometheus selection, a log, ``telemetry import --gpus``)
# may report: more is garbage, not a node (the GPU tools' own bound, gpuledger.facts.tool_output).
MAX_DEVICES = 1024

# The units a log's header or cell may give, per base unit, as factors to it (matched in any case; amd-smi
# and DCGM print "MB" for MiB, as their own sources say; the same holds for KB, GB, TB).
UNITS: dict[str, dict[str, float]] = {
    "W": {"W": 1.0, "mW": 1e-3, "µW": 1e-6, "uW": 1e-6, "kW": 1e3},
    "J": {"J": 1.0, "mJ": 1e-3, "µJ": 1e-6, "uJ": 1e-6, "kJ": 1e3, "Wh": 3600.0, "kWh": 3.6e6},
    "B": {"B": 1.0, "KiB": 1024.0, "MiB": float(MIB), "GiB": 1024.0**3, "TiB": 1024.0**4,
          "KB": 1024.0, "MB": float(MIB), "GB": 1024.0**3, "TB": 1024.0**4},
    "ratio": {"%": 0.01, "ratio": 1.0},
    "°C": {"C": 1.0, "°C": 1.0, "degC": 1.0, "mC": 1e-3},
    "Hz": {"Hz": 1.0, "kHz": 1e3, "MHz": MHZ, "GHz": 1e9},
}
_UNITS_LOWER = {base: {unit.lower(): f for unit, f in table.items()} for base, table in UNITS.items()}
# The largest reading of one device in base units that is physics, not garbage (per base unit): a
# reading above is refused where it is read. (Power is held much lower per device, against the catalog's
# TDP: gpuledger.telemetry.bounds.)
PHYSICAL_MAX: dict[str, float] = {"W": 1e5, "J": 1e16, "B": 1e15, "ratio": 1.0, "°C": 500.0, "Hz": 1e11}


def unit_factor(unit: str, base: str) -> float | None:
    """The factor from ``unit`` (as a tool prints it: ``mW``, ``MiB``, ``%``) to ``base`` (a key of
    :data:`UNITS`), None when it is not a unit of that quantity."""
    return _UNITS_LOWER.get(base, {}).get(unit.strip().lower())
SECONDARY_DIE = (
    "0 W reported: the secondary die of a multi-die package (e.g. MI250) reports its power on the "
    "primary die"
)


class SourceError(ResourceError):
    """A whole telemetry source stopped working (library gone, CLI failing). The sampler records the
    message as the source's reason and keeps sampling the other sources."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One measured device. ``key`` is the stable id used in stored samples: ``nvidia:0``, ``amd:1``,
    ``cpu``."""

    key: str
    vendor: Vendor
    index: int | None
    name: str
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "vendor": self.vendor, "index": self.index, "name": self.name,
                "uuid": self.uuid}


@dataclass(frozen=True, slots=True)
class Reading:
    """One value as read: ``t`` on the monotonic clock, ``value`` in the metric's base unit."""

    t: float
    device: DeviceInfo
    metric: str
    value: float
    source: str

    def to_sample(self, t0: float) -> TelemetrySample:
        return TelemetrySample(t=self.t - t0, device=self.device.key, metric=self.metric,
                               value=self.value, source=self.source)


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """What ``gpuledger sample`` lists under ``sources``: whether a source works and, if not, why."""

    name: str
    available: bool
    reason: str | None
    devices: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "available": self.available, "reason": self.reason,
                "devices": list(self.devices)}


class BaseSource:
    """State every source keeps. Subclasses set ``name``, ``vendor``, ``provides`` and implement
    ``read(now)``; they fill ``_unavailable`` (device -> metric -> reason) and ``_device_errors``
    (device -> reason, e.g. "GPU is lost") as they learn them."""

    def __init__(self, name: str, vendor: Vendor, provides: frozenset[str], *,
                 min_interval_s: float = 0.0) -> None:
        self.name = name
        self.vendor: Vendor = vendor
        self.provides = provides
        self.available = False
        self.reason: str | None = None
        self.min_interval_s = min_interval_s
        self._devices: list[DeviceInfo] = []
        self._unavailable: dict[str, dict[str, str]] = {}
        self._device_errors: dict[str, str] = {}
        self._skip: set[tuple[str, str]] = set()

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def unavailable(self) -> dict[str, dict[str, str]]:
        """Metrics that could not be read, per device, with the reason."""
        return {k: dict(v) for k, v in self._unavailable.items()}

    def device_errors(self) -> dict[str, str]:
        """Devices that failed during the window (lost, reset, unreadable) and why."""
        return dict(self._device_errors)

    def status(self) -> SourceStatus:
        return SourceStatus(self.name, self.available, self.reason, tuple(d.key for d in self._devices))

    def close(self) -> None:
        """Release library handles. Safe to call twice."""

    def _mark_unavailable(self, device: str, metric: str, reason: str, *, permanent: bool = True) -> None:
        """Record why ``metric`` has no value on ``device``; ``permanent`` stops asking for it."""
        self._unavailable.setdefault(device, {}).setdefault(metric, reason)
        if permanent:
            self._skip.add((device, metric))

    def _is_unavailable(self, device: str, metric: str) -> bool:
        return (device, metric) in self._skip
