"""What a report is made of, independent of how it is drawn.

``build_report`` turns store data into a :class:`ReportData`: sections holding tables of already
formatted cells, figures holding plain data series, and "not measured" lines saying why a part is
missing. The renderers (terminal, Markdown, HTML) only lay these out, so the Markdown twin shows
exactly the numbers the HTML shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

FigureKind = Literal["line", "scatter", "bar"]
SeriesMode = Literal["lines", "markers", "lines+markers"]
SeriesDash = Literal["solid", "dot", "dash"]


@dataclass(frozen=True, slots=True)
class Table:
    """A table of formatted cells. ``provenance`` says unit, source and method of its numbers."""

    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    provenance: str = ""
    align_numbers: bool = True  # right-align numeric cells (off for tables of version strings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "provenance": self.provenance,
        }


@dataclass(frozen=True, slots=True)
class Series:
    """One trace. ``x`` is numeric, or category names for bar figures. ``shape`` "hv" draws steps."""

    name: str
    x: tuple[float | str, ...]
    y: tuple[float, ...]
    mode: SeriesMode = "lines"
    shape: Literal["linear", "hv"] = "linear"
    dash: SeriesDash = "solid"
    group: str = ""
    color: int | None = None  # index into the report's palette: the same run keeps its colour everywhere

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "points": len(self.y), "group": self.group}


@dataclass(frozen=True, slots=True)
class Figure:
    """A plot as data. Axis titles carry the unit; ``provenance`` says source and method."""

    key: str
    title: str
    kind: FigureKind
    x_title: str
    y_title: str
    series: tuple[Series, ...]
    provenance: str
    x_log: bool = False
    y_range_zero: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "kind": self.kind,
            "x_title": self.x_title,
            "y_title": self.y_title,
            "series": [s.to_dict() for s in self.series],
            "provenance": self.provenance,
        }


@dataclass(frozen=True, slots=True)
class Answer:
    """The first thing a reader sees for one run (or one comparison): the ``headline`` figure, a
    ``subline`` beside it, a few ``facts`` (label, formatted value with its unit and origin) and at most
    five ``why`` lines saying what the figure is made of and how far to trust it."""

    title: str
    headline: str
    subline: str = ""
    facts: tuple[tuple[str, str], ...] = ()
    why: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headline": self.headline,
            "subline": self.subline,
            "facts": [{"label": k, "value": v} for k, v in self.facts],
            "why": list(self.why),
        }


@dataclass(frozen=True, slots=True)
class Thumb:
    """A small picture a run made (a PNG, base64), drawn in the HTML report's contact sheet."""

    caption: str
    png_base64: str
    width: int
    height: int

    def to_dict(self) -> dict[str, Any]:
        return {"caption": self.caption, "width": self.width, "height": self.height}


@dataclass(frozen=True, slots=True)
class Section:
    """One part of the report. ``not_measured`` lines read "what: why". ``answers`` (the first section
    only) are drawn before anything else; a ``collapsed`` section is drawn folded (HTML) or shortened."""

    key: str
    title: str
    intro: str = ""
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    not_measured: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    definitions: tuple[tuple[str, str], ...] = ()
    terminal_notes: bool = False  # the terminal prints the notes too (they explain the numbers)
    answers: tuple[Answer, ...] = ()
    collapsed: bool = False
    images: tuple[Thumb, ...] = ()  # a contact sheet (HTML only; the other formats say how many)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "answers": [a.to_dict() for a in self.answers],
            "intro": self.intro,
            "tables": [t.to_dict() for t in self.tables],
            "figures": [f.to_dict() for f in self.figures],
            "not_measured": list(self.not_measured),
            "notes": list(self.notes),
            "definitions": [{"term": t, "definition": d} for t, d in self.definitions],
            **({"images": [i.to_dict() for i in self.images]} if self.images else {}),
        }


@dataclass(frozen=True, slots=True)
class RunRef:
    """Who is who in the report: ``name`` is the label shown in tables and legends."""

    id: str
    name: str
    label: str
    model: str
    engine: str
    status: str
    started_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "label": self.label,
            "model": self.model,
            "engine": self.engine,
            "status": self.status,
            "started_at": self.started_at.isoformat() if self.started_at else None,
        }


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything a renderer needs. ``numbers`` is the machine-readable part (``--json``): per run
    summary, telemetry summary and cost, and the comparison, with units in the key names."""

    title: str
    generated_at: datetime
    runs: tuple[RunRef, ...]
    sections: tuple[Section, ...]
    numbers: dict[str, Any] = field(default_factory=dict)

    def section(self, key: str) -> Section:
        for s in self.sections:
            if s.key == key:
                return s
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "generated_at": self.generated_at.isoformat(),
            "runs": [r.to_dict() for r in self.runs],
            "sections": [s.to_dict() for s in self.sections],
            "numbers": self.numbers,
        }
