"""A benchmark matrix's report as a report page (``matrix_page``): the matrix, the cheapest target per load
level, every cell, each target's Pareto fronts (plotted in the HTML) and, with ``detail``, every cell ×
repeat — a :class:`~gpuledger.report.model.ReportData` for the report's own renderers (the terminal, Markdown
and the self-contained HTML file). It lays out a :class:`~gpuledger.report.matrix_model.MatrixReport`, which
``gpuledger.report.matrix`` builds from the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gpuledger.cost.comparison.groups import Interval, fmt_with_interval
from gpuledger.report import fmt
from gpuledger.report.matrix_model import TABLE_FIGURES, MatrixCell, MatrixReport
from gpuledger.report.model import Figure, ReportData, Section, Series, Table

__all__ = ["figure_text", "matrix_page"]


def figure_text(value: Interval | None) -> str:
    """A mean with its interval (``812 ± 14``), ``n/a`` when no complete run gave the figure."""
    if value is None:
        return "n/a"
    return fmt_with_interval(value.mean, value.half_width)


def _overview(report: MatrixReport) -> Section:
    m = report.matrix
    name = report.matrix.name
    rows = [
        ("matrix", m.id),
        *((("plan", name),) if name else ()),
        ("status", m.status),
        ("started", fmt.when(m.created_at)),
        ("last change", fmt.when(m.updated_at)),
        ("runs", ", ".join(f"{n} {s}" for s, n in report.counts.items()) or "none planned"),
        ("targets", ", ".join(report.targets()) or "none"),
        ("load levels", ", ".join(dict.fromkeys(c.load_level for c in report.cells)) or "none"),
    ]
    return Section(
        key="matrix",
        title="The matrix",
        tables=(
            Table(
                key="matrix",
                title="Matrix",
                columns=("what", "value"),
                rows=tuple(rows),
                provenance=f"the store's matrix and its cells (plan digest {m.plan_digest})",
                align_numbers=False,
            ),
        ),
    )


def _cheapest_section(report: MatrixReport, unit: str | None) -> Section:
    rows = []
    for entry in report.cheapest:
        if entry.cheapest is not None and entry.cost is not None:
            others = "; ".join(f"{o.target} {o.times:.2f}×" for o in entry.others or ())
            if entry.not_priced:
                others = "; ".join(p for p in (others, "not priced: " + ", ".join(entry.not_priced)) if p)
            cost = f"{entry.cost:.4g}" + ("" if unit else f" {entry.unit}")
            rows.append((entry.load_level, entry.cheapest, cost, others or "the only target priced"))
        else:
            rows.append((entry.load_level, fmt.MISSING, "n/a", entry.note or "not priced"))
    return Section(
        key="cheapest",
        title="Cheapest target per load level",
        tables=(
            Table(
                key="cheapest",
                title=f"Cheapest target per load level ({unit or 'each cost in its unit'})",
                columns=("load level", "cheapest", "cost", "the others cost"),
                rows=tuple(rows),
                provenance="the lowest mean cost per unit of work of the level's targets (each cell priced "
                "by gpuledger.cost at its target's profile, over its complete repeats); the others as "
                "multiples of it; costs in different currencies are not compared",
            ),
        ),
    )


def _cells_section(report: MatrixReport, unit: str | None) -> Section:
    rows = []
    for c in report.cells:
        if c.cost is not None:
            cost = figure_text(c.cost.interval) + ("" if unit else f" {c.cost.unit}")
        else:
            cost = "n/a" if c.cost_note is None else f"n/a: {c.cost_note}"
        rows.append(
            (
                c.key,
                f"{c.complete}/{len(c.repeats)}",
                *(figure_text(c.figures.get(f.key)) for f in TABLE_FIGURES),
                fmt.num(c.tokens_per_s_per_user) if c.tokens_per_s_per_user is not None else "n/a",
                cost,
            )
        )
    return Section(
        key="cells",
        title="Every cell",
        tables=(
            Table(
                key="cells",
                title="Every cell (mean of its complete repeats ± 95 % interval; latencies in ms; --json has "
                "every percentile)",
                columns=(
                    "cell",
                    "runs ok",
                    *(f.label for f in TABLE_FIGURES),
                    "tok/s per user",
                    f"cost ({unit or 'in its unit'})",
                ),
                rows=tuple(rows),
                provenance="each run's summary (gpuledger.bench.metrics); the mean over the cell's complete "
                "repeats with the 95 % Student-t interval (n − 1); tok/s per user = 1000 ÷ the mean TPOT "
                "p50; cost: gpuledger.cost at the target's profile",
            ),
        ),
    )


def _front_series(
    target: str, colour: int, points: list[tuple[str, float, float]], front: Sequence[str]
) -> tuple[Series, ...]:
    """A target's cells as markers, and the line through its front (sorted along x)."""
    on_front = sorted((x, y) for key, x, y in points if key in front)
    cells = Series(
        name=target,
        x=tuple(x for _, x, _ in points),
        y=tuple(y for _, _, y in points),
        mode="markers",
        group=target,
        color=colour,
    )
    line = Series(
        name=f"{target}: Pareto front",
        x=tuple(x for x, _ in on_front),
        y=tuple(y for _, y in on_front),
        mode="lines",
        dash="dot",
        group=target,
        color=colour,
    )
    return (cells, line) if on_front else (cells,)


def _figure(
    key: str,
    title: str,
    x_title: str,
    y_title: str,
    provenance: str,
    targets: Sequence[str],
    points: Sequence[tuple[MatrixCell, float, float]],
    fronts: dict[str, tuple[str, ...]],
) -> Figure:
    """A scatter of the cells at (x, y), one colour per target, each target's front joined by a line."""
    series: list[Series] = []
    for i, t in enumerate(targets):
        own = [(c.key, x, y) for c, x, y in points if c.target == t]
        if own:
            series.extend(_front_series(t, i, own, fronts.get(t, ())))
    return Figure(
        key=key,
        title=title,
        kind="scatter",
        x_title=x_title,
        y_title=y_title,
        series=tuple(series),
        provenance=provenance,
    )


def _pareto_section(report: MatrixReport, unit: str | None) -> Section:
    targets = report.targets()
    figures: list[Figure] = []
    missing: list[str] = []
    costed = [
        (c, c.tokens_per_s_per_user, c.cost.mean)
        for c in report.cells
        if c.cost is not None and c.tokens_per_s_per_user is not None
    ]
    if not costed:
        missing.append("cost vs tok/s per user: no cell has both a cost and a TPOT p50")
    elif unit is None:
        missing.append(
            "cost vs tok/s per user: the cells' costs are in different units, which one axis cannot show"
        )
    else:
        figures.append(
            _figure(
                "cost_vs_interactivity",
                "Cost vs tokens/s per user, per target",
                "tokens/s per user (1000 ÷ TPOT p50 ms)",
                f"cost ({unit})",
                "each cell: its mean cost per unit over its complete repeats (gpuledger.cost at the "
                "target's profile) against 1000 ÷ its mean TPOT p50; the dotted line joins the target's "
                "cells no other of its cells beats on both (cheaper and faster for each user)",
                targets,
                costed,
                report.cost_pareto,
            )
        )
    timed = [
        (c, tpot, tput)
        for c in report.cells
        if (tpot := c.figure("tpot_p50_ms")) is not None
        and (tput := c.figure("output_tokens_per_s")) is not None
    ]
    if timed:
        figures.append(
            _figure(
                "throughput_vs_latency",
                "Throughput vs TPOT p50, per target",
                "TPOT p50 (ms)",
                "output tokens/s",
                "each cell: its mean output tokens/s over the measured window against its mean TPOT p50 "
                "(gpuledger.bench.metrics, over its complete repeats); the dotted line joins the target's "
                "cells no other of its cells beats on both (more throughput at a lower TPOT)",
                targets,
                timed,
                report.pareto,
            )
        )
    else:
        missing.append("throughput vs TPOT p50: no cell has both figures")
    left_out = [c.key for c in report.cells if c.runs and c.figure("tpot_p50_ms") is None]
    if left_out:
        missing.append(
            "not drawn, without a TPOT p50 (answers of one token, or no complete run): " + ", ".join(left_out)
        )
    notes: list[str] = []
    for t in targets:
        front = report.pareto.get(t, ())
        basis = sorted(
            {
                lat[0]
                for c in report.cells
                if c.target == t and c.key in front and (lat := c.latency_for_front()) is not None
            }
        )
        notes.append(
            f"Pareto front of {t} (throughput vs {' / '.join(basis) or 'TPOT p50'}): "
            + (", ".join(front) if front else "no cell has both throughput and latency")
        )
        cost_front = report.cost_pareto.get(t, ())
        notes.append(
            f"Cost front of {t} (cost vs tok/s per user): "
            + (", ".join(cost_front) if cost_front else "no cell has both a cost and a TPOT p50")
        )
    return Section(
        key="pareto",
        title="Pareto fronts",
        intro="Per target, the cells no other cell of the same target beats on both axes: the load levels "
        "worth running it at.",
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=tuple(notes),
        terminal_notes=True,
    )


def _repeats_section(report: MatrixReport) -> Section:
    rows = tuple(
        (c.key, str(r.repeat), r.status, str(r.attempts), r.run_id or fmt.MISSING, r.reason or "")
        for c in report.cells
        for r in c.repeats
    )
    return Section(
        key="repeats",
        title="Cells × repeats",
        tables=(
            Table(
                key="repeats",
                title="Cells × repeats",
                columns=("cell", "repeat", "status", "attempts", "run", "reason"),
                rows=rows,
                provenance="the store's matrix cells: each repeat's status, attempts, run and reason",
            ),
        ),
    )


def matrix_page(
    report: MatrixReport, *, detail: bool = False, generated_at: datetime | None = None
) -> ReportData:
    """The matrix as a report page: the matrix, the cheapest target per load level, every cell, the Pareto
    fronts (plotted in the HTML), and with ``detail`` every cell × repeat."""
    unit = report.unit()
    name = report.matrix.name
    title = f"gpuledger matrix {report.matrix.id}" + (f" — {name}" if name else "")
    sections = (
        _overview(report),
        _cheapest_section(report, unit),
        _cells_section(report, unit),
        _pareto_section(report, unit),
        *((_repeats_section(report),) if detail else ()),
    )
    return ReportData(title=title, generated_at=generated_at or datetime.now(UTC), runs=(), sections=sections)
