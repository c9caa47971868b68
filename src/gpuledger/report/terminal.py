"""The terminal report: the answer first, then the headline tables, fitted to the console width.

Tables go through ``gpuledger.report.layout``: no number is cut by a line break, numeric columns never
wrap, and a table too wide for the terminal is turned (metrics as rows, runs as columns) or split.
Every string is passed to rich as plain ``Text`` (never parsed as markup), so a label like
``[red]x[/red]`` or ``<script>`` prints literally.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from gpuledger.report.fmt import MISSING
from gpuledger.report.layout import Grid, Notes, paragraph, print_grid
from gpuledger.report.model import Answer, ReportData, Table

# Environment rows that are detail, not headline: the terminal shows the first rows only.
_DETAIL_PREFIXES = ("env: ", "server: ")


# A table cell (or a fact's provenance) longer than this is a sentence: the terminal prints it once, as a
# numbered note after the tables, and the cell refers to it.
NOTE_LIMIT = 100


def grid_of(t: Table, notes: Notes | None = None) -> Grid:
    """A report table as the layout's grid. A text column with the same value in every row (the A and B
    of a comparison, the currency) moves into the title; the rows are then named by the first column, or
    by the first two when the first repeats (a run's metrics, stages or devices)."""
    columns, rows, title = t.columns, t.rows, t.title
    if len(rows) > 1:
        numeric = Grid(title, columns, rows).numeric()
        same = [
            i
            for i in range(len(columns))
            if not numeric[i] and len({r[i] for r in rows}) == 1 and rows[0][i] not in ("", MISSING)
        ]
        if same and len(same) < len(columns) - 1:
            title += " (" + ", ".join(f"{columns[i]}: {rows[0][i]}" for i in same) + ")"
            keep = [i for i in range(len(columns)) if i not in same]
            columns = tuple(columns[i] for i in keep)
            rows = tuple(tuple(r[i] for i in keep) for r in rows)
    if notes is not None:
        rows = tuple(tuple(notes.cell(c, NOTE_LIMIT) for c in r) for r in rows)
    first = [r[0] for r in rows]
    keys = 2 if len(columns) > 3 and len(set(first)) < len(first) else 1
    return Grid(title, columns, rows, t.provenance, keys, t.align_numbers)


def print_answer(a: Answer, console: Console, notes: Notes | None = None) -> None:
    """An answer block: the figure, what is beside it, and why, wrapped at the console width. Sentences
    filed in ``notes`` (a long provenance rule) are referred to by their marker, printed once later."""
    short = notes.shorten if notes is not None else (lambda s: s)
    if notes is not None:
        # "4 W priced (estimate) — <the rule the 4 W comes from>": a long provenance after the figure is
        # filed once, and every line quoting it refers to its marker.
        for _, value in a.facts:
            notes.file(*value.split(" — ")[1:], longer_than=NOTE_LIMIT)
    console.print(Text(a.title, style="bold"), soft_wrap=True)
    line = Text(a.headline, style="bold")
    if a.subline:
        line.append(Text(f"  ({a.subline})", style="dim"))
    paragraph(console, line, indent=2)
    for k, v in a.facts:
        paragraph(console, short(v), lead=Text(f"  {k}: ", style="dim"), indent=4)
    for w in a.why:
        paragraph(console, short(w), lead=Text("  why: ", style="dim"), indent=4)


def not_measured(console: Console, line: str) -> None:
    paragraph(console, line, lead=Text("not measured: ", style="yellow"), indent=2)


def render_terminal(data: ReportData, console: Console) -> None:
    """Print the answer first, then the report's headline tables and every "not measured" line."""
    notes = Notes()
    paragraph(console, Text(data.title, style="bold underline"))
    for s in data.sections:
        if s.answers:
            for a in s.answers:
                console.print()
                print_answer(a, console, notes)
            for line in s.not_measured:
                not_measured(console, line)
            for t in s.tables:  # what the answer rests on (each run's validity checks)
                if t.rows:
                    print_grid(console, grid_of(t, notes))
            continue
        tables = list(s.tables)
        if s.key == "environment":
            tables = [
                t.model_copy(
                    update={
                        "rows": tuple(r for r in t.rows if not r[0].startswith(_DETAIL_PREFIXES)),
                        "provenance": t.provenance + " Full fingerprint in --md / --html / --json.",
                    }
                )
                for t in tables
            ]
        if not tables and not s.not_measured and not (s.terminal_notes and s.notes):
            continue
        console.print()
        console.rule(Text(s.title, style="bold"), align="left")
        for t in tables:
            if t.rows:
                print_grid(console, grid_of(t, notes))
        for line in s.not_measured:
            not_measured(console, line)
        if s.terminal_notes:
            for note in s.notes:
                paragraph(console, note, indent=2)
        if s.figures:
            plots = f"{len(s.figures)} plot(s) in the HTML report (--html FILE)"
            paragraph(console, Text(plots, style="dim"))
    if notes.items:
        console.print()
        console.rule(Text("Notes", style="bold"), align="left")
        notes.print(console)
