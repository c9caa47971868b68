"""The figures of a kind of run the gate judges beyond the generic ones (throughput, cost, energy, error
rate): the latency percentiles of text generation (TTFT, TPOT, ITL, E2E), the step time of training, the
seconds per image of image generation — each as a run's summary stores it and as its per-request (per-item)
values.

This is the one module of the gate that knows the workload kinds' own records (their modules move to one
package per kind: the imports below are the only lines that follow them). Everything else in the gate asks a
run's summary through the generic API (``work``, ``headline``, ``rate``, ``unit``, ``kind``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuledger.bench.metrics import e2e_s, itl_s, tpot_s, ttft_s
from gpuledger.kinds.image.summary import timing_of
from gpuledger.kinds.train.summary import step_of
from gpuledger.records import RequestRecord, RunSummary

TEXT = "text_generation"
TRAINING = "training"
IMAGE = "image_generation"


def _text(per: Callable[[RequestRecord], float | None]) -> Callable[[Sequence[RequestRecord]], list[float]]:
    def values(records: Sequence[RequestRecord]) -> list[float]:
        return [v * 1e3 for r in records if r.ok and (v := per(r)) is not None]

    return values


def _itl(records: Sequence[RequestRecord]) -> list[float]:
    return [v * 1e3 for r in records if r.ok for v in itl_s(r)]


def _step_times(records: Sequence[RequestRecord]) -> list[float]:
    return [s.step_s for r in records if r.ok and (s := step_of(r)) is not None]


def _seconds_per_image(records: Sequence[RequestRecord]) -> list[float]:
    out: list[float] = []
    for r in records:
        t = timing_of(r) if r.ok else None
        if t is not None and t.images:
            end = r.t_end if r.t_end is not None else r.t_send
            out.append(max(end - r.t_send, 0.0) / t.images)
    return out


@dataclass(frozen=True, slots=True)
class Family:
    """A latency figure of one kind of run: its metric key prefix (``tpot``), label, unit, the kind whose
    summaries have it, the summary's field holding its percentiles, what one value is, and the values."""

    key: str
    label: str
    unit: str
    kind: str
    field: str
    what: str
    values: Callable[[Sequence[RequestRecord]], list[float]]

    def percentile(self, summary: RunSummary, pct: str) -> float | None:
        """The run's stored percentile ``pct`` ("p99") of this figure (None: the run has none)."""
        block = getattr(summary, self.field, None)
        get = getattr(block, "get", None)
        value = get(pct) if callable(get) else None
        return float(value) if isinstance(value, int | float) else None


FAMILIES: tuple[Family, ...] = (
    Family("ttft", "TTFT", "ms", TEXT, "ttft_ms", "requests", _text(ttft_s)),
    Family("tpot", "TPOT", "ms", TEXT, "tpot_ms", "requests", _text(tpot_s)),
    Family(
        "itl",
        "ITL",
        "ms",
        TEXT,
        "itl_ms",
        "token gaps (the gaps of one request are not independent: the interval is narrower than a repeat's)",
        _itl,
    ),
    Family("e2e", "E2E", "ms", TEXT, "e2e_ms", "requests", _text(e2e_s)),
    Family("step_time", "step time", "s", TRAINING, "step_time_s", "steps", _step_times),
    Family("image_s", "seconds per image", "s", IMAGE, "seconds_per_image", "requests", _seconds_per_image),
)


# Kinds whose items run one after the other (a training run's steps): a closed loop of one.
SEQUENTIAL = (TRAINING,)


def _item_work(kind: str, record: RequestRecord) -> float | None:
    """What one finished item did in its run's headline unit, where the kind's record says it."""
    if kind == TEXT:
        return float(record.output_tokens) if record.output_tokens is not None else None
    if kind == TRAINING:
        step = step_of(record)
        return float(step.tokens) if step is not None else None
    if kind == IMAGE:
        timing = timing_of(record)
        return float(timing.images) if timing is not None else None
    return None


def items(kind: str, records: Sequence[RequestRecord]) -> tuple[list[float], list[float]]:
    """(work, duration) of each finished item of a run of ``kind``: its work in the headline unit (1 each
    where the kind's record does not say) and the seconds from its send to its end."""
    work: list[float] = []
    durations: list[float] = []
    for r in records:
        end = r.t_end if r.t_end is not None else (r.chunk_times[-1] if r.chunk_times else None)
        if not r.ok or end is None:
            continue
        w = _item_work(kind, r)
        work.append(1.0 if w is None else w)
        durations.append(max(end - r.t_send, 0.0))
    return work, durations


__all__ = ["FAMILIES", "IMAGE", "SEQUENTIAL", "TEXT", "TRAINING", "Family", "items"]
