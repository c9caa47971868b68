"""Sessions: multi-turn conversations sent turn by turn (``--turns``), sessions the unit of concurrency.

A session sends its first turn; when the answer has arrived (and ``--think-time`` has passed) it sends the
next, the request carrying the session's system messages, every earlier turn and the server's reply to it as
the server returned it (the answer's text, reasoning left out), then the new turn. A turn that fails ends
its session (the next turn would need its answer). On the completions endpoint the history is the turns'
texts joined by newlines.

How sessions are released, by the stage:

- ``concurrency C``: C sessions at once; a new one starts when one ends;
- ``rate R``: sessions start at Poisson arrivals of R per second (seeded), at most ``--concurrency`` at once.

``--num-requests`` and ``--duration`` count and time requests (turns), as for any run. A session takes its
turns from the count when it starts (the last one to start may get fewer than it has; a session that breaks
gives back the turns it will not send), so the sessions under way when the count is used up still send all
theirs; once the time is up no turn is sent, and the sessions still going end there (the summary counts the
sessions that sent all their turns). Each request's record says its session (the index of the session's
first request), turn (from 1), the turns the session has, and the dataset conversation it replays
(``server_timings["workload"]``, read by ``bench.workload_metrics``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from time import perf_counter
from typing import Any

from gpuledger.bench.drive import Drive, Feed, next_in_slot
from gpuledger.engines import GenRequest, GenResult
from gpuledger.errors import EngineError
from gpuledger.kinds.text.summary import WORKLOAD_KEY
from gpuledger.records.spec import ConcurrencyStage, RateStage, Stage
from gpuledger.workload.conversations import SessionPrompts
from gpuledger.workload.datasets import DEFAULT_MAX_TOKENS, Prompt, Session
from gpuledger.workload.load import poisson_gaps


def annotate(res: GenResult, **facts: Any) -> None:
    """Add what the load knows about a request to its stored record (``server_timings["workload"]``)."""
    timings = dict(res.server_timings or {})
    timings[WORKLOAD_KEY] = {**timings.get(WORKLOAD_KEY, {}), **facts}
    res.server_timings = timings


class SessionFeed(Feed):
    """A ``Feed`` that hands out sessions, and each session's turns as requests (the stage's count and
    deadline bound the turns). ``think_time_s``: the pause between an answer and the next turn."""

    def __init__(self, prompts: SessionPrompts | Iterator[Prompt], stage: Stage, count: int | None,
                 deadline: float | None, stop: asyncio.Event, first_index: int, max_tokens: int | None = None,
                 targets: dict[int, int] | None = None, *, think_time_s: float = 0.0) -> None:
        super().__init__(prompts, stage, count, deadline, stop, first_index, max_tokens, targets)
        self.sent = prompts.sent if isinstance(prompts, SessionPrompts) else None
        self.think_time_s = think_time_s
        self.sessions = 0

    async def next_session(self) -> tuple[Session, int] | None:
        """The next session to start and how many of its turns it may send (taken from the stage's count);
        None: no more turns will be sent, or the dataset is not sessions."""
        if self.exhausted():
            return None
        p = await self._prompts.next()
        if p is None or p.session is None:
            return None
        turns = len(p.session.turns)
        if self._left is not None:
            turns = min(turns, self._left)
            self._left -= turns
        self.sessions += 1
        return p.session, turns

    def give_back(self, turns: int) -> None:
        """Turns a session took and will not send (a turn failed): back to the stage's count."""
        if self._left is not None:
            self._left += turns

    def turn(self, session: Session, t: int, history: list[dict[str, str]]) -> GenRequest | None:
        """Turn ``t`` of ``session`` after ``history`` as a request (None: the run stopped or the time is
        up)."""
        if self.expired():
            return None
        turn = session.turns[t]
        messages = [{"role": r, "content": c} for r, c in session.system]
        messages += [*history, {"role": "user", "content": turn.text}]
        if self.sent is not None:
            self.sent(messages)
        idx = self.next_index
        self.next_index += 1
        wanted = turn.output_len if turn.output_len is not None else DEFAULT_MAX_TOKENS
        return GenRequest(
            index=idx,
            prompt=turn.text,
            messages=messages,
            max_tokens=self._max_tokens if self._max_tokens is not None else wanted,
            fixed_output=turn.output_len is not None,
            stage=self._stage.stage,
        )


async def _one(ctx: Drive, feed: SessionFeed, started: tuple[Session, int]) -> None:
    """Send the turns a session may send, one after the other (the module docstring)."""
    session, allowed = started
    history: list[dict[str, str]] = []
    first: int | None = None
    for t in range(allowed):
        req = feed.turn(session, t, history)
        if req is None:
            return
        first = req.index if first is None else first
        res = await ctx.engine.generate(req)
        annotate(res, session=first, turn=t + 1, turns=len(session.turns), conversation=session.conversation)
        ctx.on_result(res)
        if res.error is not None:
            feed.give_back(allowed - t - 1)
            return
        history += [{"role": "user", "content": session.turns[t].text},
                    {"role": "assistant", "content": res.text or ""}]
        if feed.think_time_s and t + 1 < allowed:
            await feed.pause(feed.think_time_s)


async def drive_sessions(ctx: Drive, stage: Stage, feed: SessionFeed) -> None:
    """Run one stage of sessions (concurrency or rate release; the module docstring)."""
    if isinstance(stage, ConcurrencyStage):
        async def worker() -> None:
            while (session := await feed.next_session()) is not None:
                await _one(ctx, feed, session)

        n = stage.concurrency if feed.count is None else max(1, min(stage.concurrency, feed.count))
        workers = [asyncio.create_task(worker()) for _ in range(n)]
        ctx.tasks.update(workers)
        try:
            await asyncio.gather(*workers)
        finally:
            ctx.tasks.difference_update(workers)
        return
    if not isinstance(stage, RateStage):
        raise EngineError(f"sessions are released by concurrency or rate, not by {stage.RELEASE}")
    await _arrivals(ctx, stage, feed)


async def _arrivals(ctx: Drive, stage: RateStage, feed: SessionFeed) -> None:
    """Sessions starting at Poisson arrivals, at most the stage's cap (or what this process holds) at once."""
    gaps = poisson_gaps(stage.rate_requests_per_s, ctx.seed)
    cap = stage.max_concurrency or ctx.in_flight_cap
    sem = asyncio.Semaphore(cap) if cap else None
    running: set[asyncio.Task[None]] = set()

    async def run(session: tuple[Session, int]) -> None:
        try:
            await _one(ctx, feed, session)
        finally:
            if sem is not None:
                sem.release()

    # Arrivals on an absolute schedule, as the Poisson driver sends requests (bench.drive): a session that
    # waited for a slot or its prompt does not push every later arrival back (the rate would fall short).
    next_start = perf_counter()
    first = True
    while True:
        if not first:
            next_start += next(gaps)
            await feed.pause(next_start - perf_counter())
        first = False
        session = await next_in_slot(sem, feed.next_session)
        if session is None:
            break
        ctx.start(run(session), running)
    if running:
        await asyncio.gather(*list(running))


__all__ = ["SessionFeed", "annotate", "drive_sessions"]
