"""Reports: terminal (rich), Markdown, and one self-contained HTML file with plots.

``build_report(store, run_ids, profiles)`` reads one run or several from the store and returns a
:class:`RunReport` (its ``numbers`` the typed :class:`ReportNumbers`); ``render_terminal``,
``render_markdown`` and ``render_html`` lay out any :class:`ReportData` page: a run report, a trend, an
advice, a matrix (``gpuledger.report.matrix``). Every part is a frozen model whose dump is its ``--json``.
"""

from __future__ import annotations

from gpuledger.report.build import ReportStore, build_report
from gpuledger.report.html import render_html
from gpuledger.report.markdown import render_markdown
from gpuledger.report.model import (
    Answer,
    Figure,
    ReportData,
    ReportNumbers,
    RunNumbers,
    RunRef,
    RunReport,
    Section,
    Series,
    Table,
    ThroughputPoint,
    Thumb,
)
from gpuledger.report.terminal import render_terminal

__all__ = [
    "Answer",
    "Figure",
    "ReportData",
    "ReportNumbers",
    "ReportStore",
    "RunNumbers",
    "RunRef",
    "RunReport",
    "Section",
    "Series",
    "Table",
    "Thumb",
    "ThroughputPoint",
    "build_report",
    "render_html",
    "render_markdown",
    "render_terminal",
]
