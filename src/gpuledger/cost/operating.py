"""Which load of a sweep to price: the operating point.

A ``--sweep`` run measures several loads one after the other (``summary.stages``). Its whole-window
throughput blends them, and a cost per token from that blend describes no load anyone would run. The
cost model therefore prices ONE stage, chosen by a stated rule, and lists what every stage would cost:

1. ``--stage NAME``: that stage.
2. The run has SLOs (``bench --slo``): the stage with the highest output tokens/s among those where at least
   ``attainment`` (default 0.99, i.e. the SLO holds at p99) of the requests met every SLO. When no stage
   does, the stage that came closest (highest share meeting them, then throughput), with a warning.
3. No SLO: the stage with the highest output tokens/s — the throughput ceiling of this stack — labelled
   as such (its latency is whatever that load caused).

A run without stages (or with one) is priced over its whole window, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuledger.errors import InvalidInputError, NotFoundError, UsageError
from gpuledger.records import RunInfo

DEFAULT_ATTAINMENT = 0.99


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """The stage priced, why, and every stage's own figures (``stages``)."""

    stage: str
    rule: str
    summary: dict[str, Any]
    stages: list[dict[str, Any]] = field(default_factory=list)
    warning: str | None = None


def _tps(stage: dict[str, Any]) -> float:
    v = stage.get("output_tokens_per_s")
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else 0.0


def _met(stage: dict[str, Any]) -> float | None:
    slo = stage.get("slo")
    v = slo.get("met_ratio") if isinstance(slo, dict) else None
    return float(v) if isinstance(v, int | float) else None


def _limits(run: RunInfo) -> str:
    slo = run.summary.get("slo") or {}
    limits = [f"{k} ≤ {v:g}" for k, v in slo.items() if k.endswith("_ms") and isinstance(v, int | float)]
    return ", ".join(limits)


def operating_point(
    run: RunInfo, stage: str | None = None, attainment: float = DEFAULT_ATTAINMENT
) -> OperatingPoint | None:
    """The stage of ``run`` to price (None: price the whole window — not a sweep)."""
    if not 0.0 < attainment <= 1.0:
        raise UsageError(f"--slo-attainment must be in (0, 1], got {attainment:g}")
    raw = run.summary.get("stages")
    stages = [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []
    if stage is None and len(stages) < 2:
        return None
    if not stages:
        raise UsageError(f"--stage: run {run.id} is not a sweep (it has no stages)")
    names = [str(s.get("stage", "")) for s in stages]
    listing = [
        {
            "stage": str(s.get("stage", "")),
            **{k: s[k] for k in ("concurrency", "rate_requests_per_s", "max_concurrency") if k in s},
            "output_tokens_per_s": s.get("output_tokens_per_s"),
            "slo_met_ratio": _met(s),
            "num_ok": s.get("num_ok"),
        }
        for s in stages
    ]
    if stage is not None:
        if stage not in names:
            raise NotFoundError(f"run {run.id} has no stage {stage!r}; its stages: {', '.join(names)}")
        chosen = stages[names.index(stage)]
        return OperatingPoint(stage, "chosen with --stage", chosen, listing)
    usable = [s for s in stages if _tps(s) > 0]
    if not usable:
        raise InvalidInputError(f"run {run.id}: no stage of the sweep produced output tokens")
    warning = None
    limits = _limits(run)
    if limits:
        meeting = [s for s in usable if (_met(s) or 0.0) >= attainment]
        if meeting:
            chosen = max(meeting, key=_tps)
            rule = (
                f"the highest output tok/s among the stages where ≥ {attainment:.0%} of requests met the "
                f"SLOs ({limits})"
            )
        else:
            chosen = max(usable, key=lambda s: (_met(s) or 0.0, _tps(s)))
            rule = f"no stage met the SLOs ({limits}) for ≥ {attainment:.0%} of requests: the closest stage"
            warning = (
                f"no load of the sweep met the SLOs ({limits}) for {attainment:.0%} of its requests; priced "
                f"stage {chosen.get('stage')} ({(_met(chosen) or 0.0):.0%} met) — this stack does not serve "
                "that latency target at these loads"
            )
    else:
        chosen = max(usable, key=_tps)
        rule = (
            "the highest output tok/s of the sweep — the throughput ceiling (no SLO given; bench --slo "
            "prices a latency target)"
        )
    return OperatingPoint(str(chosen.get("stage", "")), rule, chosen, listing, warning)
