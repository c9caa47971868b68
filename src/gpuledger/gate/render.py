"""The gate's verdict drawn for a terminal (rich), as Markdown (a GitHub step summary) and as JUnit XML (one
testcase per metric, a failure for each regression). Every renderer takes the ``GateVerdict`` model.

What comes from the store (labels, run ids, model names, stack values) is hostile: the terminal gets it as
plain ``Text`` (never markup), Markdown escapes it, JUnit is written by ``xml.etree.ElementTree`` (which
escapes it) after ``textsafe.display`` (control characters are not allowed in XML 1.0: they become visible
stand-ins).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuledger.cost.comparison.groups import fmt_at
from gpuledger.gate.model import GateSide, GateVerdict, MetricJudgement, SideFigure, StackDrift
from gpuledger.gate.stats import Z
from gpuledger.quantity import percent
from gpuledger.textsafe import display

STATUS_TEXT = {
    "pass": "PASS",
    "fail": "FAIL",
    "not_distinguishable": "NOT DISTINGUISHABLE",
    "not_available": "NOT AVAILABLE",
}
STATUS_STYLE = {"pass": "green", "fail": "bold red", "not_distinguishable": "yellow", "not_available": "dim"}


# -------------------------------------------------------------------------------------------------- words
def metric_text(metric: MetricJudgement) -> str:
    """``"TPOT p50 (ms)"``: the metric with the unit of its figures."""
    unit = "% of requests" if metric.threshold.kind == "points" else metric.unit
    return f"{metric.label} ({unit})" if unit else metric.label


def value_text(fig: SideFigure, metric: MetricJudgement) -> str:
    """A side's figure to the precision its 95 % interval supports (a share as a percentage), or "n/a"."""
    if fig.value is None:
        return "n/a"
    if metric.threshold.kind == "points":
        return percent(fig.value).removesuffix(" %")
    half = None if fig.se is None else Z * fig.se
    return fmt_at(fig.value, half if half is not None and half > 0 else None)


def figure_text(fig: SideFigure, metric: MetricJudgement) -> str:
    """A side's figure with its unit (``"4.41 ms"``, ``"0 %"``), or "n/a"."""
    if fig.value is None:
        return "n/a"
    if metric.threshold.kind == "points":
        return percent(fig.value)
    return f"{value_text(fig, metric)} {fig.unit}".rstrip()


def change_parts(metric: MetricJudgement) -> tuple[str, str]:
    ch = metric.change
    return ("—", "—") if ch is None else ch.parts(metric.threshold.kind == "points")


def change_text(metric: MetricJudgement) -> str:
    ch = metric.change
    return "—" if ch is None else ch.text(metric.threshold.kind == "points")


def threshold_text(metric: MetricJudgement) -> str:
    t = metric.threshold
    amount = f"{t.pct:g} pp" if t.kind == "points" else f"{t.pct:g} %"
    return amount + ("" if t.source == "default" else " (given)")


def side_text(side: GateSide) -> str:
    what = f"group {side.group} ({len(side.runs)} runs)" if side.group else f"run {side.name}"
    label = f", label {', '.join(side.labels)}" if side.labels else ""
    return f"{what}{label}, model {side.model or '—'}"


def drift_text(d: StackDrift) -> str:
    cls = "matters" if d.matters else "cosmetic"
    return f"{d.key}: {d.baseline or '—'} → {d.candidate or '—'} ({cls}: {d.reason})"


# -------------------------------------------------------------------------------------------------- terminal
def render_terminal(verdict: GateVerdict, console: Console) -> None:
    """The verdict first, then each metric, what changed in the stack, and whether the runs are like for
    like."""
    style = STATUS_STYLE[verdict.status]
    console.print(Text(verdict.headline, style=style))
    console.print(Text(f"  baseline:  {side_text(verdict.baseline)}"))
    console.print(Text(f"  candidate: {side_text(verdict.candidate)}"))
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 1, 0, 0))
    table.add_column("metric", min_width=14)
    table.add_column("verdict", min_width=4)
    for column in ("baseline", "candidate", "change"):
        table.add_column(column, no_wrap=True, justify="right")
    table.add_column("95 % CI", justify="right", no_wrap=True)
    table.add_column("allowed", no_wrap=True, justify="right")
    for m in verdict.metrics:
        change, interval = change_parts(m)
        table.add_row(Text(metric_text(m)), Text(STATUS_TEXT[m.status], style=STATUS_STYLE[m.status]),
                      Text(value_text(m.baseline, m)), Text(value_text(m.candidate, m)), Text(change),
                      Text(interval), Text(threshold_text(m)))
    console.print()
    console.print(table)
    for m in verdict.metrics:
        if m.status in ("fail", "not_distinguishable", "not_available"):
            console.print(Text(f"  {m.label}: {m.why}", style="dim" if m.status == "not_available" else ""))
    console.print()
    console.print(Text("What changed in the stack", style="bold"))
    for line in stack_lines(verdict):
        console.print(Text(f"  {line}"))
    console.print(Text("Like for like", style="bold"))
    for line in like_lines(verdict):
        console.print(Text(f"  {line}"))
    for note in verdict.notes:
        console.print(Text(f"note: {note}", style="dim"))


def stack_lines(verdict: GateVerdict) -> list[str]:
    s = verdict.stack
    out = [drift_text(d) for d in s.drifts]
    if not s.drifts:
        out.append("nothing: the same stack" if s.known else "nothing that can be compared")
    out.extend(s.notes)
    return out


def like_lines(verdict: GateVerdict) -> list[str]:
    lf = verdict.like_for_like
    if lf.same:
        return ["yes: the same workload and settings"]
    head = (
        "no (allowed: --allow-different)"
        if lf.allowed
        else "no: the gate fails (--allow-different to judge anyway)"
    )
    return [head, *lf.differences]


# -------------------------------------------------------------------------------------------------- Markdown
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def md_escape(value: str) -> str:
    """One line of inline Markdown that renders as exactly ``value`` (control characters neutralised)."""
    one_line = " ".join(display(value).split())
    escaped = _MD_SPECIAL.sub(r"\\\1", one_line)
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(verdict: GateVerdict) -> str:
    """The verdict as GitHub-flavoured Markdown (for ``$GITHUB_STEP_SUMMARY``)."""
    lines = [
        f"## gpuledger gate: {STATUS_TEXT[verdict.status]}",
        "",
        f"**{md_escape(verdict.headline)}**",
        "",
        f"- baseline: {md_escape(side_text(verdict.baseline))} "
        f"({md_escape(', '.join(verdict.baseline.runs))})",
        f"- candidate: {md_escape(side_text(verdict.candidate))} "
        f"({md_escape(', '.join(verdict.candidate.runs))})",
        "",
        "| metric | verdict | baseline | candidate | change | 95 % CI | allowed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for m in verdict.metrics:
        cells = (
            metric_text(m),
            STATUS_TEXT[m.status],
            value_text(m.baseline, m),
            value_text(m.candidate, m),
            *change_parts(m),
            threshold_text(m),
        )
        lines.append("| " + " | ".join(md_escape(c) for c in cells) + " |")
    lines.append("")
    for m in verdict.metrics:
        if m.status != "pass":
            lines.append(f"- **{md_escape(m.label)}**: {md_escape(m.why)}")
    lines.extend(["", "### What changed in the stack", ""])
    lines.extend(f"- {md_escape(line)}" for line in stack_lines(verdict))
    lines.extend(["", "### Like for like", ""])
    lines.extend(f"- {md_escape(line)}" for line in like_lines(verdict))
    if verdict.notes:
        lines.append("")
        lines.extend(f"_{md_escape(n)}_" for n in verdict.notes)
    lines.extend(["", f"_{md_escape(verdict.method)}_"])
    return "\n".join(lines).rstrip() + "\n"


# -------------------------------------------------------------------------------------------------- JUnit
def _xml(value: str) -> str:
    return display(value, limit=4000)


def render_junit(verdict: GateVerdict) -> str:
    """One ``<testsuite>``: a testcase per metric (a ``<failure>`` for each regression, ``<skipped>`` for one
    not available, the reason in ``<system-out>`` for one not distinguishable) and one for like for like."""
    cases: list[ET.Element] = []
    failures = skipped = 0
    for m in verdict.metrics:
        case = ET.Element(
            "testcase", {"classname": "gpuledger.gate", "name": _xml(f"{m.label} ({m.metric})")}
        )
        detail = (
            f"baseline {figure_text(m.baseline, m)}, candidate {figure_text(m.candidate, m)}, change "
            f"{change_text(m)}, threshold {threshold_text(m)}: {m.why}"
        )
        if m.status == "fail":
            failures += 1
            node = ET.SubElement(
                case, "failure", {"message": _xml(f"{m.label} regressed: {m.why}"), "type": "regression"}
            )
            node.text = _xml(detail)
        elif m.status == "not_available":
            skipped += 1
            ET.SubElement(case, "skipped", {"message": _xml(f"not available: {m.why}")})
        else:
            ET.SubElement(case, "system-out").text = _xml(f"{STATUS_TEXT[m.status]}: {detail}")
        cases.append(case)
    like = ET.Element("testcase", {"classname": "gpuledger.gate", "name": "like for like"})
    lf = verdict.like_for_like
    if not lf.same and not lf.allowed:
        failures += 1
        node = ET.SubElement(
            like,
            "failure",
            {
                "message": _xml("the runs are not like for like: " + lf.differences[0]),
                "type": "not-like-for-like",
            },
        )
        node.text = _xml("\n".join(lf.differences))
    else:
        ET.SubElement(like, "system-out").text = _xml("\n".join(like_lines(verdict)))
    cases.append(like)
    suite = ET.Element(
        "testsuite",
        {
            "name": _xml(f"gpuledger gate {verdict.baseline.name} → {verdict.candidate.name}"),
            "tests": str(len(cases)),
            "failures": str(failures),
            "errors": "0",
            "skipped": str(skipped),
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", STATUS_TEXT[verdict.status]),
        ("baseline", f"{side_text(verdict.baseline)} ({', '.join(verdict.baseline.runs)})"),
        ("candidate", f"{side_text(verdict.candidate)} ({', '.join(verdict.candidate.runs)})"),
        ("stack", "; ".join(stack_lines(verdict))),
    ):
        ET.SubElement(props, "property", {"name": name, "value": _xml(value)})
    suite.extend(cases)
    root = ET.Element(
        "testsuites", {"name": "gpuledger gate", "tests": str(len(cases)), "failures": str(failures)}
    )
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


__all__ = ["change_text", "figure_text", "md_escape", "render_junit", "render_markdown", "render_terminal"]
