"""The doctor: layer-by-layer diagnosis of a GPU stack (NVIDIA, AMD, CPU), with exact fixes.

report = run_doctor()                        # collect_facts + diagnose
report.exit_code                             # 0 ok, 1 warnings, 2 errors
report.to_json()                             # {"facts", "findings", "summary"}
store_report(report, db_url)                 # the setup-labour ledger (DoctorRunRecord)

The ledger itself (per machine: hours from the first error to the first all-clear run) is computed by the
cost code that prices it: ``gpuledger.cost.pricing.labour.setup_labour_hours(store.list_doctor_runs())``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuledger.doctor.checks import diagnose
from gpuledger.doctor.findings import Finding, exit_code
from gpuledger.doctor.knowledge import KnowledgeBase, Rule, knowledge_base
from gpuledger.doctor.report import DoctorReport
from gpuledger.facts import collect_facts
from gpuledger.facts.runner import Runner

__all__ = [
    "DoctorReport",
    "Finding",
    "KnowledgeBase",
    "Rule",
    "diagnose",
    "exit_code",
    "knowledge_base",
    "run_doctor",
    "store_report",
]


def run_doctor(
    root: Path = Path("/"),
    *,
    runner: Runner | None = None,
    deep: bool = False,
    ollama_url: str | None = None,
    env: Mapping[str, str] | None = None,
    use_nvml: bool | None = None,
    python: str | None = None,
) -> DoctorReport:
    """Collect the facts under ``root`` and diagnose them (nothing is stored)."""
    facts = collect_facts(
        root, runner=runner, deep=deep, ollama_url=ollama_url, env=env, use_nvml=use_nvml, python=python
    )
    return DoctorReport(facts=facts, findings=diagnose(facts))


def store_report(report: DoctorReport, db_url: str | None) -> int:
    """File the run in the setup-labour ledger. Raises StoreError when the store is unusable."""
    # Imported here, not at the top: SQLAlchemy and the store cost ~0.3 s to import, which a doctor run
    # that files nothing (`--no-store`, `gpuledger run`'s check) should not pay (target: < 2 s wall).
    from gpuledger.store import open_store

    store = open_store(db_url)
    try:
        return store.add_doctor_run(report.record())
    finally:
        store.close()
