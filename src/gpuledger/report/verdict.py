"""A run's validity verdict as the renderers show it: first, before the figures it judges.

``verdict_fact`` and ``verdict_why`` put it into an answer block (the verdict in words, the worst checks
among the why lines — and always the failed requests or steps, when there are any, whatever else warned);
``verdict_table`` lists every check with its figure, rule and why, and the rules that could not be applied
with the reason. Every share is printed by ``quantity.percent``, to the precision its rule needs.
The checks themselves are ``gpuledger.bench.validity``'s.
"""

from __future__ import annotations

from gpuledger.quantity import percent
from gpuledger.records.validity import Check, Verdict
from gpuledger.report import fmt
from gpuledger.report.model import Table

# The worst checks an answer block shows among its "why" lines (the failed items' check always among them).
WORST_SHOWN = 2
# The check that counts failed requests (steps): an answer names them whenever there are any.
FAILURES = "errors"
_PERCENT_UNITS = ("CV", "relative change", "hit ratio (server)")
_MAX_DIGITS = 6


def figure_text(c: Check) -> str:
    """The check's figure with its unit: ``97 % of one core``, ``5 requests``, ``12 ms``; a share to the
    precision its rule needs (``quantity.percent``: 1 failed of 200 is ``0.5 %`` beside "warn at > 0 %"),
    a number with the digits that keep it on its side of the thresholds (9.996 lifetimes is not ``10.0``
    beside "warn below 10")."""
    if c.figure is None:
        return fmt.MISSING
    if c.unit.startswith("share of "):
        return f"{percent(c.figure, c.warn_at, c.fail_at)} of {c.unit.removeprefix('share of ')}"
    if c.unit in _PERCENT_UNITS:
        return f"{percent(c.figure, c.warn_at, c.fail_at)} ({c.unit})"
    unit = c.unit[:-1] if c.figure == 1 and c.unit in ("requests", "devices") else c.unit
    return f"{_beside(c.figure, c.warn_at, c.fail_at)} {unit}".rstrip()


def _beside(value: float, *limits: float | None) -> str:
    """``value`` with three significant figures, or more (up to ``_MAX_DIGITS``) where fewer would print it
    at or across one of ``limits`` from the side it is on."""
    text = fmt.num(value)
    for digits in range(3, _MAX_DIGITS + 1):
        text = fmt.num(value, digits)
        try:
            shown = float(text.replace(",", ""))
        except ValueError:
            return text
        if all((shown > t) == (value > t) and (shown < t) == (value < t) for t in limits if t is not None):
            return text
    return text


def check_line(c: Check) -> str:
    """``"validity: client_bound FAIL (97 % of one core): the client used ..."``."""
    where = f", stage {c.stage}" if c.stage else ""
    return f"validity: {c.name} {c.status.upper()} ({figure_text(c)}{where}): {c.why}"


def verdict_fact(v: Verdict | None) -> tuple[str, str]:
    if v is None:
        return ("validity", "not judged — the run has no summary")
    return ("validity", v.headline())


def verdict_why(v: Verdict | None, n: int = WORST_SHOWN) -> list[str]:
    """The ``n`` worst checks that warned or failed, each in one line, failures first; the failed requests
    (steps) always among them when there are any — their count, share and kinds — whatever else warned."""
    if v is None:
        return []
    problems = v.problems()
    failures = [c for c in problems if c.name == FAILURES]
    others = [c for c in problems if c.name != FAILURES][: max(0, n - len(failures))]
    return [check_line(c) for c in sorted([*failures, *others], key=lambda c: -c.severity)]


def verdict_table(v: Verdict, name: str, *, rules: bool = True) -> Table:
    """Every check, failures first, then the rules not applied; ``rules=False`` leaves the rule column out
    (a terminal: ``rule_lines`` gives the rules of the checks that warned or failed)."""
    rows: list[tuple[str, ...]] = []
    for c in sorted(v.checks, key=lambda c: -c.severity):
        why = (f"stage {c.stage}: " if c.stage else "") + c.why
        rows.append((c.name, c.status, figure_text(c), *((c.rule,) if rules else ()), why))
    rows += [(n.name, "not checked", fmt.MISSING, *(("",) if rules else ()), n.why) for n in v.not_checked]
    return Table(
        key="validity",
        title=f"Validity of {name}: {v.headline()}",
        columns=("check", "status", "figure", *(("rule",) if rules else ()), "why"),
        rows=tuple(rows),
        provenance="Rules and thresholds: docs/bench.md, 'Validity verdict' (gpuledger.bench.validity).",
        align_numbers=False,
    )


def rule_lines(v: Verdict) -> list[str]:
    """``"samples: the q-th percentile of n values ..."``: the rule of each check that warned or failed."""
    return [f"{c.name}: {c.rule}" for c in v.problems()]


__all__ = [
    "check_line",
    "figure_text",
    "rule_lines",
    "verdict_fact",
    "verdict_table",
    "verdict_why",
]
