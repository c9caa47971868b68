"""The background sampler and the per-device window summary (a ``gpuledger.records.DeviceWindow``: what
``RunInfo.telemetry_summary`` stores, one per device).

The energy maths is :mod:`gpuledger.telemetry.energy` (the one computation for every source): the
hardware counter when one covers the window AND agrees with the trapezoid integral of sampled power
within 5 %; otherwise the integral, with ``energy_reason`` saying why; and the window's validity as
stable reason codes (``reasons``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gpuledger.errors import UsageError
from gpuledger.records import DeviceWindow, EnergyMethod, TelemetrySample, Vendor
from gpuledger.telemetry.assign import decide
from gpuledger.telemetry.base import DeviceInfo, Reading, SourceError, SourceStatus
from gpuledger.telemetry.bounds import POWER_OUT_OF_RANGE, hold_power
from gpuledger.telemetry.energy import (
    COUNTER_TOLERANCE,
    DEFAULT_GAP_LIMIT_S,
    DEVICE_ERROR,
    DEVICE_MISSING,
    EnergyResult,
    audit_energy,
    choose_energy,
    counter_check,
    counter_delta,
    edge_tolerance,
    find_gaps,
    trapezoid_energy_j,
)

__all__ = [
    "COUNTER_TOLERANCE",
    "BackgroundSampler",
    "EnergyMethod",
    "EnergyResult",
    "Sampler",
    "choose_energy",
    "counter_check",
    "counter_delta",
    "find_gaps",
    "summarize_device",
    "summarize_series",
    "trapezoid_energy_j",
]

# What a summary reads per vendor: (utilisation, memory used, memory total).
_UTIL_MEM: dict[Vendor, tuple[str, str, str]] = {
    "nvidia": ("util_ratio", "memory_used_bytes", "memory_total_bytes"),
    "amd": ("util_ratio", "memory_used_bytes", "memory_total_bytes"),
    "cpu": ("cpu_util_ratio", "ram_used_bytes", "ram_total_bytes"),
}


class Sampler(Protocol):
    """What every telemetry source offers (NVML, amdsmi, nvidia-smi, amd-smi, rocm-smi, RAPL, psutil, a
    remote exporter, a Prometheus server).

    Remote sources (``gpuledger.telemetry.remote``) also have ``remote = True``, ``own_thread`` (polled on
    a thread of their own), ``final_read`` (read once more when the window ends), ``assigned_by(key)``
    (what selected a device), ``expected_devices()`` (devices the selection names, present or not) and,
    for a Prometheus server, ``after_window(start, end)`` (readings fetched once the window is over); the
    sampler reads them with ``getattr`` so that local sources need none of them."""

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


# --------------------------------------------------------------------------- window summary


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
    gap_limit_s: float = DEFAULT_GAP_LIMIT_S,
    edge_tolerance_s: float | None = None,
) -> DeviceWindow:
    """Summarise one device's samples (``t`` on the window's clock) over ``[window_start, window_end]``
    with the one energy computation (``energy.audit_energy``), its power held against what the device can
    draw first (``telemetry.bounds``: ``power_out_of_range``). Pure: a stored run can be re-summarised
    from its samples. ``edge_tolerance_s`` defaults to ``energy.edge_tolerance(interval_s)``."""
    series: dict[str, list[tuple[float, float]]] = {}
    sources: set[str] = set()
    for s in samples:
        if s.device == device.key:
            series.setdefault(s.metric, []).append((s.t, s.value))
            sources.add(s.source)
    return summarize_series(device, series, sources, window_start=window_start, window_end=window_end,
                            interval_s=interval_s, unavailable=unavailable, device_error=device_error,
                            counter_only_reason=counter_only_reason, gap_limit_s=gap_limit_s,
                            edge_tolerance_s=edge_tolerance_s)


def summarize_series(
    device: DeviceInfo,
    series: Mapping[str, Iterable[tuple[float, float]]],
    sources: Iterable[str],
    *,
    window_start: float,
    window_end: float,
    interval_s: float,
    unavailable: Mapping[str, str] | None = None,
    device_error: str | None = None,
    counter_only_reason: str | None = None,
    gap_limit_s: float = DEFAULT_GAP_LIMIT_S,
    edge_tolerance_s: float | None = None,
) -> DeviceWindow:
    """:func:`summarize_device` of one device's readings given per metric as ``(t, value)`` pairs (each
    iterated once: ``telemetry import`` passes them straight from its arrays, no sample objects)."""
    tol = edge_tolerance(interval_s) if edge_tolerance_s is None else edge_tolerance_s
    lo, hi = window_start - tol, window_end + tol
    util_m, mem_m, total_m = _UTIL_MEM[device.vendor]
    values: dict[str, list[float]] = {}
    times: set[float] = set()  # the distinct sample times in the window
    present: set[str] = set()
    power_s: list[tuple[float, float]] = []
    counter_s: list[tuple[float, float]] = []
    for metric, pairs in series.items():
        if metric in ("power_w", "energy_j"):
            pts = sorted(pairs)
            if metric == "power_w":
                power_s = pts
            else:
                counter_s = pts
            if pts:
                present.add(metric)
            times.update(t for t, _ in pts if lo <= t <= hi)
            continue
        kept: list[float] = []
        for t, v in pairs:
            present.add(metric)
            if lo <= t <= hi:
                kept.append(v)
                times.add(t)
        values[metric] = kept
    util, mem, total = values.get(util_m, []), values.get(mem_m, []), values.get(total_m, [])
    power, counter, held = hold_power(device, power_s, counter_s)

    kwargs: dict[str, Any] = {}
    if counter_only_reason:
        kwargs["counter_only_reason"] = counter_only_reason
    audit = audit_energy(power, counter, start=window_start, end=window_end, gap_limit_s=gap_limit_s,
                         edge_tolerance_s=tol, **kwargs)

    codes: list[str] = []
    details: list[str] = []
    if device_error:
        codes.append(DEVICE_ERROR)
        details.append(device_error)
    if not present:
        codes.append(DEVICE_MISSING)
        details.append("no samples")
    if held:
        codes.append(POWER_OUT_OF_RANGE)
        details.append(held)
    codes.extend(audit.reasons)
    details.extend(audit.details)

    missing = {m: why for m, why in (unavailable or {}).items() if m not in present}
    told = "; ".join(dict.fromkeys(missing[m] for m in ("power_w", "energy_j") if m in missing))
    for metric, got in ((util_m, util), (mem_m, mem), (total_m, total)):
        if not got and metric not in missing:
            missing[metric] = "not reported by any source"
    if audit.mean_power_w is None and "power_w" not in missing:
        missing["power_w"] = "not reported by any source"
    if not counter and "energy_j" not in missing:
        missing["energy_j"] = "no energy counter"

    energy_reason = audit.reason
    if audit.energy_j is None and told:
        energy_reason = f"{audit.reason} ({told})"

    return DeviceWindow(
        device=device.key, vendor=device.vendor, name=device.name, uuid=device.uuid, index=device.index,
        mean_util_ratio=sum(util) / len(util) if util else None,
        peak_util_ratio=max(util) if util else None,
        peak_memory_bytes=max(mem) if mem else None,
        memory_total_bytes=max(total) if total else None,
        mean_power_w=audit.mean_power_w, peak_power_w=audit.peak_power_w,
        energy_j=audit.energy_j, energy_method=audit.method, energy_reason=energy_reason,
        valid=not codes, validity_reason="; ".join(details) or None,
        samples=len(times), interval_s=interval_s,
        window_s=max(0.0, window_end - window_start),
        sources=sorted(set(sources)), unavailable=missing, reasons=list(dict.fromkeys(codes)),
        gap_limit_s=gap_limit_s, integrated_j=audit.integrated_j, counter_j=audit.counter_j,
        assigned=None, assigned_by=None,
    )


# --------------------------------------------------------------------------- background sampler


def _flag(source: Sampler, name: str) -> bool:
    return bool(getattr(source, name, False))


def _assigned_by(source: Sampler, key: str) -> str | None:
    fn = getattr(source, "assigned_by", None)
    by = fn(key) if callable(fn) else None
    return by if isinstance(by, str) else None


class BackgroundSampler:
    """Polls every available source in the background, each no faster than it refreshes
    (``max(interval_s, source.min_interval_s)``), and keeps the readings in memory.

    The fast sources (libraries, RAPL, psutil) share one thread; each slow source (a CLI, refreshed at
    most once a second) and each remote source gets its own, so a tool or a server that takes seconds to
    answer never delays the others. A slow tool's period stretches to the time it actually takes, and the
    summary says so (``interval_s``). ``poll(now)`` is the unit of work; tests may call it directly.

    A source raising :class:`SourceError` is dropped for the rest of the window with the error as its
    reason; the other sources keep being sampled. The window summarised starts at ``t0`` when the caller
    gives one (the start of its measured window), else when sampling starts, and ends when ``stop()`` is
    called (its last readings, taken just after, bracket that end), or at ``summaries(window_end)``.
    ``gap_limit_s`` is the energy computation's gap limit; ``env`` (default ``os.environ``) is where
    ``CUDA_VISIBLE_DEVICES`` & co. are read (``assign``).
    """

    SLOW_S = 1.0  # sources with min_interval_s >= this get their own thread

    def __init__(self, sources: Sequence[Sampler], interval_s: float = 0.1, t0: float | None = None, *,
                 gap_limit_s: float = DEFAULT_GAP_LIMIT_S, env: Mapping[str, str] | None = None) -> None:
        if not interval_s > 0 or math.isinf(interval_s):
            raise UsageError(f"sampling interval must be a positive number of seconds, got {interval_s!r}")
        if not gap_limit_s > 0 or math.isnan(gap_limit_s):
            raise UsageError(f"gap limit must be a positive number of seconds, got {gap_limit_s!r}")
        self.sources = [s for s in sources if s.available]
        self.all_sources = list(sources)
        self.interval_s = float(interval_s)
        self.gap_limit_s = float(gap_limit_s)
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.t0 = time.monotonic() if t0 is None else t0
        # A caller's t0 is the start of its measured window (the run writer's): the summaries start there.
        self._window_from_t0 = t0 is not None
        self._readings: list[Reading] = []
        self._due: dict[int, float] = {}
        self._cost: dict[int, float] = {}
        self._failed: dict[str, str] = {}
        self._devices: dict[str, DeviceInfo] = {}
        self._device_source: dict[str, list[Sampler]] = {}
        for src in self.sources:
            for dev in [*src.devices(), *getattr(src, "expected_devices", list)()]:
                self._register(dev, src)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crash: BaseException | None = None
        self._lock = threading.Lock()
        self._start: float | None = None
        self._end: float | None = None
        self._stopped_at: float | None = None
        self._interrupted: str | None = None

    def _register(self, dev: DeviceInfo, src: Sampler) -> None:
        self._devices.setdefault(dev.key, dev)
        owners = self._device_source.setdefault(dev.key, [])
        if src not in owners:
            owners.append(src)

    def _slow(self, source: Sampler) -> bool:
        return source.min_interval_s >= self.SLOW_S or _flag(source, "own_thread")

    def period(self, source: Sampler) -> float:
        return max(self.interval_s, source.min_interval_s, self._cost.get(id(source), 0.0))

    def _keep(self, src: Sampler, got: list[Reading]) -> None:
        with self._lock:
            self._readings.extend(got)
            for r in got:
                if r.device.key not in self._devices or src not in self._device_source.get(r.device.key, []):
                    self._register(r.device, src)

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
            if self._slow(src):
                self._cost[id(src)] = max(self._cost.get(id(src), 0.0), time.monotonic() - began)
            self._keep(src, got)
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
        fast = [s for s in self.sources if not self._slow(s)]
        groups = ([fast] if fast else []) + [[s] for s in self.sources if self._slow(s)]
        self._start = time.monotonic()
        for i, group in enumerate(groups):
            t = threading.Thread(target=self._run, args=(group,), name=f"gpuledger-telemetry-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def interrupt(self, why: str) -> None:
        """Cut the end of the window short (a signal while it is closed; safe from a signal handler): the
        remote sources' reads in flight are abandoned (``interrupt``), ``stop()`` takes no final reading of
        them, fetches nothing after the window and waits for no thread of a slow source."""
        self._interrupted = why
        for src in self.sources:
            cut = getattr(src, "interrupt", None)
            if callable(cut):
                cut(why)

    def _join(self, thread: threading.Thread) -> None:
        while thread.is_alive():
            thread.join(0.1)
            if self._interrupted is not None:  # a CLI's reading in flight (at most its timeout) is not waited
                thread.join(0.5)
                return

    def stop(self) -> list[TelemetrySample]:
        """Stop the threads, take a last reading of the fast sources and of the remote ones (so the
        window's end is covered), fetch what the sources that read after the window have (a Prometheus
        server), and return every sample with ``t`` relative to ``t0``. After :meth:`interrupt` the remote
        sources are not read again (their devices' coverage says what is missing)."""
        if self._threads:
            self._stopped_at = time.monotonic()  # the window's end: when the caller asked
            self._stop.set()
            for t in self._threads:
                self._join(t)
            self._threads = []
            if self._crash is not None:
                raise self._crash
            end = time.monotonic()
            last = [s for s in self.sources
                    if (not self._slow(s) or _flag(s, "final_read")) and s.name not in self._failed
                    and not (self._interrupted is not None and _flag(s, "remote"))]
            for src in last:
                self._due[id(src)] = end
            self.poll(end, last)
            self._end = end
            start = self.t0 if self._window_from_t0 else (self._start if self._start is not None else self.t0)
            for src in self.sources:
                after = getattr(src, "after_window", None)
                if after is None or src.name in self._failed:
                    continue
                if self._interrupted is not None:
                    self._failed[src.name] = f"{src.name}: not read after the window: {self._interrupted}"
                    continue
                try:
                    self._keep(src, after(start, self._stopped_at))
                except SourceError as exc:
                    self._failed[src.name] = f"{src.name} failed after the window: {exc.message}"
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

    def _assignments(self) -> dict[str, tuple[bool, str]]:
        remote: dict[str, str] = {}
        local: list[DeviceInfo] = []
        for key, dev in self._devices.items():
            owners = self._device_source[key]
            by = next((_assigned_by(s, key) for s in owners if _flag(s, "remote")), None)
            if by is not None:
                remote[key] = by
            elif not any(_flag(s, "remote") for s in owners):
                local.append(dev)
        return {k: (a.assigned, a.by) for k, a in decide(local, remote, self.env).items()}

    def summaries(
        self, window_end: float | None = None, between: tuple[float, float] | None = None
    ) -> list[DeviceWindow]:
        """One :class:`~gpuledger.records.DeviceWindow` per device seen by an available source (and per device
        a remote selection names, seen or not), with what the run was assigned. ``between``: summarise that
        part of the window instead (start, end in seconds on the samples' clock: a stage of a sweep)."""
        by_device: dict[str, list[TelemetrySample]] = {}
        for sample in self.samples():  # grouped once: each device's summary reads its own samples only
            by_device.setdefault(sample.device, []).append(sample)
        started = self._start if self._start is not None else self.t0
        start = 0.0 if self._window_from_t0 else started - self.t0
        end_abs = window_end if window_end is not None else (self._stopped_at or self._end)
        end = (end_abs if end_abs is not None else time.monotonic()) - self.t0
        if between is not None:
            start, end = between
        cpu_power_reasons = {
            s.name: s.reason or "unavailable"
            for s in self.all_sources
            if s.vendor == "cpu" and "energy_j" in s.provides and not s.available
        }
        for src in self.sources:
            for dev in getattr(src, "expected_devices", list)():
                if dev.key not in self._devices:
                    self._register(dev, src)
        assignments = self._assignments()
        # What each source says about its devices, asked once (not once per device: a source of N devices
        # would be asked N times for N entries).
        told = {id(src): (src.unavailable(), src.device_errors()) for src in self.all_sources}
        out = []
        for key, dev in list(self._devices.items()):
            srcs = self._device_source[key]
            unavailable: dict[str, str] = {}
            errors = []
            for src in srcs:
                src_unavailable, src_errors = told.get(id(src)) or (src.unavailable(), src.device_errors())
                for metric, why in src_unavailable.get(key, {}).items():
                    unavailable.setdefault(metric, f"{src.name}: {why}")
                err = src_errors.get(key)
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
            gap = next((g for s in srcs if isinstance(g := getattr(s, "gap_limit_s", None), float)),
                       self.gap_limit_s)
            summary = summarize_device(
                dev, by_device.get(key, []), window_start=start, window_end=end, interval_s=interval,
                unavailable=unavailable, device_error="; ".join(errors) or None,
                counter_only_reason=counter_only, gap_limit_s=gap,
            )
            if key in assignments:
                summary = summary.with_assignment(*assignments[key])
            out.append(summary)
        return out
