"""Trace replay: each of a trace's arrivals sent at its recorded time (``--trace FILE``), ``--trace-speed X``
times faster, from the stage's start (the trace's first arrival is sent at once).

The prompt of an arrival is made ahead of its time (the trace's source makes ``LOOKAHEAD`` ahead), so its
send waits for the clock only: the driver sleeps until ``SPIN_S`` before the arrival, then yields to the
event loop until it is due. A stage capped with ``--concurrency`` (or by the connections this process can
hold) makes an arrival wait for a free slot, and that wait is its lateness. Every request's scheduled time
is kept (``Drive.scheduled``: the run writer measures lateness — actual − scheduled send time — into
``client.send_schedule``, which the verdict's ``send_schedule`` check reads, as for Poisson arrivals), and
its record carries ``scheduled_s`` (seconds after the stage's start) and ``lag_s``
(``server_timings["workload"]``).
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import Any

from gpuledger.bench.drive import Drive, Feed, driver, next_in_slot
from gpuledger.bench.sessions import annotate
from gpuledger.engines import GenRequest
from gpuledger.errors import EngineError
from gpuledger.records.spec import TraceStage
from gpuledger.workload.traces import TracePrompts

SPIN_S = 0.002  # the last stretch before an arrival is waited for by yielding, not by a timer


class TraceFeed(Feed):
    """A ``Feed`` over a trace's prompts: ``next_arrival`` says when the next one is due."""

    def __init__(self, prompts: TracePrompts, *args: Any, **kwargs: Any) -> None:
        super().__init__(prompts, *args, **kwargs)
        self.trace = prompts

    def next_arrival(self) -> float | None:
        return None if self.exhausted() else self.trace.next_arrival()


async def _until(feed: Feed, due: float) -> None:
    """Wait until ``due`` (``perf_counter``), or until the run stops or the stage's deadline passes."""
    delay = due - perf_counter() - SPIN_S
    if delay > 0:
        await feed.pause(delay)
    while not feed.expired() and perf_counter() < due:
        await asyncio.sleep(0)


@driver(TraceStage.RELEASE)
async def _replay(ctx: Drive, stage: TraceStage, feed: Feed) -> None:
    if not isinstance(feed, TraceFeed):
        raise EngineError("a trace stage replays a trace's prompts (--trace FILE)")
    cap = stage.max_concurrency or ctx.in_flight_cap
    sem = asyncio.Semaphore(cap) if cap else None
    inflight: set[asyncio.Task[Any]] = set()

    async def one(req: GenRequest, offset: float, due: float) -> None:
        try:
            res = await ctx.engine.generate(req)
            annotate(res, scheduled_s=offset, lag_s=res.t_send - due)
            ctx.on_result(res)
        finally:
            if sem is not None:
                sem.release()

    start = perf_counter()
    while (arrival := feed.next_arrival()) is not None:
        offset = arrival / stage.speed
        due = start + offset
        await _until(feed, due)
        req = await next_in_slot(sem, feed.next)
        if req is None:
            break
        ctx.scheduled[req.index] = due
        ctx.start(one(req, offset, due), inflight)
    if inflight:
        await asyncio.gather(*list(inflight))


__all__ = ["SPIN_S", "TraceFeed"]
