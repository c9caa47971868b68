"""Groups of repeated runs as the renderers show them: each figure's mean with its 95 % interval and CV,
printed to the precision the interval supports (``cost.groups.fmt_with_interval``; a mean narrower than its
interval keeps its significant digits), and the ratio of two groups with its interval and whether it is
distinguishable from 1. Every answer says which mean and which standard deviation its figures use
(``METHOD``): the arithmetic mean of the runs' figures and the sample standard deviation (n − 1), except
the price, which is the reciprocal of the mean units per currency unit (the harmonic mean of the runs'
prices), so that the two agree.

``group_answer`` / ``group_comparison_answer`` are answer blocks (the report's answer section, ``cost`` and
``compare`` of groups); ``group_table`` lists a group's runs one per row; ``print_group`` and
``print_group_comparison`` are the terminal output of ``cost GROUP`` and ``compare GROUP GROUP``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from gpuledger.cost import RunCost
from gpuledger.cost.comparison.groups import (
    GroupComparison,
    GroupFigure,
    GroupSummary,
    fmt_at,
    repeat_of,
    summarize_group,
)
from gpuledger.quantity import percent
from gpuledger.report import fmt
from gpuledger.report.layout import Notes, paragraph, print_table
from gpuledger.report.model import Answer, Table
from gpuledger.report.terminal import print_answer

METHOD = (
    "each figure: the arithmetic mean of the runs' figures ± its 95 % Student-t interval "
    "(t(0.975, n − 1)·s/√n, s the sample standard deviation, n − 1), CV = s ÷ mean; the price is 1 ÷ the "
    "mean units per currency unit (the harmonic mean of the runs' prices, so the two agree), its interval "
    "the reciprocal of that one's (docs/bench.md, 'Repeats')"
)
RATIO_METHOD = (
    "ratio of the groups' arithmetic means; interval from the delta method on ln(ratio) with the sample "
    "standard deviations (n − 1) and Welch–Satterthwaite degrees of freedom (docs/bench.md, 'Repeats')"
)
# A spread between repeats this large says one run alone would have said less than its digits suggest.
DISAGREE_CV = 0.10


def figure_cell(f: GroupFigure) -> str:
    """``"12 ± 4 output tok/s (95 % CI, n = 3; CV 25 %)"``; a price, the reciprocal of the mean units per
    currency unit: ``"0.622 USD (95 % CI 0.608 … 0.637, n = 3; CV 1.2 %)"``."""
    iv = f.interval
    if iv is None:
        return f"n/a — no run had a {f.label}"
    cv = f"; CV {percent(iv.cv, DISAGREE_CV)}" if iv.cv is not None else ""
    if iv.half_width is None:
        return f"{iv.text(f.unit)} (n = {iv.n}: no interval{cv})"
    if iv.bounds is not None:
        shown = iv.text(f.unit).removesuffix(f" ({iv.range_text()})")
        return f"{shown} ({iv.range_text()}, n = {iv.n}{cv})"
    return f"{iv.text(f.unit)} ({percent(iv.level)} CI, n = {iv.n}{cv})"


def _verdict_line(g: GroupSummary) -> str | None:
    judged = g.verdicts()
    bad = [(rid, status) for rid, status in judged if status != "pass"]
    if not bad:
        return f"every run's validity verdict passed ({len(judged)} judged)" if judged else None
    return "validity: " + ", ".join(f"run {rid} {status}" for rid, status in bad) + f" of {len(g.runs)} runs"


def group_answer(g: GroupSummary, title: str | None = None) -> Answer:
    """The group's answer: its price (or headline rate) with the interval, and every other figure."""
    figures = list(g.figures)
    head = figures[0] if figures else None
    headline = figure_cell(head) if head is not None else "no figures"
    facts = tuple((f.label, figure_cell(f)) for f in figures[1:])
    why = [METHOD]
    line = _verdict_line(g)
    if line:
        why.append(line)
    spread = [(f.label, iv.cv) for f in figures if (iv := f.interval) is not None and iv.cv is not None]
    wide = [(label, cv) for label, cv in spread if cv >= DISAGREE_CV]
    if wide:
        label, cv = max(wide, key=lambda w: w[1])
        why.append(
            f"the runs disagree: {label} varies {percent(cv, DISAGREE_CV)} (CV) between repeats — one run "
            "alone would have said less than its digits suggest"
        )
    return Answer(
        title=title or f"group {g.name} ({len(g.runs)} runs)",
        headline=(head.label + ": " if head is not None else "") + headline,
        facts=facts,
        why=tuple(why),
    )


def group_comparison_answer(gc: GroupComparison) -> Answer:
    a, b = gc.a.name, gc.b.name
    facts: list[tuple[str, str]] = []
    for g in (gc.a, gc.b):
        per_money = g.figure("per_money")
        if per_money is not None:
            facts.append((f"{g.name} ({len(g.runs)} runs)", figure_cell(per_money)))
    if gc.throughput is not None:
        facts.append(("throughput ratio", f"{gc.throughput.text()} — {gc.throughput.meaning()}"))
    return Answer(
        title=f"{a} vs {b}",
        headline=gc.headline(),
        subline=gc.ratio.meaning() if gc.ratio is not None else "",
        facts=tuple(facts),
        why=(RATIO_METHOD, f"{a} ÷ {b}; above 1: {a} gets more {gc.words} per {gc.currency}"),
    )


def group_table(g: GroupSummary) -> Table:
    """One row per run of the group: its figures to the precision of the group's interval, its verdict."""
    columns = ["run", *(f"{f.label} ({f.unit})" for f in g.figures), "validity"]
    rows = []
    for i, run in enumerate(g.runs):
        cells = []
        for f in g.figures:
            value = f.values[i] if i < len(f.values) else None
            half = f.interval.half_width if f.interval is not None else None
            cells.append(fmt.MISSING if value is None else fmt_at(value, half))
        verdict = (
            run.summary.verdict.status if run.summary is not None and run.summary.verdict else fmt.MISSING
        )
        rep = repeat_of(run)
        name = f"{run.id} (#{rep[1]})" if rep is not None else run.id
        rows.append((name, *cells, verdict))
    return Table(
        key="group",
        title=f"The runs of group {g.name}",
        columns=tuple(columns),
        rows=tuple(rows),
        provenance="Each run's own figures, rounded to the place its group's interval supports (a figure "
        "narrower than that interval keeps three significant digits).",
    )


def groups_in(costs: Sequence[RunCost]) -> list[GroupSummary]:
    """The groups of repeats among priced runs (two or more runs of one group), in the runs' order."""
    members: dict[str, list[RunCost]] = {}
    for c in costs:
        rep = repeat_of(c.run)
        if rep is not None:
            members.setdefault(rep[0], []).append(c)
    return [summarize_group(g, [c.run for c in cs], cs) for g, cs in members.items() if len(cs) >= 2]


def print_group(g: GroupSummary, console: Console) -> None:
    """``cost GROUP``: the group's answer, then its runs."""
    notes = Notes()
    print_answer(group_answer(g), console, notes)
    t = group_table(g)
    print_table(console, t.title, t.columns, t.rows)
    paragraph(console, t.provenance, style="dim", indent=2)
    notes.print(console)


def print_group_comparison(gc: GroupComparison, console: Console) -> None:
    """``compare GROUP GROUP``: the ratio with its interval, then each group."""
    notes = Notes()
    print_answer(group_comparison_answer(gc), console, notes)
    for g in (gc.a, gc.b):
        console.print()
        print_answer(group_answer(g), console, notes)
    notes.print(console)


__all__ = [
    "figure_cell",
    "group_answer",
    "group_comparison_answer",
    "group_table",
    "groups_in",
    "print_group",
    "print_group_comparison",
]
