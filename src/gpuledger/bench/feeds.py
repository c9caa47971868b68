"""Which feed and which driver send a stage, by what the prompt source is (``bench.runner`` asks here):

- a dataset of conversations (``--turns``): a ``SessionFeed`` and the session driver (``bench.sessions``);
- a trace (``--trace``): a ``TraceFeed`` for the measured stage, replayed by its registered driver
  (``bench.replay``); the warm-up gets prompts of the trace's lengths that are not its arrivals (so the
  replay starts with the trace's first arrival, and the warm-up fills no cache the replay would find);
- anything else: a plain ``Feed`` and the stage's registered driver (``bench.drive``).
"""

from __future__ import annotations

import asyncio

from gpuledger.bench.drive import Drive, Feed, drive
from gpuledger.bench.replay import TraceFeed
from gpuledger.bench.sessions import SessionFeed, drive_sessions
from gpuledger.records.spec import Stage
from gpuledger.workload.conversations import SessionPrompts
from gpuledger.workload.source import Prompts
from gpuledger.workload.traces import TracePrompts


def feed_for(source: Prompts, stage: Stage, count: int | None, deadline: float | None, stop: asyncio.Event,
             first_index: int, max_tokens: int | None = None, targets: dict[int, int] | None = None,
             *, think_time_s: float = 0.0) -> Feed:
    """The feed of one stage (or of the warm-up: ``first_index`` < 0) over ``source``."""
    if isinstance(source, SessionPrompts):
        return SessionFeed(source, stage, count, deadline, stop, first_index, max_tokens, targets,
                           think_time_s=think_time_s)
    if isinstance(source, TracePrompts):
        if first_index < 0:
            return Feed(source.warmup(count or 0), stage, count, deadline, stop, first_index, max_tokens)
        return TraceFeed(source, stage, count, deadline, stop, first_index, max_tokens, targets)
    return Feed(source, stage, count, deadline, stop, first_index, max_tokens, targets)


async def send_stage(ctx: Drive, stage: Stage, feed: Feed) -> None:
    """Send one stage with the driver its feed needs (the module docstring)."""
    if isinstance(feed, SessionFeed):
        await drive_sessions(ctx, stage, feed)
    else:
        await drive(ctx, stage, feed)


__all__ = ["feed_for", "send_stage"]
