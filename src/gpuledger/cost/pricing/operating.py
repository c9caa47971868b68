"""Which load of a sweep to price: the operating point.

A ``--sweep`` run measures several loads one after the other (the summary's stages). Its whole-window
throughput blends them, and a cost per unit from that blend describes no load anyone would run. The
cost model therefore prices ONE stage, chosen by a stated rule, and lists what every stage would cost:

1. ``--stage NAME``: that stage.
2. The run has SLOs (``bench --slo``): the stage with the highest headline rate (output tokens/s for an
   inference run) among those where at least ``attainment`` (default 0.99, i.e. the SLO holds at p99) of
   the requests met every SLO. When no stage does, the stage that came closest (highest share meeting
   them, then rate), with a warning.
3. No SLO: the stage with the highest headline rate — the throughput ceiling of this stack — labelled
   as such (its latency is whatever that load caused).

A run without stages (or with one) is priced over its whole window, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuledger.errors import InvalidInputError, NotFoundError, UsageError
from gpuledger.records import RunInfo, RunSummary

DEFAULT_ATTAINMENT = 0.99


@dataclass(frozen=True, slots=True)
class StageFigures:
    """One stage of a sweep: its name, the load it ran at (``{"concurrency": 4}``), its headline rate, the
    share of its requests that met the SLOs and how many succeeded."""

    stage: str
    params: dict[str, float | int | str | bool | None]
    rate: float | None
    slo_met_ratio: float | None
    num_ok: int


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """The stage priced, why, its summary, and every stage's own figures (``stages``)."""

    stage: str
    rule: str
    summary: RunSummary
    stages: list[StageFigures] = field(default_factory=list)
    warning: str | None = None


def _rate(stage: RunSummary, unit: str) -> float:
    v = stage.rate(unit)
    return float(v) if v is not None and math.isfinite(v) else 0.0


def operating_point(
    run: RunInfo, stage: str | None = None, attainment: float = DEFAULT_ATTAINMENT
) -> OperatingPoint | None:
    """The stage of ``run`` to price (None: price the whole window — not a sweep)."""
    if not 0.0 < attainment <= 1.0:
        raise UsageError(f"--slo-attainment must be in (0, 1], got {attainment:g}")
    summary = run.summary
    stages = summary.stage_summaries() if summary is not None else []
    if stage is None and len(stages) < 2:
        return None
    if summary is None or not stages:
        raise UsageError(f"--stage: run {run.id} is not a sweep (it has no stages)")
    unit = summary.headline()
    names = [s.stage_name() for s in stages]
    listing = [
        StageFigures(stage=s.stage_name(), params=s.stage_params(), rate=s.rate(unit),
                     slo_met_ratio=s.slo_attainment(), num_ok=s.num_ok)
        for s in stages
    ]
    if stage is not None:
        if stage not in names:
            raise NotFoundError(f"run {run.id} has no stage {stage!r}; its stages: {', '.join(names)}")
        chosen = stages[names.index(stage)]
        return OperatingPoint(stage, "chosen with --stage", chosen, listing)
    usable = [s for s in stages if _rate(s, unit) > 0]
    info = summary.unit(unit)
    if not usable:
        raise InvalidInputError(f"run {run.id}: no stage of the sweep produced {info.plural}")
    warning = None
    limits = summary.slo_text()
    per_s = info.rate_text
    if limits:
        meeting = [s for s in usable if (s.slo_attainment() or 0.0) >= attainment]
        if meeting:
            chosen = max(meeting, key=lambda s: _rate(s, unit))
            rule = (
                f"the highest {per_s} among the stages where ≥ {attainment:.0%} of requests met the "
                f"SLOs ({limits})"
            )
        else:
            chosen = max(usable, key=lambda s: (s.slo_attainment() or 0.0, _rate(s, unit)))
            rule = f"no stage met the SLOs ({limits}) for ≥ {attainment:.0%} of requests: the closest stage"
            warning = (
                f"no load of the sweep met the SLOs ({limits}) for {attainment:.0%} of its requests; priced "
                f"stage {chosen.stage_name()} ({(chosen.slo_attainment() or 0.0):.0%} met) — this stack does "
                "not serve that latency target at these loads"
            )
    else:
        chosen = max(usable, key=lambda s: _rate(s, unit))
        rule = (
            f"the highest {per_s} of the sweep — the throughput ceiling (no SLO given; bench --slo "
            "prices a latency target)"
        )
    return OperatingPoint(chosen.stage_name(), rule, chosen, listing, warning)
