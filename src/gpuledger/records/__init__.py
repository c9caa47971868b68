"""The records every part of gpuledger exchanges: a run, its requests, its telemetry samples, its summary.

These are the contract between engines/bench (which produce them), the store (which keeps them), and
metrics/cost/report (pure functions over them); see ``run.py``, ``summary.py`` and ``units.py``.
"""

from gpuledger.records import image, published, textgen, torchspec, training, trainspec
from gpuledger.records.origin import Origin
from gpuledger.records.published import PublishedSummary
from gpuledger.records.run import (
    RUN_STATUSES,
    TOKEN_SOURCES,
    DoctorRunRecord,
    RequestRecord,
    RunInfo,
    RunStatus,
    TelemetrySample,
    TokenSource,
)
from gpuledger.records.spec import BenchSpec, ServerSpec, SpecError, dump_spec, load_spec
from gpuledger.records.summary import (
    RunSummary,
    SummaryError,
    WorkSummary,
    dump_summary,
    load_summary,
)
from gpuledger.records.textgen import Latency, SloOutcome, TextGenerationSummary, TextStageSummary
from gpuledger.records.torchspec import TorchSpec
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
    "PublishedSummary",
    "RequestRecord",
    "RunInfo",
    "RunStatus",
    "RunSummary",
    "ServerSpec",
    "SloOutcome",
    "SpecError",
    "SummaryError",
    "TelemetrySample",
    "TextGenerationSummary",
    "TextStageSummary",
    "TokenSource",
    "TorchSpec",
    "UnitInfo",
    "Work",
    "WorkSummary",
    "alias_of",
    "register_alias",
    "resolve_alias",
    "dump_spec",
    "dump_summary",
    "load_spec",
    "load_summary",
    "published",
    "register_unit",
    "image",
    "textgen",
    "torchspec",
    "training",
    "trainspec",
    "unit_info",
]
