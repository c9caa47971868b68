"""A serving engine's counters turned into live rates: two scrapes of its ``/metrics``
(:mod:`gpuledger.engines.server_metrics` fetches and parses them) joined with the cost and device time the
monitor accrued, over a sliding window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuledger.cost.pricing.model import unit_price
from gpuledger.engines.server_metrics import ENGINE_LABELS, ENGINE_SERIES, EngineCounters
from gpuledger.monitor.status import EngineWindowStatus
from gpuledger.records import unit_info


@dataclass(frozen=True, slots=True)
class EnginePoint:
    """An engine scrape joined with what the monitor had accrued at the same instant."""

    t: float
    counters: EngineCounters
    cost_total: float | None  # machine cost accrued so far (profile currency); None without a profile
    busy_s: float  # Σ busy seconds of the accounted devices (utilisation x time)
    devices: int  # accounted devices (GPUs, or the CPU on a CPU-only machine)


@dataclass(slots=True)
class WindowStats:
    """Differences between the oldest and newest point of the window, and what follows from them.
    A figure that cannot be computed is None and ``reasons`` says why (never 0 or infinity)."""

    span_s: float
    prompt_tokens: float | None
    output_tokens: float | None
    requests: float | None
    cost: float | None
    busy_s: float
    device_seconds: float
    e2e_mean_s: float | None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def total_tokens(self) -> float | None:
        if self.prompt_tokens is None or self.output_tokens is None:
            return None
        return self.prompt_tokens + self.output_tokens

    def _per_million(self, tokens: float | None, key: str, unit: str) -> float | None:
        if self.cost is None:
            self.reasons.setdefault(key, self.reasons.get("cost", "no cost profile"))
            return None
        if tokens is None:
            self.reasons.setdefault(key, "the engine does not export these token counters")
            return None
        if tokens <= 0:
            self.reasons.setdefault(key, f"no tokens in the last {self.span_s:.0f} s")
            return None
        return unit_price(self.cost, tokens, unit_info(unit).price_per)

    def cost_per_million_output(self) -> float | None:
        """Whole cost charged to the output tokens (how benchmark sites quote it)."""
        return self._per_million(self.output_tokens, "cost_per_million_output_tokens", "output_token")

    def cost_per_million_total(self) -> float | None:
        """Cost per million input + output tokens."""
        return self._per_million(self.total_tokens, "cost_per_million_tokens", "token")

    def _per_request(self, seconds: float, key: str) -> float | None:
        if self.requests is None:
            self.reasons.setdefault(key, self.reasons.get("requests", "no request counter"))
            return None
        if self.requests <= 0:
            self.reasons.setdefault(key, f"no request finished in the last {self.span_s:.0f} s")
            return None
        return seconds / self.requests

    def device_seconds_per_request(self) -> float | None:
        """Allocated device time (devices x wall time) per finished request: what is paid for."""
        return self._per_request(self.device_seconds, "device_seconds_per_request")

    def busy_seconds_per_request(self) -> float | None:
        """Busy device time (Σ utilisation x time) per finished request: what the work used."""
        return self._per_request(self.busy_s, "busy_device_seconds_per_request")

    def rate(self, value: float | None) -> float | None:
        return None if value is None or self.span_s <= 0 else value / self.span_s

    def status(self) -> EngineWindowStatus:
        """The window as the status document shows it; ``reasons`` includes why each figure computed
        here is absent."""
        per_m_total, per_m_output = self.cost_per_million_total(), self.cost_per_million_output()
        per_request, busy_per_request = self.device_seconds_per_request(), self.busy_seconds_per_request()
        return EngineWindowStatus(
            window_s=self.span_s, prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
            requests=self.requests, cost=self.cost, busy_device_seconds=self.busy_s,
            allocated_device_seconds=self.device_seconds, e2e_mean_s=self.e2e_mean_s,
            output_tokens_per_s=self.rate(self.output_tokens), requests_per_s=self.rate(self.requests),
            cost_per_million_tokens=per_m_total, cost_per_million_output_tokens=per_m_output,
            device_seconds_per_request=per_request, busy_device_seconds_per_request=busy_per_request,
            reasons=dict(self.reasons),
        )


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


class EngineWindow:
    """The engine scrapes of the last ``window_s`` seconds (plus the newest one older than that, so the
    window really spans ``window_s``). A counter that goes backwards (engine restarted) restarts it."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.points: deque[EnginePoint] = deque()

    def add(self, point: EnginePoint) -> str | None:
        """Add a scrape; returns a log line when the engine's counters went backwards."""
        note = None
        if self.points:
            last = self.points[-1].counters
            cur = point.counters
            back = [name for name, a, b in (("prompt tokens", last.prompt_tokens, cur.prompt_tokens),
                                            ("output tokens", last.output_tokens, cur.output_tokens),
                                            ("requests", last.requests, cur.requests))
                    if a is not None and b is not None and b < a]
            if back or last.kind != cur.kind:
                what = ", ".join(back) if back else f"engine changed from {last.kind} to {cur.kind}"
                note = f"engine counters went backwards ({what}): engine restarted? window restarted"
                self.points.clear()
        self.points.append(point)
        cutoff = point.t - self.window_s
        while len(self.points) >= 2 and self.points[1].t <= cutoff:
            self.points.popleft()
        return note

    def stats(self) -> WindowStats | None:
        """None until two scrapes are in the window."""
        if len(self.points) < 2:
            return None
        first, last = self.points[0], self.points[-1]
        a, b = first.counters, last.counters
        span = last.t - first.t
        reasons: dict[str, str] = {}
        cost = _delta(first.cost_total, last.cost_total)
        if cost is None:
            reasons["cost"] = "no cost profile: cost metrics are off"
        requests = _delta(a.requests, b.requests)
        if requests is None:
            reasons["requests"] = b.requests_reason or "no request counter"
        e2e_mean = None
        d_sum, d_count = _delta(a.e2e_sum_s, b.e2e_sum_s), _delta(a.e2e_count, b.e2e_count)
        if d_sum is not None and d_count is not None and d_count > 0:
            e2e_mean = d_sum / d_count
        elif d_count is None:
            reasons["e2e_mean_s"] = (f"{ENGINE_LABELS[b.kind]} exports no end-to-end latency histogram"
                                     if ENGINE_SERIES[b.kind].e2e is None
                                     else "no e2e_request_latency_seconds histogram in the response")
        else:
            reasons["e2e_mean_s"] = f"no request finished in the last {span:.0f} s"
        return WindowStats(
            span_s=span, prompt_tokens=_delta(a.prompt_tokens, b.prompt_tokens),
            output_tokens=_delta(a.output_tokens, b.output_tokens), requests=requests, cost=cost,
            busy_s=last.busy_s - first.busy_s, device_seconds=last.devices * span, e2e_mean_s=e2e_mean,
            reasons=reasons,
        )


__all__ = [
    "EnginePoint",
    "EngineWindow",
    "WindowStats",
]
