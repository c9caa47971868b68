"""The Markdown twin of the HTML report: the same tables and numbers, no plots.

Cells are escaped so that a label cannot break a table (``|``, newlines), start formatting, or
inject HTML into a page that renders Markdown (``<`` ``>`` become entities); control characters are
neutralised and huge values clipped.
"""

from __future__ import annotations

import re

from gpuledger.report.model import Answer, ReportData, Section, Table
from gpuledger.textsafe import display

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def md_escape(value: str) -> str:
    """One line of inline Markdown text that renders as exactly ``value`` (control characters
    neutralised and a huge value clipped, as on the terminal: ``gpuledger.textsafe``)."""
    one_line = " ".join(display(value).split())
    escaped = _MD_SPECIAL.sub(r"\\\1", one_line)
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _table(t: Table) -> list[str]:
    lines = [f"**{md_escape(t.title)}**", ""]
    lines.append("| " + " | ".join(md_escape(c) for c in t.columns) + " |")
    lines.append("|" + "|".join("---" for _ in t.columns) + "|")
    for row in t.rows:
        lines.append("| " + " | ".join(md_escape(v) for v in row) + " |")
    lines.append("")
    if t.provenance:
        lines.extend([f"_{md_escape(t.provenance)}_", ""])
    return lines


def _answer(a: Answer) -> list[str]:
    lines = [f"### {md_escape(a.title)}", "", f"**{md_escape(a.headline)}**"]
    if a.subline:
        lines[-1] += f" — {md_escape(a.subline)}"
    lines.append("")
    lines.extend(f"- {md_escape(k)}: {md_escape(v)}" for k, v in a.facts)
    if a.facts:
        lines.append("")
    if a.why:
        lines.append("Why:")
        lines.extend(f"- {md_escape(w)}" for w in a.why)
        lines.append("")
    return lines


def _section(s: Section) -> list[str]:
    lines = [f"## {md_escape(s.title)}", ""]
    for a in s.answers:
        lines.extend(_answer(a))
    if s.intro:
        lines.extend([md_escape(s.intro), ""])
    if s.not_measured:
        lines.append("> **Not measured**")
        lines.extend(f"> - {md_escape(m)}" for m in s.not_measured)
        lines.append("")
    for t in s.tables:
        lines.extend(_table(t))
    if s.images:
        lines.append(f"{len(s.images)} thumbnail(s) of the generated images in the HTML report.")
        lines.append("")
    if s.figures:
        lines.append("Plots in the HTML report: " + "; ".join(md_escape(f.title) for f in s.figures) + ".")
        lines.append("")
    for n in s.notes:
        lines.append(f"- {md_escape(n)}")
    if s.notes:
        lines.append("")
    for term, definition in s.definitions:
        lines.append(f"- **{md_escape(term)}**: {md_escape(definition)}")
    if s.definitions:
        lines.append("")
    return lines


def render_markdown(data: ReportData) -> str:
    """The report as GitHub-flavoured Markdown (tables, no plots), ready to paste into an issue."""
    lines = [f"# {md_escape(data.title)}", ""]
    lines.append(f"Generated {data.generated_at.strftime('%Y-%m-%d %H:%M:%S UTC')} from the gpuledger store.")
    lines.append("")
    for r in data.runs:
        lines.append(
            f"- **{md_escape(r.name)}**: id {md_escape(r.id)}, model {md_escape(r.model or '—')}, "
            f"engine {md_escape(r.engine or '—')}, status {md_escape(r.status)}"
        )
    if data.runs:
        lines.append("")
    for s in data.sections:
        lines.extend(_section(s))
    return "\n".join(lines).rstrip() + "\n"
