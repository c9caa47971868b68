"""The background sampler, the per-device window summary, and the energy maths (pure functions).

Energy rule (DESIGN.md): the hardware counter when one exists AND its delta agrees with the trapezoid
integral of sampled power within 5 %; otherwise the integral, with ``energy_reason`` saying why.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpuledger.errors import UsageError
from gpuledger.records import TelemetrySample
from gpuledger.telemetry.base import DeviceInfo, Reading, SourceError, SourceStatus, Vendor

EnergyMethod = Literal["counter", "integrated"]

COUNTER_TOLERANCE = 0.05  # counter accepted when within 5 % of integrated power
GAP_INTERVALS = 3  # a device is "gap" when samples are missing for more than this many intervals

# What a summary reads per vendor: (utilisation, memory used, memory total).
_UTIL_MEM: dict[Vendor, tuple[str, str, str]] = {
    "nvidia": ("util_ratio", "memory_used_bytes", "memory_total_bytes"),
    "amd": ("util_ratio", "memory_used_bytes", "memory_total_bytes"),
    "cpu": ("cpu_util_ratio", "ram_used_bytes", "ram_total_bytes"),
}


class Sampler(Protocol):
    """What every telemetry source offers (NVML, amdsmi, nvidia-smi, amd-smi, rocm-smi, RAPL, psutil)."""

    name: str
    vendor: Vendor
    available: bool
    reason: str | None
    min_interval_s: float
    provides: frozenset[str]

    def devices(self) -> list[DeviceInfo]: ...

    def read(self, now: float) -> list[Reading]: ...

    def unavailable(self) -> dict[str, dict[str, str]]: ...

    def device_errors(self) -> dict[str, str]: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- energy maths (pure)


def trapezoid_energy_j(times: Sequence[float], watts: Sequence[float]) -> float:
    """Integral of power over time by the trapezoid rule: sum of (t[i+1]-t[i]) * (p[i]+p[i+1]) / 2."""
    if len(times) != len(watts):
        raise ValueError("times and watts differ in length")
    total = 0.0
    for i in range(1, len(times)):
        dt = times[i] - times[i - 1]
        if dt < 0:
            raise ValueError("times must not decrease")
        total += dt * (watts[i] + watts[i - 1]) / 2.0
    return total


def counter_delta(values: Sequence[float], wrap_at: float | None = None) -> float:
    """Energy between the first and last counter reading. A decrease is a wraparound when ``wrap_at``
    (the counter's range) is known, and the range is added back; otherwise it is an error
    (``ValueError``), because a reset counter cannot be trusted."""
    total = 0.0
    for i in range(1, len(values)):
        step = values[i] - values[i - 1]
        if step < 0:
            if wrap_at is None or wrap_at <= 0:
                raise ValueError(f"counter went backwards ({values[i - 1]:g} -> {values[i]:g})")
            step += wrap_at
        total += step
    return total


def counter_check(counter_j: float, integrated_j: float, tolerance: float = COUNTER_TOLERANCE) -> str | None:
    """None when a hardware counter's energy agrees with the integral of sampled power over the same
    time (within ``tolerance``), else why it is not to be trusted."""
    if integrated_j <= 0:
        return None if counter_j == 0 else "counter disagreed with integrated power (integrated power is 0 J)"
    disagreement = abs(counter_j - integrated_j) / integrated_j
    if disagreement <= tolerance:
        return None
    return f"counter disagreed with integrated power by {disagreement * 100:.0f} %"


@dataclass(frozen=True, slots=True)
class EnergyResult:
    energy_j: float | None
    method: EnergyMethod | None
    reason: str | None
    integrated_j: float | None = None
    counter_j: float | None = None


def choose_energy(
    power: Sequence[tuple[float, float]],
    counter: Sequence[tuple[float, float]],
    *,
    tolerance: float = COUNTER_TOLERANCE,
    wrap_at: float | None = None,
    counter_only_reason: str = "not validated: no power readings to check the counter against",
) -> EnergyResult:
    """Pick the energy figure for one device from ``(t, W)`` power samples and ``(t, J)`` counter
    readings (as read, monotonic apart from wraparound)."""
    integrated = None
    if len(power) >= 2:
        integrated = trapezoid_energy_j([t for t, _ in power], [w for _, w in power])

    if len(counter) < 2:
        if integrated is None:
            return EnergyResult(None, None, "no power or energy readings")
        return EnergyResult(integrated, "integrated", "no counter", integrated, None)

    values = [v for _, v in counter]
    if all(v == 0 for v in values):
        if integrated is None:
            return EnergyResult(None, None, "counter stuck at 0 and no power readings", None, 0.0)
        return EnergyResult(integrated, "integrated", "counter stuck at 0", integrated, 0.0)
    try:
        delta = counter_delta(values, wrap_at)
    except ValueError as exc:
        if integrated is None:
            return EnergyResult(None, None, f"{exc} and no power readings")
        return EnergyResult(integrated, "integrated", str(exc), integrated, None)

    if integrated is None:
        return EnergyResult(delta, "counter", counter_only_reason, None, delta)
    problem = counter_check(delta, integrated, tolerance)
    if problem is None:
        return EnergyResult(delta, "counter", None, integrated, delta)
    return EnergyResult(integrated, "integrated", problem, integrated, delta)


def find_gaps(
    times: Sequence[float], start: float, end: float, interval_s: float
) -> list[tuple[float, float]]:
    """Spans ``(from, length)`` longer than ``GAP_INTERVALS`` intervals with no sample, including
    before the first and after the last sample of the window ``[start, end]``."""
    limit = GAP_INTERVALS * interval_s
    points = [start, *sorted(times), end] if times else [start, end]
    gaps = []
    for a, b in zip(points, points[1:], strict=False):
        if b - a > limit + 1e-9:
            gaps.append((a, b - a))
    return gaps


# --------------------------------------------------------------------------- window summary


@dataclass(slots=True)
class WindowSummary:
    """One device over one sampling window. ``to_dict()`` is what ``RunInfo.telemetry_summary`` stores."""

    device: str
    vendor: Vendor
    name: str
    uuid: str | None
    index: int | None
    mean_util_ratio: float | None
    peak_util_ratio: float | None
    peak_memory_bytes: float | None
    memory_total_bytes: float | None
    mean_power_w: float | None
    peak_power_w: float | None
    energy_j: float | None
    energy_method: EnergyMethod | None
    energy_reason: str | None
    valid: bool
    validity_reason: str | None
    samples: int
    interval_s: float
    window_s: float
    sources: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "vendor": self.vendor, "name": self.name, "uuid": self.uuid,
            "index": self.index, "mean_util_ratio": self.mean_util_ratio,
            "peak_util_ratio": self.peak_util_ratio, "peak_memory_bytes": self.peak_memory_bytes,
            "memory_total_bytes": self.memory_total_bytes, "mean_power_w": self.mean_power_w,
            "peak_power_w": self.peak_power_w, "energy_j": self.energy_j,
            "energy_method": self.energy_method, "energy_reason": self.energy_reason,
            "valid": self.valid, "validity_reason": self.validity_reason, "samples": self.samples,
            "interval_s": self.interval_s, "window_s": self.window_s, "sources": list(self.sources),
            "unavailable": dict(self.unavailable),
        }


def _series(samples: Iterable[TelemetrySample], metric: str) -> list[tuple[float, float]]:
    return sorted((s.t, s.value) for s in samples if s.metric == metric)


def summarize_device(
    device: DeviceInfo,
    samples: Sequence[TelemetrySample],
    *,
    window_start: float,
    window_end: float,
    interval_s: float,
    unavailable: Mapping[str, str] | None = None,
    device_error: str | None = None,
    counter_only_reason: str | None = None,
) -> WindowSummary:
    """Summarise one device's samples (``t`` on the window's clock). Pure: a stored run can be
    re-summarised from its samples."""
    own = [s for s in samples if s.device == device.key]
    util_m, mem_m, total_m = _UTIL_MEM[device.vendor]
    util = [v for _, v in _series(own, util_m)]
    mem = [v for _, v in _series(own, mem_m)]
    total = [v for _, v in _series(own, total_m)]
    power = _series(own, "power_w")
    counter = _series(own, "energy_j")

    if counter_only_reason:
        energy = choose_energy(power, counter, counter_only_reason=counter_only_reason)
    else:
        energy = choose_energy(power, counter)

    mean_power = peak_power = None
    if power:
        watts = [w for _, w in power]
        peak_power = max(watts)
        span = power[-1][0] - power[0][0]
        # Time-weighted mean when there is a span (samples may be unevenly spaced); else the value.
        mean_power = trapezoid_energy_j([t for t, _ in power], watts) / span if span > 0 else watts[0]
    elif energy.method == "counter" and len(counter) >= 2 and energy.energy_j is not None:
        span = counter[-1][0] - counter[0][0]
        if span > 0:
            mean_power = energy.energy_j / span
            pairs = zip(counter, counter[1:], strict=False)
            steps = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in pairs if b[0] > a[0]]
            peak_power = max(steps) if steps else None

    tick_times = sorted({s.t for s in own})
    gaps = find_gaps(tick_times, window_start, window_end, interval_s)
    reasons = []
    if device_error:
        reasons.append(device_error)
    if gaps:
        longest = max(gaps, key=lambda g: g[1])
        more = f" ({len(gaps)} gaps)" if len(gaps) > 1 else ""
        reasons.append(
            f"gap: no samples for {longest[1]:.2f} s from t={longest[0]:.2f} s "
            f"(> {GAP_INTERVALS} intervals of {interval_s:g} s){more}"
        )
    if not own:
        reasons.append("no samples")

    present = {s.metric for s in own}
    missing = {m: why for m, why in (unavailable or {}).items() if m not in present}
    told = "; ".join(dict.fromkeys(missing[m] for m in ("power_w", "energy_j") if m in missing))
    for metric, values in ((util_m, util), (mem_m, mem), (total_m, total)):
        if not values and metric not in missing:
            missing[metric] = "not reported by any source"
    if mean_power is None and "power_w" not in missing:
        missing["power_w"] = "not reported by any source"
    if not counter and "energy_j" not in missing:
        missing["energy_j"] = "no energy counter"

    energy_reason = energy.reason
    if energy.energy_j is None and told:
        energy_reason = f"{energy.reason} ({told})"

    return WindowSummary(
        device=device.key, vendor=device.vendor, name=device.name, uuid=device.uuid, index=device.index,
        mean_util_ratio=sum(util) / len(util) if util else None,
        peak_util_ratio=max(util) if util else None,
        peak_memory_bytes=max(mem) if mem else None,
        memory_total_bytes=max(total) if total else None,
        mean_power_w=mean_power, peak_power_w=peak_power,
        energy_j=energy.energy_j, energy_method=energy.method, energy_reason=energy_reason,
        valid=not reasons, validity_reason="; ".join(reasons) or None,
        samples=len(tick_times), interval_s=interval_s, window_s=max(0.0, window_end - window_start),
        sources=sorted({s.source for s in own}), unavailable=missing,
    )


# --------------------------------------------------------------------------- background sampler


class BackgroundSampler:
    """Polls every available source in the background, each no faster than it refreshes
    (``max(interval_s, source.min_interval_s)``), and keeps the readings in memory.

    The fast sources (libraries, RAPL, psutil) share one thread; each slow source (a CLI, refreshed at
    most once a second) gets its own, so a tool that takes seconds to answer never delays the others.
    A slow tool's period stretches to the time it actually takes, and the summary says so
    (``interval_s``). ``poll(now)`` is the unit of work; tests may call it directly.

    A source raising :class:`SourceError` is dropped for the rest of the window with the error as its
    reason; the other sources keep being sampled.
    """

    SLOW_S = 1.0  # sources with min_interval_s >= this get their own thread

    def __init__(self, sources: Sequence[Sampler], interval_s: float = 0.1, t0: float | None = None) -> None:
        if not interval_s > 0 or math.isinf(interval_s):
            raise UsageError(f"sampling interval must be a positive number of seconds, got {interval_s!r}")
        self.sources = [s for s in sources if s.available]
        self.all_sources = list(sources)
        self.interval_s = float(interval_s)
        self.t0 = time.monotonic() if t0 is None else t0
        self._readings: list[Reading] = []
        self._due: dict[int, float] = {}
        self._cost: dict[int, float] = {}
        self._failed: dict[str, str] = {}
        self._devices: dict[str, DeviceInfo] = {}
        self._device_source: dict[str, list[Sampler]] = {}
        for src in self.sources:
            for dev in src.devices():
                self._devices.setdefault(dev.key, dev)
                self._device_source.setdefault(dev.key, []).append(src)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crash: BaseException | None = None
        self._lock = threading.Lock()
        self._start: float | None = None
        self._end: float | None = None

    def period(self, source: Sampler) -> float:
        return max(self.interval_s, source.min_interval_s, self._cost.get(id(source), 0.0))

    def poll(self, now: float, sources: Sequence[Sampler] | None = None) -> None:
        """Read every source (of ``sources``, default all) that is due at ``now``."""
        if self._start is None:
            self._start = now
        for src in self.sources if sources is None else sources:
            if src.name in self._failed:
                continue
            due = self._due.get(id(src), now)
            if now < due - 0.05 * self.period(src):  # tolerate float rounding and early wake-ups
                continue
            began = time.monotonic()
            try:
                got = src.read(now)
            except SourceError as exc:
                self._failed[src.name] = f"{src.name} failed at t={now - self.t0:.2f} s: {exc.message}"
                continue
            if src.min_interval_s >= self.SLOW_S:
                self._cost[id(src)] = max(self._cost.get(id(src), 0.0), time.monotonic() - began)
            with self._lock:
                self._readings.extend(got)
            step = self.period(src)
            nxt = due + step
            self._due[id(src)] = nxt if nxt > now else now + step
            self._end = max(self._end or now, now)

    def _run(self, group: list[Sampler]) -> None:
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                self.poll(now, group)
                wake = min((self._due.get(id(s), now) for s in group), default=now + self.interval_s)
                self._stop.wait(max(0.0, wake - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop() on the caller's thread
            self._crash = exc

    def start(self) -> BackgroundSampler:
        if self._threads:
            raise RuntimeError("sampler already started")
        fast = [s for s in self.sources if s.min_interval_s < self.SLOW_S]
        groups = ([fast] if fast else []) + [[s] for s in self.sources if s.min_interval_s >= self.SLOW_S]
        self._start = time.monotonic()
        for i, group in enumerate(groups):
            t = threading.Thread(target=self._run, args=(group,), name=f"gpuledger-telemetry-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def stop(self) -> list[TelemetrySample]:
        """Stop the threads, take a last reading of the fast sources (so the window's end is covered),
        and return every sample with ``t`` relative to ``t0``."""
        if self._threads:
            self._stop.set()
            for t in self._threads:
                t.join()
            self._threads = []
            if self._crash is not None:
                raise self._crash
            end = time.monotonic()
            fast = [s for s in self.sources if s.min_interval_s < self.SLOW_S and s.name not in self._failed]
            for src in fast:
                self._due[id(src)] = end
            self.poll(end, fast)
            self._end = end
        return self.samples()

    def samples(self) -> list[TelemetrySample]:
        with self._lock:
            return [r.to_sample(self.t0) for r in self._readings]

    def failures(self) -> dict[str, str]:
        """Sources dropped during the window, with the reason."""
        return dict(self._failed)

    def statuses(self) -> list[SourceStatus]:
        """Every source (available or not) with its reason; a source that failed mid-window says so."""
        return [
            SourceStatus(src.name, src.available and src.name not in self._failed,
                         self._failed.get(src.name, src.reason), tuple(d.key for d in src.devices()))
            for src in self.all_sources
        ]

    def summaries(self, window_end: float | None = None) -> list[WindowSummary]:
        """One :class:`WindowSummary` per device seen by an available source."""
        samples = self.samples()
        start = (self._start if self._start is not None else self.t0) - self.t0
        end_abs = window_end if window_end is not None else self._end
        end = (end_abs if end_abs is not None else time.monotonic()) - self.t0
        cpu_power_reasons = {
            s.name: s.reason or "unavailable"
            for s in self.all_sources
            if s.vendor == "cpu" and "energy_j" in s.provides and not s.available
        }
        out = []
        for key, dev in self._devices.items():
            srcs = self._device_source[key]
            unavailable: dict[str, str] = {}
            errors = []
            for src in srcs:
                for metric, why in src.unavailable().get(key, {}).items():
                    unavailable.setdefault(metric, f"{src.name}: {why}")
                err = src.device_errors().get(key)
                if err:
                    errors.append(f"{src.name}: {err}")
                if src.name in self._failed:
                    errors.append(self._failed[src.name])
            if dev.vendor == "cpu" and not any("energy_j" in s.provides for s in srcs):
                why = "; ".join(cpu_power_reasons.values()) or "no CPU power source"
                unavailable.setdefault("power_w", why)
                unavailable.setdefault("energy_j", why)
            counter_only = None
            if not any("power_w" in s.provides for s in srcs):
                names = ", ".join(sorted(s.name for s in srcs if "energy_j" in s.provides))
                counter_only = (
                    f"not validated: {names} reports energy only (no independent power reading); "
                    "power is derived from the counter"
                )
            interval = max([self.period(s) for s in srcs], default=self.interval_s)
            out.append(
                summarize_device(
                    dev, samples, window_start=start, window_end=end, interval_s=interval,
                    unavailable=unavailable, device_error="; ".join(errors) or None,
                    counter_only_reason=counter_only,
                )
            )
        return out
