"""Load patterns: how requests are released.

- fixed concurrency ``C``: ``C`` requests are always in flight; the next is sent when one finishes.
- Poisson rate ``R`` req/s: sends at exponentially distributed gaps (mean ``1/R``, fixed seed), optionally
  capped at ``max_concurrency`` in flight (a send waits for a free slot).
- sweep ``[c1, c2, …]``: one fixed-concurrency stage per value, one after the other.

Every stage is bounded by a request count or a duration (no new send after it ends; requests in
flight finish).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from gpuledger.errors import UsageError

DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    concurrency: int | None  # fixed concurrency, or the cap under a rate (None = uncapped)
    rate: float | None = None  # Poisson requests/s

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"stage": self.name}
        if self.rate is not None:
            out["rate_requests_per_s"] = self.rate
            out["max_concurrency"] = self.concurrency
        else:
            out["concurrency"] = self.concurrency
        return out


@dataclass(frozen=True, slots=True)
class LoadPattern:
    concurrency: int | None = None
    rate: float | None = None
    sweep: tuple[int, ...] = ()

    def validate(self) -> None:
        if self.sweep and (self.concurrency is not None or self.rate is not None):
            raise UsageError(
                "--sweep runs its own concurrencies: do not combine it with --concurrency or --rate"
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.rate is not None and (not math.isfinite(self.rate) or self.rate <= 0):
            raise UsageError(f"--rate must be a positive number of requests per second, got {self.rate}")
        if any(c < 1 for c in self.sweep):
            raise UsageError("--sweep values must be concurrencies of at least 1")
        if len(set(self.sweep)) != len(self.sweep):
            raise UsageError("--sweep lists a concurrency twice")

    @property
    def kind(self) -> str:
        return "sweep" if self.sweep else ("rate" if self.rate is not None else "concurrency")

    def stages(self) -> list[Stage]:
        if self.sweep:
            return [Stage(f"c={c}", c) for c in self.sweep]
        if self.rate is not None:
            return [Stage(f"rate={self.rate:g}", self.concurrency, self.rate)]
        c = self.concurrency or DEFAULT_CONCURRENCY
        return [Stage(f"c={c}", c)]

    def max_in_flight(self) -> int | None:
        """The most requests ever in flight (``None`` = unbounded: a rate without a cap)."""
        if self.sweep:
            return max(self.sweep)
        if self.rate is not None:
            return self.concurrency
        return self.concurrency or DEFAULT_CONCURRENCY

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "stages": [s.params() for s in self.stages()]}


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
