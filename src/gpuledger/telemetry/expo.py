"""GPU exporters' Prometheus exposition text, read with prometheus-client's text parser, turned into our
metrics in base units, one set per device.

Names and units as each exporter's own source defines them (tests/fixtures/captures/exporters/SOURCES.md):

========================  ==========================================  =======================================
exporter                  series                                      our metric (unit conversion)
========================  ==========================================  =======================================
NVIDIA dcgm-exporter      ``DCGM_FI_DEV_POWER_USAGE`` (W)             ``power_w``
                          ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``    ``energy_j`` (mJ / 1000)
                          ``DCGM_FI_DEV_GPU_UTIL`` (%)                ``util_ratio`` (/ 100)
                          ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%)           ``mem_util_ratio`` (/ 100)
                          ``DCGM_FI_DEV_FB_USED`` / ``_FREE`` (MiB)   ``memory_used_bytes``, total = sum
AMD device-metrics-       ``gpu_power_usage`` (W; else                ``power_w``
exporter                  ``gpu_package_power``, ``gpu_average_
                          package_power``)
                          ``gpu_energy_consumed`` (uJ)                ``energy_j`` (/ 1e6)
                          ``gpu_gfx_activity`` (%; ``gpu_usage`` in   ``util_ratio`` (/ 100)
                          early releases)
                          ``gpu_used_vram`` / ``gpu_total_vram`` (MB  ``memory_used_bytes`` / ``_total_bytes``
                          = MiB)
gpuledger monitor         ``gpuledger_gpu_power_watts``,              the same metrics, already in base units
                          ``gpuledger_gpu_energy_joules_total``, ...
========================  ==========================================  =======================================

Devices are told apart by the index label (``gpu``, ``gpu_id``), else the UUID (``UUID``, ``gpu_uuid``),
on the host the exporter names (``Hostname``, ``hostname``; else the URL's host). With MIG, dcgm-exporter
repeats the device's series once per instance: the first is kept. Values an exporter uses to mean "not
available" (DCGM's blank integers near 2**63, AMD's 0xFFFF / 0xFFFFFFFF) and values outside a physical
range are left out (a device's power is held against its catalog TDP later: ``telemetry.bounds``). An
exposition of more than ``MAX_DEVICES`` (1,024) GPUs is refused (``SourceError``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from gpuledger.records import Vendor
from gpuledger.telemetry.base import MAX_DEVICES, MHZ, MIB, DeviceInfo, SourceError

Exporter = Literal["dcgm-exporter", "amd-device-metrics-exporter", "gpuledger"]

# sample name -> (exporter, our metric, scale to base units); within one metric the first listed wins.
# The name `gpuledger monitor` exports each device metric under (monitor.exporter builds its gauges from
# this table; SERIES below reads them back). Units are in the names, values in base units.
GPULEDGER_GPU_SERIES: dict[str, str] = {
    "util_ratio": "gpuledger_gpu_utilization_ratio",
    "mem_util_ratio": "gpuledger_gpu_memory_utilization_ratio",
    "memory_used_bytes": "gpuledger_gpu_memory_used_bytes",
    "memory_total_bytes": "gpuledger_gpu_memory_total_bytes",
    "power_w": "gpuledger_gpu_power_watts",
    "power_limit_w": "gpuledger_gpu_power_limit_watts",
    "temperature_c": "gpuledger_gpu_temperature_celsius",
    "temperature_hotspot_c": "gpuledger_gpu_hotspot_temperature_celsius",
    "sm_clock_hz": "gpuledger_gpu_sm_clock_hertz",
    "mem_clock_hz": "gpuledger_gpu_memory_clock_hertz",
    "process_memory_bytes": "gpuledger_gpu_process_memory_bytes",
}
SERIES: dict[str, tuple[Exporter, str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("dcgm-exporter", "power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("dcgm-exporter", "energy_j", 1e-3),
    "DCGM_FI_DEV_GPU_UTIL": ("dcgm-exporter", "util_ratio", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("dcgm-exporter", "mem_util_ratio", 0.01),
    "DCGM_FI_DEV_FB_USED": ("dcgm-exporter", "memory_used_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_TOTAL": ("dcgm-exporter", "memory_total_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_FREE": ("dcgm-exporter", "_memory_free_bytes", float(MIB)),
    "DCGM_FI_DEV_GPU_TEMP": ("dcgm-exporter", "temperature_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("dcgm-exporter", "sm_clock_hz", MHZ),
    "DCGM_FI_DEV_MEM_CLOCK": ("dcgm-exporter", "mem_clock_hz", MHZ),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("dcgm-exporter", "power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("dcgm-exporter", "power_limit_w", 1.0),
    "gpu_power_usage": ("amd-device-metrics-exporter", "power_w", 1.0),
    "gpu_package_power": ("amd-device-metrics-exporter", "power_w", 1.0),
    "gpu_average_package_power": ("amd-device-metrics-exporter", "power_w", 1.0),
    "gpu_energy_consumed": ("amd-device-metrics-exporter", "energy_j", 1e-6),
    "gpu_gfx_activity": ("amd-device-metrics-exporter", "util_ratio", 0.01),
    "gpu_usage": ("amd-device-metrics-exporter", "util_ratio", 0.01),
    "gpu_umc_activity": ("amd-device-metrics-exporter", "mem_util_ratio", 0.01),
    "gpu_used_vram": ("amd-device-metrics-exporter", "memory_used_bytes", float(MIB)),
    "gpu_total_vram": ("amd-device-metrics-exporter", "memory_total_bytes", float(MIB)),
    "gpu_total_memory": ("amd-device-metrics-exporter", "memory_total_bytes", float(MIB)),
    "gpu_edge_temperature": ("amd-device-metrics-exporter", "temperature_c", 1.0),
    "gpu_junction_temperature": ("amd-device-metrics-exporter", "temperature_hotspot_c", 1.0),
    # gpuledger's own exporter (`gpuledger monitor` on the node): every name it exports, in base units
    **{name: ("gpuledger", metric, 1.0) for metric, name in GPULEDGER_GPU_SERIES.items()},
    "gpuledger_gpu_energy_joules_total": ("gpuledger", "energy_j", 1.0),
    "gpuledger_gpu_energy_joules": ("gpuledger", "energy_j", 1.0),
}
# Names that carry power or energy (what a Prometheus server is asked for, with the rest of SERIES).
POWER_SERIES = tuple(name for name, (_, metric, _) in SERIES.items() if metric == "power_w")
ENERGY_SERIES = tuple(name for name, (_, metric, _) in SERIES.items() if metric == "energy_j")
_RANK = {name: i for i, name in enumerate(SERIES)}
VENDOR: dict[Exporter, Vendor] = {"dcgm-exporter": "nvidia", "amd-device-metrics-exporter": "amd"}
COUNTERS = frozenset({"energy_j"})

INDEX_LABELS = ("gpu", "gpu_id")
UUID_LABELS = ("UUID", "uuid", "gpu_uuid", "GPU_UUID")
NAME_LABELS = ("modelName", "model", "card_series", "DCGM_FI_DEV_NAME", "card_model")
HOST_LABELS = ("Hostname", "hostname")

# Upper bounds of a physical reading in base units (a value above is a sentinel or garbage).
_LIMITS = {"power_w": 1e5, "power_limit_w": 1e5, "util_ratio": 1.0, "mem_util_ratio": 1.0,
           "memory_used_bytes": 1e15, "memory_total_bytes": 1e15, "_memory_free_bytes": 1e15,
           "temperature_c": 500.0, "temperature_hotspot_c": 500.0, "sm_clock_hz": 1e11,
           "mem_clock_hz": 1e11, "energy_j": 1e16, "process_memory_bytes": 1e15}
_SENTINELS = (0xFFFF, 0xFFFFFFFF)
_DCGM_BLANK = 9.0e18  # DCGM's "blank" values are int64 numbers just below 2**63
_HOST_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def clean_host(host: str) -> str:
    """A host name as it may sit in a device key (no odd characters, at most 64 of them)."""
    return _HOST_CHARS.sub("_", host)[:64] or "unknown"


@dataclass(slots=True)
class ExpoDevice:
    """One GPU as an exposition reports it: identity, host, and its values in base units."""

    vendor: Vendor
    index: int | None
    uuid: str | None
    name: str
    host: str
    values: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        ident = str(self.index) if self.index is not None else (self.uuid or "?")[-12:]
        return f"{self.vendor}:{ident}@{self.host}"

    def info(self) -> DeviceInfo:
        return DeviceInfo(key=self.key, vendor=self.vendor, index=self.index, name=self.name, uuid=self.uuid)


@dataclass(frozen=True, slots=True)
class Exposition:
    exporter: Exporter | None
    devices: list[ExpoDevice]
    left_out: int  # samples of known series whose value was a sentinel or out of range


def _label(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value[:200]
    return None


def _plausible(metric: str, raw: float, value: float) -> bool:
    if not math.isfinite(raw) or raw < 0 or raw >= _DCGM_BLANK:
        return False
    if metric not in COUNTERS and raw in _SENTINELS:
        return False
    return value <= _LIMITS.get(metric, math.inf) * (1.0 + 1e-9)


def classify(name: str, labels: dict[str, str], default_host: str
             ) -> tuple[tuple[str, str], ExpoDevice, Exporter, str, float, int] | None:
    """What one sample of series ``name`` with ``labels`` is: (device identity, a device carrying the
    identity's labels, exporter, our metric, scale, preference rank), or None when it is not a GPU series
    this knows. Counters may come named ``<series>_total``."""
    if name not in SERIES and name.endswith("_total"):
        name = name[:-6]  # prometheus-client names a counter's sample <family>_total
    known = SERIES.get(name)
    if known is None:
        return None
    exporter, metric, scale = known
    vendor: Vendor | None = VENDOR.get(exporter)
    if exporter == "gpuledger":
        told = labels.get("vendor")
        vendor = told if told in ("nvidia", "amd") else None  # type: ignore[assignment]
    if vendor is None:
        return None
    index_text = _label(labels, INDEX_LABELS)
    index = int(index_text) if index_text and index_text.isdigit() and len(index_text) <= 6 else None
    uuid = _label(labels, UUID_LABELS)
    if index is None and uuid is None:
        return None
    host = clean_host(_label(labels, HOST_LABELS) or default_host)
    ident = (host, f"{vendor}:{index}" if index is not None else f"{vendor}:{uuid}")
    dev = ExpoDevice(vendor, index, uuid, _label(labels, NAME_LABELS) or "", host)
    return ident, dev, exporter, metric, scale, _RANK[name]


def plausible(metric: str, raw: float, scale: float) -> bool:
    """Is ``raw`` (as exported) a reading, not a "not available" sentinel or garbage?"""
    return _plausible(metric, raw, raw * scale)


def finish_memory(dev: ExpoDevice) -> None:
    """dcgm-exporter reports used and free framebuffer: the total is their sum."""
    free = dev.values.pop("_memory_free_bytes", None)
    used = dev.values.get("memory_used_bytes")
    if free is not None and used is not None and "memory_total_bytes" not in dev.values:
        dev.values["memory_total_bytes"] = used + free


def parse_exposition(text: str, *, default_host: str) -> Exposition:
    """The GPUs of one exposition (module docstring). Text the parser rejects is a SourceError."""
    devices: dict[tuple[str, str], ExpoDevice] = {}
    ranks: dict[tuple[tuple[str, str], str], int] = {}
    exporters: list[Exporter] = []
    left_out = 0
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise SourceError(f"not Prometheus exposition text ({exc}); it starts with {first!r}") from exc
    for fam in families:
        for sample in fam.samples:
            got = classify(sample.name, dict(sample.labels), default_host)
            if got is None:
                continue
            ident, proto, exporter, metric, scale, rank = got
            raw = float(sample.value)
            if not plausible(metric, raw, scale):
                left_out += 1
                continue
            dev = devices.setdefault(ident, proto)
            if len(devices) > MAX_DEVICES:
                raise SourceError(f"the exposition reports more than {MAX_DEVICES:,} GPUs: not one "
                                  "node's exporter (point at the node's own exporter)")
            if exporter not in exporters:
                exporters.append(exporter)
            if ranks.get((ident, metric), len(_RANK)) > rank:  # the preferred series; the first of equals
                ranks[(ident, metric)] = rank
                dev.values[metric] = raw * scale
    for dev in devices.values():
        finish_memory(dev)
    return Exposition(exporters[0] if exporters else None, list(devices.values()), left_out)
