"""A benchmark matrix read back from the store (``gpuledger matrix show ID``, ``report --matrix ID``): every
cell with its figures, the Pareto front of each target, and the cheapest target at each load level.

Per cell (its repeats together; each figure the mean over its complete runs with the 95 % Student-t interval
of ``cost.groups`` when there are two or more):

- output tokens/s over the measured window, TTFT and TPOT p50 / p99, E2E p99 (ms), from each run's summary;
- the cost per unit of work (1M output tokens for text) at the matrix's profile for the cell's target (the
  target's ``profile``, else the plan's ``profile``, else the run's own hardware's), from ``cost_of_run``.

Pareto front of a target: its cells that no other cell of the same target beats on both throughput (higher
is better) and TPOT p50 (lower is better; E2E p50 for runs whose requests have one output token) — the
load levels worth running it at. Cheapest target per load level: at each load level (a cell's key without
its target), the target with the lowest mean cost per unit, and how many times more the others cost. Costs
in different currencies are not compared (said so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost import cost_of_run, default_profile_for, load_profile
from gpuledger.cost.comparison.groups import Interval, fmt_with_interval, mean_interval
from gpuledger.errors import GpuledgerError, NotFoundError
from gpuledger.records import DoctorRunRecord, RunInfo, dump_summary
from gpuledger.store import Store
from gpuledger.store.matrix import CellRecord, MatrixRecord

# (key, label, unit, where in the summary document)
FIGURES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("output_tokens_per_s", "output tok/s", "tok/s", ("output_tokens_per_s",)),
    ("ttft_p50_ms", "TTFT p50", "ms", ("ttft_ms", "p50")),
    ("ttft_p99_ms", "TTFT p99", "ms", ("ttft_ms", "p99")),
    ("tpot_p50_ms", "TPOT p50", "ms", ("tpot_ms", "p50")),
    ("tpot_p99_ms", "TPOT p99", "ms", ("tpot_ms", "p99")),
    ("e2e_p50_ms", "E2E p50", "ms", ("e2e_ms", "p50")),
    ("e2e_p99_ms", "E2E p99", "ms", ("e2e_ms", "p99")),
)


def _at(doc: Any, path: Sequence[str]) -> float | None:
    for part in path:
        doc = doc.get(part) if isinstance(doc, dict) else None
    return float(doc) if isinstance(doc, int | float) and not isinstance(doc, bool) else None


@dataclass
class CellView:
    """One cell of the matrix (all its repeats)."""

    key: str
    target: str
    load_level: str
    values: dict[str, Any]
    repeats: list[CellRecord]
    runs: list[RunInfo] = field(default_factory=list)
    figures: dict[str, Interval] = field(default_factory=dict)
    cost: Interval | None = None
    price_text: str | None = None
    currency: str | None = None
    profile: str | None = None
    cost_note: str | None = None

    @property
    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.repeats:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def figure(self, key: str) -> float | None:
        value = self.figures.get(key)
        return value.mean if value is not None else None

    def latency_for_front(self) -> tuple[str, float] | None:
        tpot = self.figure("tpot_p50_ms")
        if tpot is not None:
            return "TPOT p50", tpot
        e2e = self.figure("e2e_p50_ms")
        return ("E2E p50", e2e) if e2e is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "target": self.target, "load_level": self.load_level, "values": self.values,
            "statuses": self.statuses, "runs": [r.id for r in self.runs],
            "repeats": [r.to_dict() for r in self.repeats],
            "figures": {k: v.to_dict() for k, v in self.figures.items()},
            "cost": None if self.cost is None else {**self.cost.to_dict(), "unit": self.price_text,
                                                    "currency": self.currency, "profile": self.profile},
            "cost_note": self.cost_note,
        }


@dataclass
class MatrixView:
    """The matrix, its cells, each target's Pareto front and the cheapest target per load level."""

    matrix: MatrixRecord
    cells: list[CellView]
    fronts: dict[str, list[str]]
    cheapest: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for c in self.cells:
            for status, n in c.statuses.items():
                counts[status] = counts.get(status, 0) + n
        return {"matrix": {k: v for k, v in self.matrix.to_dict().items() if k != "plan"},
                "plan": self.matrix.plan, "counts": counts, "cells": [c.to_dict() for c in self.cells],
                "pareto": self.fronts, "cheapest": self.cheapest}


def _price(
    cell: CellView, profile_name: str | None, catalog: Catalog, doctor_records: Sequence[DoctorRunRecord]
) -> None:
    """Each run of the cell at the cell's profile (else its default one), with the doctor's ledger as
    ``cost`` and ``report`` price them (a profile may take its setup hours from it)."""
    costs: list[float] = []
    named = None
    for run in cell.runs:
        try:
            if profile_name and named is None:
                named = load_profile(profile_name, catalog)
            profile = named if named is not None else default_profile_for(run, catalog)
            priced = cost_of_run(run, profile, catalog=catalog, doctor_records=doctor_records)
        except GpuledgerError as exc:
            cell.cost_note = f"run {run.id} not priced: {exc.message}"
            return
        per = priced.evaluation.cost_per(priced.headline)
        if per is None:
            cell.cost_note = f"run {run.id} did no work to price"
            return
        if cell.currency is not None and priced.currency != cell.currency:
            cell.cost_note = "its runs were priced in different currencies"
            return
        cell.currency, cell.price_text = priced.currency, priced.price_text()
        cell.profile = priced.profile.name
        costs.append(per)
    cell.cost = mean_interval(costs)


def _front(cells: Sequence[CellView]) -> list[str]:
    points = [(c, c.figure("output_tokens_per_s"), c.latency_for_front()) for c in cells]
    known = [(c, tput, lat[1]) for c, tput, lat in points if tput is not None and lat is not None]
    front = []
    for c, tput, lat in known:
        beaten = any(t2 >= tput and l2 <= lat and (t2 > tput or l2 < lat)
                     for o, t2, l2 in known if o is not c)
        if not beaten:
            front.append(c.key)
    return front


def _cheapest(cells: Sequence[CellView]) -> list[dict[str, Any]]:
    levels: dict[str, list[CellView]] = {}
    for c in cells:
        levels.setdefault(c.load_level, []).append(c)
    out: list[dict[str, Any]] = []
    for level, at in levels.items():
        priced = [c for c in at if c.cost is not None]
        currencies = {c.currency for c in priced}
        entry: dict[str, Any] = {"load_level": level, "targets": len(at)}
        if not priced:
            entry["note"] = "no target was priced at this load level"
        elif len(currencies) > 1:
            shown = ", ".join(sorted(str(c) for c in currencies))
            entry["note"] = f"priced in different currencies ({shown})"
        else:
            ranked = sorted(priced, key=lambda c: c.cost.mean if c.cost is not None else 0.0)
            best = ranked[0]
            assert best.cost is not None
            entry.update(cheapest=best.target, cost=best.cost.mean, unit=best.price_text, others=[
                {"target": c.target, "cost": c.cost.mean, "times": c.cost.mean / best.cost.mean}
                for c in ranked[1:] if c.cost is not None and best.cost.mean > 0])
            unpriced = [c.target for c in at if c.cost is None]
            if unpriced:
                entry["not_priced"] = unpriced
        out.append(entry)
    return out


def build_matrix_view(store: Store, matrix_ref: str, catalog: Catalog | None = None) -> MatrixView:
    """Read the matrix and every run of its cells; price and rank them."""
    matrix = store.get_matrix(matrix_ref)
    rows = store.matrix_cells(matrix.id)
    cat = catalog if catalog is not None else load_catalog()
    by_key: dict[str, CellView] = {}
    profiles: dict[str, str | None] = {}
    doctor_records = store.list_doctor_runs()
    for row in rows:
        given = row.params.get("target")
        target: dict[str, Any] = given if isinstance(given, dict) else {}
        view = by_key.get(row.key)
        if view is None:
            view = by_key[row.key] = CellView(
                row.key, str(target.get("name", "")), str(row.params.get("load_level", "")),
                dict(row.params.get("values") or {}), [])
            profiles[row.key] = target.get("profile") if isinstance(target.get("profile"), str) else None
        view.repeats.append(row)
        if row.status == "complete" and row.run_id is not None:
            try:
                view.runs.append(store.get_run(row.run_id))
            except NotFoundError:
                view.cost_note = f"run {row.run_id} of repeat {row.repeat} is no longer in the store"
    for view in by_key.values():
        docs = [dump_summary(r.summary) for r in view.runs]
        for key, _label, _unit, path in FIGURES:
            interval = mean_interval(v for v in (_at(d, path) for d in docs) if v is not None)
            if interval is not None:
                view.figures[key] = interval
        if view.runs:
            _price(view, profiles[view.key], cat, doctor_records)
    cells = list(by_key.values())
    targets: dict[str, list[CellView]] = {}
    for c in cells:
        targets.setdefault(c.target, []).append(c)
    return MatrixView(matrix, cells, {t: _front(cs) for t, cs in targets.items()}, _cheapest(cells))


def figure_text(value: Interval | None) -> str:
    """A mean with its interval (``812 ± 14``), ``n/a`` when no complete run gave the figure."""
    if value is None:
        return "n/a"
    return fmt_with_interval(value.mean, value.half_width)
