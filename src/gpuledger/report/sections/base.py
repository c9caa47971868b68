"""What every report section reads: one run with everything read for it (:class:`RunData`), the part of
the store a report reads, and the small helpers the sections share (tables from rows, series, numbers
and stages out of a summary document)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gpuledger.records import BenchSpec, DoctorRunRecord, RequestRecord, RunInfo, TelemetrySample
from gpuledger.report.model import RunRef, Series, SeriesDash, SeriesMode, Table

LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)


# The latency table's columns: the stored summary's keys of each metric's block.
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "std", "min", "max", "n")


ACCELERATOR_VENDORS = ("nvidia", "amd")


class ReportStore(Protocol):
    """The part of ``gpuledger.store.Store`` a report reads."""

    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def get_requests(
        self, id_or_prefix: str, *, chunks: bool = True, chunks_every: int = 1
    ) -> list[RequestRecord]: ...

    def get_telemetry(self, run_id: str) -> list[TelemetrySample]: ...

    def list_doctor_runs(self, machine: str | None = None) -> list[DoctorRunRecord]: ...


ProgressFn = Callable[[str], None]


@dataclass
class RunData:
    """One run with everything read for it."""

    info: RunInfo
    ref: RunRef
    summary: dict[str, Any]  # the typed summary's document (dump_summary), for the tables
    summary_source: str
    requests: list[RequestRecord]
    telemetry: list[TelemetrySample]
    profile: str | None
    accelerators: int
    accelerator_note: str
    extra: dict[str, Any] = field(default_factory=dict)


def stages_of(summary: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    stages = summary.get("stages")
    if isinstance(stages, Mapping):
        return [(str(k), dict(v)) for k, v in stages.items() if isinstance(v, Mapping)]
    if isinstance(stages, list):
        out = []
        for i, st in enumerate(stages):
            if isinstance(st, Mapping):
                name = st.get("stage") or st.get("name") or str(i)
                out.append((str(name), dict(st)))
        return out
    return []


CONCURRENCY_STAGE = re.compile(r"^c=(\d+)$")


def concurrency_of(stage_name: str, stage: Mapping[str, Any], spec: BenchSpec) -> float | None:
    """The fixed concurrency of a sweep stage, or of a whole run at one load level (``None`` for a
    request-rate load, which has no fixed concurrency). Bench records it as the stage's
    ``concurrency`` parameter and in the run's spec (``BenchSpec.fixed_concurrency``)."""
    value = as_number(stage.get("concurrency"))
    if value is not None:
        return value
    m = CONCURRENCY_STAGE.match(stage_name)
    if m:
        return float(m.group(1))
    if stage_name:
        return None
    return as_number(spec.fixed_concurrency())


def block_of(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    block = summary.get(key)
    return block if isinstance(block, Mapping) else {}


def as_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def like_of(info: RunInfo) -> Mapping[str, Any] | None:
    """``RunInfo.config.like`` of a run made with ``bench --like RUN`` (its workload was copied)."""
    like = info.config.like
    return like.model_dump() if like is not None else None


def tabulate(key: str, title: str, rows: Sequence[Mapping[str, str]], provenance: str) -> tuple[Table, ...]:
    """A section's table from rows that map each column header to its cell, so that a header is
    declared once, next to the value under it. No rows, no table: the section's not-measured lines
    say why."""
    if not rows:
        return ()
    columns = tuple(rows[0])
    for row in rows:
        if tuple(row) != columns:
            raise ValueError(f"table {key!r}: a row has columns {tuple(row)}, the first row {columns}")
    return (
        Table(
            key=key,
            title=title,
            columns=columns,
            rows=tuple(tuple(row.values()) for row in rows),
            provenance=provenance,
        ),
    )


def line_mode(points: int) -> SeriesMode:
    """Markers on a line only while there are few enough points to tell them apart."""
    return "lines+markers" if points <= 20 else "lines"


def xy_series(
    name: str,
    points: Sequence[tuple[float, float]],
    *,
    mode: SeriesMode,
    color: int,
    group: str = "",
    dash: SeriesDash = "solid",
) -> Series:
    return Series(
        name=name,
        x=tuple(x for x, _ in points),
        y=tuple(y for _, y in points),
        mode=mode,
        dash=dash,
        group=group,
        color=color,
    )


def machine_of(info: RunInfo) -> str | None:
    """The host a run was measured on, found the way the cost model finds it for the labour ledger."""
    from gpuledger.cost.pricing.runview import machine_name

    return machine_name(info)


def aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)
