"""The one energy computation, for every source (local libraries and CLIs, remote exporters, a Prometheus
server, logs imported after the run): pure functions over ``(t, value)`` series on one clock.

Per device, over the measured window ``[start, end]``:

- **integral**: power is taken as linear between samples (the trapezoid rule), interpolated linearly at the
  window's two edges; within ``edge_tolerance_s`` of an edge the nearest sample is held flat.
- **validity** (stable reason codes, :data:`REASON_CODES`): ``window_not_covered`` (the samples do not
  bracket the window), ``gap_over_limit`` (two samples further apart than ``gap_limit_s``, default 3 s),
  ``counter_mismatch`` (a hardware energy counter disagrees with the integral by more than 5 %),
  ``device_missing`` (a device that was expected has no samples), ``device_error`` (the source reported the
  device lost or failing). A device with reasons keeps its figures: they are an estimate, labelled so.
- **figure**: the counter's delta when one covers the window and agrees with the integral (method
  ``counter``), else the integral (method ``integrated``), with the reason in words.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuledger.records import EnergyMethod

Series = Sequence[tuple[float, float]]

COUNTER_TOLERANCE = 0.05  # a counter is accepted when within 5 % of the integral of sampled power
DEFAULT_GAP_LIMIT_S = 3.0  # two samples further apart than this: the energy is not valid
MIN_EDGE_TOLERANCE_S = 0.5  # a first/last sample this close to an edge still covers it (held flat)

WINDOW_NOT_COVERED = "window_not_covered"
GAP_OVER_LIMIT = "gap_over_limit"
COUNTER_MISMATCH = "counter_mismatch"
DEVICE_MISSING = "device_missing"
DEVICE_ERROR = "device_error"
POWER_OUT_OF_RANGE = "power_out_of_range"  # held by gpuledger.telemetry.bounds before this computation

# Stable codes (stored with the run, shown by `show --json` as energy.reasons) and what each means.
REASON_CODES: dict[str, str] = {
    WINDOW_NOT_COVERED: "the device's samples do not bracket the measured window (started late, stopped "
                        "early)",
    GAP_OVER_LIMIT: "two consecutive samples are further apart than the gap limit (default 3 s)",
    COUNTER_MISMATCH: "the hardware energy counter disagrees with the integral of sampled power by more "
                      "than 5 %",
    DEVICE_MISSING: "a device the run was assigned (or told to expect) has no samples",
    DEVICE_ERROR: "the telemetry source reported the device lost or failing during the window",
    POWER_OUT_OF_RANGE: "power readings (or an energy counter's rate) above what the device can draw (its "
                        "catalog TDP × 1.5, else 3,000 W) were left out of its energy",
}


def edge_tolerance(period_s: float) -> float:
    """How far a device's first/last sample may sit inside the window and still cover its edge: one
    sampling period, at least :data:`MIN_EDGE_TOLERANCE_S`."""
    return max(period_s, MIN_EDGE_TOLERANCE_S)


# --------------------------------------------------------------------------- primitives


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
    if not values:
        return 0.0
    cumulative = unwrap(values, wrap_at)
    return cumulative[-1] - cumulative[0]


def unwrap(values: Sequence[float], wrap_at: float | None = None) -> list[float]:
    """A counter's readings made monotonic: each wraparound adds ``wrap_at`` back (``ValueError`` for a
    decrease without a known range)."""
    out: list[float] = []
    offset = 0.0
    for i, value in enumerate(values):
        if i and value < values[i - 1]:
            if wrap_at is None or wrap_at <= 0:
                raise ValueError(f"counter went backwards ({values[i - 1]:g} -> {value:g})")
            offset += wrap_at
        out.append(value + offset)
    return out


def counter_check(counter_j: float, integrated_j: float, tolerance: float = COUNTER_TOLERANCE) -> str | None:
    """None when a hardware counter's energy agrees with the integral of sampled power over the same
    time (within ``tolerance``), else why it is not to be trusted."""
    if integrated_j <= 0:
        return None if counter_j == 0 else "counter disagreed with integrated power (integrated power is 0 J)"
    disagreement = abs(counter_j - integrated_j) / integrated_j
    if disagreement <= tolerance:
        return None
    return f"counter disagreed with integrated power by {disagreement * 100:.0f} %"


def interpolate(series: Series, t: float) -> float:
    """The value of the piecewise-linear curve through ``series`` (sorted by time) at ``t``; beyond its
    first or last point the nearest value is held."""
    if not series:
        raise ValueError("no points to interpolate")
    times = [p[0] for p in series]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return series[0][1]
    if i >= len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    if t1 == t0:
        return v1
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def integrate_window(series: Series, start: float, end: float) -> float:
    """Integral over ``[start, end]`` of the piecewise-linear curve through ``series`` (sorted by time),
    with its values interpolated at the two edges and held flat beyond its first and last point."""
    if end <= start or not series:
        return 0.0
    inner = [(t, v) for t, v in series if start < t < end]
    points = [(start, interpolate(series, start)), *inner, (end, interpolate(series, end))]
    return trapezoid_energy_j([t for t, _ in points], [v for _, v in points])


def find_gaps(times: Sequence[float], start: float, end: float, limit_s: float) -> list[tuple[float, float]]:
    """Spans ``(from, length)`` longer than ``limit_s`` between consecutive samples that bear on the
    window ``[start, end]``: those in it and the ones that bracket its edges (the last at or before the
    start, the first at or after the end)."""
    ordered = sorted(times)
    lo = max(0, bisect.bisect_right(ordered, start) - 1)
    hi = min(len(ordered), bisect.bisect_left(ordered, end) + 1)
    relevant = ordered[lo:hi]
    return [(a, b - a) for a, b in zip(relevant, relevant[1:], strict=False) if b - a > limit_s + 1e-9]


def counter_step(cum: Series) -> float:
    """How often a counter's readings show it moving, when they show it standing still in between: the
    median time between readings whose value changed (a counter refreshed every 30 s and read every
    second repeats itself 29 times). 0 for a counter that moved at every reading (as fine as the reads)."""
    changes = [t for (t, v), (_, prev) in zip(cum[1:], cum, strict=False) if v != prev]
    if len(changes) == len(cum) - 1:
        return 0.0
    steps = [b - a for a, b in zip(changes, changes[1:], strict=False) if b > a]
    if not steps:
        return 0.0
    steps.sort()
    return steps[len(steps) // 2]


def counter_resolution(cum: Series, a: float, b: float) -> float:
    """The relative error a counter's steps allow over ``[a, b]``: up to one step at each end."""
    return 2.0 * counter_step(cum) / (b - a) if b > a else math.inf


# --------------------------------------------------------------------------- the audit


@dataclass(frozen=True, slots=True)
class EnergyResult:
    """Which energy figure a device's samples give (``choose_energy``: no window, no validity)."""

    energy_j: float | None
    method: EnergyMethod | None
    reason: str | None
    integrated_j: float | None = None
    counter_j: float | None = None


def choose_energy(
    power: Series,
    counter: Series,
    *,
    tolerance: float = COUNTER_TOLERANCE,
    wrap_at: float | None = None,
    counter_only_reason: str = "not validated: no power readings to check the counter against",
) -> EnergyResult:
    """The energy over the span of the samples themselves (first to last): :func:`audit_energy` over that
    span, without its validity."""
    times = [t for t, _ in (*power, *counter)]
    if not times:
        return EnergyResult(None, None, "no power or energy readings")
    basis = [t for t, _ in power] if len(power) >= 2 else times
    span = (min(basis), max(basis))
    audit = audit_energy(power, counter, start=span[0], end=span[1], tolerance=tolerance, wrap_at=wrap_at,
                         counter_only_reason=counter_only_reason, gap_limit_s=float("inf"))
    return EnergyResult(audit.energy_j, audit.method, audit.reason, audit.integrated_j, audit.counter_j)


@dataclass(frozen=True, slots=True)
class EnergyAudit:
    """One device's energy over one window: the figure, how it was obtained, and whether it is valid
    (``reasons``: codes of :data:`REASON_CODES`; ``details``: one sentence per code, in the same order)."""

    energy_j: float | None
    method: EnergyMethod | None
    reason: str | None  # why this figure/method, in words (None: a validated counter)
    integrated_j: float | None
    counter_j: float | None
    mean_power_w: float | None
    peak_power_w: float | None
    reasons: tuple[str, ...] = ()
    details: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.reasons


def _coverage(times: Sequence[float], start: float, end: float, tol: float, what: str) -> str | None:
    if times[0] <= start + tol + 1e-9 and times[-1] >= end - tol - 1e-9:
        return None
    return (f"{what} samples cover t={max(times[0], start):.2f}..{min(times[-1], end):.2f} s of the window "
            f"t={start:.2f}..{end:.2f} s")


def _gaps(times: Sequence[float], start: float, end: float, limit: float, what: str) -> str | None:
    gaps = find_gaps(times, start, end, limit)
    if not gaps:
        return None
    longest = max(gaps, key=lambda g: g[1])
    more = f" ({len(gaps)} gaps)" if len(gaps) > 1 else ""
    return f"no {what} sample for {longest[1]:.2f} s from t={longest[0]:.2f} s (limit {limit:g} s){more}"


def _peak(series: Series, start: float, end: float, tol: float) -> float:
    inside = [v for t, v in series if start - tol <= t <= end + tol]
    return max(inside) if inside else max(v for _, v in series)


def audit_energy(
    power: Series,
    counter: Series,
    *,
    start: float,
    end: float,
    gap_limit_s: float = DEFAULT_GAP_LIMIT_S,
    edge_tolerance_s: float = 0.0,
    tolerance: float = COUNTER_TOLERANCE,
    wrap_at: float | None = None,
    counter_only_reason: str = "not validated: no power readings to check the counter against",
) -> EnergyAudit:
    """Energy of one device over ``[start, end]`` from ``(t, W)`` power samples and ``(t, J)`` counter
    readings (as read: monotonic apart from wraparound), with its validity (module docstring)."""
    power = sorted(power)
    counter = sorted(counter)
    window = max(0.0, end - start)
    codes: list[str] = []
    details: list[str] = []

    def flag(code: str, detail: str | None) -> None:
        if detail is not None:
            codes.append(code)
            details.append(detail)

    cum: list[tuple[float, float]] = []
    counter_problem: str | None = None
    if len(counter) >= 2:
        values = [v for _, v in counter]
        if all(v == 0 for v in values):
            counter_problem = "counter stuck at 0"
        else:
            try:
                cum = list(zip([t for t, _ in counter], unwrap(values, wrap_at), strict=True))
            except ValueError as exc:
                counter_problem = str(exc)

    if power:
        times = [t for t, _ in power]
        flag(WINDOW_NOT_COVERED, _coverage(times, start, end, edge_tolerance_s, "power"))
        flag(GAP_OVER_LIMIT, _gaps(times, start, end, gap_limit_s, "power"))
        integrated = integrate_window(power, start, end) if window > 0 else 0.0
        mean = integrated / window if window > 0 else interpolate(power, start)
        peak = _peak(power, start, end, edge_tolerance_s)
        if not cum:
            reason = counter_problem or ("no counter" if len(counter) < 2 else None)
            return EnergyAudit(integrated, "integrated", reason, integrated, None, mean, peak,
                               tuple(codes), tuple(details))
        a, b = max(start, cum[0][0]), min(end, cum[-1][0])
        if b <= a:
            return EnergyAudit(integrated, "integrated", "counter readings do not overlap the window",
                               integrated, None, mean, peak, tuple(codes), tuple(details))
        delta = interpolate(cum, b) - interpolate(cum, a)
        coarse = counter_resolution(cum, a, b)
        if coarse > tolerance:  # a counter that moves in steps this large cannot be checked to 5 % here
            why = (f"counter not used: it advances in steps of {counter_step(cum):.2f} s, too coarse to "
                   f"check against integrated power over {b - a:.2f} s (up to {coarse * 100:.0f} %)")
            return EnergyAudit(integrated, "integrated", why, integrated, delta, mean, peak, tuple(codes),
                               tuple(details))
        problem = counter_check(delta, integrate_window(power, a, b), tolerance)
        if problem is not None:
            flag(COUNTER_MISMATCH, problem)
            return EnergyAudit(integrated, "integrated", problem, integrated, delta, mean, peak,
                               tuple(codes), tuple(details))
        if _coverage([t for t, _ in cum], start, end, edge_tolerance_s, "counter") is not None:
            return EnergyAudit(integrated, "integrated", "counter does not cover the window", integrated,
                               delta, mean, peak, tuple(codes), tuple(details))
        # The counter over the window; the edges it does not reach (within the tolerance) from power.
        joules = delta + integrate_window(power, start, a) + integrate_window(power, b, end)
        return EnergyAudit(joules, "counter", None, integrated, joules, mean, peak, tuple(codes),
                           tuple(details))

    if cum:
        times = [t for t, _ in cum]
        flag(WINDOW_NOT_COVERED, _coverage(times, start, end, edge_tolerance_s, "energy counter"))
        flag(GAP_OVER_LIMIT, _gaps(times, start, end, gap_limit_s, "energy counter"))
        a, b = max(start, cum[0][0]), min(end, cum[-1][0])
        if b > a:
            delta = interpolate(cum, b) - interpolate(cum, a)
            joules = delta / (b - a) * window if window > 0 else 0.0  # the uncovered edges at the mean rate
            rates = [(y[1] - x[1]) / (y[0] - x[0]) for x, y in zip(cum, cum[1:], strict=False) if y[0] > x[0]]
            rate = joules / window if window > 0 else None
            return EnergyAudit(joules, "counter", counter_only_reason, None, joules, rate,
                               max(rates) if rates else None, tuple(codes), tuple(details))
        return EnergyAudit(None, None, "energy counter readings do not overlap the window", None, None, None,
                           None, tuple(codes), tuple(details))

    reason = "no power or energy readings"
    if counter_problem:
        reason = f"{counter_problem} and no power readings"
    return EnergyAudit(None, None, reason, None, 0.0 if counter_problem == "counter stuck at 0" else None,
                       None, None, tuple(codes), tuple(details))
