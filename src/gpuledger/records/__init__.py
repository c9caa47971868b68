"""The records every part of gpuledger exchanges: a run, its requests, its telemetry samples, its summary.

These are the contract between engines/bench (which produce them), the store (which keeps them), and
metrics/cost/report (pure functions over them); see ``run.py``, ``summary.py``, ``telemetry.py`` (a run's
telemetry summary: one window per device) and ``units.py``. What each workload kind stores (its spec and
summary classes) is in its package under ``gpuledger.kinds``, found through ``records.kinds``.
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
from gpuledger.records.telemetry import (
    GPU_VENDORS,
    DeviceWindow,
    EnergyMethod,
    StageWindow,
    TelemetryRecordError,
    Vendor,
    dump_telemetry_summary,
    dump_window,
    load_telemetry_summary,
    load_window,
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
    "GPU_VENDORS",
    "RUN_STATUSES",
    "TOKEN_SOURCES",
    "BenchSpec",
    "DeviceWindow",
    "DoctorRunRecord",
    "EnergyMethod",
    "Latency",
    "Origin",
    "RequestRecord",
    "RunInfo",
    "RunStatus",
    "RunSummary",
    "SpecError",
    "StageWindow",
    "SummaryError",
    "TelemetryRecordError",
    "TelemetrySample",
    "TokenSource",
    "UnitInfo",
    "Vendor",
    "Work",
    "WorkSummary",
    "WorkloadKind",
    "alias_of",
    "dump_spec",
    "dump_telemetry_summary",
    "dump_window",
    "dump_summary",
    "kind_named",
    "kind_of_spec",
    "kind_of_summary",
    "kinds",
    "load_spec",
    "load_summary",
    "load_telemetry_summary",
    "load_window",
    "register_alias",
    "register_unit",
    "resolve_alias",
    "unit_info",
]
