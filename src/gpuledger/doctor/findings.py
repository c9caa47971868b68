"""A finding: what the doctor concluded about one thing, with the evidence and the exact fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuledger.doctor.knowledge import LAYERS, Layer, Severity, fill, knowledge_base


@dataclass(slots=True)
class Finding:
    """``evidence``: the lines/values that prove it; ``fix``: copy-pasteable commands or steps;
    ``docs``: seed sections or vendor documents."""

    id: str
    layer: Layer
    severity: Severity
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: list[str] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "layer": self.layer,
            "severity": self.severity,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": list(self.fix),
            "docs": list(self.docs),
        }

    def brief(self) -> dict[str, Any]:
        """What the setup-labour ledger keeps (``DoctorRunRecord.findings``)."""
        return {"id": self.id, "layer": self.layer, "severity": self.severity, "title": self.title}


def make(
    rule_id: str,
    evidence: list[str],
    *,
    values: dict[str, str] | None = None,
    title: str | None = None,
    severity: Severity | None = None,
    fix: list[str] | None = None,
    extra_fix: list[str] | None = None,
    layer: Layer | None = None,
) -> Finding:
    """A finding from its knowledge-base rule, with ``{placeholders}`` in the fix filled from ``values``."""
    kb = knowledge_base()
    rule = kb.rule(rule_id)
    known = {**kb.defaults, **(values or {})}
    lines = [fill(line, known) for line in (rule.fix if fix is None else fix)]
    lines += [fill(line, known) for line in (extra_fix or [])]
    return Finding(
        id=rule.id,
        layer=layer or rule.layer,
        severity=severity or rule.severity,
        title=fill(title, known) if title else rule.title,
        evidence=[e for e in evidence if e],
        fix=lines,
        docs=list(rule.docs),
    )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Bottom layer first; inside a layer, in the order the checks produced them."""
    order = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(findings, key=lambda f: order[f.layer])


def count(findings: list[Finding], severity: Severity) -> int:
    return sum(1 for f in findings if f.severity == severity)


def exit_code(findings: list[Finding]) -> int:
    """0: no warnings or errors; 1: warnings; 2: errors."""
    if count(findings, "error"):
        return 2
    if count(findings, "warning"):
        return 1
    return 0
