"""A run report's figures (``numbers`` in ``report --json``), typed: per run its summary, telemetry, cost
document and throughput points, and the comparison document. Apart from ``report/model.py`` (the sections a
renderer lays out), so that reading a report's page model imports nothing of the cost model.
"""

from __future__ import annotations

from pydantic import Field, field_serializer

from gpuledger.cost.comparison.compare import ComparisonDocument
from gpuledger.cost.pricing.document import CostDocument
from gpuledger.records import DeviceWindow, RunSummary, dump_summary
from gpuledger.records.spec import LikeOrigin
from gpuledger.report.model import JsonObject, ReportData, ReportModel, none


class ThroughputPoint(ReportModel):
    """One load level of a run (a sweep stage, or the whole run): what the throughput section plots.
    ``None`` where the run's summary has no such figure."""

    stage: str
    concurrency: float | None
    requests_per_s: float | None
    output_tokens_per_s: float | None
    output_tokens_per_s_per_gpu: float | None
    tokens_per_s_per_user: float | None
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    num_ok: int | None


class RunNumbers(ReportModel):
    """The figures of one run of a report: its typed summary (dumped as ``dump_summary`` dumps it: the
    fields that were set, and the kind), where that summary came from, the telemetry summary as stored (a
    ``DeviceWindow`` per device, dumped as its fields that were set), how many accelerators served it, its
    throughput points, its price (the cost document ``gpuledger cost --json`` prints) or why it has none;
    the server's state over the window and where the workload came from only for runs that record them."""

    id: str
    name: str
    summary_source: str
    summary: RunSummary | None
    telemetry_summary: tuple[DeviceWindow, ...]
    accelerators: int
    throughput_points: tuple[ThroughputPoint, ...]
    cost: CostDocument | None
    cost_error: str | None
    server_state: JsonObject | None = Field(default=None, exclude_if=none)
    workload_like: LikeOrigin | None = Field(default=None, exclude_if=none)

    @field_serializer("summary")
    def _summary(self, summary: RunSummary | None) -> JsonObject:
        return dump_summary(summary)


class ReportNumbers(ReportModel):
    """The machine-readable figures of a report (``numbers`` in ``report --json``): per run, and the
    comparison of the first run with the others (``gpuledger compare --json``'s document) or why there is
    none (``None`` for a report of one run)."""

    gpuledger_version: str
    runs: tuple[RunNumbers, ...]
    comparison: ComparisonDocument | None
    comparison_error: str | None

    def run(self, run_id: str) -> RunNumbers:
        for r in self.runs:
            if r.id == run_id:
                return r
        raise KeyError(run_id)


class RunReport(ReportData):
    """The report of one run or a comparison of several (``build_report``); its dump is ``report --json``
    (less the ``files`` written)."""

    numbers: ReportNumbers
