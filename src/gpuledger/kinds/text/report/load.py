"""The load a text-generation run (or a stage of its sweep) ran at, as its report sections read it."""

from __future__ import annotations

import re
from typing import Any

from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import BenchSpec, RunSummary

CONCURRENCY_STAGE = re.compile(r"^c=(\d+)$")


def concurrency_of(stage_name: str, stage: RunSummary | None, spec: BenchSpec) -> float | None:
    """The fixed concurrency of a sweep stage, or of a whole run at one load level (``None`` for a
    request-rate load, which has no fixed concurrency). Bench records it as the stage's ``concurrency``
    parameter and in the run's spec (``BenchSpec.fixed_concurrency``); a published point says its own."""
    if isinstance(stage, PublishedSummary):
        value: Any = stage.concurrency
    else:
        value = stage.stage_params().get("concurrency") if stage is not None else None
    if isinstance(value, int | float):
        return float(value)
    m = CONCURRENCY_STAGE.match(stage_name)
    if m:
        return float(m.group(1))
    if stage_name:
        return None
    fixed = spec.fixed_concurrency()
    return float(fixed) if fixed is not None else None
