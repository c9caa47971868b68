"""Finding runs in a large store: the query of ``Store.query_runs`` (filters, sort, page), the light rows it
answers with, and the indexed columns that make it fast (revision 0004).

A run's ``kind``, ``gpu`` and headline ``rate`` live in its summary, spec and telemetry documents; reading
those for 100,000 runs to filter a list would read every summary. So the store keeps them beside the run as
indexed columns, derived here from the run when it is written (``index_values``) and filled for older runs
by the migration:

- ``kind``: the workload kind (``text``, ``train``, ``image``: ``records.kinds``) of the run's summary, else
  of its spec, else text (what a summary that names no kind is read as);
- ``gpu``: the GPUs the run recorded, by name, distinct and sorted, joined with `` + ``: the GPU devices of
  its telemetry summary (those it was assigned, when it records that), else those of its environment
  fingerprint; a published point's catalog key (``h200``); None for a run that recorded none (a CPU run, or
  a remote server benched without its telemetry);
- ``rate`` and ``rate_unit``: the rate of the summary's headline unit (output tokens/s, images/s, training
  tokens/s) and its unit text; None until the run is summarised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuledger.records import DeviceWindow, RunInfo, RunStatus, RunSummary, kind_of_spec, kind_of_summary
from gpuledger.records.summary import DEFAULT_KIND

GPU_TEXT_LENGTH = 128
RATE_UNIT_LENGTH = 64
MAX_PER_PAGE = 200
MAX_PAGE = 100_000
# What a filter value may hold: a label, a model name, an engine (the store's own texts are longer only in
# theory; a longer value matches nothing anyway).
MAX_FILTER_CHARS = 512

SortKey = Literal["created", "label", "model", "engine", "gpu", "kind", "requests", "duration", "rate"]
SORT_KEYS: tuple[SortKey, ...] = (
    "created", "label", "model", "engine", "gpu", "kind", "requests", "duration", "rate"
)
Order = Literal["asc", "desc"]


class RunQuery(BaseModel):
    """Which runs, in which order, which page. Every filter is an exact match (empty: no filter); ``since``
    and ``until`` are dates (UTC days, both included) of the run's ``created_at``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str | None = Field(default=None, max_length=MAX_FILTER_CHARS)
    model: str | None = Field(default=None, max_length=MAX_FILTER_CHARS)
    engine: str | None = Field(default=None, max_length=MAX_FILTER_CHARS)
    kind: str | None = Field(default=None, max_length=32)
    gpu: str | None = Field(default=None, max_length=MAX_FILTER_CHARS)
    since: date | None = None
    until: date | None = None
    sort: SortKey = "created"
    order: Order = "desc"
    page: int = Field(default=1, ge=1, le=MAX_PAGE)
    per_page: int = Field(default=50, ge=1, le=MAX_PER_PAGE)

    @field_validator("label", "model", "engine", "kind", "gpu", "since", "until", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    def filters(self) -> dict[str, Any]:
        """The filters given (name -> value), for links and headings."""
        names = ("label", "model", "engine", "kind", "gpu", "since", "until")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run of a list, from its indexed columns only (no summary, spec or telemetry read)."""

    id: str
    created_at: datetime
    label: str
    engine: str
    model: str
    status: RunStatus
    unit: str
    kind: str | None
    gpu: str | None
    num_requests: int
    duration_s: float | None
    rate: float | None
    rate_unit: str | None


@dataclass(frozen=True, slots=True)
class RunPage:
    """A page of runs: its rows, how many runs match in all, and the query that made it."""

    rows: tuple[RunRow, ...]
    total: int
    query: RunQuery

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.query.per_page))


# ---- the derived columns -----------------------------------------------------------------------------


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def run_kind(summary: RunSummary | None, spec_kind: str | None) -> str | None:
    """The workload kind of a run's summary, else of its spec, else the kind a summary without one is read as
    (text generation: ``records.summary.DEFAULT_KIND``); None when no registered kind stores that."""
    found = kind_of_summary(summary.kind) if summary is not None else None
    if found is None and spec_kind:
        found = kind_of_spec(spec_kind)
    if found is None:
        found = kind_of_summary(DEFAULT_KIND)
    return found.name if found is not None else None


def run_gpu(
    summary: RunSummary | None, telemetry_summary: Sequence[DeviceWindow], environment_gpus: Sequence[Any]
) -> str | None:
    """The GPUs a run recorded (the module docstring's rule), or None."""
    devices = [d for d in telemetry_summary if d.is_gpu]
    if any(d.assigned is not None for d in devices):
        devices = [d for d in devices if d.assigned is True]
    names = {n for n in (_text(d.name) for d in devices) if n}
    if not names and summary is not None:
        origin = summary.origin()
        if origin is not None and origin.gpu:
            names = {origin.gpu}
    if not names:
        names = {n for n in (_text(g.get("name") if isinstance(g, Mapping) else getattr(g, "name", None))
                             for g in environment_gpus) if n}
    if not names:
        return None
    return " + ".join(sorted(names))[:GPU_TEXT_LENGTH]


def run_rate(summary: RunSummary | None) -> tuple[float | None, str | None]:
    """The rate of the summary's headline unit and its unit text (``output tok/s``); (None, None) when it
    has none (not summarised yet, or the window is empty)."""
    if summary is None:
        return None, None
    head = summary.headline()
    if not head:
        return None, None
    rate = summary.rate(head)
    if rate is None or not math.isfinite(rate):
        return None, None
    return float(rate), summary.unit(head).rate_text[:RATE_UNIT_LENGTH]


def index_values(info: RunInfo) -> dict[str, Any]:
    """The indexed columns of ``info`` (``kind``, ``gpu``, ``rate``, ``rate_unit``), as the store writes
    them."""
    summary = info.summary
    rate, rate_unit = run_rate(summary)
    return {
        "kind": run_kind(summary, info.config.kind or None),
        "gpu": run_gpu(summary, info.telemetry_summary, info.environment.gpus),
        "rate": rate,
        "rate_unit": rate_unit,
    }


# The run fields the indexed columns are derived from: a write that sets one of them derives them again.
INDEXED_FROM = frozenset({"summary", "config", "telemetry_summary", "environment"})
