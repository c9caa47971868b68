"""Load patterns: how requests are released.

- fixed concurrency ``C``: ``C`` requests are always in flight; the next is sent when one finishes.
- Poisson rate ``R`` req/s: sends at exponentially distributed gaps (mean ``1/R``, fixed seed), optionally
  capped at ``max_concurrency`` in flight (a send waits for a free slot).
- sweep ``[c1, c2, …]``: one fixed-concurrency stage per value, one after the other.
- trace (``--trace FILE``): the trace's own arrival times, ``--trace-speed X`` times faster, optionally capped
  at ``--concurrency`` in flight (``workload/traces.py`` reads the file; ``bench/trace_drive.py`` sends).

Every stage is bounded by a request count or a duration (no new send after it ends; requests in
flight finish). The patterns are typed in ``records.spec`` (``ConcurrencyLoad``, ``RateLoad``,
``SweepLoad``: what a run stores) and registered here by kind (``LOAD_KINDS``), each with how it reads the
command line's ``--concurrency``, ``--rate`` and ``--sweep``. How a stage's requests are sent is the
runner's (``bench/drive.py``, by the stage's ``RELEASE``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpuledger.errors import UsageError
from gpuledger.records.spec import (
    DEFAULT_CONCURRENCY,
    ConcurrencyLoad,
    ConcurrencyStage,
    RateLoad,
    RateStage,
    SweepLoad,
    TraceLoad,
    TraceStage,
    checked,
)

Load = ConcurrencyLoad | RateLoad | SweepLoad | TraceLoad


@dataclass(frozen=True, slots=True)
class Flags:
    """The load flags as given (``None`` / empty: not given)."""

    concurrency: int | None = None
    rate: float | None = None
    sweep: tuple[int, ...] = ()
    trace: bool = False
    trace_speed: float | None = None


@dataclass(frozen=True, slots=True)
class LoadKind:
    """A load pattern: its name, whether the flags ask for it, and the stored pattern they make."""

    name: str
    asked: Callable[[Flags], bool]
    build: Callable[[Flags], Load]


def _trace(f: Flags) -> Load:
    if f.rate is not None or f.sweep:
        raise UsageError(
            "a trace replays its own arrival times: do not combine --trace with --rate or --sweep"
        )
    speed = f.trace_speed if f.trace_speed is not None else 1.0
    stage = checked(TraceStage, {"stage": "trace" if speed == 1.0 else f"trace x{speed:g}", "speed": speed,
                                 "max_concurrency": f.concurrency})
    return TraceLoad(kind="trace", stages=[stage])


def _sweep(f: Flags) -> Load:
    if f.concurrency is not None or f.rate is not None:
        raise UsageError("--sweep runs its own concurrencies: do not combine it with --concurrency or --rate")
    if any(c < 1 for c in f.sweep):
        raise UsageError("--sweep values must be concurrencies of at least 1")
    stages = [{"stage": f"c={c}", "concurrency": c} for c in f.sweep]
    return checked(SweepLoad, {"kind": "sweep", "stages": stages})


def _rate(f: Flags) -> Load:
    rate = f.rate if f.rate is not None else 0.0
    stage = checked(RateStage, {"stage": f"rate={rate:g}", "rate_requests_per_s": rate,
                                "max_concurrency": f.concurrency})
    return RateLoad(kind="rate", stages=[stage])


def _concurrency(f: Flags) -> Load:
    c = f.concurrency if f.concurrency is not None else DEFAULT_CONCURRENCY
    stage = checked(ConcurrencyStage, {"stage": f"c={c}", "concurrency": c})
    return ConcurrencyLoad(kind="concurrency", stages=[stage])


# Tried in order: the first kind the flags ask for makes the pattern (fixed concurrency when none does).
LOAD_KINDS: dict[str, LoadKind] = {}


def register_load(kind: LoadKind) -> None:
    LOAD_KINDS[kind.name] = kind


register_load(LoadKind("trace", lambda f: f.trace or f.trace_speed is not None, _trace))
register_load(LoadKind("sweep", lambda f: bool(f.sweep), _sweep))
register_load(LoadKind("rate", lambda f: f.rate is not None, _rate))
register_load(LoadKind("concurrency", lambda f: True, _concurrency))


def load_from_flags(concurrency: int | None = None, rate: float | None = None,
                    sweep: tuple[int, ...] = (), *, trace: bool = False,
                    trace_speed: float | None = None) -> Load:
    """The load pattern the command line asks for; ``UsageError`` with the flag's one line otherwise."""
    flags = Flags(concurrency, rate, tuple(sweep), trace, trace_speed)
    kind = next(k for k in LOAD_KINDS.values() if k.asked(flags))
    return kind.build(flags)


def parse_sweep(text: str | None) -> tuple[int, ...]:
    """``"1,4,16,64"`` → ``(1, 4, 16, 64)``; ``UsageError`` on anything else."""
    if not text:
        return ()
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError as exc:
        raise UsageError(f"--sweep takes comma-separated concurrencies like 1,4,16,64, got {text!r}") from exc
    if not values:
        raise UsageError("--sweep needs at least one concurrency")
    return values


def poisson_gaps(rate: float, seed: int) -> Iterator[float]:
    """Seconds between sends: exponentially distributed with mean ``1/rate``, reproducible by seed."""
    rng = random.Random(seed)
    while True:
        yield rng.expovariate(rate)
