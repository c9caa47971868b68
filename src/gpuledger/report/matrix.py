"""A benchmark matrix read back from the store (``gpuledger matrix show ID``, ``report --matrix ID``): every
cell with its figures, the Pareto fronts of each target, and the cheapest target at each load level.

``build_matrix_report`` reads it into a :class:`MatrixReport`, whose dump is the ``--json`` document;
``matrix_page`` lays that out as a report page (:class:`~gpuledger.report.model.ReportData`) for the report's
own renderers: the terminal, Markdown and the self-contained HTML file, which plots the fronts.

Per cell (its repeats together; each figure the mean over its complete runs with the 95 % Student-t interval
of ``cost.comparison.groups`` when there are two or more):

- output tokens/s over the measured window, TTFT and TPOT p50 / p99, E2E p50 / p99 (ms), from each run's
  typed summary; tokens/s per user = 1000 ÷ the mean TPOT p50 (how fast one user sees tokens arrive);
- the cost per unit of work (1M output tokens for text) at the matrix's profile for the cell's target (the
  target's ``profile``, else the plan's, else the run's own hardware's), from ``cost_of_run``.

Pareto fronts of a target, among its own cells:

- ``pareto``: the cells no other beats on both throughput (higher is better) and TPOT p50 (lower is better;
  E2E p50 for runs whose requests have one output token) — the load levels worth running it at;
- ``cost_pareto``: the cells no other beats on both cost per unit (lower) and tokens/s per user (higher) —
  what a faster answer for each user costs on it.

Cheapest target per load level: at each load level (a cell's key without its target), the target with the
lowest mean cost per unit, and how many times more the others cost. Costs in different currencies are not
compared (said so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    PlainSerializer,
    ValidationError,
    model_serializer,
)

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost import cost_of_run, default_profile_for, load_profile
from gpuledger.cost.comparison.groups import Interval, IntervalDoc, fmt_with_interval, mean_interval
from gpuledger.errors import GpuledgerError, NotFoundError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, RunInfo
from gpuledger.report import fmt
from gpuledger.report.model import Figure, JsonObject, ReportData, ReportModel, Section, Series, Table
from gpuledger.store import Store
from gpuledger.store.matrix import CellRecord, CellStatus, MatrixRecord

__all__ = [
    "FIGURES",
    "CellCost",
    "CellFigure",
    "CellRepeat",
    "CostMultiple",
    "LevelCheapest",
    "MatrixCell",
    "MatrixHeader",
    "MatrixReport",
    "build_matrix_report",
    "figure_text",
    "matrix_page",
]


@dataclass(frozen=True, slots=True)
class CellFigure:
    """A figure every cell reports: its key in ``--json``, label and unit, and how a run's summary has it."""

    key: str
    label: str
    unit: str
    read: Callable[[TextGenerationSummary], float | None]


FIGURES: tuple[CellFigure, ...] = (
    CellFigure("output_tokens_per_s", "output tok/s", "tok/s", lambda s: s.output_tokens_per_s),
    CellFigure("ttft_p50_ms", "TTFT p50", "ms", lambda s: s.ttft_ms.p50),
    CellFigure("ttft_p99_ms", "TTFT p99", "ms", lambda s: s.ttft_ms.p99),
    CellFigure("tpot_p50_ms", "TPOT p50", "ms", lambda s: s.tpot_ms.p50),
    CellFigure("tpot_p99_ms", "TPOT p99", "ms", lambda s: s.tpot_ms.p99),
    CellFigure("e2e_p50_ms", "E2E p50", "ms", lambda s: s.e2e_ms.p50),
    CellFigure("e2e_p99_ms", "E2E p99", "ms", lambda s: s.e2e_ms.p99),
)
# The figures the cells' table shows (``--json`` has them all).
TABLE_FIGURES = tuple(f for f in FIGURES if f.key not in ("tpot_p99_ms", "e2e_p50_ms"))


def _interval_document(value: Interval) -> IntervalDoc:
    return value.document()


# A mean over a cell's repeats with its interval, dumped as its document (``cost GROUP --json``'s intervals).
MeanFigure = Annotated[InstanceOf[Interval], PlainSerializer(_interval_document, return_type=IntervalDoc)]


def _none(value: object) -> bool:
    return value is None


def _empty(value: tuple[object, ...]) -> bool:
    return not value


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


Timestamp = Annotated[datetime, PlainSerializer(_iso, return_type=str)]


class MatrixHeader(ReportModel):
    """The matrix as stored (its plan is the report's ``plan``)."""

    id: str
    status: str
    plan_digest: str
    created_at: Timestamp
    updated_at: Timestamp
    # The plan's name, as its plan document (the report's ``plan``) gives it.
    name: str | None = Field(default=None, exclude=True)


class CellRepeat(ReportModel):
    """One repeat of a cell: how far it got, its run and why it stopped."""

    key: str
    repeat: int
    status: CellStatus
    attempts: int
    run_id: str | None
    reason: str | None
    params: JsonObject
    updated_at: Annotated[datetime | None, PlainSerializer(_iso, return_type=str | None)]


class CellCost(ReportModel):
    """A cell's mean cost per unit of work over its complete repeats, in ``unit`` (``USD per 1M output
    tokens``), priced at ``profile``. Dumped flat: the interval's figures with the unit, currency, profile."""

    interval: MeanFigure
    unit: str
    currency: str
    profile: str

    @property
    def mean(self) -> float:
        return self.interval.mean

    @model_serializer(mode="plain")
    def _document(self) -> JsonObject:
        doc: JsonObject = self.interval.document().model_dump(mode="json")
        return doc | {"unit": self.unit, "currency": self.currency, "profile": self.profile}


class MatrixCell(ReportModel):
    """One cell of the matrix, all its repeats: its figures (``FIGURES``' keys), its cost or why none."""

    key: str
    target: str
    load_level: str
    values: JsonObject
    statuses: dict[str, int]
    runs: tuple[str, ...]
    repeats: tuple[CellRepeat, ...]
    figures: dict[str, MeanFigure]
    tokens_per_s_per_user: float | None
    cost: CellCost | None
    cost_note: str | None

    @property
    def complete(self) -> int:
        """How many of its repeats are complete."""
        return sum(1 for r in self.repeats if r.status == "complete")

    def figure(self, key: str) -> float | None:
        value = self.figures.get(key)
        return value.mean if value is not None else None

    def latency_for_front(self) -> tuple[str, float] | None:
        """The latency the throughput front ranks the cell by: TPOT p50, else E2E p50 (one-token answers)."""
        tpot = self.figure("tpot_p50_ms")
        if tpot is not None:
            return "TPOT p50", tpot
        e2e = self.figure("e2e_p50_ms")
        return ("E2E p50", e2e) if e2e is not None else None


class CostMultiple(ReportModel):
    """Another target at a load level: its mean cost and how many times the cheapest one's it is."""

    target: str
    cost: float
    times: float


class LevelCheapest(ReportModel):
    """The cheapest target at one load level (``cheapest``, its ``cost`` in ``unit``, the ``others`` as
    multiples of it, the targets ``not_priced``), or the ``note`` saying why none is named."""

    load_level: str
    targets: int
    cheapest: str | None = Field(default=None, exclude_if=_none)
    cost: float | None = Field(default=None, exclude_if=_none)
    unit: str | None = Field(default=None, exclude_if=_none)
    others: tuple[CostMultiple, ...] | None = Field(default=None, exclude_if=_none)
    not_priced: tuple[str, ...] = Field(default=(), exclude_if=_empty)
    note: str | None = Field(default=None, exclude_if=_none)


class MatrixReport(ReportModel):
    """``report --matrix ID --json``: the matrix, its plan, the runs by status, every cell, each target's
    Pareto fronts (cell keys, by target) and the cheapest target per load level."""

    matrix: MatrixHeader
    plan: JsonObject
    counts: dict[str, int]
    cells: tuple[MatrixCell, ...]
    pareto: dict[str, tuple[str, ...]]
    cost_pareto: dict[str, tuple[str, ...]]
    cheapest: tuple[LevelCheapest, ...]

    def unit(self) -> str | None:
        """The one unit every priced cell's cost is in (``USD per 1M output tokens``), else None."""
        units = {c.cost.unit for c in self.cells if c.cost is not None}
        return next(iter(units)) if len(units) == 1 else None

    def targets(self) -> list[str]:
        return list(dict.fromkeys(c.target for c in self.cells))


# ------------------------------------------------------------------------------------------ reading


class _StoredTarget(BaseModel):
    """The part of a cell's stored target the report reads (``bench.matrix.Cell.params``)."""

    model_config = ConfigDict(extra="ignore")

    name: str = ""
    profile: str | None = None


class _StoredParams(BaseModel):
    """A cell's stored parameters (``matrix_cells.params``): its axis values, load level and target."""

    model_config = ConfigDict(extra="ignore")

    values: JsonObject = Field(default_factory=dict)
    load_level: str = ""
    target: _StoredTarget = Field(default_factory=_StoredTarget)


@dataclass
class _Cell:
    """A cell while its repeats are read."""

    key: str
    params: _StoredParams
    repeats: list[CellRecord] = field(default_factory=list)
    runs: list[RunInfo] = field(default_factory=list)
    note: str | None = None


def _params(row: CellRecord) -> tuple[_StoredParams, str | None]:
    try:
        return _StoredParams.model_validate(row.params), None
    except ValidationError as exc:
        return _StoredParams(), f"its stored parameters are not readable ({exc.error_count()} error(s))"


def _repeat(row: CellRecord) -> CellRepeat:
    return CellRepeat(
        key=row.key,
        repeat=row.repeat,
        status=row.status,
        attempts=row.attempts,
        run_id=row.run_id,
        reason=row.reason,
        params=row.params,
        updated_at=row.updated_at,
    )


def _price(
    cell: _Cell, catalog: Catalog, doctor_records: Sequence[DoctorRunRecord]
) -> tuple[CellCost | None, str | None]:
    """Each run of the cell at the cell's profile (else its default one), with the doctor's ledger as
    ``cost`` and ``report`` price them (a profile may take its setup hours from it)."""
    costs: list[float] = []
    named = None
    unit = currency = profile = None
    for run in cell.runs:
        try:
            if cell.params.target.profile and named is None:
                named = load_profile(cell.params.target.profile, catalog)
            priced = cost_of_run(
                run,
                named if named is not None else default_profile_for(run, catalog),
                catalog=catalog,
                doctor_records=doctor_records,
            )
        except GpuledgerError as exc:
            return None, f"run {run.id} not priced: {exc.message}"
        per = priced.evaluation.cost_per(priced.headline)
        if per is None:
            return None, f"run {run.id} did no work to price"
        if currency is not None and priced.currency != currency:
            return None, "its runs were priced in different currencies"
        unit, currency, profile = priced.price_text(), priced.currency, priced.profile.name
        costs.append(per)
    interval = mean_interval(costs)
    if interval is None or unit is None or currency is None or profile is None:
        return None, None
    return CellCost(interval=interval, unit=unit, currency=currency, profile=profile), None


def _figures(runs: Iterable[RunInfo]) -> dict[str, Interval]:
    """Each figure's mean over the runs that have it (a matrix runs inference servers: text generation)."""
    summaries = [r.summary for r in runs if isinstance(r.summary, TextGenerationSummary)]
    out: dict[str, Interval] = {}
    for f in FIGURES:
        interval = mean_interval(v for v in (f.read(s) for s in summaries) if v is not None)
        if interval is not None:
            out[f.key] = interval
    return out


def _cell(cell: _Cell, catalog: Catalog, doctor_records: Sequence[DoctorRunRecord]) -> MatrixCell:
    statuses: dict[str, int] = {}
    for r in cell.repeats:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    figures = _figures(cell.runs)
    cost, note = _price(cell, catalog, doctor_records) if cell.runs else (None, None)
    tpot = figures.get("tpot_p50_ms")
    return MatrixCell(
        key=cell.key,
        target=cell.params.target.name,
        load_level=cell.params.load_level,
        values=cell.params.values,
        statuses=statuses,
        runs=tuple(r.id for r in cell.runs),
        repeats=tuple(_repeat(r) for r in cell.repeats),
        figures=figures,
        tokens_per_s_per_user=1000.0 / tpot.mean if tpot is not None and tpot.mean > 0 else None,
        cost=cost,
        cost_note=cell.note or note,
    )


def _undominated(points: Sequence[tuple[str, float, float]]) -> tuple[str, ...]:
    """The keys of the points no other point beats on both coordinates (more is better on both)."""
    return tuple(
        key
        for key, x, y in points
        if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for k2, x2, y2 in points if k2 != key)
    )


def _throughput_front(cells: Sequence[MatrixCell]) -> tuple[str, ...]:
    points = []
    for c in cells:
        tput, lat = c.figure("output_tokens_per_s"), c.latency_for_front()
        if tput is not None and lat is not None:
            points.append((c.key, tput, -lat[1]))
    return _undominated(points)


def _cost_front(cells: Sequence[MatrixCell]) -> tuple[str, ...]:
    return _undominated(
        [
            (c.key, c.tokens_per_s_per_user, -c.cost.mean)
            for c in cells
            if c.cost is not None and c.tokens_per_s_per_user is not None
        ]
    )


def _cheapest(cells: Sequence[MatrixCell]) -> tuple[LevelCheapest, ...]:
    levels: dict[str, list[MatrixCell]] = {}
    for c in cells:
        levels.setdefault(c.load_level, []).append(c)
    out: list[LevelCheapest] = []
    for level, at in levels.items():
        priced = [(c, c.cost) for c in at if c.cost is not None]
        currencies = {cost.currency for _, cost in priced}
        if not priced:
            out.append(
                LevelCheapest(
                    load_level=level, targets=len(at), note="no target was priced at this load level"
                )
            )
            continue
        if len(currencies) > 1:
            out.append(
                LevelCheapest(
                    load_level=level,
                    targets=len(at),
                    note=f"priced in different currencies ({', '.join(sorted(currencies))})",
                )
            )
            continue
        ranked = sorted(priced, key=lambda p: p[1].mean)
        best, best_cost = ranked[0]
        others = (
            tuple(
                CostMultiple(target=c.target, cost=cost.mean, times=cost.mean / best_cost.mean)
                for c, cost in ranked[1:]
            )
            if best_cost.mean > 0
            else ()
        )
        out.append(
            LevelCheapest(
                load_level=level,
                targets=len(at),
                cheapest=best.target,
                cost=best_cost.mean,
                unit=best_cost.unit,
                others=others,
                not_priced=tuple(c.target for c in at if c.cost is None),
            )
        )
    return tuple(out)


def build_matrix_report(store: Store, matrix_ref: str, catalog: Catalog | None = None) -> MatrixReport:
    """Read the matrix (an id or unambiguous prefix) and every run of its cells; price and rank them."""
    matrix: MatrixRecord = store.get_matrix(matrix_ref)
    cat = catalog if catalog is not None else load_catalog()
    doctor_records = store.list_doctor_runs()
    reading: dict[str, _Cell] = {}
    for row in store.matrix_cells(matrix.id):
        cell = reading.get(row.key)
        if cell is None:
            params, note = _params(row)
            cell = reading[row.key] = _Cell(row.key, params, note=note)
        cell.repeats.append(row)
        if row.status == "complete" and row.run_id is not None:
            try:
                cell.runs.append(store.get_run(row.run_id))
            except NotFoundError:
                cell.note = f"run {row.run_id} of repeat {row.repeat} is no longer in the store"
    cells = tuple(_cell(c, cat, doctor_records) for c in reading.values())
    counts: dict[str, int] = {}
    for c in cells:
        for status, n in c.statuses.items():
            counts[status] = counts.get(status, 0) + n
    by_target: dict[str, list[MatrixCell]] = {}
    for c in cells:
        by_target.setdefault(c.target, []).append(c)
    return MatrixReport(
        matrix=MatrixHeader(
            id=matrix.id,
            status=matrix.status,
            plan_digest=matrix.plan_digest,
            created_at=matrix.created_at,
            updated_at=matrix.updated_at,
            name=name if isinstance(name := matrix.plan.get("name"), str) and name else None,
        ),
        plan=matrix.plan,
        counts=counts,
        cells=cells,
        pareto={t: _throughput_front(cs) for t, cs in by_target.items()},
        cost_pareto={t: _cost_front(cs) for t, cs in by_target.items()},
        cheapest=_cheapest(cells),
    )


# ------------------------------------------------------------------------------------------ the page


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
