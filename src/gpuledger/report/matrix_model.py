"""The typed models of a benchmark matrix's report (``gpuledger.report.matrix``): the figures every cell
reports (``FIGURES``), and :class:`MatrixReport` with its parts — the matrix as stored, each cell with its
repeats, figures and cost, and the cheapest target per load level. Its dump is the ``--json`` document.

``gpuledger.report.matrix`` builds it from the store; ``gpuledger.report.matrix_page`` lays it out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from pydantic import Field, InstanceOf, PlainSerializer, model_serializer

from gpuledger.cost.comparison.groups import Interval, IntervalDoc
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.report.model import JsonObject, ReportModel
from gpuledger.store.matrix import CellStatus

__all__ = [
    "FIGURES",
    "TABLE_FIGURES",
    "CellCost",
    "CellFigure",
    "CellRepeat",
    "CostMultiple",
    "LevelCheapest",
    "MatrixCell",
    "MatrixHeader",
    "MatrixReport",
    "MeanFigure",
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
