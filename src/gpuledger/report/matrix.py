"""A benchmark matrix read back from the store (``gpuledger matrix show ID``, ``report --matrix ID``): every
cell with its figures, the Pareto fronts of each target, and the cheapest target at each load level.

``build_matrix_report`` (here) reads it into a :class:`MatrixReport` (its models in
``gpuledger.report.matrix_model``), whose dump is the ``--json`` document; ``matrix_page``
(``gpuledger.report.matrix_page``) lays that out as a report page
(:class:`~gpuledger.report.model.ReportData`) for the report's own renderers: the terminal, Markdown and
the self-contained HTML file, which plots the fronts. This module re-exports both modules' names, so
``gpuledger.report.matrix`` has them all.

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost import cost_of_run, default_profile_for, load_profile
from gpuledger.cost.comparison.groups import Interval, mean_interval
from gpuledger.errors import GpuledgerError, NotFoundError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, RunInfo
from gpuledger.report.matrix_model import (
    FIGURES,
    CellCost,
    CellFigure,
    CellRepeat,
    CostMultiple,
    LevelCheapest,
    MatrixCell,
    MatrixHeader,
    MatrixReport,
)
from gpuledger.report.matrix_page import figure_text, matrix_page
from gpuledger.report.model import JsonObject
from gpuledger.store import Store
from gpuledger.store.matrix import CellRecord, MatrixRecord

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
