"""The records every part of gpuledger exchanges: a run, its requests, its telemetry samples, its summary.

These are the contract between engines/bench (which produce them), the store (which keeps them), and
metrics/cost/report (pure functions over them); see ``run.py``, ``summary.py`` and ``units.py``. What each
workload kind stores (its spec and summary classes) is in its package under ``gpuledger.kinds``, found
through ``records.kinds``.
"""

from gpuledger.records.itemstats import Latency
from gpuledger.records.kinds import WorkloadKind, kind_named, kind_of_spec, kind_of_summary, kinds
from gpuledger.records.origin import Origin
from gpuledger.records.request import TOKEN_SOURCES, RequestRecord, TokenSource
from gpuledger.records.run import RUN_STATUSES, DoctorRunRecord, RunInfo, RunStatus, TelemetrySample
from gpuledger.records.spec import BenchSpec, SpecError, dump_spec, load_spec
from gpuledger.records.summary import (
    RunSummary,
    SummaryError,
    WorkSummary,
    dump_summary,
    load_summary,
)
from gpuledger.records.units import (
    UnitInfo,
    Work,
    alias_of,
    register_alias,
    register_unit,
    resolve_alias,
    unit_info,
)

__all__ = [
    "RUN_STATUSES",
    "TOKEN_SOURCES",
    "BenchSpec",
    "DoctorRunRecord",
    "Latency",
    "Origin",
    "RequestRecord",
    "RunInfo",
    "RunStatus",
    "RunSummary",
    "SpecError",
    "SummaryError",
    "TelemetrySample",
    "TokenSource",
    "UnitInfo",
    "Work",
    "WorkSummary",
    "WorkloadKind",
    "alias_of",
    "dump_spec",
    "dump_summary",
    "kind_named",
    "kind_of_spec",
    "kind_of_summary",
    "kinds",
    "load_spec",
    "load_summary",
    "register_alias",
    "register_unit",
    "resolve_alias",
    "unit_info",
]
