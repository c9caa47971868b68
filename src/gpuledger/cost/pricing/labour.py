"""Setup labour: the profile's ``setup_hours``, or the setup-labour ledger (``from_doctor_history``).

The ledger (seed §2.3, §7.3 step 4) is computed here from the stored ``gpuledger doctor`` runs
(``store.list_doctor_runs()``): how long a machine took to get from its first doctor run with an error to
the first run with no error after it, and which problems were met.

An *episode* starts at a doctor run with at least one error (while no episode is open) and ends at
the next run with zero errors ("all clear"; warnings do not keep an episode open). A machine can have
several episodes (a later driver upgrade breaks it again). ``hours`` sums the closed episodes; an
episode still open has no end and counts in ``open_hours`` (up to the machine's latest run) only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuledger.cost.pricing.document import Doc
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runview import machine_name
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord, RunInfo


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


@dataclass(slots=True)
class LabourEpisode:
    start: datetime
    end: datetime | None = None
    runs: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        return self.end is not None

    @property
    def hours(self) -> float | None:
        return None if self.end is None else (self.end - self.start).total_seconds() / 3600.0

    def document(self) -> EpisodeDoc:
        end = None if self.end is None else self.end.isoformat()
        return EpisodeDoc(start=self.start.isoformat(), end=end, hours=self.hours, runs=self.runs,
                          problems=list(self.problems))


@dataclass(slots=True)
class MachineLabour:
    machine: str
    runs: int = 0
    first_run: datetime | None = None
    last_run: datetime | None = None
    episodes: list[LabourEpisode] = field(default_factory=list)

    @property
    def hours(self) -> float:
        """Setup hours of the closed episodes (first error -> first all-clear run after it)."""
        return sum(e.hours or 0.0 for e in self.episodes if e.closed)

    @property
    def open_hours(self) -> float:
        """Hours of an episode still open, up to the latest run (not included in ``hours``)."""
        return sum(
            ((self.last_run or e.start) - e.start).total_seconds() / 3600.0
            for e in self.episodes
            if not e.closed
        )

    @property
    def resolved(self) -> bool:
        return all(e.closed for e in self.episodes)

    @property
    def problems(self) -> list[str]:
        seen: list[str] = []
        for e in self.episodes:
            seen += [p for p in e.problems if p not in seen]
        return seen

    def document(self) -> MachineLabourDoc:
        """One machine of ``doctor --ledger --json``."""
        return MachineLabourDoc(
            machine=self.machine,
            runs=self.runs,
            first_run=None if self.first_run is None else self.first_run.isoformat(),
            last_run=None if self.last_run is None else self.last_run.isoformat(),
            hours=self.hours,
            open_hours=self.open_hours,
            resolved=self.resolved,
            problems=self.problems,
            episodes=[e.document() for e in self.episodes],
        )


class EpisodeDoc(Doc):
    """From a machine's first doctor run with an error to the first all-clear one after it (``end`` None:
    still open), its runs and the problems met (ISO 8601 times)."""

    start: str
    end: str | None
    hours: float | None
    runs: int
    problems: list[str]


class MachineLabourDoc(Doc):
    machine: str
    runs: int
    first_run: str | None
    last_run: str | None
    hours: float
    open_hours: float
    resolved: bool
    problems: list[str]
    episodes: list[EpisodeDoc]


def setup_labour_hours(records: Iterable[DoctorRunRecord]) -> dict[str, MachineLabour]:
    """Per machine: episodes from the first run with an error to the first all-clear run after it.

    Problems are the distinct ids of error and warning findings seen during an episode. Pure: the
    same records give the same answer (order does not matter; runs are sorted by time)."""
    machines: dict[str, MachineLabour] = {}
    for rec in sorted(records, key=lambda r: (_aware(r.created_at), r.id or 0)):
        ts = _aware(rec.created_at)
        m = machines.setdefault(rec.machine, MachineLabour(machine=rec.machine))
        m.runs += 1
        m.first_run = m.first_run or ts
        m.last_run = ts
        current = m.episodes[-1] if m.episodes and not m.episodes[-1].closed else None
        if rec.errors > 0:
            if current is None:
                current = LabourEpisode(start=ts)
                m.episodes.append(current)
            current.runs += 1
            for item in rec.findings:
                problem = item.get("id")
                if (
                    item.get("severity") in ("error", "warning")
                    and isinstance(problem, str)
                    and problem not in current.problems
                ):
                    current.problems.append(problem)
        elif current is not None:
            current.runs += 1
            current.end = ts
    return machines


def resolve_setup_hours(
    profile: CostProfile, doctor_records: Sequence[DoctorRunRecord] | None, run: RunInfo
) -> tuple[float, str]:
    """(setup hours, where they came from)."""
    if not profile.from_doctor_history:
        if profile.setup_hours == 0 and "setup_hours" not in profile.sources:
            return 0.0, "profile: no setup_hours given (setup labour not priced)"
        return profile.setup_hours, profile.source_of("setup_hours")
    if doctor_records is None:
        raise InvalidInputError("from_doctor_history: the doctor history was not provided to the cost model")
    if not doctor_records:
        raise InvalidInputError(
            "from_doctor_history: no doctor runs are stored",
            hint="run `gpuledger doctor` while setting up, or set setup_hours",
        )
    ledger = setup_labour_hours(doctor_records)
    machine = machine_name(run)
    if machine is not None and machine in ledger:
        chosen = machine
    elif len(ledger) == 1:
        chosen = next(iter(ledger))
    else:
        known = ", ".join(sorted(m for m in ledger if m)) or "none"
        raise InvalidInputError(
            f"from_doctor_history: cannot tell which machine run {run.id} was measured on "
            f"(run machine: {machine or 'not recorded'}; ledger machines: {known})",
            hint="set setup_hours in the cost profile",
        )
    entry = ledger[chosen]
    source = (
        f"doctor history: machine {chosen or '(unnamed)'}, first error to first all-clear "
        "(gpuledger.cost.pricing.labour.setup_labour_hours)"
    )
    if not entry.resolved:
        source += f"; a setup episode is still open ({entry.open_hours:.1f} h so far, not counted)"
    return entry.hours, source
