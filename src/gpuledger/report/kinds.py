"""What a workload kind gives a report: its ``report`` facet's ``REPORT``, a :class:`KindReport`.

A report composes the sections every run has (the answer, overview, cost, telemetry, labour, how measured,
environment) and, for each kind its runs are of, that kind's own sections (text generation: latency,
throughput, the server's state; image generation: seconds per image and the contact sheet; training: step
time, loss and MFU), each given only that kind's runs. What the generic sections say that depends on the
kind — the overview's counts and rates, the how-measured columns and definitions, the answer's key facts and
why lines, the noun of its items — comes from the kind too, so no section speaks of tokens to a run that made
images. ``report_of(info)`` finds a run's ``KindReport`` through the registry (``records.kinds``); a run of
no registered kind, or one without a summary and a spec of a known kind, gets ``GENERIC``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuledger.records import RunInfo, RunSummary
from gpuledger.records.kinds import WorkloadKind, kind_of_spec, kind_of_summary, kinds
from gpuledger.records.summary import WINDOW
from gpuledger.records.units import unit_info
from gpuledger.report import fmt
from gpuledger.report.definitions import GENERIC_DEFINITIONS
from gpuledger.report.model import Section
from gpuledger.report.rundata import RunData


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """How the report was asked for, as far as a kind's sections care: ``images`` — the image runs'
    thumbnails in the report (``--no-images``: left out)."""

    images: bool = True


# A kind's section: its runs (in the report's order) -> the section, or None when it has nothing to show.
SectionMaker = Callable[[Sequence[RunData], ReportOptions], Section | None]
Cells = Callable[[RunData], dict[str, str]]
Facts = Callable[[RunSummary, bool], list[tuple[str, str]]]


def key_figure_facts(summary: RunSummary, estimate: bool = False) -> list[tuple[str, str]]:
    """The summary's key figures as an answer's facts (label, value with its unit and source); of an
    ``estimate`` (a summary scaled to another GPU), only the figures it carries, each marked an estimate."""
    facts: list[tuple[str, str]] = []
    for label, q in summary.key_figures():
        if q.value is None:
            if not estimate:
                facts.append((label, f"n/a — {q.reason}"))
        else:
            facts.append((label, f"{fmt.num(q.value)} {q.unit} ({'estimate' if estimate else q.source})"))
    return facts


def fidelity_why(summary: RunSummary) -> list[str]:
    """The answer's why lines a summary gives: the ways the run did not do the work asked for."""
    return summary.fidelity_notes()


def counts_cells(r: RunData, items: str) -> dict[str, str]:
    """The overview's counts of a run's ``items`` (requests, steps) and its window; a point measured
    elsewhere (published) has neither."""
    s = r.info.summary
    if s is None:
        return {f"ok {items}": fmt.MISSING, "failed": fmt.MISSING, "error rate (%)": fmt.MISSING,
                "window (s)": fmt.MISSING}
    elsewhere = s.origin() is not None
    return {
        f"ok {items}": fmt.MISSING if elsewhere else fmt.num(s.num_ok),
        "failed": fmt.MISSING if elsewhere else fmt.num(s.num_failed),
        "error rate (%)": fmt.pct(s.error_rate),
        "window (s)": fmt.MISSING if elsewhere else fmt.num(s.window_s),
    }


def rate_cells(r: RunData, units: Sequence[str]) -> dict[str, str]:
    """The rate of each of ``units`` over the run's window, headed by the unit's rate (``images/s``)."""
    s = r.info.summary
    return {
        unit_info(u).rate_text: fmt.num(s.rate(u) if s is not None else None) for u in units
    }


def _generic_overview(r: RunData) -> dict[str, str]:
    s = r.info.summary
    head = s.headline() if s is not None else ""
    return {**counts_cells(r, "items"), **(rate_cells(r, (head,)) if head else {})}


@dataclass(frozen=True, slots=True)
class KindReport:
    """A kind's part of a report (the ``REPORT`` of its ``report`` facet).

    ``sections``: its own sections, in order, each given the kind's runs; ``overview``: its columns of the
    overview's row of a run (counts and rates), and ``overview_note`` what they are; ``how``: its columns of
    the how-measured row of a run, and ``how_note`` where their figures come from; ``definitions``: the
    metric definitions how measured quotes (``definitions_note``: what they are); ``answer_facts`` and
    ``answer_why``: the key facts and why lines of a run's answer; ``items``: what the run's ``num_ok`` /
    ``num_failed`` count; ``request_stride``: every how-many-th request's chunk times a report reads (1:
    all)."""

    name: str
    sections: tuple[SectionMaker, ...] = ()
    overview: Cells = _generic_overview
    overview_note: str = f"Counts and rates {WINDOW}."
    how: Cells = field(default=lambda r: {})
    how_note: str = ""
    definitions: tuple[tuple[str, str], ...] = GENERIC_DEFINITIONS
    definitions_note: str = "the project's metric definitions"
    answer_facts: Facts = key_figure_facts
    answer_why: Callable[[RunSummary], list[str]] = fidelity_why
    items: str = "items"
    request_stride: Callable[[RunInfo], int] = field(default=lambda info: 1)


GENERIC = KindReport(name="")


def kind_of_run(info: RunInfo) -> WorkloadKind | None:
    """The workload kind of a run: of its summary, else (a run not summarised) of its spec."""
    if info.summary is not None:
        return kind_of_summary(info.summary.kind)
    return kind_of_spec(info.config.kind)


def _report_of_kind(kind: WorkloadKind | None) -> KindReport:
    facet = kind.facet("report") if kind is not None else None
    report = getattr(facet, "REPORT", None)
    return report if isinstance(report, KindReport) else GENERIC


def report_of(info: RunInfo) -> KindReport:
    """The report part of the run's kind (``GENERIC`` for a run of no registered kind)."""
    return _report_of_kind(kind_of_run(info))


def report_of_summary(summary: RunSummary) -> KindReport:
    """The report part of the kind that stores ``summary``."""
    return _report_of_kind(kind_of_summary(summary.kind))


def by_kind(runs: Sequence[RunData]) -> list[tuple[KindReport, list[RunData]]]:
    """The kinds the runs are of, in the registry's order (runs of no registered kind last), each with its
    runs in the report's order."""
    names = [k.name for k in kinds()]
    groups: dict[str, tuple[KindReport, list[RunData]]] = {}
    for r in runs:
        rep = report_of(r.info)
        groups.setdefault(rep.name, (rep, []))[1].append(r)
    order = {n: i for i, n in enumerate(names)}
    return [groups[n] for n in sorted(groups, key=lambda n: order.get(n, len(names)))]


def kind_sections(runs: Sequence[RunData], options: ReportOptions) -> list[Section]:
    """Every kind's own sections, kind by kind in the registry's order, each kind's in its own order."""
    out: list[Section] = []
    for rep, own in by_kind(runs):
        for make in rep.sections:
            section = make(own, options)
            if section is not None:
                out.append(section)
    return out


__all__ = [
    "GENERIC",
    "Cells",
    "Facts",
    "KindReport",
    "ReportOptions",
    "SectionMaker",
    "by_kind",
    "counts_cells",
    "fidelity_why",
    "key_figure_facts",
    "kind_of_run",
    "kind_sections",
    "rate_cells",
    "report_of",
    "report_of_summary",
]
