"""The server's own view while a bench runs: how many requests it was running, how many it kept
waiting in its queue, how full its KV cache was, and how often it preempted sequences — read from its
Prometheus ``/metrics`` once a second during the measured window.

They say *why* a run's numbers are what they are: a TTFT that grows with concurrency while requests
wait in the server's queue is queueing, not prefill; a throughput plateau with a full KV cache and
preemptions is memory, not compute. Series read (summed over label sets, except the KV-cache ratio,
which is the fullest engine's when a server runs several):

- vLLM: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
  (v1; ``vllm:gpu_cache_usage_perc`` in v0; a ratio 0..1 despite the name), ``vllm:num_preemptions_total``.
- SGLang: ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` (ratio); no
  preemption counter.
- llama.cpp (``--metrics``): ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:kv_cache_usage_ratio`` (not in every build); no preemption counter.

The scrapes use their own connection (never one of the load generator's) and are parsed with
prometheus_client in a worker thread, so they do not delay the requests being measured.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.monitor.engine import EngineMetricsError, fetch_engine_metrics

SCRAPE_TIMEOUT_S = 5.0
# The KV cache counts as full from this ratio on (schedulers keep a little headroom).
KV_FULL_RATIO = 0.95


@dataclass(frozen=True, slots=True)
class StateSeries:
    label: str
    running: str
    waiting: str
    kv_usage: tuple[str, ...]  # first present wins
    preemptions: str | None


STATE_SERIES: dict[str, StateSeries] = {
    "vllm": StateSeries(
        "vLLM", "vllm:num_requests_running", "vllm:num_requests_waiting",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "vllm:num_preemptions_total",
    ),
    "sglang": StateSeries("SGLang", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                          ("sglang:token_usage",), None),
    "llamacpp": StateSeries("llama.cpp", "llamacpp:requests_processing", "llamacpp:requests_deferred",
                            ("llamacpp:kv_cache_usage_ratio",), None),
}


@dataclass(frozen=True, slots=True)
class StatePoint:
    """One scrape: ``t`` in seconds on the run's clock; None where the server does not export it."""

    t: float
    running: float | None
    waiting: float | None
    kv_usage_ratio: float | None
    preemptions_total: float | None


def parse_state(text: str, kind: str, t: float) -> StatePoint:
    """The state series of ``kind`` in one exposition text (``EngineMetricsError`` if it is not one)."""
    series = STATE_SERIES[kind]
    wanted = {series.running, series.waiting, *series.kv_usage}
    if series.preemptions:
        wanted.add(series.preemptions)
    sums: dict[str, float] = {}
    peaks: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for sample in fam.samples:
                if sample.name not in wanted:
                    continue
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                sums[sample.name] = sums.get(sample.name, 0.0) + value
                peaks[sample.name] = max(peaks.get(sample.name, value), value)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise EngineMetricsError(f"/metrics is not Prometheus exposition text ({exc})") from exc
    kv = next((peaks[n] for n in series.kv_usage if n in peaks), None)
    return StatePoint(
        t,
        sums.get(series.running),
        sums.get(series.waiting),
        kv,
        sums.get(series.preemptions) if series.preemptions else None,
    )


@dataclass(slots=True)
class ServerStateSampler:
    """Scrapes ``url`` every ``interval_s`` between :meth:`start` and :meth:`stop`."""

    kind: str
    url: str
    interval_s: float = 1.0
    points: list[StatePoint] = field(default_factory=list)
    final: StatePoint | None = None  # read as the window closed: for the counters only
    failures: int = 0
    last_error: str | None = None
    _session: aiohttp.ClientSession | None = None
    _task: asyncio.Task[None] | None = None
    _t0: float = 0.0

    async def check(self) -> str | None:
        """One scrape before the window: None when the series are there, else why they are not (the
        session is closed then and nothing is sampled)."""
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        try:
            point = await self._scrape()
        except EngineMetricsError as exc:
            await self.close()
            return exc.message
        if point.running is None and point.waiting is None and point.kv_usage_ratio is None:
            await self.close()
            return f"{self.url} has none of {STATE_SERIES[self.kind].label}'s scheduler series"
        return None

    async def _scrape(self) -> StatePoint:
        assert self._session is not None
        text = await fetch_engine_metrics(self._session, self.url, SCRAPE_TIMEOUT_S)
        t = perf_counter() - self._t0
        return await asyncio.to_thread(parse_state, text, self.kind, t)

    def start(self, t0: float) -> None:
        """Begin sampling; ``t0`` is the run's zero on ``perf_counter``'s clock."""
        self._t0 = t0
        if self._session is not None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        next_at = perf_counter()
        while True:
            try:
                self.points.append(await self._scrape())
            except EngineMetricsError as exc:
                self.failures += 1
                self.last_error = exc.message
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - perf_counter()))

    async def stop(self) -> None:
        """End sampling with one last scrape (the counters' value at the window's end)."""
        if self._task is not None:
            self._task.cancel()
            (outcome,) = await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            if isinstance(outcome, Exception):  # the loop died before the window ended: say so
                self.failures += 1
                self.last_error = f"sampling stopped early: {type(outcome).__name__}: {outcome}"
            try:
                self.final = await self._scrape()
            except EngineMetricsError as exc:
                self.failures += 1
                self.last_error = exc.message
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": sum(values) / len(values), "max": max(values)}


def _block(points: list[StatePoint], final: StatePoint | None = None) -> dict[str, Any]:
    def col(name: str) -> list[float]:
        return [v for p in points if (v := getattr(p, name)) is not None]

    pre = col("preemptions_total")
    if final is not None and final.preemptions_total is not None:
        pre.append(final.preemptions_total)
    return {
        "scrapes": len(points),
        "running": _stats(col("running")),
        "waiting": _stats(col("waiting")),
        "kv_cache_usage_ratio": _stats(col("kv_usage_ratio")),
        "preemptions": (pre[-1] - pre[0]) if len(pre) >= 2 else None,
    }


def notes_for(block: dict[str, Any], label: str) -> list[str]:
    """What the server's state says about the numbers measured against it."""
    out: list[str] = []
    waiting = block.get("waiting") or {}
    if waiting.get("max"):
        out.append(
            f"{label} kept requests waiting in its queue (up to {waiting['max']:g}, {waiting['mean']:.1f} on "
            "average): it was at capacity for this load, and TTFT includes the queueing time"
        )
    kv = block.get("kv_cache_usage_ratio") or {}
    if kv.get("max") is not None and kv["max"] >= KV_FULL_RATIO:
        out.append(
            f"{label}'s KV cache was full (up to {kv['max']:.0%}): more concurrency cannot run more "
            "sequences at once on this memory"
        )
    if block.get("preemptions"):
        out.append(
            f"{label} preempted sequences {block['preemptions']:g} times (evicted for lack of KV cache and "
            "recomputed): that costs throughput and latency"
        )
    return out


def summarize_state(
    sampler: ServerStateSampler, stages: list[tuple[str, float, float]] | None = None
) -> dict[str, Any]:
    """``RunInfo.server["state"]``: the window's means and peaks, per sweep stage when there are
    several (``stages`` = (name, start, end) on the run's clock), and what they say."""
    label = STATE_SERIES[sampler.kind].label
    out: dict[str, Any] = {
        "source": f"{label} GET {sampler.url}",
        "interval_s": sampler.interval_s,
        **_block(sampler.points, sampler.final),
        "failed_scrapes": sampler.failures,
    }
    if sampler.last_error:
        out["last_error"] = sampler.last_error
    if stages and len(stages) > 1:
        per: list[dict[str, Any]] = []
        for name, start, end in stages:
            block = _block([p for p in sampler.points if start <= p.t <= end])
            per.append({"stage": name, **block})
        out["stages"] = per
        out["notes"] = [f"stage {b['stage']}: {n}" for b in per for n in notes_for(b, label)]
    else:
        out["notes"] = notes_for(out, label)
    return out
