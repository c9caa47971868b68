"""A serving engine's own Prometheus endpoint: fetch it (aiohttp, on a timeout), parse it
(prometheus_client's text parser), and turn two scrapes into live rates over a sliding window.

Series read, per engine (summed over every label set: models, DP ranks, finish reasons):

=========  ==============================  ==============================  ==================================
engine     prompt tokens                   output tokens                   finished requests
=========  ==============================  ==============================  ==================================
vLLM       ``vllm:prompt_tokens_total``    ``vllm:generation_tokens_total``  ``vllm:request_success_total``
                                                                           (else the e2e histogram's count)
SGLang     ``sglang:prompt_tokens_total``  ``sglang:generation_tokens_total``  ``sglang:num_requests_total``
                                                                           (else the e2e histogram's count)
llama.cpp  ``llamacpp:prompt_tokens_total``  ``llamacpp:tokens_predicted_total``  none (not exported)
=========  ==============================  ==============================  ==================================

End-to-end latency: ``<engine>:e2e_request_latency_seconds`` (``_sum`` / ``_count``), vLLM and SGLang.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.errors import EngineError

EngineKind = Literal["vllm", "sglang", "llamacpp"]
MAX_BODY_BYTES = 32 * 1024 * 1024
MILLION = 1e6


class EngineMetricsError(EngineError):
    """The engine's /metrics could not be fetched or is not an engine's exposition text. The monitor
    shows the message as the engine source's reason and keeps serving everything else."""


@dataclass(frozen=True, slots=True)
class _Names:
    prompt: str
    output: str
    requests: tuple[str, ...]  # first present wins
    e2e: str | None
    no_requests_reason: str | None = None


ENGINE_SERIES: dict[EngineKind, _Names] = {
    "vllm": _Names("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                   ("vllm:request_success_total", "vllm:e2e_request_latency_seconds_count"),
                   "vllm:e2e_request_latency_seconds"),
    "sglang": _Names("sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                     ("sglang:num_requests_total", "sglang:e2e_request_latency_seconds_count"),
                     "sglang:e2e_request_latency_seconds"),
    "llamacpp": _Names("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", (), None,
                       "llama.cpp's /metrics exports no finished-request counter"),
}
ENGINE_LABELS: dict[EngineKind, str] = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """One scrape of an engine, as cumulative counters (tokens, requests, seconds)."""

    kind: EngineKind
    prompt_tokens: float | None
    output_tokens: float | None
    requests: float | None
    e2e_sum_s: float | None
    e2e_count: float | None
    models: tuple[str, ...] = ()
    requests_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.kind, "prompt_tokens_total": self.prompt_tokens,
                "output_tokens_total": self.output_tokens, "requests_total": self.requests,
                "e2e_seconds_sum": self.e2e_sum_s, "e2e_count": self.e2e_count, "models": list(self.models),
                "requests_reason": self.requests_reason}


def normalise_engine_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/metrics`` (a URL with a path is kept as given)."""
    parts = urlsplit(url.strip())
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urlunsplit(parts)


def parse_engine_metrics(text: str) -> EngineCounters:
    """The engine's counters from its exposition text. Unparseable text, or text with none of the
    engines' series, is an :class:`EngineMetricsError` saying which."""
    sums: dict[str, float] = {}
    models: set[str] = set()
    families = 0
    try:
        for fam in text_string_to_metric_families(text):
            families += 1
            for sample in fam.samples:
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                sums[sample.name] = sums.get(sample.name, 0.0) + value
                model = sample.labels.get("model_name")
                if model and sample.name.split(":", 1)[0] in ENGINE_SERIES:
                    models.add(model)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise EngineMetricsError(f"not Prometheus exposition text ({exc}); it starts with {first!r}") from exc

    for kind, names in ENGINE_SERIES.items():
        if names.prompt not in sums and names.output not in sums:
            continue
        requests = None
        for name in names.requests:
            if name in sums:
                requests = sums[name]
                break
        reason = None
        if requests is None:
            reason = names.no_requests_reason or f"none of {', '.join(names.requests)} in the response"
        e2e_sum = sums.get(f"{names.e2e}_sum") if names.e2e else None
        e2e_count = sums.get(f"{names.e2e}_count") if names.e2e else None
        return EngineCounters(kind, sums.get(names.prompt), sums.get(names.output), requests, e2e_sum,
                              e2e_count, tuple(sorted(models)), reason)
    raise EngineMetricsError(
        f"no vLLM, SGLang or llama.cpp token counters in the response ({families} metric families; "
        "expected vllm:generation_tokens_total, sglang:generation_tokens_total or "
        "llamacpp:tokens_predicted_total) — is this the engine's /metrics endpoint? "
        "(llama.cpp needs --metrics)"
    )


async def fetch_engine_metrics(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """GET ``url`` and return its text; every failure is an :class:`EngineMetricsError`."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s),
                               allow_redirects=False) as resp:
            if resp.status != 200:
                status = f"HTTP {resp.status} {resp.reason or ''}".rstrip()
                raise EngineMetricsError(f"GET {url} answered {status}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(65536):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise EngineMetricsError(f"GET {url}: response larger than {MAX_BODY_BYTES // 2**20} MiB")
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", errors="replace")
    except TimeoutError as exc:
        raise EngineMetricsError(f"GET {url}: no answer within {timeout_s:g} s") from exc
    except aiohttp.ClientError as exc:
        raise EngineMetricsError(f"GET {url}: {type(exc).__name__}: {exc}") from exc


async def scrape_engine(session: aiohttp.ClientSession, url: str, timeout_s: float) -> EngineCounters:
    text = await fetch_engine_metrics(session, url, timeout_s)
    return parse_engine_metrics(text)


# --------------------------------------------------------------------------- sliding window


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

    def _per_million(self, tokens: float | None, key: str) -> float | None:
        if self.cost is None:
            self.reasons.setdefault(key, self.reasons.get("cost", "no cost profile"))
            return None
        if tokens is None:
            self.reasons.setdefault(key, "the engine does not export these token counters")
            return None
        if tokens <= 0:
            self.reasons.setdefault(key, f"no tokens in the last {self.span_s:.0f} s")
            return None
        return self.cost / tokens * MILLION

    def cost_per_million_output(self) -> float | None:
        """Whole cost charged to the output tokens (how benchmark sites quote it)."""
        return self._per_million(self.output_tokens, "cost_per_million_output_tokens")

    def cost_per_million_total(self) -> float | None:
        """Cost per million input + output tokens."""
        return self._per_million(self.total_tokens, "cost_per_million_tokens")

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.span_s, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "requests": self.requests, "cost": self.cost, "busy_device_seconds": self.busy_s,
            "allocated_device_seconds": self.device_seconds, "e2e_mean_s": self.e2e_mean_s,
            "output_tokens_per_s": self.rate(self.output_tokens), "requests_per_s": self.rate(self.requests),
            "cost_per_million_tokens": self.cost_per_million_total(),
            "cost_per_million_output_tokens": self.cost_per_million_output(),
            "device_seconds_per_request": self.device_seconds_per_request(),
            "busy_device_seconds_per_request": self.busy_seconds_per_request(),
            "reasons": dict(self.reasons),
        }


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
    "ENGINE_SERIES",
    "EngineCounters",
    "EngineKind",
    "EngineMetricsError",
    "EnginePoint",
    "EngineWindow",
    "WindowStats",
    "fetch_engine_metrics",
    "normalise_engine_url",
    "parse_engine_metrics",
    "scrape_engine",
]
