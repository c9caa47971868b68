"""The monitor's live state: latest readings per device, energy and busy-time counters, the
low-utilisation alert, cost accrual and the engine window. Pure bookkeeping: every method takes
``now`` (monotonic seconds), so tests drive it with a hand-moved clock.

Thread use: the monitor loop mutates it, the HTTP thread reads it; both hold ``lock``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpuledger.cost import CostProfile, HourlyCost, hourly_cost
from gpuledger.engines.server_metrics import EngineCounters
from gpuledger.monitor.config import MonitorConfig
from gpuledger.monitor.engine import EnginePoint, EngineWindow
from gpuledger.monitor.pricing import GPU_VENDORS, PowerFallback, accounted_devices
from gpuledger.monitor.status import (
    AlertSettings,
    CostStatus,
    DeviceStatus,
    EngineScrape,
    EngineStatus,
    EventKind,
    FallbackPower,
    MonitorEvent,
    MonitorStatus,
    SourceStatus,
)
from gpuledger.telemetry import DeviceInfo, Reading, Sampler
from gpuledger.telemetry.sampler import EnergyMethod, counter_check, trapezoid_energy_j
from gpuledger.urls import redact_url

COUNTER_CHECK_INTERVALS = 30  # intervals with both figures before the counter is judged
GAP_PERIODS = 3  # no reading for more than this many periods: a gap (not integrated across)
COST_COMPONENTS = ("capex", "rental", "energy", "labour", "other")


def max_gap(period_s: float) -> float:
    """Longest silence between two readings that is still integrated (and still counts as "up")."""
    return GAP_PERIODS * period_s + 0.5


def human_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 120:
        return f"{seconds:g} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {(s % 3600) // 60} min" if s % 3600 else "")


class EnergyMeter:
    """A device's energy since the monitor started, in J, never decreasing.

    Each interval adds the hardware counter's delta when the device has a counter (a negative step —
    wraparound or reset — falls back to integrated power for that interval), else the trapezoid of its
    sampled power. As in the window summary, the counter is checked against integrated power: after
    ``COUNTER_CHECK_INTERVALS`` intervals with both, a cumulative disagreement above 5 % drops the
    counter for good (logged). A counter that has only ever read 0 is not a counter (MI250 secondary die).
    """

    def __init__(self) -> None:
        self.total_j = 0.0
        self.method: EnergyMethod | None = None
        self.reason: str | None = None
        self.counter_rejected: str | None = None
        self.last_power_w: float | None = None  # measured, or derived from the counter step
        self.last_power_t: float | None = None
        self.power_derived = False
        self._power: tuple[float, float] | None = None
        self._counter: tuple[float, float] | None = None
        self._counter_nonzero = False
        self._check_counter = 0.0
        self._check_integrated = 0.0
        self._check_n = 0

    @property
    def has_data(self) -> bool:
        """True once the device has given a power reading or a counter that is not stuck at 0."""
        return self._power is not None or self._counter_nonzero

    def add(self, t: float, power_w: float | None, counter_j: float | None, gap_s: float) -> str | None:
        """Take one reading (either value may be None); returns a log line when the counter is dropped."""
        integrated = None
        if power_w is not None:
            if self._power is not None and 0 < t - self._power[0] <= gap_s:
                integrated = trapezoid_energy_j((self._power[0], t), (self._power[1], power_w))
            self._power = (t, power_w)
            self.last_power_w, self.last_power_t, self.power_derived = power_w, t, False

        step = None
        step_reason = None
        if counter_j is not None:
            if counter_j != 0:
                self._counter_nonzero = True
            if self._counter is not None and t > self._counter[0]:
                raw = counter_j - self._counter[1]
                if raw < 0:
                    step_reason = f"counter went backwards ({self._counter[1]:g} -> {counter_j:g} J)"
                elif self._counter_nonzero:
                    step = raw
                    if power_w is None:
                        self.last_power_w = raw / (t - self._counter[0])
                        self.last_power_t, self.power_derived = t, True
            self._counter = (t, counter_j)

        note = None
        if step is not None and integrated is not None and self.counter_rejected is None:
            self._check_counter += step
            self._check_integrated += integrated
            self._check_n += 1
            if self._check_n >= COUNTER_CHECK_INTERVALS and self._check_integrated > 0:
                # The window summary's rule (telemetry.sampler.counter_check), on the cumulative figures.
                self.counter_rejected = counter_check(self._check_counter, self._check_integrated)
                if self.counter_rejected is not None:
                    note = f"energy counter dropped: {self.counter_rejected}; integrating power from now on"

        if step is not None and self.counter_rejected is None:
            self.total_j += step
            self.method, self.reason = "counter", None
        elif integrated is not None:
            self.total_j += integrated
            self.method = "integrated"
            if self.counter_rejected:
                self.reason = self.counter_rejected
            elif step_reason:
                self.reason = step_reason
            elif self._counter is not None and not self._counter_nonzero:
                self.reason = "counter stuck at 0"
            else:
                self.reason = "no counter"
        elif counter_j is not None and not self._counter_nonzero and power_w is None:
            self.reason = "counter stuck at 0 and no power readings"
        return note


class LowUtilAlert:
    """Fires when every utilisation reading stays below ``level`` for ``window_s``; clears on the first
    reading at or above it. A gap in the readings restarts the count (nothing is known about the gap)."""

    def __init__(self, level: float, window_s: float) -> None:
        self.level = level
        self.window_s = window_s
        self.below_since: float | None = None
        self.active = False
        self._last_t: float | None = None

    def update(self, t: float, util: float, gap_s: float) -> Literal["fired", "recovered"] | None:
        gap = self._last_t is not None and t - self._last_t > gap_s
        self._last_t = t
        if util >= self.level:
            self.below_since = None
            if self.active:
                self.active = False
                return "recovered"
            return None
        if self.below_since is None or gap:
            self.below_since = t
        if not self.active and t - self.below_since >= self.window_s:
            self.active = True
            return "fired"
        return None


@dataclass(slots=True)
class DeviceState:
    info: DeviceInfo
    accounted: bool
    alert: LowUtilAlert
    sources: set[str] = field(default_factory=set)
    latest: dict[str, tuple[float, float]] = field(default_factory=dict)
    latest_source: dict[str, str] = field(default_factory=dict)
    meter: EnergyMeter = field(default_factory=EnergyMeter)
    period_s: float = 1.0
    last_seen: float | None = None
    error: str | None = None
    busy_s: float = 0.0
    last_util_t: float | None = None
    energy_at_accrual: float = 0.0
    idle_cost: float = 0.0

    @property
    def util_metric(self) -> str:
        return "cpu_util_ratio" if self.info.vendor == "cpu" else "util_ratio"

    def up(self, now: float) -> bool:
        if self.error is not None or self.last_seen is None:
            return False
        return now - self.last_seen <= max_gap(self.period_s)

    def fresh(self, metric: str, now: float) -> float | None:
        """The latest value of ``metric`` when it is recent enough to be shown (else None: stale)."""
        got = self.latest.get(metric)
        if got is None or self.error is not None or now - got[0] > max_gap(self.period_s):
            return None
        return got[1]


@dataclass(slots=True)
class SourceState:
    name: str
    vendor: str
    available_at_start: bool
    reason: str | None
    devices: tuple[str, ...]
    min_interval_s: float
    up: bool = False
    failures: int = 0
    retry_at: float | None = None
    read_s: float = 0.0  # longest read so far: a slow CLI stretches its own period

    def period(self, interval_s: float) -> float:
        return max(interval_s, self.min_interval_s, self.read_s)


@dataclass(slots=True)
class CostState:
    profile: CostProfile
    note: str
    gpu_count: int
    accounted: tuple[str, ...]
    fallback: dict[str, PowerFallback]
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COST_COMPONENTS, 0.0))
    rate: HourlyCost | None = None
    power_w: float | None = None
    power_source: str = ""
    energy_reason: str | None = None
    last_t: float | None = None

    @property
    def currency(self) -> str:
        return self.profile.currency

    @property
    def total(self) -> float:
        return sum(self.totals.values())


@dataclass(slots=True)
class EngineState:
    url: str
    window: EngineWindow
    up: bool = False
    reason: str | None = "not scraped yet"
    last: EngineCounters | None = None
    scrapes: int = 0
    failures: int = 0


class MonitorState:
    """Everything the exporter shows. Built from the opened telemetry sources."""

    def __init__(self, config: MonitorConfig, sources: Sequence[Sampler], *, now: float,
                 profile: CostProfile | None = None, profile_note: str = "",
                 fallback: dict[str, PowerFallback] | None = None, engine_url: str | None = None) -> None:
        self.config = config
        self.lock = threading.RLock()
        self.started = now
        self.hostname = config.hostname
        self.sources: dict[str, SourceState] = {}
        self.devices: dict[str, DeviceState] = {}
        self.events: list[MonitorEvent] = []
        found: list[DeviceInfo] = []
        for src in sources:
            devs = src.devices() if src.available else []
            self.sources[src.name] = SourceState(src.name, src.vendor, src.available, src.reason,
                                                 tuple(d.key for d in devs), src.min_interval_s,
                                                 up=src.available)
            for d in devs:
                if d.key not in self.devices:
                    found.append(d)
                    self.devices[d.key] = DeviceState(d, False, LowUtilAlert(config.alert_util,
                                                                            config.alert_window_s))
                self.devices[d.key].sources.add(src.name)
                self.devices[d.key].period_s = max(self.devices[d.key].period_s,
                                                   self.sources[src.name].period(config.interval_s))
        acc = accounted_devices(found)
        for d in acc:
            self.devices[d.key].accounted = True
        self.profile_note = profile_note
        self.cost: CostState | None = None
        if profile is not None:
            n_gpus = sum(1 for d in acc if d.vendor in GPU_VENDORS)
            self.cost = CostState(profile, profile_note, profile.gpu_count or max(n_gpus, 1),
                                  tuple(d.key for d in acc), dict(fallback or {}), last_t=now)
        self.engine: EngineState | None = (
            EngineState(engine_url, EngineWindow(config.engine_window_s)) if engine_url else None
        )

    # ------------------------------------------------------------------ helpers

    def label(self, dev: DeviceState) -> str:
        return f"{dev.info.key} ({dev.info.name})"

    def _event(self, now: float, kind: EventKind, message: str, *, device: str | None = None,
               active: bool | None = None, source: str | None = None) -> str:
        self.events.append(MonitorEvent(t_s=round(now - self.started, 3), kind=kind, message=message,
                                        device=device, active=active, source=source))
        del self.events[:-200]  # the JSON summary keeps the last 200
        return message

    def accounted(self) -> list[DeviceState]:
        return [d for d in self.devices.values() if d.accounted]

    # ------------------------------------------------------------------ telemetry

    def ingest(self, source: str, readings: Sequence[Reading], now: float, read_s: float = 0.0) -> list[str]:
        """One successful read of ``source``: store the readings, advance energy, busy time and alerts.
        Returns the log lines it caused."""
        logs: list[str] = []
        with self.lock:
            src = self.sources[source]
            src.read_s = max(src.read_s, read_s) if src.min_interval_s >= 1.0 else src.read_s
            if not src.up:
                logs.append(self._event(now, "source_up", f"source {source} is back"))
            src.up, src.failures, src.retry_at = True, 0, None
            if src.available_at_start:
                src.reason = None
            period = src.period(self.config.interval_s)
            by_dev: dict[str, dict[str, tuple[float, float]]] = {}
            for r in readings:
                by_dev.setdefault(r.device.key, {})[r.metric] = (r.t, r.value)
            for key, values in by_dev.items():
                dev = self.devices.get(key)
                if dev is None or dev.error is not None:
                    continue
                dev.latest_source.update(dict.fromkeys(values, source))
                logs.extend(self._ingest_device(dev, values, period))
        return logs

    def _ingest_device(self, dev: DeviceState, values: dict[str, tuple[float, float]],
                       period: float) -> list[str]:
        logs: list[str] = []
        t = max(v[0] for v in values.values())
        gap = max_gap(max(dev.period_s, period))
        dev.latest.update(values)
        dev.last_seen = t if dev.last_seen is None else max(dev.last_seen, t)
        power = values.get("power_w")
        counter = values.get("energy_j")
        if power is not None or counter is not None:
            note = dev.meter.add(t, power[1] if power else None, counter[1] if counter else None, gap)
            if note:
                logs.append(self._event(t, "energy", f"{self.label(dev)}: {note}"))
        util = values.get(dev.util_metric)
        if util is not None:
            if dev.last_util_t is not None and 0 < t - dev.last_util_t <= gap:
                dev.busy_s += util[1] * (t - dev.last_util_t)  # a reading covers the time since the last
            dev.last_util_t = t
            if dev.accounted:
                logs.extend(self._alert(dev, t, util[1], gap))
        return logs

    def _alert(self, dev: DeviceState, t: float, util: float, gap: float) -> list[str]:
        change = dev.alert.update(t, util, gap)
        level = f"{self.config.alert_util * 100:g} %"
        cost = ""
        if self.cost is not None:
            cost = f"; idle cost so far {dev.idle_cost:.2f} {self.cost.currency}"
        if change == "fired":
            since = dev.alert.below_since if dev.alert.below_since is not None else t
            return [self._event(t, "alert", (
                f"ALERT low utilisation: {self.label(dev)} below {level} for "
                f"{human_duration(t - since)} (--alert-window {human_duration(self.config.alert_window_s)}; "
                f"now {util * 100:.0f} %){cost}"), device=dev.info.key, active=True)]
        if change == "recovered":
            return [self._event(t, "alert", (
                f"alert cleared: {self.label(dev)} back at {util * 100:.0f} % (>= {level}){cost}"),
                device=dev.info.key, active=False)]
        return []

    def source_failed(self, source: str, reason: str, now: float) -> list[str]:
        """A read of ``source`` raised: mark it down and schedule a retry (1, 2, 4 ... 60 s)."""
        with self.lock:
            src = self.sources[source]
            was_up, old = src.up, src.reason
            src.up, src.reason = False, reason
            for dev in self.devices.values():  # what it last said is no longer current
                gone = [m for m, s in dev.latest_source.items() if s == source]
                for metric in gone:
                    dev.latest.pop(metric, None)
                    dev.latest_source.pop(metric, None)
                if {"power_w", "energy_j"} & set(gone):
                    dev.meter.last_power_w = dev.meter.last_power_t = None
            src.failures += 1
            src.retry_at = now + min(60.0, 2.0 ** (src.failures - 1))
            if was_up or old != reason:
                return [self._event(now, "source_down", (
                    f"source {source} failed: {reason} — still serving the other sources; "
                    "retrying"), source=source)]
            return []

    def device_failed(self, key: str, reason: str, now: float) -> list[str]:
        """A source reported ``key`` lost (fell off the bus, stopped being listed)."""
        with self.lock:
            dev = self.devices.get(key)
            if dev is None or dev.error is not None:
                return []
            dev.error = reason
            return [self._event(now, "device_lost", (
                f"device {self.label(dev)} lost: {reason} — its gauges are no longer exported "
                "(gpuledger_gpu_up 0); the rest keeps being served"), device=key)]

    # ------------------------------------------------------------------ cost

    def accrue(self, now: float) -> None:
        """Add the cost of the time since the last call: hourly cost (profile, power of the interval)
        x elapsed hours, by component; and each accounted device's share to its idle cost while its
        utilisation is below the alert level."""
        with self.lock:
            c = self.cost
            if c is None:
                return
            if c.last_t is None:
                c.last_t = now
                return
            dt = now - c.last_t
            if dt <= 0:
                return
            c.last_t = now
            profile = c.profile
            devs = [self.devices[k] for k in c.accounted]
            per_dev: dict[str, float | None] = {}
            sources: set[str] = set()
            missing: list[str] = []
            for dev in devs:
                delta = dev.meter.total_j - dev.energy_at_accrual
                dev.energy_at_accrual = dev.meter.total_j
                if dev.meter.has_data:
                    per_dev[dev.info.key] = delta / dt
                    sources.add("measured")
                elif dev.info.key in c.fallback:
                    per_dev[dev.info.key] = c.fallback[dev.info.key].watts
                    sources.add("catalog TDP" if dev.info.vendor in GPU_VENDORS else "estimate")
                else:
                    per_dev[dev.info.key] = None
                    missing.append(self.label(dev))
            energy_ok = True
            if profile.mode == "rental":
                power = 0.0
                c.power_source = "not needed: the rental price includes energy"
            elif profile.power_w is not None:
                power = profile.power_w + profile.host_power_w
                share = profile.power_w / max(len(devs), 1)
                per_dev = dict.fromkeys(per_dev, share)
                c.power_source = "profile power_w"
            elif missing:
                power = profile.host_power_w
                energy_ok = False
                c.power_source = "unmeasured: " + ", ".join(missing)
            else:
                power = sum(w for w in per_dev.values() if w is not None) + profile.host_power_w
                c.power_source = " + ".join(sorted(sources)) or "none"
            if profile.host_power_w and profile.mode == "ownership":
                c.power_source += f" + host_power_w {profile.host_power_w:g} W"
            rate = hourly_cost(profile, power, gpu_count=c.gpu_count)
            # The gauges show the cost at the devices' current power (their latest readings): the power
            # of one short accrual interval (energy delta / dt) jumps with the timing of the readings,
            # while its sum over time (what the counters accrue) is exact.
            current = self._current_power(devs, profile) if energy_ok else None
            c.power_w = current if profile.mode == "ownership" else None
            c.rate = hourly_cost(profile, current if current is not None else power, gpu_count=c.gpu_count)
            c.energy_reason = None if energy_ok else (
                f"energy cost not accrued: no power reading and no stated figure for {', '.join(missing)} "
                "(set power_w in the profile)")
            hours = dt / 3600.0
            for name, per_hour in rate.components().items():
                if name == "energy" and not energy_ok:
                    continue
                c.totals[name] += per_hour * hours
            fixed = (rate.total - rate.energy) / max(len(devs), 1)
            price_per_wh = (profile.pue * (profile.electricity_per_kwh or 0.0) / 1000.0
                            if profile.mode == "ownership" else 0.0)
            for dev in devs:
                watts = per_dev.get(dev.info.key)
                share = fixed * hours
                if watts is not None and energy_ok:
                    share += watts * price_per_wh * hours
                util = dev.fresh(dev.util_metric, now)
                if util is not None and util < self.config.alert_util:
                    dev.idle_cost += share

    def _current_power(self, devs: Sequence[DeviceState], profile: CostProfile) -> float | None:
        """Watts drawn now by the priced devices (+ host_power_w): the latest reading of each (or its
        stated figure when it reports none); None when a device has neither."""
        c = self.cost
        if profile.mode == "rental" or c is None:
            return 0.0
        if profile.power_w is not None:
            return profile.power_w + profile.host_power_w
        total = profile.host_power_w
        for dev in devs:
            if dev.meter.last_power_w is not None:
                total += dev.meter.last_power_w
            elif not dev.meter.has_data and dev.info.key in c.fallback:
                total += c.fallback[dev.info.key].watts
            elif dev.meter.has_data:
                continue  # measured energy but no power step yet: its energy is still accrued
            else:
                return None
        return total

    # ------------------------------------------------------------------ engine

    def busy_total(self) -> float:
        return sum(d.busy_s for d in self.accounted())

    def engine_scraped(self, now: float, counters: EngineCounters) -> list[str]:
        logs: list[str] = []
        with self.lock:
            eng = self.engine
            if eng is None:
                return logs
            self.accrue(now)
            if not eng.up:
                what = "reachable" if eng.scrapes == 0 and eng.failures == 0 else "back"
                models = f" serving {', '.join(counters.models)}" if counters.models else ""
                line = f"engine {counters.kind} at {redact_url(eng.url)} {what}{models}"
                logs.append(self._event(now, "engine_up", line))
            eng.up, eng.reason, eng.last = True, None, counters
            eng.scrapes += 1
            point = EnginePoint(now, counters, self.cost.total if self.cost else None, self.busy_total(),
                                len(self.accounted()))
            note = eng.window.add(point)
            if note:
                logs.append(self._event(now, "engine", note))
        return logs

    def engine_failed(self, now: float, reason: str) -> list[str]:
        with self.lock:
            eng = self.engine
            if eng is None:
                return []
            was_up, old = eng.up, eng.reason
            eng.up, eng.reason = False, reason
            eng.failures += 1
            if was_up or old != reason:
                shown = redact_url(eng.url)
                line = f"engine metrics at {shown} unavailable: {reason} — still serving the rest"
                return [self._event(now, "engine_down", line)]
            return []

    # ------------------------------------------------------------------ summary

    def status(self, now: float) -> MonitorStatus:
        """The status document (``gpuledger monitor --json`` prints it when the monitor stops)."""
        with self.lock:
            devices = tuple(DeviceStatus(
                device=d.info.key, vendor=d.info.vendor, name=d.info.name, uuid=d.info.uuid,
                index=d.info.index, accounted=d.accounted, up=d.up(now), error=d.error,
                sources=tuple(sorted(d.sources)), latest={m: v for m, (_, v) in sorted(d.latest.items())},
                energy_j=d.meter.total_j if d.meter.has_data else None,
                energy_method=d.meter.method, energy_reason=d.meter.reason,
                busy_s=d.busy_s, low_utilization_alert=d.alert.active,
                idle_cost=d.idle_cost if self.cost and d.accounted else None,
            ) for d in self.devices.values())
            cost: CostStatus | None = None
            if self.cost is not None:
                c = self.cost
                cost = CostStatus(
                    profile=c.profile.name, currency=c.currency, mode=c.profile.mode, note=c.note,
                    total=c.total, components=dict(c.totals), per_hour=c.rate.total if c.rate else None,
                    priced_power_w=c.power_w, power_source=c.power_source, energy_reason=c.energy_reason,
                    gpu_count=c.gpu_count,
                    fallback_power={k: FallbackPower(watts=f.watts, source=f.source)
                                    for k, f in c.fallback.items()},
                )
            engine: EngineStatus | None = None
            if self.engine is not None:
                e = self.engine
                stats = e.window.stats()
                engine = EngineStatus(url=redact_url(e.url), up=e.up, reason=e.reason, scrapes=e.scrapes,
                                      failures=e.failures, last=EngineScrape.of(e.last) if e.last else None,
                                      window=stats.status() if stats else None)
            return MonitorStatus(
                hostname=self.hostname, uptime_s=now - self.started, interval_s=self.config.interval_s,
                alert=AlertSettings(util_ratio=self.config.alert_util, window_s=self.config.alert_window_s),
                sources=tuple(SourceStatus(name=s.name, up=s.up, available_at_start=s.available_at_start,
                                           reason=s.reason, devices=s.devices)
                              for s in self.sources.values()),
                devices=devices, cost=cost, cost_note=self.profile_note, engine=engine,
                events=tuple(self.events),
            )
