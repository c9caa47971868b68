"""What one device can physically draw: its readings are held against it before any energy is computed.

A source's number is hostile until checked: a log whose header says ``[mW]`` read as W gives 300,000 W, an
exporter can serve 99,999 W for an H100, 1.7e308 W integrates to infinity. The bound of a device is its
package TDP from the catalog (``gpuledger.catalog``, found by the device's name) times :data:`POWER_MARGIN`
(sampled power overshoots the TDP for short spikes, never by half); a device the catalog does not know is held
to :data:`MAX_DEVICE_POWER_W`. Power readings above the bound, and an energy counter whose rate over its
readings is above it, are left out of the device's energy, and the device's summary is not valid:
``power_out_of_range``, with the highest reading and the bound in words.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.errors import GpuledgerError
from gpuledger.telemetry.base import DeviceInfo
from gpuledger.telemetry.energy import POWER_OUT_OF_RANGE

POWER_MARGIN = 1.5
# No GPU package draws more (B200 1,000 W, MI355X 1,400 W); nor does a CPU package (RAPL) or a board's sum.
MAX_DEVICE_POWER_W = 3000.0


@functools.lru_cache(maxsize=1)
def _catalog() -> Catalog | None:
    try:
        return load_catalog()
    except GpuledgerError:  # a broken user catalog: the generic bound applies (cost says why it is broken)
        return None


@dataclass(frozen=True, slots=True)
class PowerBound:
    """The most W a device can draw and what says so."""

    watts: float
    basis: str


@functools.lru_cache(maxsize=4096)
def _bound_for(name: str, vendor: str) -> PowerBound:
    catalog = _catalog() if vendor in ("nvidia", "amd") and name else None
    spec = catalog.find(name) if catalog is not None else None
    tdp = spec.figure("tdp_w").value if spec is not None else None  # the package's: MI250 dies report it
    if spec is not None and isinstance(tdp, int | float) and tdp > 0:
        return PowerBound(float(tdp) * POWER_MARGIN, f"{POWER_MARGIN:g} × the {spec.name}'s {tdp:g} W TDP "
                                                     "(catalog)")
    what = f"the catalog has no TDP of {name[:60]!r}" if name and vendor != "cpu" else "no TDP known"
    return PowerBound(MAX_DEVICE_POWER_W, f"{MAX_DEVICE_POWER_W:,.0f} W, the most any device draws ({what})")


def power_bound(device: DeviceInfo) -> PowerBound:
    """The bound of ``device`` (module docstring)."""
    return _bound_for(device.name or "", device.vendor)


Series = Sequence[tuple[float, float]]


def hold_power(device: DeviceInfo, power: Series, counter: Series
               ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], str | None]:
    """``power`` (t, W) and ``counter`` (t, J) with what ``device`` cannot have drawn left out, and why
    (None when everything is within the bound)."""
    bound = power_bound(device)
    kept = [(t, w) for t, w in power if w <= bound.watts]
    problems: list[str] = []
    if len(kept) < len(power):
        out = [(t, w) for t, w in power if not w <= bound.watts]  # NaN is out too
        t_high, high = max(out, key=lambda p: p[1] if p[1] == p[1] else float("inf"))
        problems.append(f"{len(out)} power reading(s) over {bound.watts:,.0f} W ({bound.basis}) left out; "
                        f"the highest {high:.6g} W at t={t_high:.2f} s")
    kept_counter = list(counter)
    if len(counter) >= 2:
        (t0, e0), (t1, e1) = min(counter), max(counter)
        rate = (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0
        if not rate <= bound.watts:
            kept_counter = []
            problems.append(f"the energy counter advanced at {rate:.6g} W over {t1 - t0:.2f} s, over "
                            f"{bound.watts:,.0f} W ({bound.basis}): not used")
    return kept, kept_counter, "; ".join(problems) or None


__all__ = ["MAX_DEVICE_POWER_W", "POWER_MARGIN", "POWER_OUT_OF_RANGE", "PowerBound", "hold_power",
           "power_bound"]
