"""Load patterns as a run stores them (``RunInfo.config.load``) and the stages they run, in order.

A stage says how its requests are released (``RELEASE``: the runner's driver for it, ``bench/drive.py``):
``ConcurrencyStage`` (C in flight), ``RateStage`` (Poisson arrivals, optional cap), ``BatchStage`` (whole
batches generated together: the in-process engine; not stored, its spec says it). The stored patterns are
``ConcurrencyLoad``, ``RateLoad``, ``SweepLoad`` and ``TraceLoad`` (a trace's own arrival times, replayed by
``TraceStage``) (``LoadSpec``: told apart by ``kind``); the command line's flags make them in
``workload/load.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from gpuledger.records.specbase import SpecModel, finite_positive


class _Stage(SpecModel):
    """One stage of a run: its name and how its requests are released (``RELEASE``: the driver the
    runner uses, ``bench/drive.py``)."""

    RELEASE: ClassVar[str] = ""

    stage: str = ""

    def in_flight(self) -> int | None:
        """The most requests in flight during the stage (None: unbounded)."""
        return None

    def warmup(self, count: int) -> Stage:
        """The stage the unmeasured warm-up of ``count`` requests runs as."""
        return ConcurrencyStage(stage="warmup", concurrency=min(count, self.in_flight() or count))

    def params(self) -> dict[str, Any]:
        """The stage as the summary and the stored load list it (``{"stage": "c=4", "concurrency": 4}``)."""
        return self.model_dump(mode="json")


class ConcurrencyStage(_Stage):
    """``concurrency`` requests always in flight: the next is sent when one finishes."""

    RELEASE: ClassVar[str] = "concurrency"

    concurrency: int

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")
        return self

    def in_flight(self) -> int | None:
        return self.concurrency


class RateStage(_Stage):
    """Poisson arrivals at ``rate_requests_per_s``, at most ``max_concurrency`` in flight (None: uncapped)."""

    RELEASE: ClassVar[str] = "rate"

    rate_requests_per_s: float
    max_concurrency: int | None = None

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if not finite_positive(self.rate_requests_per_s):
            raise ValueError(
                f"--rate must be a positive number of requests per second, got {self.rate_requests_per_s}"
            )
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.max_concurrency}")
        return self

    def in_flight(self) -> int | None:
        return self.max_concurrency


class BatchStage(_Stage):
    """Whole batches of ``batch_size`` requests generated together (the in-process engine). No new batch
    starts once the last batch's duration says the next would end past ``time_cap_s`` (from the stage's
    start)."""

    RELEASE: ClassVar[str] = "batch"

    batch_size: int = Field(ge=1)
    time_cap_s: float | None = None

    def in_flight(self) -> int | None:
        return self.batch_size

    def warmup(self, count: int) -> Stage:
        return BatchStage(stage="warmup", batch_size=self.batch_size)


TRACE_SPEEDS = (1e-3, 1e6)  # --trace-speed: from 1000 times slower to a million times faster


class TraceStage(_Stage):
    """A trace's arrivals replayed at their recorded times (``bench --trace FILE``), ``speed`` times faster
    (``--trace-speed``), at most ``max_concurrency`` in flight (None: uncapped)."""

    RELEASE: ClassVar[str] = "trace"

    speed: float = 1.0
    max_concurrency: int | None = None

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if not finite_positive(self.speed) or not TRACE_SPEEDS[0] <= self.speed <= TRACE_SPEEDS[1]:
            low, high = TRACE_SPEEDS
            raise ValueError(
                f"--trace-speed must be {low:g} to {high:g} (times the recorded pace), got {self.speed}"
            )
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.max_concurrency}")
        return self

    def in_flight(self) -> int | None:
        return self.max_concurrency


Stage = ConcurrencyStage | RateStage | BatchStage | TraceStage


class _Load(SpecModel):
    """A load pattern as stored: its ``kind`` and the stages it runs, in order."""

    def run_stages(self) -> list[Stage]:
        """The stages, in the order they run."""
        return []

    def max_in_flight(self) -> int | None:
        """The most requests ever in flight (None: unbounded, a rate without a cap)."""
        values = [s.in_flight() for s in self.run_stages()]
        return None if not values or any(v is None for v in values) else max(v for v in values if v)

    def fixed_concurrency(self) -> int | None:
        """The concurrency of a run at one fixed load level, else None (a rate, a sweep)."""
        return None


class ConcurrencyLoad(_Load):
    kind: Literal["concurrency"] = "concurrency"
    stages: list[ConcurrencyStage] = Field(min_length=1, max_length=1)

    def run_stages(self) -> list[Stage]:
        return list(self.stages)

    def fixed_concurrency(self) -> int | None:
        return self.stages[0].concurrency


class RateLoad(_Load):
    kind: Literal["rate"] = "rate"
    stages: list[RateStage] = Field(min_length=1, max_length=1)

    def run_stages(self) -> list[Stage]:
        return list(self.stages)


class SweepLoad(_Load):
    kind: Literal["sweep"] = "sweep"
    stages: list[ConcurrencyStage] = Field(min_length=1)

    def run_stages(self) -> list[Stage]:
        return list(self.stages)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        values = [s.concurrency for s in self.stages]
        if len(set(values)) != len(values):
            raise ValueError("--sweep lists a concurrency twice")
        return self


class TraceLoad(_Load):
    kind: Literal["trace"] = "trace"
    stages: list[TraceStage] = Field(min_length=1, max_length=1)

    def run_stages(self) -> list[Stage]:
        return list(self.stages)


LoadSpec = Annotated[ConcurrencyLoad | RateLoad | SweepLoad | TraceLoad, Field(discriminator="kind")]
