"""Setup labour per vendor for a deployment nobody has set up yet (the advisor, the no-run estimate): the
hours you state, else the doctor's setup-labour ledger of your machines with that vendor's GPUs
(``cost/pricing/labour.py``), else the seed essay's own example — an afternoon on CUDA, two weeks on ROCm
(§2.3), clearly labelled as that example."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuledger.cost.pricing.labour import setup_labour_hours
from gpuledger.records import DoctorRunRecord

WORKDAY_HOURS = 8.0
ESSAY_SETUP_HOURS: dict[str, float] = {"nvidia": 4.0, "amd": 10 * WORKDAY_HOURS}
ESSAY_SOURCE = (
    "the seed essay's own example (§2.3), not a measurement: an environment that takes an afternoon on CUDA "
    "(4 h) and two weeks on ROCm (10 working days x 8 h = 80 h); state yours with --setup-hours"
)


@dataclass(frozen=True, slots=True)
class SetupHours:
    hours: float
    source: str
    origin: str  # "stated" | "doctor ledger" | "essay example"


def ledger_by_vendor(records: Sequence[DoctorRunRecord]) -> dict[str, SetupHours]:
    """Per GPU vendor: the median setup hours of your machines with that vendor's GPUs (their latest
    doctor run names the GPUs) whose setup the ledger saw closed (first error to first all-clear)."""
    ledger = setup_labour_hours(records)
    vendors: dict[str, set[str]] = {}
    for rec in sorted(records, key=lambda r: r.created_at):
        gpus = rec.facts.get("gpus") if isinstance(rec.facts, Mapping) else None
        if isinstance(gpus, list):
            vendors[rec.machine] = {str(g.get("vendor")) for g in gpus if isinstance(g, Mapping)}
    found: dict[str, list[tuple[str, float]]] = {}
    for machine, entry in ledger.items():
        closed = [e for e in entry.episodes if e.closed]
        if not closed:
            continue
        for vendor in vendors.get(machine, set()):
            found.setdefault(vendor, []).append((machine or "(unnamed)", entry.hours))
    out: dict[str, SetupHours] = {}
    for vendor, rows in found.items():
        hours = statistics.median([h for _, h in rows])
        names = ", ".join(m for m, _ in rows)
        source = (f"doctor history: median of {len(rows)} machine(s) with {vendor} GPUs ({names}), first "
                  "error to first all-clear")
        out[vendor] = SetupHours(hours, source, "doctor ledger")
    return out


def setup_hours_for(
    vendor: str,
    stated: Mapping[str, float] | None = None,
    records: Sequence[DoctorRunRecord] | None = None,
) -> SetupHours:
    """The setup hours of a ``vendor`` deployment (module docstring: in which order)."""
    if stated and vendor in stated:
        return SetupHours(stated[vendor], f"stated: --setup-hours {vendor}={stated[vendor]:g}", "stated")
    if records:
        ledger = ledger_by_vendor(records)
        if vendor in ledger:
            return ledger[vendor]
    hours = ESSAY_SETUP_HOURS.get(vendor, ESSAY_SETUP_HOURS["amd"])
    return SetupHours(hours, ESSAY_SOURCE, "essay example")
