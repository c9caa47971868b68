"""``gpuledger report --trend LABEL`` (or ``--model M``): one figure over time across the stored runs, with
each change of the stack marked — "what did the ROCm 6.2 → 6.4 upgrade do to our cost per token" as one
picture.

``build_trend(runs, metric=…)`` makes the typed :class:`Trend` (its ``model_dump(mode="json")`` is the
``--json`` document); ``trend_report(trend)`` lays it out as a :class:`ReportData` for the report's own
renderers (terminal, Markdown, self-contained HTML with a plotly figure).

- The metric: ``throughput`` (the headline rate of the first run's unit), ``cost`` (the price of that unit
  under ``--profile``, else each run's default profile: ``cost``'s rules), ``energy`` (joules per that unit,
  measured energy only), ``error_rate`` (% of requests), or any key figure of the runs by its name in
  lower case with ``_`` for the rest (``ttft_p99``, ``tpot_p50``, ``step_time_p50``, ``s_image_p50``,
  ``mfu``).
  A run without the figure is a point without a value, with the reason.
- The time of a point: when its run started (else when it was stored); the x axis counts minutes, hours or
  days from the first run, whichever the span needs.
- A stack change: a run whose fingerprint differs from the last fingerprint before it (``lock.diff_stacks``:
  driver, CUDA/ROCm/HIP, torch, Python, the engines installed, kernel, GPUs — what matters and what is
  cosmetic, as docs/lock.md classes them), or whose server (kind, version) or model differs from the run
  before it. Each is marked at its first run: a dotted vertical line on the plot, a ◆ in the tables.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.cost import RunCost
from gpuledger.errors import InvalidInputError, NotFoundError, UsageError
from gpuledger.lock import diff_stacks
from gpuledger.records import RunInfo, RunSummary
from gpuledger.report.fmt import num, when
from gpuledger.report.model import Figure, ReportData, RunRef, Section, Series, Table

GENERIC = ("throughput", "cost", "energy", "error_rate")
MARKER = "◆"
CHANGE_GROUP = "stack-change"
Price = Callable[[RunInfo], RunCost]


class TrendModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TrendDrift(TrendModel):
    """One difference between two stacks (``lock --diff``'s key and classes; ``server.version``,
    ``model``)."""

    key: str
    before: str | None
    after: str | None
    matters: bool
    reason: str


class StackChange(TrendModel):
    """The stack changed at run ``run_id`` (point ``index``) from the one of run ``before_run_id``."""

    number: int = Field(ge=1)
    index: int = Field(ge=0)
    run_id: str
    before_run_id: str
    at: datetime | None
    drifts: list[TrendDrift]

    def text(self) -> str:
        """``"torch 2.5.1 → 2.6.0; rocm 6.2 → 6.4"``."""
        return "; ".join(f"{d.key} {d.before or '—'} → {d.after or '—'}" for d in self.drifts)


class TrendPoint(TrendModel):
    """One run on the trend: its figure (None: ``reason`` says why) and the stack it ran on."""

    run_id: str
    label: str
    model: str
    engine: str
    status: str
    at: datetime | None
    value: float | None
    reason: str | None = None
    stack_hash: str | None = None
    server: str | None = None


class Trend(TrendModel):
    """A figure over time: the runs selected (``label``, ``model``), the metric, its points in time order and
    the stack changes between them."""

    label: str | None
    model: str | None
    metric: str
    metric_label: str
    unit: str
    provenance: str
    points: list[TrendPoint]
    changes: list[StackChange]
    notes: list[str] = Field(default_factory=list)


# -------------------------------------------------------------------------------------------------- figures
def slug(label: str) -> str:
    """A key figure's name as ``--metric`` takes it: ``"TPOT p99"`` -> ``"tpot_p99"``."""
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def metric_names(runs: Sequence[RunInfo]) -> list[str]:
    """Every metric ``--metric`` can name for these runs."""
    names = list(GENERIC)
    for run in runs:
        for label, _ in run.summary.key_figures() if run.summary is not None else []:
            if slug(label) not in names:
                names.append(slug(label))
    return names


def _headline(runs: Sequence[RunInfo]) -> tuple[str, RunSummary | None]:
    first = next((r.summary for r in runs if r.summary is not None), None)
    return (first.headline() if first is not None else ""), first


def _value(run: RunInfo, metric: str, head: str, price: Price | None) -> tuple[float | None, str, str | None]:
    """(value, unit, reason) of ``metric`` for ``run``."""
    s = run.summary
    if s is None:
        return None, "", f"not summarised (status {run.status})"
    if metric in ("throughput", "cost", "energy") and s.headline() != head:
        return None, "", f"its headline unit is {s.headline()!r}, not {head!r}"
    info = s.unit(head) if head else None
    if metric == "throughput":
        rate = s.rate(head)
        unit = info.rate_text if info is not None else ""
        return (rate, unit, None) if rate else (None, unit, "no work was measured")
    if metric == "error_rate":
        rate = s.error_rate
        return (
            None if rate is None else rate * 100,
            "% of requests",
            None if rate is not None else "no requests were measured",
        )
    if metric in ("cost", "energy"):
        if price is None:
            return None, "", "no cost profile"
        try:
            cost = price(run)
        except (InvalidInputError, NotFoundError) as exc:  # the run cannot be priced: its reason
            return None, "", exc.message
        if metric == "cost":
            return cost.evaluation.cost_per(head), cost.price_text(head), None
        unit = f"J per {info.singular}" if info is not None else "J"
        energy = cost.energy
        if energy.joules is None:
            return None, unit, energy.reason or "energy not measured"
        if not energy.measured:
            return None, unit, f"energy is {energy.how()}, not measured here ({energy.method})"
        value = energy.per(head)
        return (value, unit, None) if value is not None else (None, unit, f"no joules per {head}")
    for label, q in s.key_figures():
        if slug(label) == metric:
            return q.value, q.unit, q.reason
    return None, "", f"a {s.kind} run has no {metric}"


def _label(metric: str, runs: Sequence[RunInfo], head: str, first: RunSummary | None) -> str:
    if metric == "throughput":
        return "throughput"
    if metric == "cost" and first is not None and head:
        return f"cost {first.unit(head).per_text()}"
    if metric == "energy" and first is not None and head:
        return f"energy per {first.unit(head).singular}"
    if metric == "error_rate":
        return "error rate"
    for run in runs:
        for label, _ in run.summary.key_figures() if run.summary is not None else []:
            if slug(label) == metric:
                return label
    return metric


# -------------------------------------------------------------------------------------------------- stacks
def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    return json.dumps(value, sort_keys=True, default=str)


def _server(run: RunInfo) -> Mapping[str, Any]:
    return run.server if isinstance(run.server, dict) else {}


def _server_text(run: RunInfo) -> str | None:
    s = _server(run)
    kind, version = s.get("kind"), s.get("version")
    if not kind and not version:
        return None
    return " ".join(str(p) for p in (kind, version) if p)


def _drifts(before: RunInfo, after: RunInfo, env_before: RunInfo | None) -> list[TrendDrift]:
    out: list[TrendDrift] = []
    if env_before is not None and not after.environment.empty and not after.environment.error:
        out.extend(
            TrendDrift(
                key=d.key, before=_text(d.locked), after=_text(d.live), matters=d.matters, reason=d.reason
            )
            for d in diff_stacks(env_before.environment.to_dict(), after.environment.to_dict())
        )
    sa, sb = _server(before), _server(after)
    for key in ("kind", "version"):
        a, b = sa.get(key), sb.get(key)
        if a and b and a != b:
            out.append(
                TrendDrift(
                    key=f"server.{key}",
                    before=_text(a),
                    after=_text(b),
                    matters=True,
                    reason=f"the server's {key} changed",
                )
            )
    if before.model != after.model:
        out.append(
            TrendDrift(
                key="model",
                before=before.model or None,
                after=after.model or None,
                matters=True,
                reason="another model",
            )
        )
    return out


def _when(run: RunInfo) -> datetime | None:
    moment = run.started_at or run.created_at
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def build_trend(
    runs: Sequence[RunInfo],
    *,
    metric: str = "throughput",
    label: str | None = None,
    model: str | None = None,
    price: Price | None = None,
    profile: str | None = None,
) -> Trend:
    """The trend of ``metric`` over ``runs`` (module docstring); ``UsageError`` for a metric none of them has,
    ``NotFoundError`` for no runs. ``price`` prices a run (``cost``, ``energy``); ``profile`` names it."""
    if not runs:
        what = " and ".join(
            p
            for p in (
                f"label {label!r}" if label is not None else "",
                f"model {model!r}" if model is not None else "",
            )
            if p
        )
        raise NotFoundError(
            f"no stored runs with {what or 'that selection'}", hint="gpuledger runs lists what is stored"
        )
    names = metric_names(runs)
    if metric not in names:
        raise UsageError(f"--metric {metric!r} is not a figure of these runs; one of: {', '.join(names)}")
    ordered = sorted(runs, key=lambda r: (_when(r) or datetime.min.replace(tzinfo=UTC), r.id))
    head, first = _headline(ordered)
    points: list[TrendPoint] = []
    changes: list[StackChange] = []
    unit = ""
    last_env: RunInfo | None = None
    for i, run in enumerate(ordered):
        value, u, reason = _value(run, metric, head, price)
        unit = unit or u
        points.append(
            TrendPoint(
                run_id=run.id,
                label=run.label,
                model=run.model,
                engine=run.engine,
                status=run.status,
                at=_when(run),
                value=value if value is None or math.isfinite(value) else None,
                reason=reason,
                stack_hash=run.environment.hash,
                server=_server_text(run),
            )
        )
        if i:
            drifts = _drifts(ordered[i - 1], run, last_env)
            if drifts:
                changes.append(
                    StackChange(
                        number=len(changes) + 1,
                        index=i,
                        run_id=run.id,
                        before_run_id=ordered[i - 1].id,
                        at=_when(run),
                        drifts=drifts,
                    )
                )
        if not run.environment.empty and not run.environment.error:
            last_env = run
    notes = []
    missing = [r.id for r in ordered if r.environment.empty or r.environment.error]
    if missing:
        notes.append(
            f"{len(missing)} run(s) have no stack fingerprint ({', '.join(missing[:5])}): a change is "
            "found between the fingerprints there are"
        )
    how = {
        "throughput": "each run's headline rate over its measured window",
        "cost": f"each run priced under {profile or 'its default profile'} (cost's rules)",
        "energy": "each run's measured energy ÷ its work (no estimate)",
        "error_rate": "failed requests ÷ requests of each run",
    }.get(metric, "each run's key figure as stored (its summary)")
    return Trend(
        label=label,
        model=model,
        metric=metric,
        metric_label=_label(metric, ordered, head, first),
        unit=unit,
        provenance=f"{how}; stack changes from the runs' fingerprints (lock --diff's "
        "classes) and the servers they measured",
        points=points,
        changes=changes,
        notes=notes,
    )


# -------------------------------------------------------------------------------------------------- drawing
def _axis(points: Sequence[TrendPoint]) -> tuple[list[float], str]:
    """x of each point and the axis title: minutes, hours or days since the first run (or the run order)."""
    times = [p.at for p in points]
    if any(t is None for t in times) or not times:
        return [float(i + 1) for i in range(len(points))], "run, in the order stored"
    start = min(t for t in times if t is not None)
    seconds = [(t - start).total_seconds() for t in times if t is not None]
    span = max(seconds)
    scale, word = (
        (60.0, "minutes") if span < 2 * 3600 else (3600.0, "hours") if span < 3 * 86400 else (86400.0, "days")
    )
    return [s / scale for s in seconds], f"{word} since {when(start)} (the first run)"


def trend_figure(trend: Trend) -> Figure | None:
    """The trend as a line with a dotted vertical line at each stack change; None without any value."""
    xs, x_title = _axis(trend.points)
    shown = [(x, p.value) for x, p in zip(xs, trend.points, strict=True) if p.value is not None]
    if not shown:
        return None
    ys = [y for _, y in shown]
    low, high = min(ys), max(ys)
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    series = [
        Series(
            name=trend.metric_label, x=tuple(x for x, _ in shown), y=tuple(ys), mode="lines+markers", color=0
        )
    ]
    for c in trend.changes:
        series.append(
            Series(
                name=f"{MARKER} stack change {c.number}: {c.text()}",
                x=(xs[c.index], xs[c.index]),
                y=(min(0.0, low), high + pad),
                mode="lines",
                dash="dot",
                group=CHANGE_GROUP,
                color=1,
            )
        )
    what = " and ".join(
        p
        for p in (
            f"label {trend.label}" if trend.label is not None else "",
            f"model {trend.model}" if trend.model is not None else "",
        )
        if p
    )
    return Figure(
        key="trend",
        title=f"{trend.metric_label} over time ({what})",
        kind="line",
        x_title=x_title,
        y_title=f"{trend.metric_label} ({trend.unit})" if trend.unit else trend.metric_label,
        series=tuple(series),
        provenance=trend.provenance,
    )


def trend_report(trend: Trend, generated_at: datetime | None = None) -> ReportData:
    """The trend as a report: the plot, a table of the points (◆ where the stack changed), the changes."""
    at_change = {c.index: c for c in trend.changes}
    rows = []
    for i, p in enumerate(trend.points):
        change = at_change.get(i)
        rows.append(
            (
                when(p.at),
                p.run_id,
                p.label or "—",
                p.server or "—",
                num(p.value) if p.value is not None else f"n/a: {p.reason or 'no figure'}",
                f"{MARKER} {change.number}: {change.text()}" if change is not None else "",
            )
        )
    column = f"{trend.metric_label} ({trend.unit})" if trend.unit else trend.metric_label
    table = Table(
        key="trend-points",
        title=f"{trend.metric_label}, run by run",
        columns=("when", "run", "label", "server", column, "stack change"),
        rows=tuple(rows),
        provenance=trend.provenance,
    )
    notes = [
        f"{MARKER} {c.number} at run {c.run_id} (after {c.before_run_id}): "
        + "; ".join(
            f"{d.key} {d.before or '—'} → {d.after or '—'} ({'matters' if d.matters else 'cosmetic'}:"
            f" {d.reason})"
            for d in c.drifts
        )
        for c in trend.changes
    ] or ["no stack change between these runs"]
    figure = trend_figure(trend)
    what = " and ".join(
        p
        for p in (
            f"label {trend.label}" if trend.label is not None else "",
            f"model {trend.model}" if trend.model is not None else "",
        )
        if p
    )
    section = Section(
        key="trend",
        title=f"Trend: {trend.metric_label}",
        intro=f"{len(trend.points)} runs with {what}, oldest first; {len(trend.changes)} stack change(s).",
        tables=(table,),
        figures=(figure,) if figure is not None else (),
        not_measured=tuple(f"{p.run_id}: {p.reason}" for p in trend.points if p.value is None),
        notes=tuple([*notes, *trend.notes]),
        terminal_notes=True,
    )
    refs = tuple(
        RunRef(
            id=p.run_id,
            name=p.label or p.run_id,
            label=p.label,
            model=p.model,
            engine=p.engine,
            status=p.status,
            started_at=p.at,
        )
        for p in trend.points
    )
    return ReportData(
        title=f"gpuledger trend: {trend.metric_label} ({what})",
        generated_at=generated_at or datetime.now(UTC),
        runs=refs,
        sections=(section,),
    )


__all__ = [
    "StackChange",
    "Trend",
    "TrendDrift",
    "TrendPoint",
    "build_trend",
    "metric_names",
    "slug",
    "trend_figure",
    "trend_report",
]
