"""What every report section reads: one run with everything read for it (:class:`RunData`), the part of
the store a report reads, and the small helpers the sections share (tables from rows, series, numbers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuledger.records import RunInfo
from gpuledger.report import fmt
from gpuledger.report.model import Series, SeriesDash, SeriesMode, Table

ACCELERATOR_VENDORS = ("nvidia", "amd")


def as_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def aligned(rows: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Rows of runs of several kinds, each with its kind's columns, as rows of one table: every column of
    any row, in the order they first appear, "—" where a row's kind has no such column."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return [{c: row.get(c, fmt.MISSING) for c in columns} for row in rows]


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
