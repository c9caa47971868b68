"""The setup-labour ledger: the stored doctor runs of the runs' machines and the setup hours they sum to."""

from __future__ import annotations

from gpuledger.records import DoctorRunRecord
from gpuledger.report import fmt
from gpuledger.report.model import Section, Table
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import aware, machine_of, tabulate


def labour_section(runs: list[RunData], doctor_runs: list[DoctorRunRecord]) -> Section:
    machines = {m for m in (machine_of(r.info) for r in runs) if m}
    relevant = [d for d in doctor_runs if not machines or d.machine in machines]
    notes: list[str] = []
    if not machines and relevant:
        notes.append("The runs do not record their machine: every stored doctor run is shown.")
    if not relevant:
        return Section(
            key="labour",
            title="Setup-labour ledger",
            not_measured=(
                "setup labour: no `gpuledger doctor` run is stored"
                + (f" for {', '.join(sorted(machines))}" if machines else "")
                + "; run the doctor while setting a stack up to record the time it took",
            ),
        )
    relevant.sort(key=lambda d: aware(d.created_at))
    rows = [
        {
            "when": fmt.when(d.created_at),
            "machine": fmt.text(d.machine),
            "errors": str(d.errors),
            "warnings": str(d.warnings),
            "problems found": "; ".join(
                fmt.text(f.get("id") or f.get("title"))
                for f in d.findings
                if f.get("severity") in ("error", "warning")
            )
            or "all clear",
        }
        for d in relevant
    ]
    doctor_table = tabulate(
        "doctor_runs", "Doctor runs", rows, "Stored `gpuledger doctor` runs (store.list_doctor_runs)."
    )
    missing: list[str] = []
    setup = _setup_labour(relevant)
    if setup:
        notes.append("A cost profile with from_doctor_history: true prices these hours as setup labour.")
    else:
        missing.append("setup labour: no doctor run to compute it from")
    return Section(
        key="labour",
        title="Setup-labour ledger",
        intro="The hidden cost the essay insists on: how long it took to get each stack to work.",
        tables=doctor_table + setup,
        not_measured=tuple(missing),
        notes=tuple(notes),
    )


def _setup_labour(records: list[DoctorRunRecord]) -> tuple[Table, ...]:
    from gpuledger.cost.pricing.labour import setup_labour_hours

    rows = []
    for machine, m in sorted(setup_labour_hours(records).items()):
        if not m.episodes:
            status = "no error in any doctor run"
        elif m.resolved:
            status = "resolved"
        else:
            status = f"still failing: open for {fmt.num(m.open_hours)} h up to the latest doctor run"
        rows.append(
            {
                "machine": fmt.text(machine),
                "setup hours": fmt.num(m.hours),
                "status": status,
                "episodes": str(len(m.episodes)),
                "doctor runs": str(m.runs),
                "problems met": fmt.text(m.problems),
            }
        )
    return tabulate(
        "setup_labour",
        "Setup labour per machine",
        rows,
        "Hours of wall-clock time from each first doctor run with an error to the first all-clear run after "
        "it, summed over episodes (gpuledger.cost.pricing.labour.setup_labour_hours); not effort logged by a "
        "person.",
    )
