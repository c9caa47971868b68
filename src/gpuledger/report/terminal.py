"""The terminal report: rich tables with the headline numbers.

Every string is passed to rich as plain ``Text`` (never parsed as markup), so a label like
``[red]x[/red]`` or ``<script>`` prints literally.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from gpuledger.report.fmt import NUMERIC
from gpuledger.report.model import Answer, ReportData, Table

# Environment rows that are detail, not headline: the terminal shows the first rows only.
_DETAIL_PREFIXES = ("env: ", "server: ")


def _rich_table(t: Table) -> RichTable:
    table = RichTable(
        title=Text(t.title, style="bold"),
        title_justify="left",
        show_lines=False,
        caption=Text(t.provenance, style="dim") if t.provenance else None,
        caption_justify="left",
    )
    numeric_cols = [
        t.align_numbers and bool(t.rows) and all(NUMERIC.match(row[i]) or row[i] == "—" for row in t.rows)
        for i in range(len(t.columns))
    ]
    for col, numeric in zip(t.columns, numeric_cols, strict=True):
        table.add_column(Text(col), justify="right" if numeric else "left", overflow="fold")
    for row in t.rows:
        table.add_row(*(Text(v) for v in row))
    return table


def print_answer(a: Answer, console: Console) -> None:
    """An answer block: the figure, what is beside it, and why (plain text, wraps at the console width)."""
    console.print(Text(a.title, style="bold"))
    line = Text(a.headline, style="bold")
    if a.subline:
        line.append(Text(f"  ({a.subline})", style="dim"))
    console.print(line)
    for k, v in a.facts:
        console.print(Text(f"  {k}: ", style="dim") + Text(v))
    for w in a.why:
        console.print(Text("  why: ", style="dim") + Text(w))


def render_terminal(data: ReportData, console: Console) -> None:
    """Print the answer first, then the report's headline tables and every "not measured" line."""
    console.print(Text(data.title, style="bold underline"))
    for s in data.sections:
        if s.answers:
            console.print()
            for a in s.answers:
                print_answer(a, console)
            for line in s.not_measured:
                console.print(Text("not measured: ", style="yellow") + Text(line))
            continue
        tables = list(s.tables)
        if s.key == "environment":
            tables = [
                Table(
                    key=t.key,
                    title=t.title,
                    columns=t.columns,
                    rows=tuple(r for r in t.rows if not r[0].startswith(_DETAIL_PREFIXES)),
                    provenance=t.provenance + " Full fingerprint in --md / --html / --json.",
                    align_numbers=t.align_numbers,
                )
                for t in tables
            ]
        if not tables and not s.not_measured:
            continue
        console.print()
        console.rule(Text(s.title, style="bold"), align="left")
        for t in tables:
            if t.rows:
                console.print(_rich_table(t))
        for line in s.not_measured:
            console.print(Text("not measured: ", style="yellow") + Text(line))
        if s.terminal_notes:
            for note in s.notes:
                console.print(Text(note))
        if s.figures:
            console.print(Text(f"{len(s.figures)} plot(s) in the HTML report (--html FILE)", style="dim"))
