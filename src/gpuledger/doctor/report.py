"""A doctor run's result: the JSON document, the terminal rendering, and the ledger record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from gpuledger.doctor.findings import Finding, count, exit_code
from gpuledger.doctor.knowledge import LAYER_TITLES, LAYERS, Rule
from gpuledger.facts import Facts, machine_name
from gpuledger.records import DoctorRunRecord

STYLES = {"ok": "green", "info": "blue", "warning": "yellow", "error": "bold red"}
BADGES = {"ok": " OK  ", "info": "INFO ", "warning": "WARN ", "error": "ERROR"}


@dataclass(slots=True)
class DoctorReport:
    facts: Facts
    findings: list[Finding]

    @property
    def errors(self) -> int:
        return count(self.findings, "error")

    @property
    def warnings(self) -> int:
        return count(self.findings, "warning")

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)

    def to_json(self) -> dict[str, Any]:
        """``{"facts": {...}, "findings": [...], "summary": {"errors": n, "warnings": n, "gpus": [...]}}``."""
        return {
            "facts": self.facts.model_dump(mode="json"),
            "findings": [f.to_dict() for f in self.findings],
            "summary": {
                "errors": self.errors,
                "warnings": self.warnings,
                "gpus": [g.model_dump(mode="json") for g in self.facts.gpus],
            },
        }

    def record(self) -> DoctorRunRecord:
        """The setup-labour ledger entry for this run (finding ids + a compact view of the stack)."""
        f = self.facts
        compact = {
            "os": f.system.os_name,
            "kernel": f.system.kernel_release,
            "gpus": [{"vendor": g.vendor, "name": g.name, "gfx_target": g.gfx_target} for g in f.gpus],
            "nvidia_driver": f.nvidia.driver_version,
            "cuda": f.nvidia.cuda_version,
            "rocm": f.amd.rocm_version,
            "torch": f.frameworks.torch.version,
            "torch_build": f.frameworks.torch.build,
            "root": f.root,
        }
        return DoctorRunRecord(
            machine=machine_name(f),
            created_at=f.collected_at,
            errors=self.errors,
            warnings=self.warnings,
            findings=[x.brief() for x in self.findings],
            facts=compact,
        )


def render(report: DoctorReport, console: Console) -> None:
    """One section per layer, bottom up; fixes printed as plain, copy-pasteable lines."""
    f = report.facts
    head = Text(f"gpuledger doctor — {machine_name(f)}", style="bold")
    head.append(
        f"  ({f.system.os_name or 'unknown OS'}, kernel {f.system.kernel_release or '?'}, "
        f"collected in {f.duration_s:.2f} s)",
        style="dim",
    )
    console.print(head)
    for layer in LAYERS:
        items = [x for x in report.findings if x.layer == layer]
        if not items:
            continue
        console.print()
        console.print(Text(LAYER_TITLES[layer], style="bold underline"))
        for item in items:
            line = Text("  ")
            line.append(f"[{BADGES[item.severity]}]", style=STYLES[item.severity])
            line.append(f" {item.title} ")
            line.append(f"({item.id})", style="dim")
            console.print(line)
            for ev in item.evidence:
                console.print(Text(f"      {ev}", style="dim"))
            if item.fix and item.severity != "ok":
                console.print(Text("      fix:", style="cyan"))
                for step in item.fix:
                    console.print(Text(f"        {step}", style="cyan"), soft_wrap=True)
            if item.docs and item.severity in ("warning", "error"):
                console.print(Text(f"      see: {'; '.join(item.docs)}", style="dim"))
    console.print()
    summary = Text(
        f"{report.errors} error(s), {report.warnings} warning(s)",
        style="bold red" if report.errors else ("yellow" if report.warnings else "green"),
    )
    summary.append("  — `gpuledger doctor --explain ID` explains a finding", style="dim")
    console.print(summary)


def render_rule(rule: Rule, console: Console) -> None:
    console.print(Text(f"{rule.id}  [{rule.severity}, layer: {rule.layer}]", style="bold"))
    console.print(Text(rule.title))
    console.print()
    console.print(Text("Symptom", style="bold"))
    console.print(Text(f"  {rule.symptom}"))
    if rule.causes:
        console.print(Text("Causes", style="bold"))
        for cause in rule.causes:
            console.print(Text(f"  - {cause}"))
    if rule.fix:
        console.print(Text("Fix", style="bold"))
        for step in rule.fix:
            console.print(Text(f"  {step}", style="cyan"), soft_wrap=True)
    if rule.docs:
        console.print(Text("See", style="bold"))
        for doc in rule.docs:
            console.print(Text(f"  {doc}"))
    if rule.seed_rows:
        console.print(
            Text(f"Seed essay §6 table row(s): {', '.join(str(r) for r in rule.seed_rows)}", style="dim")
        )
