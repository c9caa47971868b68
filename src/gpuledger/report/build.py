"""``build_report``: read runs from the store and assemble every section of the report.

Everything here is recomputed from stored data: the run header and its cached summary, the
per-request timings (for the latency distributions), the telemetry samples (for power and
utilisation over time), the doctor runs (setup-labour ledger) and the cost model. A part that
cannot be shown says so and why, in the section's ``not_measured`` lines. The sections every run has
are built by their modules under ``gpuledger.report.sections``; each kind the runs are of adds its own,
from its ``report`` facet (``report.kinds``), given only its runs. A section that cannot apply to a kind
is not drawn. This module reads the runs and puts the sections in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from gpuledger import __version__
from gpuledger.bench.metrics import summarize_run
from gpuledger.errors import UsageError
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.report import costs as cost_part
from gpuledger.report.headline import answer_section
from gpuledger.report.kinds import ReportOptions, kind_sections, report_of
from gpuledger.report.model import RunRef
from gpuledger.report.numbers import ReportNumbers, RunNumbers, RunReport, ThroughputPoint
from gpuledger.report.rundata import ProgressFn, ReportStore, RunData
from gpuledger.report.sections.environment import environment_section
from gpuledger.report.sections.how import how_measured_section
from gpuledger.report.sections.labour import labour_section
from gpuledger.report.sections.overview import overview_section
from gpuledger.report.sections.telemetry import telemetry_section

__all__ = ["ProgressFn", "ReportStore", "RunData", "build_report"]


def build_report(
    store: ReportStore,
    run_ids: Sequence[str],
    profiles: Mapping[str, str] | None = None,
    *,
    progress: ProgressFn | None = None,
    images: bool = True,
) -> RunReport:
    """Build the report for one run or a comparison of several.

    ``run_ids`` are ids or unambiguous prefixes (``NotFoundError`` otherwise). ``profiles`` maps a
    run id/prefix to a cost profile name or path; the key ``"*"`` applies to every run without
    its own entry; runs without a profile are priced with ``gpuledger.cost.default_profile_for``.
    ``images``: the image runs' thumbnails in the report (``--no-images``: left out).
    """
    say = progress or (lambda _msg: None)
    if not run_ids:
        raise UsageError("give at least one run id")
    infos: list[RunInfo] = []
    for rid in run_ids:
        info = store.get_run(rid)
        if any(i.id == info.id for i in infos):
            raise UsageError(f"run {info.id} is given twice")
        infos.append(info)
    profile_for = _resolve_profiles(store, infos, profiles or {})
    refs = _run_refs(infos)

    runs: list[RunData] = []
    for info, ref in zip(infos, refs, strict=True):
        say(f"reading run {info.id}")
        # A finalised run's numbers come from its stored summary: its kind says how many requests' chunk
        # times its sections need (text generation's ITL plot: a systematic sample of a 100k-request run).
        every = report_of(info).request_stride(info) if info.summary else 1
        requests = store.get_requests(info.id, chunks_every=every)
        telemetry = store.get_telemetry(info.id)
        typed, summary_source = _summary(info, requests)
        # What the sections and the cost part read: the stored summary, or the one recomputed now.
        info = replace(info, summary=typed)
        n_acc, acc_note = _accelerators(info)
        runs.append(
            RunData(
                info=info,
                ref=ref,
                summary_source=summary_source,
                requests=requests,
                telemetry=telemetry,
                profile=profile_for.get(info.id),
                accelerators=n_acc,
                accelerator_note=acc_note,
            )
        )

    say("reading the setup-labour ledger")
    doctor_runs = store.list_doctor_runs()
    say("computing cost")
    costs = cost_part.cost_runs(runs, doctor_runs)

    say("assembling sections")
    # The answer first; each kind's own sections after the cost (in the registry's order of the kinds);
    # the environment (dozens of rows, no money) folded at the end.
    sections = (
        answer_section(runs, costs),
        overview_section(runs),
        cost_part.cost_section(runs, costs),
        *kind_sections(runs, ReportOptions(images=images)),
        telemetry_section(runs),
        labour_section(runs, doctor_runs),
        how_measured_section(runs),
        environment_section(runs, doctor_runs).model_copy(update={"collapsed": True}),
    )
    numbers = ReportNumbers(
        gpuledger_version=__version__,
        runs=tuple(_run_numbers(r, costs) for r in runs),
        comparison=costs.comparison.document() if costs.comparison is not None else None,
        comparison_error=costs.comparison_error,
    )
    title = (
        f"gpuledger report — {runs[0].ref.name}"
        if len(runs) == 1
        else "gpuledger comparison — " + " vs ".join(r.ref.name for r in runs)
    )
    return RunReport(
        title=title,
        generated_at=datetime.now(UTC),
        runs=tuple(r.ref for r in runs),
        sections=sections,
        numbers=numbers,
    )


def _resolve_profiles(
    store: ReportStore, infos: list[RunInfo], profiles: Mapping[str, str]
) -> dict[str, str]:
    out: dict[str, str] = {}
    default = profiles.get("*")
    for key, profile in profiles.items():
        if key == "*":
            continue
        info = store.get_run(key)
        if not any(i.id == info.id for i in infos):
            raise UsageError(f"--profile {key}={profile}: run {info.id} is not in this report")
        out[info.id] = profile
    if default is not None:
        for info in infos:
            out.setdefault(info.id, default)
    return out


def _run_refs(infos: list[RunInfo]) -> list[RunRef]:
    labels = [i.label.strip() for i in infos]
    refs = []
    for info, label in zip(infos, labels, strict=True):
        name = label if label and labels.count(label) == 1 else (f"{label} ({info.id})" if label else info.id)
        refs.append(
            RunRef(
                id=info.id,
                name=name,
                label=info.label,
                model=info.model,
                engine=info.engine,
                status=info.status,
                started_at=info.started_at,
            )
        )
    return refs


def _summary(info: RunInfo, requests: list[RequestRecord]) -> tuple[RunSummary | None, str]:
    """The run's cached summary, or — when the run was never finalised (killed, incomplete) —
    the summary recomputed now from its stored requests by the same metrics functions, with the run's
    SLOs and sweep stages."""
    if info.summary is not None:
        origin = info.summary.origin()
        if origin is not None:
            return info.summary, f"{origin.label} (stored by gpuledger import-results)"
        return info.summary, "stored summary (gpuledger.bench.metrics at the end of the run)"
    if not requests:
        return None, "no requests stored"
    return (
        summarize_run(info, requests),
        "recomputed now from the stored requests (gpuledger.bench.metrics)",
    )


def _accelerators(info: RunInfo) -> tuple[int, str]:
    """How many accelerators served the run: the GPUs the telemetry saw working (the cost model's
    count), else the GPU count of the environment fingerprint, else 1 (a CPU run)."""
    from gpuledger.cost.pricing.runview import gpu_devices

    used, idle = gpu_devices(info)
    origin = info.summary.origin() if info.summary is not None and not used else None
    if origin is not None and origin.gpus:
        return origin.gpus, f"{origin.gpus} GPU(s), as {origin.by}"
    if used:
        note = f"{len(used)} GPU(s) seen working by the telemetry sampler"
        if idle:
            note += f" ({len(idle)} more stayed idle and are not counted)"
        return len(used), note
    count = info.environment.gpu_count
    if count:
        return int(count), f"{int(count)} GPU(s) in the environment fingerprint (no GPU telemetry in the run)"
    return 1, "no GPU in the run's telemetry or environment: throughput is per machine (a CPU run)"


def _run_numbers(r: RunData, costs: cost_part.Costs) -> RunNumbers:
    """The figures of one run: its typed summary, telemetry summary, throughput points and price; the
    server's state over the window (``RunInfo.server.state``) and where the workload came from
    (``RunInfo.config.like``) only for runs that record them."""
    state = r.info.server.get("state") if isinstance(r.info.server, Mapping) else None
    return RunNumbers(
        id=r.info.id,
        name=r.ref.name,
        summary_source=r.summary_source,
        summary=r.info.summary,
        telemetry_summary=tuple(r.info.telemetry_summary),
        accelerators=r.accelerators,
        throughput_points=tuple(
            ThroughputPoint.model_validate(p) for p in r.extra.get("stage_points", ())
        ),
        cost=cost.document() if (cost := costs.per_run.get(r.info.id)) is not None else None,
        cost_error=costs.errors.get(r.info.id),
        server_state=dict(state) if isinstance(state, Mapping) else None,
        workload_like=r.info.config.like,
    )
