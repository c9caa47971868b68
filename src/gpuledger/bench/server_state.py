"""The server's own view of a bench: how long requests waited in its queue, how often it preempted
sequences, and — when asked — how many requests it was running and keeping waiting and how full its KV
cache was, read from its Prometheus ``/metrics``.

They say *why* a run's numbers are what they are: a TTFT that grows with concurrency while requests
wait in the server's queue is queueing, not prefill; a throughput plateau with a full KV cache and
preemptions is memory, not compute.

Measuring must not change what is measured. Rendering ``/metrics`` costs the server CPU in its API
process: on this project's 2-vCPU machine a scrape once a second during the window added ~250-330 ms to
vLLM's mean TTFT and halved its throughput. So the page is read only where the server is idle
— before the window and at the end of each stage (a sweep's stages run one after another, and the
requests of a stage have all finished when it ends): the counters (preemptions; vLLM's queue-time
histogram) are exact from those edges and cost the measured requests nothing. The gauges (running,
waiting, KV cache) exist only during the load: ``--server-metrics-interval S`` samples them, on its own
connection, parsed in a worker thread, and the run records that it did.

The series read per server family are listed in :mod:`gpuledger.engines.server_metrics`, which fetches
and parses the page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer

from gpuledger.engines.server_metrics import (
    STATE_SERIES,
    EngineMetricsError,
    StatePoint,
    fetch_engine_metrics,
    parse_state,
)

if TYPE_CHECKING:
    import aiohttp

SCRAPE_TIMEOUT_S = 5.0
# The KV cache counts as full from this ratio on (schedulers keep a little headroom).
KV_FULL_RATIO = 0.95


@dataclass(slots=True)
class ServerStateSampler:
    """Reads ``url`` before the window (:meth:`check`) and at each stage's end (:meth:`mark`), and, when
    ``interval_s`` is set, every ``interval_s`` during the window (:meth:`start` .. :meth:`stop`)."""

    kind: str
    url: str
    interval_s: float | None = None
    points: list[StatePoint] = field(default_factory=list)  # sampled during the load
    edges: list[StatePoint] = field(default_factory=list)  # before the window, then each stage's end
    failures: int = 0
    last_error: str | None = None
    _session: aiohttp.ClientSession | None = None
    _task: asyncio.Task[None] | None = None
    _t0: float = 0.0

    async def check(self) -> str | None:
        """The first edge, before the window: None when the series are there, else why they are not
        (the session is closed then and nothing more is read)."""
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        try:
            point = await self._scrape()
        except EngineMetricsError as exc:
            await self.close()
            return exc.message
        if point.running is None and point.waiting is None and point.kv_usage_ratio is None:
            await self.close()
            return f"{self.url} has none of {STATE_SERIES[self.kind].label}'s scheduler series"
        self.edges.append(point)
        return None

    async def _scrape(self) -> StatePoint:
        assert self._session is not None
        text = await fetch_engine_metrics(self._session, self.url, SCRAPE_TIMEOUT_S)
        t = perf_counter() - self._t0
        return await asyncio.to_thread(parse_state, text, self.kind, t)

    def start(self, t0: float) -> None:
        """The window begins; ``t0`` is the run's zero on ``perf_counter``'s clock. With an interval,
        sampling the gauges starts now."""
        self._t0 = t0
        if self.edges:
            self.edges[0] = replace(self.edges[0], t=0.0)
        if self._session is not None and self.interval_s:
            self._task = asyncio.get_running_loop().create_task(self._loop(self.interval_s))

    async def _loop(self, interval_s: float) -> None:
        next_at = perf_counter()
        while True:
            try:
                self.points.append(await self._scrape())
            except EngineMetricsError as exc:
                self.failures += 1
                self.last_error = exc.message
            next_at += interval_s
            await asyncio.sleep(max(0.0, next_at - perf_counter()))

    async def mark(self) -> None:
        """A stage ended (its requests have all finished): read the counters at this edge."""
        if self._session is None:
            return
        try:
            self.edges.append(await self._scrape())
        except EngineMetricsError as exc:
            self.failures += 1
            self.last_error = exc.message

    async def stop(self) -> None:
        """The window ended: stop sampling the gauges."""
        if self._task is not None:
            self._task.cancel()
            (outcome,) = await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            if isinstance(outcome, Exception):  # the loop died before the window ended: say so
                self.failures += 1
                self.last_error = f"sampling stopped early: {type(outcome).__name__}: {outcome}"
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


class _Stored(BaseModel):
    """Base of the state's models: their dump is the stored document — the fields that were set (what was
    absent stays absent: a run stored before a figure existed has none), in the order bench has always
    written them (``LEAD`` first, then the figures, then the rest)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    LEAD: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        kept = {k: v for k, v in dumped.items() if k in self.model_fields_set}
        lead = {k: kept.pop(k) for k in self.LEAD if k in kept}
        return {**lead, **kept}


class StateStats(_Stored):
    """A gauge's mean and peak over the scrapes that read it."""

    mean: float
    max: float


class StateFigures(_Stored):
    """What the server's /metrics said over a window (the whole run, or one sweep stage): the gauges' means
    and peaks over the scrapes taken during the load (None: the series is not exported, or not sampled),
    and the counters' increases between the window's idle edges (None: not exported, or a read failed)."""

    scrapes: int = 0
    running: StateStats | None = None
    waiting: StateStats | None = None
    kv_cache_usage_ratio: StateStats | None = None
    preemptions: float | None = None
    queued_requests: float | None = None
    queue_time_ms_mean: float | None = None
    # The share of prompt tokens the prefix cache served; set only where the server counts it (vLLM v1).
    prefix_cache_hit_ratio: float | None = None


class StageState(StateFigures):
    """One sweep stage's figures."""

    LEAD: ClassVar[tuple[str, ...]] = ("stage",)

    stage: str


class ServerState(StateFigures):
    """``RunInfo.server["state"]`` of a run benched with ``--server-metrics``: where it was read, the whole
    window's figures, per sweep stage when there are several, and what they say (``notes``)."""

    LEAD: ClassVar[tuple[str, ...]] = ("source", "interval_s", "edges")

    source: str
    interval_s: float | None = None
    # Reads at the window's idle edges (absent in runs stored before gpuledger read /metrics there).
    edges: int | None = None
    failed_scrapes: int = 0
    gauges_reason: str | None = None
    last_error: str | None = None
    stages: list[StageState] | None = None
    notes: list[str] = []


class StateUnavailable(_Stored):
    """``RunInfo.server["state"]`` of a run asked for the server's /metrics that could not read them."""

    reason: str


def load_state(doc: object) -> ServerState | StateUnavailable | None:
    """A run's stored ``server.state`` typed (None: the run stored none). A document this gpuledger cannot
    read is unavailable, with why."""
    if not isinstance(doc, Mapping) or not doc:
        return None
    try:
        if "reason" in doc and len(doc) == 1:
            return StateUnavailable.model_validate(doc)
        return ServerState.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]["msg"]
        return StateUnavailable(reason=f"the stored server state is not one this gpuledger reads "
                                       f"({exc.error_count()} problem(s), the first: {first})")


def _stats(values: list[float]) -> StateStats | None:
    if not values:
        return None
    return StateStats(mean=sum(values) / len(values), max=max(values))


# A mean time in the queue from this many ms on is worth a reason line.
QUEUE_NOTE_MS = 5.0
GAUGES_NOT_SAMPLED = (
    "not sampled during the window: reading /metrics under load costs the server CPU "
    "(--server-metrics-interval S samples them)"
)


def _gauges(points: list[StatePoint]) -> dict[str, Any]:
    """The gauge fields of ``StateFigures`` over ``points``."""

    def col(name: str) -> list[float]:
        return [v for p in points if (v := getattr(p, name)) is not None]

    return {
        "scrapes": len(points),
        "running": _stats(col("running")),
        "waiting": _stats(col("waiting")),
        "kv_cache_usage_ratio": _stats(col("kv_usage_ratio")),
    }


def _counters(first: StatePoint | None, last: StatePoint | None) -> dict[str, Any]:
    """The counter fields of ``StateFigures`` between two edges: preemptions, requests that left the queue
    and their mean time in it, the prefix cache's hit ratio where the server counts it."""
    def delta(name: str) -> float | None:
        a = getattr(first, name) if first is not None else None
        b = getattr(last, name) if last is not None else None
        return b - a if a is not None and b is not None else None

    count, total = delta("queue_count"), delta("queue_seconds_sum")
    out = {
        "preemptions": delta("preemptions_total"),
        "queued_requests": count,
        "queue_time_ms_mean": total / count * 1000.0 if count and total is not None else None,
    }
    queries, hits = delta("prefix_queries"), delta("prefix_hits")
    if queries and hits is not None:  # the share of prompt tokens the prefix cache served (the verdict)
        out["prefix_cache_hit_ratio"] = hits / queries
    return out


def _window_counters(edges: list[StatePoint], points: list[StatePoint]) -> dict[str, Any]:
    """The counters between the first and last edge; without two edges, between the first and last
    sample taken during the load (when the gauges were sampled)."""
    if len(edges) >= 2:
        return _counters(edges[0], edges[-1])
    return _counters(points[0], points[-1]) if len(points) >= 2 else _counters(None, None)


def notes_for(block: StateFigures, label: str) -> list[str]:
    """What the server's state says about the numbers measured against it."""
    out: list[str] = []
    queue = block.queue_time_ms_mean
    if queue is not None and queue >= QUEUE_NOTE_MS:
        out.append(
            f"requests waited {queue:.0f} ms on average in {label}'s queue before it began on them: that "
            "much of their TTFT is queueing, not prefill"
        )
    waiting = block.waiting
    if waiting is not None and waiting.max:
        out.append(
            f"{label} kept requests waiting in its queue (up to {waiting.max:g}, {waiting.mean:.1f} on "
            "average): it was at capacity for this load, and TTFT includes the queueing time"
        )
    kv = block.kv_cache_usage_ratio
    if kv is not None and kv.max >= KV_FULL_RATIO:
        out.append(
            f"{label}'s KV cache was full (up to {kv.max:.0%}): more concurrency cannot run more "
            "sequences at once on this memory"
        )
    if block.preemptions:
        out.append(
            f"{label} preempted sequences {block.preemptions:g} times (evicted for lack of KV cache and "
            "recomputed): that costs throughput and latency"
        )
    return out


def summarize_state(
    sampler: ServerStateSampler, stages: list[tuple[str, float, float]] | None = None
) -> ServerState:
    """``RunInfo.server["state"]`` (stored as its dump): the counters between the edges, the gauges' means
    and peaks when they were sampled, per sweep stage when there are several (``stages`` = (name, start,
    end) on the run's clock), and what they say."""
    label = STATE_SERIES[sampler.kind].label
    edges = sampler.edges
    figures = {**_gauges(sampler.points), **_window_counters(edges, sampler.points)}
    said: dict[str, Any] = {}
    if not sampler.interval_s:
        said["gauges_reason"] = GAUGES_NOT_SAMPLED
    if sampler.last_error:
        said["last_error"] = sampler.last_error
    whole = {"source": f"{label} GET {sampler.url}", "interval_s": sampler.interval_s, "edges": len(edges),
             **figures, "failed_scrapes": sampler.failures, **said}
    if stages and len(stages) > 1:
        # edges[i] is the end of stage i (edges[0] the window's start) when every read succeeded.
        aligned = len(edges) == len(stages) + 1
        per: list[StageState] = []
        for i, (name, start, end) in enumerate(stages):
            inside = [p for p in sampler.points if start <= p.t <= end]
            per.append(StageState(stage=name, **_gauges(inside),
                                  **_window_counters(edges[i : i + 2] if aligned else [], inside)))
        notes = [f"stage {b.stage}: {n}" for b in per for n in notes_for(b, label)]
        return ServerState(**whole, stages=per, notes=notes)
    return ServerState(**whole, notes=notes_for(StateFigures(**figures), label))
