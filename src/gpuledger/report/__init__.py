"""Reports: terminal (rich), Markdown, and one self-contained HTML file with plots.

``build_report(store, run_ids, profiles)`` reads one run or several from the store and returns a
:class:`ReportData`; ``render_terminal``, ``render_markdown`` and ``render_html`` lay it out.
"""

from __future__ import annotations

from gpuledger.report.build import ReportStore, build_report
from gpuledger.report.html import render_html
from gpuledger.report.markdown import render_markdown
from gpuledger.report.model import Figure, ReportData, RunRef, Section, Series, Table
from gpuledger.report.terminal import render_terminal

__all__ = [
    "Figure",
    "ReportData",
    "ReportStore",
    "RunRef",
    "Section",
    "Series",
    "Table",
    "build_report",
    "render_html",
    "render_markdown",
    "render_terminal",
]
