"""What a report reads for each run (:class:`RunData`: the run with its requests, telemetry and profile), the
part of the store a report reads (:class:`ReportStore`) and the progress callback. Every section and every
kind's report facet takes ``RunData``; it lives beside them, not in one of them, so that the sections and the
kinds' registry of sections import it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuledger.records import DoctorRunRecord, RequestRecord, RunInfo, TelemetrySample
from gpuledger.report.model import RunRef


class ReportStore(Protocol):
    """The part of ``gpuledger.store.Store`` a report reads."""

    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def get_requests(
        self, id_or_prefix: str, *, chunks: bool = True, chunks_every: int = 1
    ) -> list[RequestRecord]: ...

    def get_telemetry(self, run_id: str) -> list[TelemetrySample]: ...

    def list_doctor_runs(self, machine: str | None = None) -> list[DoctorRunRecord]: ...


ProgressFn = Callable[[str], None]


@dataclass
class RunData:
    """One run with everything read for it."""

    info: RunInfo
    ref: RunRef
    summary_source: str
    requests: list[RequestRecord]
    telemetry: list[TelemetrySample]
    profile: str | None
    accelerators: int
    accelerator_note: str
    extra: dict[str, Any] = field(default_factory=dict)
