"""How a stage's requests are sent, by the stage's ``RELEASE`` (``records.spec``): registered drivers.

- ``concurrency``: ``C`` workers, each sending its next request when the last one finished.
- ``rate``: Poisson arrivals (``workload.load.poisson_gaps``), at most ``max_concurrency`` in flight.
- ``batch``: whole batches generated together by a ``BatchEngine`` (the in-process engine); no new batch
  once the last one's duration says the next would end past the stage's time cap (said in a note).

A ``Feed`` hands out the stage's requests until its count or deadline is reached, the run stops, or its prompt
source ends; each request's prompt is pulled from the source as the request is about to be sent
(``workload.prompts``), so nothing is built for requests that are never sent. Every driver keeps the tasks
it starts in ``Drive.tasks`` (a signal cancels them) — as many workers as requests can be in flight, never
more than the stage has requests — and hands each finished request to ``Drive.on_result``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, TypeVar

from gpuledger.engines import BatchEngine, Engine, GenRequest, GenResult
from gpuledger.errors import EngineError
from gpuledger.records.spec import BatchStage, ConcurrencyStage, RateStage, Stage
from gpuledger.workload.datasets import DEFAULT_MAX_TOKENS, Prompt
from gpuledger.workload.load import poisson_gaps
from gpuledger.workload.prompts import PromptSource

T = TypeVar("T")


class Feed:
    """Hands out the stage's requests until its count or deadline is reached, the run stops or the prompts
    end. Request indexes count up from ``first_index`` (the warm-up's are negative: they are not measured).
    ``max_tokens`` overrides what each prompt asks for (the in-process warm-up's short answers);
    ``targets`` (index -> prompt tokens asked for) is kept for requests whose prompt asked a length."""

    def __init__(
        self,
        prompts: PromptSource | Iterator[Prompt],
        stage: Stage,
        count: int | None,
        deadline: float | None,
        stop: asyncio.Event,
        first_index: int,
        max_tokens: int | None = None,
        targets: dict[int, int] | None = None,
    ) -> None:
        self._prompts = _Listed(prompts) if isinstance(prompts, Iterator) else prompts
        self._targets = targets
        self._stage = stage
        self._left = count
        self._deadline = deadline
        self._stop = stop
        self._max_tokens = max_tokens
        self.count = count
        self.next_index = first_index

    def expired(self) -> bool:
        return self._stop.is_set() or (self._deadline is not None and perf_counter() >= self._deadline)

    def exhausted(self) -> bool:
        """No request will be handed out any more."""
        return (self._left is not None and self._left <= 0) or self.expired()

    async def pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less: until the deadline, or until the run is stopped."""
        if self._deadline is not None:
            delay = min(delay, self._deadline - perf_counter())
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def next(self) -> GenRequest | None:
        if self.exhausted():
            return None
        if self._left is not None:
            self._left -= 1
        idx = self.next_index
        self.next_index += 1
        p = await self._prompts.next()
        if p is None:  # the source has no more prompts: the stage ends here
            self._left = 0
            return None
        if self._targets is not None and p.target_len is not None:
            self._targets[idx] = p.target_len
        wanted = p.output_len if p.output_len is not None else DEFAULT_MAX_TOKENS
        return GenRequest(
            index=idx,
            prompt=p.text,
            messages=p.messages,
            max_tokens=self._max_tokens if self._max_tokens is not None else wanted,
            fixed_output=p.output_len is not None,
            input_tokens_hint=p.input_len,
            stage=self._stage.stage,
        )


class _Listed:
    """Prompts from an iterator (a list handed to a load process): what a ``PromptSource`` hands out."""

    def __init__(self, prompts: Iterator[Prompt]) -> None:
        self._prompts = prompts

    async def next(self) -> Prompt | None:
        return next(self._prompts, None)


@dataclass(slots=True)
class Drive:
    """What a driver needs: the engine, where results go, the seed of the arrivals, the tasks it starts
    (cancelled on a signal), and the notes it leaves for the run's record."""

    engine: Engine
    on_result: Callable[[GenResult], None]
    seed: int
    tasks: set[asyncio.Task[Any]]
    notes: list[str] = field(default_factory=list)
    # An open-loop load's scheduled send time of each request (index -> perf_counter), until it finishes.
    scheduled: dict[int, float] = field(default_factory=dict)
    # The most requests in flight when the stage sets no cap (a Poisson rate without --concurrency): the
    # connections this process can hold open (bench.bounds.in_flight_budget); None: unbounded.
    in_flight_cap: int | None = None
    # The prompt tokens each measured request asked for (index -> tokens), until it finishes (the runner
    # compares them with the server's count: bench.prepare.PromptCheck).
    targets: dict[int, int] = field(default_factory=dict)

    def start(self, work: Coroutine[Any, Any, Any], inflight: set[asyncio.Task[Any]]) -> None:
        """``work`` as a task the run cancels on a signal (``tasks``) and the driver awaits at its end
        (``inflight``); each set lets it go when it is done."""
        task = asyncio.create_task(work)
        inflight.add(task)
        self.tasks.add(task)
        task.add_done_callback(inflight.discard)
        task.add_done_callback(self.tasks.discard)


async def next_in_slot(sem: asyncio.Semaphore | None, take: Callable[[], Awaitable[T | None]]) -> T | None:
    """A slot under the concurrency cap (``sem``; None: no cap), then the next item ``take`` gives; when there
    is none (the load has ended), the slot is given back."""
    if sem is not None:
        await sem.acquire()
    item = await take()
    if item is None and sem is not None:
        sem.release()
    return item


Driver = Callable[[Drive, Any, Feed], Awaitable[None]]
DRIVERS: dict[str, Driver] = {}


def driver(release: str) -> Callable[[Driver], Driver]:
    def register(fn: Driver) -> Driver:
        DRIVERS[release] = fn
        return fn

    return register


async def drive(ctx: Drive, stage: Stage, feed: Feed) -> None:
    """Run one stage with the driver registered for its release."""
    await DRIVERS[stage.RELEASE](ctx, stage, feed)


@driver(ConcurrencyStage.RELEASE)
async def _closed_loop(ctx: Drive, stage: ConcurrencyStage, feed: Feed) -> None:
    async def worker() -> None:
        while (req := await feed.next()) is not None:
            ctx.on_result(await ctx.engine.generate(req))

    n = stage.concurrency if feed.count is None else max(1, min(stage.concurrency, feed.count))
    workers = [asyncio.create_task(worker()) for _ in range(n)]
    ctx.tasks.update(workers)
    try:
        await asyncio.gather(*workers)
    finally:
        ctx.tasks.difference_update(workers)


@driver(RateStage.RELEASE)
async def _poisson(ctx: Drive, stage: RateStage, feed: Feed) -> None:
    async def one(req: GenRequest, sem: asyncio.Semaphore | None) -> None:
        try:
            ctx.on_result(await ctx.engine.generate(req))
        finally:
            if sem is not None:
                sem.release()

    gaps = poisson_gaps(stage.rate_requests_per_s, ctx.seed)
    cap = stage.max_concurrency or ctx.in_flight_cap  # uncapped: what this process can hold open
    sem = asyncio.Semaphore(cap) if cap else None
    inflight: set[asyncio.Task[Any]] = set()
    next_send = perf_counter()
    first = True
    while True:
        if not first:
            next_send += next(gaps)
            await feed.pause(next_send - perf_counter())
        first = False
        req = await next_in_slot(sem, feed.next)
        if req is None:
            break
        ctx.scheduled[req.index] = next_send
        ctx.start(one(req, sem), inflight)
    if inflight:
        await asyncio.gather(*list(inflight))


@driver(BatchStage.RELEASE)
async def _batches(ctx: Drive, stage: BatchStage, feed: Feed) -> None:
    engine = ctx.engine
    if not isinstance(engine, BatchEngine):
        raise EngineError(f"engine {engine.name} does not generate batches")
    t_stage = perf_counter()
    done = 0
    last_s: float | None = None
    while not feed.exhausted():
        cap = stage.time_cap_s
        if cap is not None and last_s is not None and perf_counter() - t_stage + last_s > cap:
            ctx.notes.append(f"time cap {cap:g} s reached: ran {done} of {feed.count} planned requests")
            break
        reqs: list[GenRequest] = []
        while len(reqs) < stage.batch_size and (req := await feed.next()) is not None:
            reqs.append(req)
        if not reqs:
            break
        task = asyncio.create_task(engine.generate_batch(reqs))
        ctx.tasks.add(task)
        t = perf_counter()
        try:
            results = await task
        finally:
            ctx.tasks.discard(task)
        last_s = perf_counter() - t
        for res in results:
            ctx.on_result(res)
        done += len(results)
