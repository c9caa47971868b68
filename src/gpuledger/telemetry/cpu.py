"""CPU utilisation and RAM through psutil (source ``psutil``)."""

from __future__ import annotations

from pathlib import Path

import psutil

from gpuledger.facts.cpu import cpu_model_name
from gpuledger.telemetry.base import BaseSource, DeviceInfo, Reading


def cpu_device(root: Path = Path("/")) -> DeviceInfo:
    return DeviceInfo(key="cpu", vendor="cpu", index=None, name=cpu_model_name(root), uuid=None)


def _busy_total(times: object) -> tuple[float, float]:
    """(busy, total) seconds from ``psutil.cpu_times()``; idle and iowait count as not busy."""
    fields = getattr(times, "_fields", ())
    values = {name: float(getattr(times, name)) for name in fields}
    # guest/guest_nice are already included in user/nice on Linux: do not count them twice.
    total = sum(v for k, v in values.items() if k not in ("guest", "guest_nice"))
    idle = values.get("idle", 0.0) + values.get("iowait", 0.0)
    return total - idle, total


class PsutilSource(BaseSource):
    """``cpu_util_ratio`` (all cores, from /proc/stat deltas between reads), ``ram_used_bytes``
    (total − available) and ``ram_total_bytes``. No power: that is RAPL's job."""

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__("psutil", "cpu",
                         frozenset({"cpu_util_ratio", "ram_used_bytes", "ram_total_bytes"}))
        self._dev = cpu_device(root)
        self._devices = [self._dev]
        self._last = _busy_total(psutil.cpu_times())
        self.available = True

    def read(self, now: float) -> list[Reading]:
        busy, total = _busy_total(psutil.cpu_times())
        out = []
        d_total = total - self._last[1]
        if d_total > 0:
            ratio = min(1.0, max(0.0, (busy - self._last[0]) / d_total))
            out.append(Reading(now, self._dev, "cpu_util_ratio", ratio, self.name))
            self._last = (busy, total)
        vm = psutil.virtual_memory()
        out.append(Reading(now, self._dev, "ram_used_bytes", float(vm.total - vm.available), self.name))
        out.append(Reading(now, self._dev, "ram_total_bytes", float(vm.total), self.name))
        return out
