"""The documents of the store commands about runs, as typed models: an entry of ``gpuledger runs --json``
(:class:`RunEntry`), and the parts of ``gpuledger show RUN --json`` (``report/show_document.py``) they
share. Their dump (``model_dump(mode="json")``) is the ``--json`` document; the terminal tables read the
same models.

Every run says what it did in its own unit, from its summary's typed API (``headline()``, ``work()``,
``rate_key()``, ``unit()``): ``unit`` is the unit of its workload kind (``RunInfo.unit``: ``image``,
``training_token``; ``token`` for text generation, as always), ``kind`` the workload kind (``text``,
``image``, ``train``), ``rate`` the rate of its headline unit (images/s for an image run), ``work`` each
unit it counted (images, denoising steps and requests for an image run), headline first.
``output_tokens_per_s`` stays for the documents' older readers (an inference run's output rate; of another
kind of run, missing with the reason).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from gpuledger.quantity import Quantity
from gpuledger.records import RunInfo, RunSummary
from gpuledger.records.kinds import kind_of_spec, kind_of_summary

JsonObject = dict[str, JsonValue]


class DocModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuantityDoc(DocModel):
    """A figure with its unit and where it came from; ``value`` None with the ``reason``."""

    value: float | None
    unit: str
    source: str
    method: str = ""
    reason: str | None = None

    @classmethod
    def of(cls, q: Quantity) -> QuantityDoc:
        return cls(value=q.value, unit=q.unit, source=q.source, method=q.method, reason=q.reason)


class WorkDoc(DocModel):
    """One unit a run counted over its window: ``unit`` its name, ``plural`` how it reads (``images``),
    ``count`` done, ``per_s`` the rate (None: an empty window), ``rate_key`` the rate's key in the
    summary (``images_per_s``)."""

    unit: str
    plural: str
    count: float
    per_s: float | None
    rate_key: str


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def kind_name(run: RunInfo) -> str | None:
    """The run's workload kind (``text``, ``image``, ``train``): of its summary, else of its spec."""
    kind = kind_of_summary(run.summary.kind) if run.summary is not None else None
    kind = kind or kind_of_spec(run.config.kind)
    return kind.name if kind is not None else None


def _missing(run: RunInfo, unit: str, source: str) -> Quantity:
    reason = {"running": "still running", "incomplete": "run did not finish", "failed": "run failed"}
    return Quantity.missing(unit, source, reason.get(run.status, "no summary stored"))


def output_rate(run: RunInfo) -> Quantity:
    """The run's output tokens per second (an inference run's), or why there is none."""
    unit = f"{run.unit or 'token'}/s"
    source = "bench summary"
    summary = run.summary
    if summary is None:
        return _missing(run, unit, source)
    origin = summary.origin()
    value = _finite(summary.rate("output_token"))
    if value is None:
        return Quantity.missing(unit, origin.label if origin else source, "not in the summary")
    if origin is not None:
        return Quantity(value, unit, origin.label, "output tokens per second of all its GPUs together")
    return Quantity(value, unit, source, "output tokens ÷ measured window")


def headline_rate(run: RunInfo) -> Quantity:
    """The rate of the run's headline unit (output tokens, images, training tokens, ...), or why there is
    none: what ``runs`` lists for every kind of run."""
    summary = run.summary
    if summary is None:
        return output_rate(run)
    head = summary.headline()
    if not head:
        return Quantity.missing("units/s", "bench summary", "the summary records no work")
    info = summary.unit(head)
    origin = summary.origin()
    source = origin.label if origin is not None else "bench summary"
    rate = _finite(summary.rate(head))
    if rate is None:
        return Quantity.missing(info.rate_text, source, "the window is empty")
    return Quantity(rate, info.rate_text, source, f"{info.plural} ÷ measured window")


def work_of(summary: RunSummary | None) -> list[WorkDoc]:
    """Every unit the summary counted, its headline first."""
    if summary is None:
        return []
    work = summary.work()
    head = summary.headline()
    order = [head, *(u for u in work if u != head)] if head in work else list(work)
    return [
        WorkDoc(
            unit=u, plural=summary.unit(u).plural, count=work[u].count, per_s=_finite(work[u].per_s),
            rate_key=summary.rate_key(u),
        )
        for u in order
    ]


class RunEntry(DocModel):
    """One ``runs --json`` entry."""

    id: str
    created_at: str | None
    label: str
    engine: str
    model: str
    status: str
    num_requests: int
    unit: str
    kind: str | None
    duration_s: float | None
    finished_at: str | None
    output_tokens_per_s: QuantityDoc
    rate: QuantityDoc
    work: list[WorkDoc]

    @classmethod
    def of(cls, run: RunInfo) -> RunEntry:
        return cls(
            id=run.id, created_at=_iso(run.created_at), label=run.label, engine=run.engine, model=run.model,
            status=run.status, num_requests=run.num_requests, unit=run.unit, kind=kind_name(run),
            duration_s=run.duration_s, finished_at=_iso(run.finished_at),
            output_tokens_per_s=QuantityDoc.of(output_rate(run)), rate=QuantityDoc.of(headline_rate(run)),
            work=work_of(run.summary),
        )


class UnreadableEntry(DocModel):
    """A ``runs --json`` entry for a row that could not be read back: its id and why."""

    id: str
    status: Literal["unreadable"] = "unreadable"
    error: str


def runs_document(found: Iterable[RunInfo], unreadable: Iterable[tuple[str, str]] = ()) -> list[JsonObject]:
    """``runs --json``: an entry per run, then each row that could not be read (id, why)."""
    entries: list[RunEntry | UnreadableEntry] = [RunEntry.of(r) for r in found]
    entries.extend(UnreadableEntry(id=i, error=why) for i, why in unreadable)
    return [e.model_dump(mode="json") for e in entries]


__all__ = [
    "QuantityDoc",
    "RunEntry",
    "UnreadableEntry",
    "WorkDoc",
    "headline_rate",
    "kind_name",
    "output_rate",
    "runs_document",
    "work_of",
]
