"""The gate: judge a candidate (a run, or a group of repeats) against a baseline, metric by metric.

A metric regresses — FAIL — only when the candidate is worse than the baseline by more than the metric's
threshold AND the difference is distinguishable at 95 % (``gate/stats.py``). Worse by more than the threshold
but within the noise is NOT DISTINGUISHABLE; anything else PASS; a side without the figure NOT AVAILABLE,
with the reason. The verdict fails when a metric regressed, or when the two sides are not like for like
(``gate/like.py``) and ``allow_different`` is not given; it lists what changed in the stack
(``gate/stack.py``).

What a metric is judged on (each run's figure through the generic summary API and the cost model):

- throughput: the rate of the headline unit (``summary.rate(summary.headline())``), higher is better;
- cost: the price of the headline unit under one profile (``cost_of_run``): judged as what one currency unit
  buys (the group's price is the reciprocal of its mean yield, as ``cost GROUP`` gives it), shown as the
  price;
- energy: joules per headline unit, from measured energy only (an estimate from a TDP is no measurement);
- error rate: failed ÷ requests, judged in percentage points;
- the latency percentiles of the kind (``gate/figures.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuledger.cost import RunCost
from gpuledger.cost.comparison.groups import RunSet, resolve, resolve_all
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.gate import stats
from gpuledger.gate.figures import SEQUENTIAL, items
from gpuledger.gate.like import like_for_like
from gpuledger.gate.metrics import MetricDef, selected
from gpuledger.gate.model import (
    LEVEL,
    Change,
    GateSide,
    GateVerdict,
    LikeForLike,
    MetricJudgement,
    SideFigure,
    StackDiff,
    Status,
    Threshold,
)
from gpuledger.gate.stack import stack_diff
from gpuledger.records import RequestRecord, RunInfo, RunSummary

Price = Callable[[RunInfo], RunCost]

METHOD = (
    "A metric fails when the candidate is worse by more than its threshold and the difference is "
    "distinguishable at 95 %: Welch's t over the runs of groups (mean ± t·s/√n, Welch–Satterthwaite "
    "degrees of freedom); a single run's interval comes from its own per-request (per-item) figures — the "
    "order statistics of a percentile, Little's law and the delta method for a rate at a fixed concurrency "
    "(else its completions as a Poisson count), Agresti–Caffo for the error rate — and says how precisely "
    "the run measured itself, not how much a repeat would move it (docs/gate.md, 'Statistics')."
)


class GateStore(Protocol):
    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def list_runs(self) -> Sequence[RunInfo]: ...

    def get_requests(self, run_id: str) -> list[RequestRecord]: ...


@dataclass(slots=True)
class Side:
    """One side as the gate reads it: its runs, their costs (or why a run has none), a single run's
    requests."""

    ref: str
    runs: RunSet
    requests: Callable[[str], list[RequestRecord]]
    price: Price | None
    _costs: dict[str, RunCost | str] = field(default_factory=dict)
    _records: dict[str, list[RequestRecord]] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        return len(self.runs.runs) == 1

    def cost(self, run: RunInfo) -> RunCost | str:
        """The run's cost under the gate's profile, or why it has none (a run the cost model refuses)."""
        if run.id not in self._costs:
            if self.price is None:
                self._costs[run.id] = "no cost profile"
            else:
                try:
                    self._costs[run.id] = self.price(run)
                except (InvalidInputError, NotFoundError) as exc:  # the run cannot be priced: its reason
                    self._costs[run.id] = exc.message
        return self._costs[run.id]

    def records(self, run: RunInfo) -> list[RequestRecord]:
        if run.id not in self._records:
            self._records[run.id] = self.requests(run.id)
        return self._records[run.id]

    def describe(self) -> GateSide:
        runs = self.runs.runs
        first = runs[0]
        summary = first.summary
        return GateSide(
            ref=self.ref,
            name=self.runs.name,
            group=self.runs.group,
            runs=[r.id for r in runs],
            labels=sorted({r.label for r in runs if r.label}),
            model=first.model,
            kind=summary.kind if summary is not None else "unsummarised",
            headline=summary.headline() if summary is not None else "",
            status=[r.status for r in runs],
        )


# -------------------------------------------------------------------------------------------------- figures
@dataclass(frozen=True, slots=True)
class Figure:
    """A side's figure of a metric in the space it is judged in (``estimate``; None with ``reason``), its
    unit, and how to show it (``shown``: the judged value → the shown one; the price is the reciprocal of a
    yield)."""

    estimate: stats.Estimate | None
    unit: str
    reason: str | None = None
    shown: Callable[[float], float] = lambda v: v
    n_runs: int = 0


def _missing(unit: str, reason: str, n_runs: int) -> Figure:
    return Figure(None, unit, reason, n_runs=n_runs)


def _per_run(side: Side, unit: str, value: Callable[[RunInfo], float | None | str]) -> Figure:
    """The group's mean of each run's ``value`` (a string: that run's reason for having none)."""
    values: list[float] = []
    reasons: list[tuple[str, str]] = []
    for run in side.runs.runs:
        v = value(run)
        if isinstance(v, str) or v is None:
            reasons.append((run.id, v or "no figure"))
        else:
            values.append(v)
    n = len(side.runs.runs)
    if reasons and len(reasons) == n and len({why for _, why in reasons}) == 1:
        return _missing(unit, f"every run: {reasons[0][1]}", n)
    if reasons:
        shown = "; ".join(f"run {run_id}: {why}" for run_id, why in reasons[:3])
        return _missing(unit, shown + (f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""), n)
    est = stats.group_estimate(values)
    return Figure(est, unit, None if est is not None else "no run has the figure", n_runs=n)


def _headline(summary: RunSummary | None) -> tuple[str, str]:
    """The headline unit and its rate's unit text."""
    if summary is None:
        return "", ""
    head = summary.headline()
    return head, summary.unit(head).rate_text if head else ""


def _spread(side: Side) -> stats.Spread:
    """How precisely a single run measured its rate: Little's law at its fixed concurrency (one item at a time
    for a kind that runs so), else its completions as a Poisson count."""
    run = side.runs.runs[0]
    summary = run.summary
    kind = summary.kind if summary is not None else ""
    swept = summary is not None and bool(summary.stage_summaries())
    concurrency = run.config.fixed_concurrency() or (1 if kind in SEQUENTIAL else None)
    work, durations = items(kind, side.records(run))
    if concurrency is not None and not swept:
        return stats.ratio_spread(work, durations, concurrency)
    return stats.count_spread(len(durations))


def _throughput(side: Side) -> Figure:
    first = side.runs.runs[0]
    head, unit = _headline(first.summary)

    def rate(run: RunInfo) -> float | str | None:
        if run.summary is None:
            return "not summarised"
        if run.summary.headline() != head:
            return f"its headline unit is {run.summary.headline()!r}, not {head!r}"
        return run.summary.rate(head) or f"no {run.summary.unit(head).plural} were measured"

    if not side.single:
        return _per_run(side, unit, rate)
    value = rate(first)
    if not isinstance(value, float):
        return _missing(unit, f"run {first.id}: {value}", 1)
    return Figure(stats.rate_estimate(value, _spread(side)), unit, n_runs=1)


def _cost_unit(cost: RunCost) -> str:
    return cost.price_text()


def _cost(side: Side) -> Figure:
    """Judged as units per currency unit (yield); shown as the price of the headline unit (its quantum ÷
    yield)."""
    first = side.runs.runs[0]
    c0 = side.cost(first)
    if isinstance(c0, str):
        return _missing("", f"run {first.id}: {c0}", len(side.runs.runs))
    unit = _cost_unit(c0)
    quantum = c0.inputs.unit(c0.headline).price_per

    def shown(y: float) -> float:
        return quantum / y if y > 0 else math.inf

    def per_money(run: RunInfo) -> float | str | None:
        c = side.cost(run)
        if isinstance(c, str):
            return c
        if c.headline != c0.headline or c.currency != c0.currency:
            return f"priced {c.price_text()}, not {unit}"
        return c.evaluation.per_money(c.headline)

    if not side.single:
        fig = _per_run(side, unit, per_money)
        return Figure(fig.estimate, unit, fig.reason, shown, fig.n_runs)
    y = per_money(first)
    if not isinstance(y, float) or y <= 0:
        return _missing(unit, f"run {first.id}: {y or 'no price'}", 1)
    return Figure(stats.rate_estimate(y, _spread(side)), unit, None, shown, 1)


def _energy(side: Side) -> Figure:
    first = side.runs.runs[0]
    summary = first.summary
    head = summary.headline() if summary is not None else ""
    info = summary.unit(head) if summary is not None else None
    unit = f"J per {info.singular}" if info is not None else "J"
    key = f"joules_per_{info.singular_key}" if info is not None else ""

    def joules(run: RunInfo) -> float | str | None:
        if not run.telemetry_summary:
            return "no telemetry was recorded (no device measured): no energy"
        c = side.cost(run)
        if isinstance(c, str):
            return f"energy not known: {c}"
        energy = c.energy
        if energy.joules is None:
            return energy.reason or "energy not measured"
        if not energy.measured:
            return f"energy is {energy.how()}, not measured here ({energy.method})"
        value = energy.per(head)
        return value if value is not None else f"no {key}"

    if not side.single:
        return _per_run(side, unit, joules)
    value = joules(first)
    if not isinstance(value, float):
        return _missing(unit, f"run {first.id}: {value}", 1)
    return Figure(stats.rate_estimate(value, _spread(side)), unit, n_runs=1)


def _error_rate(side: Side) -> Figure:
    unit = "share of requests"

    def share(run: RunInfo) -> float | str | None:
        if run.summary is None or run.summary.error_rate is None:
            return "no requests were measured"
        return run.summary.error_rate

    if not side.single:
        return _per_run(side, unit, share)
    run = side.runs.runs[0]
    s = run.summary
    est = stats.share_estimate(s.num_failed, s.num_requests) if s is not None else None
    if est is None:
        return _missing(unit, f"run {run.id}: no requests were measured", 1)
    return Figure(est, unit, n_runs=1)


def _percentile(side: Side, metric: MetricDef) -> Figure:
    fam, pct = metric.family, metric.pct
    assert fam is not None and pct is not None
    first = side.runs.runs[0]

    def stored(run: RunInfo) -> float | str | None:
        s = run.summary
        if s is None:
            return "not summarised"
        if s.kind != fam.kind:
            return f"a {s.kind} run has no {fam.label}"
        value = fam.percentile(s, pct)
        return value if value is not None else f"no {fam.what.split(' ')[0]} had a {fam.label}"

    if not side.single:
        return _per_run(side, fam.unit, stored)
    why = stored(first)
    if isinstance(why, str):
        return _missing(fam.unit, f"run {first.id}: {why}", 1)
    est = stats.quantile_estimate(fam.values(side.records(first)), float(pct[1:]) / 100.0, fam.what)
    if est is None:
        return _missing(fam.unit, f"run {first.id}: its stored requests have no {fam.label}", 1)
    return Figure(est, fam.unit, n_runs=1)


def figure_of(metric: MetricDef, side: Side) -> Figure:
    if metric.key == "throughput":
        return _throughput(side)
    if metric.key == "cost":
        return _cost(side)
    if metric.key == "energy":
        return _energy(side)
    if metric.key == "error_rate":
        return _error_rate(side)
    return _percentile(side, metric)


# -------------------------------------------------------------------------------------------------- judging
def _side_figure(fig: Figure) -> SideFigure:
    est = fig.estimate
    if est is None:
        return SideFigure(value=None, unit=fig.unit, n_runs=fig.n_runs, reason=fig.reason)
    value = fig.shown(est.value)
    se = est.se
    if se is not None and est.value:
        se = abs(value) * se / abs(est.value)  # a reciprocal's se: the same relative se (delta method)
    single = fig.n_runs == 1
    return SideFigure(
        value=value if math.isfinite(value) else None,
        unit=fig.unit,
        n_runs=fig.n_runs,
        n_values=est.n if single else None,
        se=se,
        df=est.df,
        method=est.method,
        reason=est.why,
    )


_RUN_PREFIX = re.compile(r"^(run \S+|every run): ")


def _missing_why(a: Figure, b: Figure) -> str:
    """Why a metric cannot be judged: each side's reason, or the one both sides share, once."""
    missing = [(side, f.reason or "no figure") for side, f in (("baseline", a), ("candidate", b))
               if f.estimate is None]
    if len(missing) == 2 and _RUN_PREFIX.sub("", missing[0][1]) == _RUN_PREFIX.sub("", missing[1][1]):
        return f"both sides: {_RUN_PREFIX.sub('', missing[0][1])}"
    return "; ".join(f"{side}: {why}" for side, why in missing)


def judge_metric(metric: MetricDef, threshold: Threshold, a: Figure, b: Figure) -> MetricJudgement:
    """One metric judged (the module docstring's rule)."""
    base = dict(
        metric=metric.key,
        label=metric.label,
        unit=a.unit or b.unit,
        better=metric.better,
        threshold=threshold,
        baseline=_side_figure(a),
        candidate=_side_figure(b),
    )
    ea, eb = a.estimate, b.estimate
    if ea is None or eb is None:
        return MetricJudgement(status="not_available", why=_missing_why(a, b), **base)
    reciprocal = metric.key == "cost"
    points = threshold.kind == "points"
    if not points and (ea.value <= 0 or eb.value <= 0):
        side = "baseline" if ea.value <= 0 else "candidate"
        return MetricJudgement(
            status="not_available", why=f"the {side}'s figure is 0: no relative change", **base
        )
    diff = stats.difference(ea, eb)
    d, h = diff.value, diff.half_width
    if (
        reciprocal
    ):  # a price: quantum ÷ yield; the yield's interval ends map to the price's the other way round
        rel = ea.value / eb.value - 1.0
        low = None if h is None else ea.value / (ea.value + d + h) - 1.0
        high = None if h is None or ea.value + d - h <= 0 else ea.value / (ea.value + d - h) - 1.0
    elif points:
        rel, low, high = d, (None if h is None else d - h), (None if h is None else d + h)
    else:
        rel = d / ea.value
        low, high = (None, None) if h is None else ((d - h) / ea.value, (d + h) / ea.value)
    worse_by = rel if metric.better == "lower" else -rel
    how = _how(a, b, diff)
    change = Change(
        relative=rel,
        low=low,
        high=high,
        worse_by=worse_by,
        distinguishable=diff.distinguishable,
        df=diff.df,
        method=how,
    )
    allowed = f"the {threshold.pct:g} {'percentage points' if points else '%'} allowed"
    text = change.text(points)
    status: Status
    if worse_by > threshold.fraction:
        if diff.distinguishable:
            status, why = "fail", f"{text}: worse by more than {allowed}, and distinguishable at 95 %"
        elif diff.distinguishable is None:
            missing = next(e.why for e in (ea, eb) if e.se is None)
            status, why = "not_distinguishable", f"{text}: worse by more than {allowed}, but {missing}"
        else:
            status, why = (
                "not_distinguishable",
                f"{text}: worse by more than {allowed}, but not distinguishable at 95 % "
                "(the interval of the difference holds 0)",
            )
    elif worse_by < 0:
        status, why = "pass", f"{text}: better"
    else:
        status, why = "pass", f"{text}: within {allowed}"
    return MetricJudgement(status=status, why=why, change=change, **base)


def _how(a: Figure, b: Figure, diff: stats.Difference) -> str:
    ea, eb = a.estimate, b.estimate
    assert ea is not None and eb is not None
    if diff.half_width is None:
        return f"no interval: baseline {ea.method}; candidate {eb.method}"
    df = "normal quantile" if diff.df is None else f"Welch–Satterthwaite df {diff.df:.3g}"
    if a.n_runs > 1 and b.n_runs > 1:
        lead = f"Welch's t over the runs (n = {a.n_runs} and {b.n_runs}), {df}"
    else:
        lead = f"difference ± t(0.975)·√(se_A² + se_B²), {df}"
    return f"{lead}; baseline: {ea.method}; candidate: {eb.method}"


# -------------------------------------------------------------------------------------------------- verdict
def _headline_text(
    status: str,
    failed: list[MetricJudgement],
    undecided: list[MetricJudgement],
    like: LikeForLike,
    judged: int,
) -> str:
    if status == "fail":
        parts = [
            f"{m.label} {m.change.text(m.threshold.kind == 'points')}" for m in failed if m.change is not None
        ]
        lines = [f"{len(failed)} of {judged} metrics regressed: " + "; ".join(parts)] if failed else []
        if not like.same and not like.allowed:
            lines.append(
                "the runs are not like for like: "
                + like.differences[0]
                + (f" (+{len(like.differences) - 1} more)" if len(like.differences) > 1 else "")
            )
        return "FAIL: " + "; and ".join(lines)
    if status == "not_distinguishable":
        names = ", ".join(m.label for m in undecided)
        return (
            f"NOT DISTINGUISHABLE: no metric regressed, but {names} got worse beyond the threshold within "
            "the noise (repeat each side with bench --repeat N to decide)"
        )
    return f"PASS: no metric regressed beyond its threshold ({judged} judged)"


def judge(
    baseline: Side,
    candidate: Side,
    thresholds: Mapping[str, Threshold],
    *,
    profile: str | None = None,
    allow_different: bool = False,
) -> GateVerdict:
    """The gate's verdict of ``candidate`` against ``baseline`` (module docstring). ``thresholds``: those
    ``--max-regression`` gave (``gate.metrics.parse_thresholds``); ``profile``: the profile's name when the
    sides are priced (then ``cost`` is judged)."""
    first = baseline.runs.runs[0]
    kind = first.summary.kind if first.summary is not None else ""
    metrics = []
    for metric, threshold in selected(kind, dict(thresholds), priced=profile is not None):
        metrics.append(
            judge_metric(metric, threshold, figure_of(metric, baseline), figure_of(metric, candidate))
        )
    names = (f"the baseline {baseline.runs.name}", f"the candidate {candidate.runs.name}")
    stack: StackDiff = stack_diff(baseline.runs.runs, candidate.runs.runs, names)
    like = like_for_like(baseline.runs.runs, candidate.runs.runs, allowed=allow_different)
    failed = [m for m in metrics if m.status == "fail"]
    undecided = [m for m in metrics if m.status == "not_distinguishable"]
    blocked = not like.same and not allow_different
    status = "fail" if failed or blocked else "not_distinguishable" if undecided else "pass"
    judged = sum(1 for m in metrics if m.status != "not_available")
    notes = []
    if baseline.single or candidate.single:
        notes.append(
            "a single run's interval comes from its own per-request (per-item) figures: it says how "
            "precisely the run measured itself, not how much a repeat would move it; repeat each side "
            "(bench --repeat N, gate --run --repeat N) for intervals over runs"
        )
    if any(
        r.summary is not None and r.summary.stage_summaries()
        for r in [*baseline.runs.runs, *candidate.runs.runs]
    ):
        notes.append("a sweep is judged over its whole window (every stage together), its cost at the stage "
                     "cost prices it at (its operating point)")
    if not like.same and allow_different:
        notes.append(
            "the runs are not like for like (--allow-different): the differences are listed, the "
            "verdict does not rest on them"
        )
    return GateVerdict(
        status=status,
        exit_code=1 if status == "fail" else 0,
        headline=_headline_text(status, failed, undecided, like, judged),
        baseline=baseline.describe(),
        candidate=candidate.describe(),
        metrics=metrics,
        stack=stack,
        like_for_like=like,
        profile=profile,
        level=LEVEL,
        method=METHOD,
        notes=notes,
    )


def side(store: GateStore, ref: str, price: Price | None) -> Side:
    """One argument as a side (a run id or prefix, or a group ``g-…``); a run without a summary is refused."""
    found = resolve(store, ref)
    for run in found.runs:
        if run.summary is None:
            raise InvalidInputError(f"run {run.id} has no summary (status {run.status}): nothing to gate")
    return Side(ref, found, store.get_requests, price)


def sides(store: GateStore, baseline: str, candidate: str, price: Price | None) -> tuple[Side, Side]:
    """The two arguments as sides (ids or groups, as ``compare`` takes them); a run given twice is refused."""
    resolve_all(store, [baseline, candidate])
    return side(store, baseline, price), side(store, candidate, price)


def gate(
    store: GateStore,
    baseline: str,
    candidate: str,
    thresholds: Mapping[str, Threshold],
    *,
    price: Price | None = None,
    profile: str | None = None,
    allow_different: bool = False,
) -> GateVerdict:
    """``gpuledger gate BASELINE CANDIDATE``: both read from ``store``."""
    a, b = sides(store, baseline, candidate, price)
    return judge(a, b, thresholds, profile=profile, allow_different=allow_different)


__all__ = [
    "METHOD",
    "GateStore",
    "Price",
    "Side",
    "figure_of",
    "gate",
    "judge",
    "judge_metric",
    "side",
    "sides",
]
