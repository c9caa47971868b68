"""What the summaries of item-by-item runs compute alike (an image run's requests, a training run's steps:
``kinds/image/summary.py``, ``kinds/train/summary.py``): the measured window, the failures, a rate over the
window, the per-item latency blocks, the timing an engine keeps in a request record, and the percentile
figures of ``key_figures``. Pure functions over stored records.

- the window runs from the first item sent to the last one finished (failed ones included: they held the
  engine too); a rate is a count ÷ the window, None for an empty window;
- a latency block is the mean, the percentiles (linear interpolation), the population std, the min and the
  max of the values (``Latency``; every figure None without values);
- a failure counts under its kind (the error's text up to its first ``:``); the first ``MAX_EXAMPLES`` are
  kept as examples, each error cut at ``MAX_ERROR_CHARS``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from gpuledger.quantity import Quantity
from gpuledger.records.request import RequestRecord
from gpuledger.records.summary import ErrorExample, Strict, measured

MAX_EXAMPLES = 10
MAX_ERROR_CHARS = 500

T = TypeVar("T", bound=BaseModel)

class Latency(Strict):
    """One latency metric over the successful requests, in milliseconds (``n`` values; every figure
    ``None`` when there are none). Percentiles interpolate linearly; ``std`` is the population std."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    n: int = Field(default=0, ge=0)

    def get(self, name: str) -> float | None:
        value = getattr(self, name, None)
        return float(value) if isinstance(value, int | float) else None



def timing_in(record: RequestRecord, key: str, model: type[T]) -> T | None:
    """What the engine kept under ``server_timings[key]``, or None when the record has none (or a malformed
    one)."""
    raw = (record.server_timings or {}).get(key)
    if not isinstance(raw, dict):
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def window_of(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first item sent to the last one finished (an unfinished one: its send); ``records``
    is not empty."""
    start = min(r.t_send for r in records)
    end = max((r.t_end if r.t_end is not None else r.t_send) for r in records)
    return max(end - start, 0.0)


def per_window(count: float, window: float) -> float | None:
    """``count`` per second of the window; None when the window is empty."""
    return count / window if window > 0 else None


def latency_of(values: Sequence[float]) -> Latency:
    """Mean, percentiles (linear interpolation), population std, min and max of ``values``."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return Latency(n=0)

    def pct(q: float) -> float:
        pos = (n - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    mean = math.fsum(v) / n
    return Latency(
        mean=mean,
        p50=pct(50),
        p90=pct(90),
        p95=pct(95),
        p99=pct(99),
        std=math.sqrt(math.fsum((x - mean) ** 2 for x in v) / n),
        min=v[0],
        max=v[-1],
        n=n,
    )


def error_kind(error: str) -> str:
    """The kind a failure counts under: its text up to the first ``:`` (80 characters at most)."""
    return error.split(":", 1)[0].strip()[:80] or "error"


def item_counts(records: Sequence[RequestRecord], window: float) -> dict[str, Any]:
    """The ``RunSummary`` fields of a run of ``records`` (not empty) over ``window``: the items attempted,
    finished and failed, the error rate, the failures by kind and the first of them as examples."""
    failed = [r for r in records if not r.ok]
    errors = Counter(error_kind(r.error or "") for r in failed)
    examples = [
        ErrorExample(index=r.index, error=(r.error or "")[:MAX_ERROR_CHARS]) for r in failed[:MAX_EXAMPLES]
    ]
    return {
        "window_s": window,
        "num_requests": len(records),
        "num_ok": len(records) - len(failed),
        "num_failed": len(failed),
        "error_rate": len(failed) / len(records),
        "errors": dict(errors) if errors else None,
        "error_examples": examples or None,
    }


def percentile_figures(
    label: str, block: Latency, unit: str, method: str, missing: str
) -> list[tuple[str, Quantity]]:
    """``(f"{label} p50", figure)`` and the same for p99: measured over the block's ``n`` items (``method``
    says what they are), or missing with the reason ``missing``."""
    return [(f"{label} {pct}", measured(block.get(pct), unit, method, missing)) for pct in ("p50", "p99")]
