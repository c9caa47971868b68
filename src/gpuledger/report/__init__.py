"""Reports: terminal (rich), Markdown, and one self-contained HTML file with plots.

``build_report(store, run_ids, profiles)`` reads one run or several from the store and returns a
:class:`RunReport` (its ``numbers`` the typed :class:`ReportNumbers`); ``render_terminal``,
``render_markdown`` and ``render_html`` lay out any :class:`ReportData` page: a run report, a trend, an
advice, a matrix (``gpuledger.report.matrix``). Every part is a frozen model whose dump is its ``--json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.lazy import exports

if TYPE_CHECKING:
    from gpuledger.report.build import ReportStore, build_report
    from gpuledger.report.html import render_html
    from gpuledger.report.markdown import render_markdown
    from gpuledger.report.model import (
        Answer,
        Figure,
        ReportData,
        RunRef,
        Section,
        Series,
        Table,
        Thumb,
    )
    from gpuledger.report.numbers import ReportNumbers, RunNumbers, RunReport, ThroughputPoint
    from gpuledger.report.terminal import render_terminal

__getattr__, __dir__ = exports(__name__, {
    "ReportStore": "gpuledger.report.build",
    "build_report": "gpuledger.report.build",
    "render_html": "gpuledger.report.html",
    "render_markdown": "gpuledger.report.markdown",
    "Answer": "gpuledger.report.model",
    "Figure": "gpuledger.report.model",
    "ReportData": "gpuledger.report.model",
    "ReportNumbers": "gpuledger.report.numbers",
    "RunNumbers": "gpuledger.report.numbers",
    "RunRef": "gpuledger.report.model",
    "RunReport": "gpuledger.report.numbers",
    "Section": "gpuledger.report.model",
    "Series": "gpuledger.report.model",
    "Table": "gpuledger.report.model",
    "ThroughputPoint": "gpuledger.report.numbers",
    "Thumb": "gpuledger.report.model",
    "render_terminal": "gpuledger.report.terminal",
})

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
