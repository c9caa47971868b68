"""What a report is made of, independent of how it is drawn.

``build_report`` turns store data into a :class:`RunReport` (``report/numbers.py``): sections holding tables
of already formatted cells, figures holding plain data series, "not measured" lines saying why a part is
missing, and the report's figures as typed ``ReportNumbers``. The renderers (terminal, Markdown, HTML) take
a :class:`ReportData` — any page made of these sections: a run report, a trend, an advice, a matrix — and
only lay it out, so the Markdown twin shows exactly the numbers the HTML shows.

Every model is frozen and refuses unknown fields; its dump (``model_dump(mode="json")``) is its part of
the ``--json`` document. What only a renderer needs (a series' points, a figure's axis type, a thumbnail's
pixels, whether a section is folded) is left out of the dump: ``sections`` in ``report --json`` describe
the presentation, ``numbers`` carry the figures.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, computed_field, field_serializer

FigureKind = Literal["line", "scatter", "bar"]
SeriesMode = Literal["lines", "markers", "lines+markers"]
SeriesDash = Literal["solid", "dot", "dash"]
# A document the store keeps as JSON and no model describes (a device's telemetry summary, the server's
# state over the window): its values as stored.
JsonObject = dict[str, JsonValue]


def _empty(value: tuple[object, ...]) -> bool:
    return not value


def none(value: object) -> bool:
    return value is None


class ReportModel(BaseModel):
    """Base of the report's models: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Table(ReportModel):
    """A table of formatted cells. ``provenance`` says unit, source and method of its numbers."""

    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    provenance: str = ""
    # Right-align numeric cells (off for tables of version strings): presentation only.
    align_numbers: bool = Field(default=True, exclude=True)


class Series(ReportModel):
    """One trace. ``x`` is numeric, or category names for bar figures. ``shape`` "hv" draws steps.
    The dump names the trace and counts its points; the points themselves are drawn, not dumped."""

    name: str
    x: tuple[float | str, ...] = Field(exclude=True)
    y: tuple[float, ...] = Field(exclude=True)
    mode: SeriesMode = Field(default="lines", exclude=True)
    shape: Literal["linear", "hv"] = Field(default="linear", exclude=True)
    dash: SeriesDash = Field(default="solid", exclude=True)
    group: str = ""
    # An index into the report's palette: the same run keeps its colour everywhere.
    color: int | None = Field(default=None, exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def points(self) -> int:
        return len(self.y)


class Figure(ReportModel):
    """A plot as data. Axis titles carry the unit; ``provenance`` says source and method."""

    key: str
    title: str
    kind: FigureKind
    x_title: str
    y_title: str
    series: tuple[Series, ...]
    provenance: str
    x_log: bool = Field(default=False, exclude=True)
    y_range_zero: bool = Field(default=True, exclude=True)


class Answer(ReportModel):
    """The first thing a reader sees for one run (or one comparison): the ``headline`` figure, a
    ``subline`` beside it, a few ``facts`` (label, formatted value with its unit and origin) and at most
    five ``why`` lines saying what the figure is made of and how far to trust it."""

    title: str
    headline: str
    subline: str = ""
    facts: tuple[tuple[str, str], ...] = ()
    why: tuple[str, ...] = ()

    @field_serializer("facts")
    def _facts(self, facts: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
        return [{"label": k, "value": v} for k, v in facts]


class Thumb(ReportModel):
    """A small picture a run made (a PNG, base64), drawn in the HTML report's contact sheet."""

    caption: str
    png_base64: str = Field(exclude=True)
    width: int
    height: int


class Section(ReportModel):
    """One part of the report. ``not_measured`` lines read "what: why". ``answers`` (the first section
    only) are drawn before anything else; a ``collapsed`` section is drawn folded (HTML) or shortened."""

    key: str
    title: str
    answers: tuple[Answer, ...] = ()
    intro: str = ""
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    not_measured: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    definitions: tuple[tuple[str, str], ...] = ()
    # A contact sheet (HTML only; the other formats say how many); dumped only when there is one.
    images: tuple[Thumb, ...] = Field(default=(), exclude_if=_empty)
    # The terminal prints the notes too (they explain the numbers).
    terminal_notes: bool = Field(default=False, exclude=True)
    collapsed: bool = Field(default=False, exclude=True)

    @field_serializer("definitions")
    def _definitions(self, definitions: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
        return [{"term": t, "definition": d} for t, d in definitions]


class RunRef(ReportModel):
    """Who is who in the report: ``name`` is the label shown in tables and legends."""

    id: str
    name: str
    label: str
    model: str
    engine: str
    status: str
    started_at: datetime | None

    @field_serializer("started_at")
    def _started(self, started_at: datetime | None) -> str | None:
        return started_at.isoformat() if started_at is not None else None


class ReportData(ReportModel):
    """A page the renderers lay out: a title, the runs it is about (``name`` is how tables and legends
    call each) and its sections in order. A run report (:class:`RunReport`) adds its figures; a trend,
    an advice or a matrix is a page of its own document."""

    title: str
    generated_at: datetime
    runs: tuple[RunRef, ...]
    sections: tuple[Section, ...]

    @field_serializer("generated_at")
    def _generated(self, generated_at: datetime) -> str:
        return generated_at.isoformat()

    def section(self, key: str) -> Section:
        for s in self.sections:
            if s.key == key:
                return s
        raise KeyError(key)
