"""A run's validity verdict: each check of how far its figures can be trusted, with its figure and rule.

``gpuledger.bench.validity.verdict`` computes it from what a run stores (its header and requests); the run
writer stores it with the summary (``RunSummary.verdict``), and readers compute it on the fly for runs
stored before it existed. docs/bench.md ("Validity verdict") lists every check with its thresholds.

A ``Check`` is one rule applied: its ``figure`` in ``unit`` (the measured value the rule looked at), the
``rule`` in words with its thresholds (``warn_at``, ``fail_at`` in the figure's unit; ``worse`` says which
direction is bad), the outcome ``status`` and one line saying ``why``. A rule that cannot be applied to a
run (no telemetry, an in-process engine, nothing recorded) is a ``NotChecked`` with its reason: never a
silent pass.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CheckStatus = Literal["pass", "warn", "fail"]
# The order of severity, least first.
STATUSES: tuple[CheckStatus, ...] = ("pass", "warn", "fail")
# The version of the rules a stored verdict was computed with (docs/bench.md says what each one checks).
RULES_VERSION = 1


class _Stored(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Check(_Stored):
    """One rule applied to one run (or to the worst stage of a sweep, named in ``stage``)."""

    name: str = Field(min_length=1, max_length=64)
    status: CheckStatus
    figure: float | None = None
    unit: str = Field(default="", max_length=64)
    rule: str = Field(max_length=500)
    warn_at: float | None = None
    fail_at: float | None = None
    worse: Literal["higher", "lower"] = "higher"
    why: str = Field(max_length=1000)
    stage: str | None = Field(default=None, max_length=128)

    @property
    def severity(self) -> int:
        return STATUSES.index(self.status)

    def line(self) -> str:
        """``"client_bound fail: the client used 97 % of one CPU core ..."``: the check in one line."""
        where = f" (stage {self.stage})" if self.stage else ""
        return f"{self.name} {self.status}{where}: {self.why}"


class NotChecked(_Stored):
    """A rule that could not be applied to the run, and why."""

    name: str = Field(min_length=1, max_length=64)
    why: str = Field(max_length=1000)


class Verdict(_Stored):
    """Every check of one run; ``status`` is the worst of them (``pass`` when every check passed)."""

    rules: int = RULES_VERSION
    status: CheckStatus = "pass"
    checks: list[Check] = Field(default_factory=list)
    not_checked: list[NotChecked] = Field(default_factory=list)

    @classmethod
    def of(cls, checks: list[Check], not_checked: list[NotChecked]) -> Verdict:
        worst = max((c.severity for c in checks), default=0)
        return cls(status=STATUSES[worst], checks=checks, not_checked=not_checked)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def problems(self) -> list[Check]:
        """The checks that warned or failed, failures first (each group in the checks' order)."""
        return sorted((c for c in self.checks if c.status != "pass"), key=lambda c: -c.severity)

    def worst(self, n: int) -> list[Check]:
        return self.problems()[:n]

    def headline(self) -> str:
        """``"valid: 12 checks passed"`` / ``"2 failed, 1 warned of 12 checks"``: the verdict in words."""
        failed = sum(1 for c in self.checks if c.status == "fail")
        warned = sum(1 for c in self.checks if c.status == "warn")
        n = len(self.checks)
        if n == 0:
            why = self.not_checked[0].why if self.not_checked else "no rule applies to this run"
            return f"not judged: {why}"
        if not failed and not warned:
            return f"valid: all {n} checks passed"
        parts = [f"{failed} failed" if failed else "", f"{warned} warned" if warned else ""]
        return f"{self.status.upper()}: " + ", ".join(p for p in parts if p) + f" of {n} checks"


__all__ = ["RULES_VERSION", "STATUSES", "Check", "CheckStatus", "NotChecked", "Verdict"]
