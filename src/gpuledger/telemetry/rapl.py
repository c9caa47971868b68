"""CPU package energy from the Linux powercap interface (RAPL), source ``rapl``.

Reads ``<root>/sys/class/powercap/intel-rapl:N/energy_uj`` (and ``amd-rapl:N``) for the top-level
zones only: sub-zones (``intel-rapl:N:M``, core/uncore/dram) are inside their package and would be
counted twice. A ``psys`` zone (whole platform) overlaps the packages and is used only when no
package zone exists. Each zone's counter wraps at ``max_energy_range_uj``; the source unwraps every
zone and emits ``energy_j`` as one monotonic counter: joules since the source was opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuledger.telemetry.base import BaseSource, Reading, SourceError
from gpuledger.telemetry.cpu import cpu_device

_TOP_LEVEL = re.compile(r"^(intel-rapl|amd-rapl):\d+$")
POWERCAP = Path("sys/class/powercap")
NEEDS_ROOT = (
    "needs root: {path} is readable by root only (Linux >= 5.10 restricts RAPL, CVE-2020-8694); "
    "run as root or grant read access (e.g. a udev rule)"
)


@dataclass(slots=True)
class RaplZone:
    path: Path
    name: str
    max_range_uj: int | None
    last_uj: int | None = None
    total_uj: float = 0.0

    def label(self) -> str:
        return f"{self.path.name} ({self.name})" if self.name else self.path.name


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def unwrap_step(previous: int, current: int, max_range_uj: int | None) -> int:
    """Energy in µJ between two readings of one zone; a decrease is one wraparound of
    ``max_energy_range_uj``. Without a known range a decrease cannot be unwrapped."""
    step = current - previous
    if step >= 0:
        return step
    if not max_range_uj:
        raise SourceError(
            f"rapl: counter decreased ({previous} -> {current}) and max_energy_range_uj is unknown"
        )
    return step + max_range_uj


def find_zones(root: Path) -> list[Path]:
    base = root / POWERCAP
    return sorted(p for p in base.iterdir() if _TOP_LEVEL.match(p.name)) if base.is_dir() else []


class RaplSource(BaseSource):
    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__("rapl", "cpu", frozenset({"energy_j"}))
        self._dev = cpu_device(root)
        self.zones: list[RaplZone] = []
        base = root / POWERCAP
        if not base.is_dir():
            self.reason = "rapl: not present (no /sys/class/powercap)"
            return
        paths = find_zones(root)
        if not paths:
            self.reason = "rapl: not present (no intel-rapl or amd-rapl zone under /sys/class/powercap)"
            return
        zones = []
        for p in paths:
            try:
                name = (p / "name").read_text().strip()
            except OSError:
                name = ""
            try:
                max_range: int | None = _read_int(p / "max_energy_range_uj")
            except (OSError, ValueError):
                max_range = None
            zones.append(RaplZone(p, name, max_range))
        packages = [z for z in zones if z.name != "psys"]
        self.zones = packages or zones
        # Prime every zone; one unreadable zone makes the sum incomplete, so energy is then refused
        # as a whole (a partial sum would under-count without saying so).
        problems = []
        for zone in self.zones:
            try:
                zone.last_uj = _read_int(zone.path / "energy_uj")
            except PermissionError:
                problems.append(NEEDS_ROOT.format(path=f"/{POWERCAP}/{zone.path.name}/energy_uj"))
            except (OSError, ValueError) as exc:
                problems.append(f"rapl: cannot read {zone.label()}: {exc}")
        if problems:
            self.reason = "; ".join(dict.fromkeys(problems))
            return
        self._devices = [self._dev]
        self.available = True

    def read(self, now: float) -> list[Reading]:
        total = 0.0
        for zone in self.zones:
            try:
                current = _read_int(zone.path / "energy_uj")
            except PermissionError as exc:
                raise SourceError(NEEDS_ROOT.format(path=zone.path / "energy_uj")) from exc
            except (OSError, ValueError) as exc:
                raise SourceError(f"rapl: cannot read {zone.label()}: {exc}") from exc
            if zone.last_uj is not None:
                zone.total_uj += unwrap_step(zone.last_uj, current, zone.max_range_uj)
            zone.last_uj = current
            total += zone.total_uj
        return [Reading(now, self._dev, "energy_j", total / 1e6, self.name)]
