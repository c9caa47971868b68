"""``build_report``: read runs from the store and assemble every section of the report.

Everything here is recomputed from stored data: the run header and its cached summary, the
per-request timings (for the latency distributions), the telemetry samples (for power and
utilisation over time), the doctor runs (setup-labour ledger) and the cost model. A part that
cannot be shown says so and why, in the section's ``not_measured`` lines.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from gpuledger import __version__
from gpuledger.bench.metrics import e2e_s, itl_s, summarize_run, ttft_s
from gpuledger.errors import UsageError
from gpuledger.records import (
    DoctorRunRecord,
    RequestRecord,
    RunInfo,
    RunSummary,
    TelemetrySample,
    dump_summary,
)
from gpuledger.report import costs as cost_part
from gpuledger.report import fmt
from gpuledger.report import serverstate as state_part
from gpuledger.report.definitions import METRIC_DEFINITIONS
from gpuledger.report.headline import answer_section
from gpuledger.report.model import (
    Figure,
    ReportData,
    RunRef,
    Section,
    Series,
    SeriesDash,
    SeriesMode,
    Table,
)
from gpuledger.report.series import bucket_means, cdf_points, pareto_front, stride_for

# At most this many per-token gaps are drawn in the ITL distribution; beyond it, every k-th
# request is taken (the table's percentiles still come from all requests, via the summary).
ITL_GAP_BUDGET = 200_000
LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)
# The latency table's columns: the stored summary's keys of each metric's block.
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "std", "min", "max", "n")
ACCELERATOR_VENDORS = ("nvidia", "amd")


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
    summary: dict[str, Any]  # the typed summary's document (dump_summary), for the tables
    summary_source: str
    requests: list[RequestRecord]
    telemetry: list[TelemetrySample]
    profile: str | None
    accelerators: int
    accelerator_note: str
    extra: dict[str, Any] = field(default_factory=dict)


def build_report(
    store: ReportStore,
    run_ids: Sequence[str],
    profiles: Mapping[str, str] | None = None,
    *,
    progress: ProgressFn | None = None,
) -> ReportData:
    """Build the report for one run or a comparison of several.

    ``run_ids`` are ids or unambiguous prefixes (``NotFoundError`` otherwise). ``profiles`` maps a
    run id/prefix to a cost profile name or path; the key ``"*"`` applies to every run without
    its own entry; runs without a profile are priced with ``gpuledger.cost.default_profile_for``.
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
        # A finalised run's numbers come from its stored summary; the per-token (ITL) plot then needs
        # chunk times for a systematic sample of requests only, which keeps 100k-request runs fast.
        every = stride_for(_expected_gaps(info), ITL_GAP_BUDGET) if info.summary else 1
        requests = store.get_requests(info.id, chunks_every=every)
        telemetry = store.get_telemetry(info.id)
        typed, summary_source = _summary(info, requests)
        summary = dump_summary(typed)
        # What the sections and the cost part read: the stored summary, or the one recomputed now.
        info = replace(info, summary=typed)
        n_acc, acc_note = _accelerators(info)
        runs.append(
            RunData(
                info=info,
                ref=ref,
                summary=summary,
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
    throughput = _throughput(runs)
    server_state = _server_state(runs)
    if server_state is None:
        # No run records the server's view: one line says why, where the section would have been.
        throughput = replace(throughput, not_measured=(*throughput.not_measured, _no_server_state(runs)))
    # The answer first; the environment (dozens of rows, no money) folded at the end.
    sections = (
        answer_section(runs, costs),
        _overview(runs),
        cost_part.cost_section(runs, costs),
        _latency(runs),
        throughput,
        *((server_state,) if server_state is not None else ()),
        _telemetry(runs),
        _labour(runs, doctor_runs),
        _how_measured(runs),
        replace(_environment(runs, doctor_runs), collapsed=True),
    )
    numbers: dict[str, Any] = {
        "gpuledger_version": __version__,
        "runs": [
            {
                "id": r.info.id,
                "name": r.ref.name,
                "summary_source": r.summary_source,
                "summary": r.summary,
                "telemetry_summary": r.info.telemetry_summary,
                "accelerators": r.accelerators,
                "throughput_points": r.extra.get("stage_points", []),
                "cost": costs.numbers(r.info.id),
                "cost_error": costs.errors.get(r.info.id),
                **_optional_numbers(r.info),
            }
            for r in runs
        ],
        "comparison": costs.comparison.to_dict() if costs.comparison is not None else None,
        "comparison_error": costs.comparison_error,
    }
    title = (
        f"gpuledger report — {runs[0].ref.name}"
        if len(runs) == 1
        else "gpuledger comparison — " + " vs ".join(r.ref.name for r in runs)
    )
    return ReportData(
        title=title,
        generated_at=datetime.now(UTC),
        runs=tuple(r.ref for r in runs),
        sections=sections,
        numbers=numbers,
    )


# --------------------------------------------------------------------------------------- inputs


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
    from gpuledger.cost.runview import gpu_devices

    used, idle = gpu_devices(info)
    if used:
        note = f"{len(used)} GPU(s) seen working by the telemetry sampler"
        if idle:
            note += f" ({len(idle)} more stayed idle and are not counted)"
        return len(used), note
    count = _number(info.environment.get("gpu_count")) if isinstance(info.environment, Mapping) else None
    if count:
        return int(count), f"{int(count)} GPU(s) in the environment fingerprint (no GPU telemetry in the run)"
    return 1, "no GPU in the run's telemetry or environment: throughput is per machine (a CPU run)"


def _stages(summary: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    stages = summary.get("stages")
    if isinstance(stages, Mapping):
        return [(str(k), dict(v)) for k, v in stages.items() if isinstance(v, Mapping)]
    if isinstance(stages, list):
        out = []
        for i, st in enumerate(stages):
            if isinstance(st, Mapping):
                name = st.get("stage") or st.get("name") or str(i)
                out.append((str(name), dict(st)))
        return out
    return []


_CONCURRENCY_STAGE = re.compile(r"^c=(\d+)$")


def _concurrency(stage_name: str, stage: Mapping[str, Any], config: Mapping[str, Any]) -> float | None:
    """The fixed concurrency of a sweep stage, or of a whole run at one load level (``None`` for a
    request-rate load, which has no fixed concurrency). Bench records it as the stage's
    ``concurrency`` parameter and in ``RunInfo.config["load"]["stages"]``."""
    value = _number(stage.get("concurrency"))
    if value is not None:
        return value
    m = _CONCURRENCY_STAGE.match(stage_name)
    if m:
        return float(m.group(1))
    if stage_name:
        return None
    load = config.get("load")
    stages = load.get("stages") if isinstance(load, Mapping) else None
    if isinstance(stages, list) and len(stages) == 1 and isinstance(stages[0], Mapping):
        return _number(stages[0].get("concurrency"))
    return _number(config.get("concurrency"))


def _block(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    block = summary.get(key)
    return block if isinstance(block, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _like_of(info: RunInfo) -> Mapping[str, Any] | None:
    """``RunInfo.config["like"]`` of a run made with ``bench --like RUN`` (its workload was copied)."""
    config = info.config if isinstance(info.config, Mapping) else {}
    like = config.get("like")
    return like if isinstance(like, Mapping) and isinstance(like.get("run_id"), str) else None


def _optional_numbers(info: RunInfo) -> dict[str, Any]:
    """Per-run JSON numbers that only runs recording them have: the server's state over the window
    (``RunInfo.server.state``) and where the workload came from (``RunInfo.config.like``)."""
    out: dict[str, Any] = {}
    state = state_part.state_of(info)
    if state is not None:
        out["server_state"] = dict(state)
    like = _like_of(info)
    if like is not None:
        out["workload_like"] = dict(like)
    return out


# ---------------------------------------------------------------------------- tables and series


def _tabulate(key: str, title: str, rows: Sequence[Mapping[str, str]], provenance: str) -> tuple[Table, ...]:
    """A section's table from rows that map each column header to its cell, so that a header is
    declared once, next to the value under it. No rows, no table: the section's not-measured lines
    say why."""
    if not rows:
        return ()
    columns = tuple(rows[0])
    for row in rows:
        if tuple(row) != columns:
            raise ValueError(f"table {key!r}: a row has columns {tuple(row)}, the first row {columns}")
    return (
        Table(
            key=key,
            title=title,
            columns=columns,
            rows=tuple(tuple(row.values()) for row in rows),
            provenance=provenance,
        ),
    )


def _line_mode(points: int) -> SeriesMode:
    """Markers on a line only while there are few enough points to tell them apart."""
    return "lines+markers" if points <= 20 else "lines"


def _xy_series(
    name: str,
    points: Sequence[tuple[float, float]],
    *,
    mode: SeriesMode,
    color: int,
    group: str = "",
    dash: SeriesDash = "solid",
) -> Series:
    return Series(
        name=name,
        x=tuple(x for x, _ in points),
        y=tuple(y for _, y in points),
        mode=mode,
        dash=dash,
        group=group,
        color=color,
    )


# ------------------------------------------------------------------------------------- sections


def _overview(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    for r in runs:
        s = r.summary
        rows.append(
            {
                "run": r.ref.name,
                "id": r.info.id,
                "model": fmt.text(r.info.model),
                "engine": fmt.text(r.info.engine),
                "status": r.info.status,
                "started": fmt.when(r.info.started_at),
                "ok requests": fmt.num(s.get("num_ok")),
                "failed": fmt.num(s.get("num_failed")),
                "error rate (%)": fmt.pct(s.get("error_rate")),
                "window (s)": fmt.num(s.get("window_s")),
                "output tok/s": fmt.num(s.get("output_tokens_per_s")),
                "total tok/s": fmt.num(s.get("total_tokens_per_s")),
                "req/s": fmt.num(s.get("requests_per_s")),
                "goodput (req/s)": fmt.num(s.get("goodput_requests_per_s")),
            }
        )
        if not s:
            missing.append(f"{r.ref.name}: no summary — the run has no stored requests")
        if r.info.status != "complete":
            missing.append(
                f"{r.ref.name}: status is {r.info.status!s} — numbers cover the requests that finished"
            )
    return Section(
        key="overview",
        title="Overview",
        intro=f"{len(runs)} run(s). Every number below is recomputable from the store.",
        tables=_tabulate(
            "overview",
            "Runs",
            rows,
            "Counts and rates over the measured window (first send → last finish, warmup excluded); "
            "tokens as counted per request (see how measured); goodput only when SLOs were given.",
        ),
        not_measured=tuple(missing),
    )


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = fmt.text(value)


# Which fingerprint/server keys answer the questions a reader asks first, in order.
_ENV_FIRST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU", ("gpus", "gpu", "gpu_names", "devices")),
    ("driver", ("driver", "driver_version", "nvidia_driver", "amdgpu_driver")),
    ("CUDA", ("cuda", "cuda_version", "cuda_driver_version")),
    ("ROCm", ("rocm", "rocm_version")),
    ("torch", ("torch", "torch_version")),
    ("OS", ("os", "distro")),
    ("kernel", ("kernel", "kernel_release")),
    ("python", ("python", "python_version")),
    ("fingerprint hash", ("hash",)),
)


_SERVER_FIRST = ("kind", "name", "engine", "server", "version", "engine_version")


def _env_value(env: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in env and env[k] not in (None, "", [], {}):
            value = env[k]
            if isinstance(value, list):
                return ", ".join(
                    fmt.text(v.get("name") or v) if isinstance(v, Mapping) else fmt.text(v) for v in value
                )
            if isinstance(value, Mapping):
                inner: dict[str, str] = {}
                _flatten("", value, inner)
                return "; ".join(f"{k2}={v2}" for k2, v2 in inner.items())
            return fmt.text(value)
    return None


def _machine_of(info: RunInfo) -> str | None:
    """The host a run was measured on, found the way the cost model finds it for the labour ledger."""
    from gpuledger.cost.runview import machine_name

    return machine_name(info)


def _doctor_status(info: RunInfo, doctor_runs: list[DoctorRunRecord]) -> str:
    machine = _machine_of(info)
    if machine is None:
        return "unknown — the run does not record its machine"
    mine = [d for d in doctor_runs if d.machine == machine]
    if info.started_at is not None:
        mine = [d for d in mine if _aware(d.created_at) <= _aware(info.started_at)]
    if not mine:
        return f"no doctor run stored for {machine} before this run"
    last = max(mine, key=lambda d: _aware(d.created_at))
    verdict = (
        "ok"
        if last.errors == 0 and last.warnings == 0
        else (f"{last.errors} error(s), {last.warnings} warning(s)")
    )
    return f"{verdict} (doctor {fmt.when(last.created_at)})"


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _environment(runs: list[RunData], doctor_runs: list[DoctorRunRecord]) -> Section:
    missing = []
    per_run: list[dict[str, str]] = []
    for r in runs:
        env = r.info.environment or {}
        rows: dict[str, str] = {}
        gpu_names = [
            f"{d.get('name') or d.get('device')}"
            for d in r.info.telemetry_summary
            if str(d.get("vendor", "")).lower() in ACCELERATOR_VENDORS
        ]
        for label, keys in _ENV_FIRST:
            value = _env_value(env, keys)
            if label == "GPU" and value is None and gpu_names:
                value = ", ".join(gpu_names) + " (telemetry)"
            rows[label] = value if value is not None else fmt.MISSING
        server = r.info.server or {}
        engine = _env_value(server, _SERVER_FIRST[:4])
        version = _env_value(server, _SERVER_FIRST[4:])
        rows["engine"] = (
            " ".join(p for p in (engine or r.info.engine or "", version or "") if p) or fmt.MISSING
        )
        rows["doctor status"] = _doctor_status(r.info, doctor_runs)
        used = {k for _, keys in _ENV_FIRST for k in keys}
        rest: dict[str, str] = {}
        _flatten("", {k: v for k, v in env.items() if k not in used}, rest)
        for k, v in rest.items():
            rows[f"env: {k}"] = v
        server_rest: dict[str, str] = {}
        # The server's state over the window has its own section.
        _flatten("", {k: v for k, v in server.items() if k not in (*_SERVER_FIRST, "state")}, server_rest)
        for k, v in server_rest.items():
            rows[f"server: {k}"] = v
        if not env:
            missing.append(
                f"{r.ref.name}: no environment fingerprint stored (recorded by bench via gpuledger.lock)"
            )
        elif "error" in env:
            missing.append(f"{r.ref.name}: environment fingerprint failed: {fmt.text(env['error'])}")
        per_run.append(rows)
    items: list[str] = []
    for rows in per_run:
        items.extend(k for k in rows if k not in items)
    columns: tuple[str, ...] = ("item", *[r.ref.name for r in runs])
    if len(runs) > 1:
        columns = (*columns, "same?")
    table_rows = []
    for k in items:
        values = [rows.get(k, fmt.MISSING) for rows in per_run]
        row = (k, *values)
        if len(runs) > 1:
            row = (*row, "yes" if len(set(values)) == 1 else "differs")
        table_rows.append(row)
    return Section(
        key="environment",
        title="Environment",
        intro="The software stack each run was measured on, as fingerprinted at the start of the run, and "
        "the server's own identity. Differences between runs are flagged: a comparison is only as fair "
        "as its stacks are comparable.",
        tables=(
            Table(
                key="environment",
                title="Environment per run",
                columns=columns,
                rows=tuple(table_rows),
                provenance="RunInfo.environment (gpuledger.lock.fingerprint at run start), RunInfo.server "
                "(server endpoints such as /version), doctor status from the newest stored doctor run of "
                "the same machine before the run.",
                align_numbers=False,
            ),
        ),
        not_measured=tuple(missing),
    )


def _expected_gaps(info: RunInfo) -> int:
    """Token gaps a finalised run holds, from its summary (output tokens − one per request)."""
    summary = info.summary
    if summary is None:
        return 0
    w = summary.work().get(summary.headline())
    n = summary.num_ok or info.num_requests
    return max(0, int(w.count) - int(n)) if w is not None else 0


def _latency_samples(r: RunData) -> tuple[dict[str, list[float]], str]:
    """Per-request TTFT and E2E (all requests) and per-token ITL (every k-th request past
    ``ITL_GAP_BUDGET`` gaps), in ms, from the stored timestamps, by the bench's metric functions."""

    ok = [q for q in r.requests if q.error is None]
    ttft = [v * 1000.0 for v in (ttft_s(q) for q in ok) if v is not None]
    e2e = [v * 1000.0 for v in (e2e_s(q) for q in ok) if v is not None]
    with_chunks = [q for q in ok if q.chunk_times]
    total_gaps = sum(len(q.chunk_times) - 1 for q in with_chunks)
    step = stride_for(total_gaps, ITL_GAP_BUDGET)
    chosen = with_chunks[::step]
    if len(with_chunks) < len(ok):  # the store already sampled: every k-th request by index
        step = max(1, round(len(ok) / max(1, len(with_chunks))))
    itl = [v * 1000.0 for q in chosen for v in itl_s(q)]
    note = (
        f"latency plots from all {len(ok)} successful requests"
        if step == 1
        else f"ITL plot drawn from every {step}th successful request ({len(chosen)} of {len(ok)}, "
        f"{len(itl)} token gaps); TTFT and E2E plots and the table's percentiles use all requests"
    )
    return {"ttft_ms": ttft, "e2e_ms": e2e, "itl_ms": itl}, note


def _latency(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    for r in runs:
        for key, label in LATENCY_METRICS:
            b = _block(r.summary, key)
            if not b or not b.get("n"):
                missing.append(f"{r.ref.name} {label}: {_why_no_latency(r, key)}")
                continue
            rows.append({"run": r.ref.name, "metric": label, **{k: fmt.num(b.get(k)) for k in LATENCY_STATS}})
    samples = {r.info.id: _latency_samples(r) for r in runs}
    figures = []
    notes = []
    for key, label, what in (
        ("ttft_ms", "TTFT", "time to first token"),
        ("itl_ms", "ITL", "inter-token latency, per token"),
        ("e2e_ms", "E2E", "end-to-end request latency"),
    ):
        series = []
        drawn = 0
        for i, r in enumerate(runs):
            values = samples[r.info.id][0][key]
            if not values:
                continue
            x, y = cdf_points(values)
            drawn = max(drawn, len(values))
            series.append(
                Series(name=r.ref.name, x=tuple(x), y=tuple(y), mode=_line_mode(len(x)), shape="hv", color=i)
            )
        if not series:
            continue
        # A log axis spreads tails apart but cannot show zeros (tokens that arrived in one burst).
        positive = all(v > 0 for s_ in series for v in s_.x if isinstance(v, float | int))
        figures.append(
            Figure(
                key=f"cdf_{key}",
                title=f"{label} distribution ({what})",
                kind="line",
                x_title=f"{label} (ms)",
                y_title="fraction of " + ("tokens" if key == "itl_ms" else "requests") + " ≤ x",
                series=tuple(series),
                provenance="Empirical CDF of client-side timings from the store; at most "
                "600 points per run taken at evenly spaced ranks (exact values, min and max kept)"
                + (
                    "." if positive else "; linear axis: some values are 0 ms (tokens that arrived together)."
                ),
                x_log=positive,
            )
        )
    for r in runs:
        notes.append(f"{r.ref.name}: {samples[r.info.id][1]}.")
    return Section(
        key="latency",
        title="Latency distributions",
        intro="How long users wait: first token (TTFT), between tokens (ITL, TPOT), whole request (E2E).",
        tables=_tabulate(
            "latency",
            "Latency (ms)",
            rows,
            "Milliseconds, client-side timestamps (time.perf_counter) of every successful request; "
            "n = requests (TTFT, TPOT, E2E) or tokens (ITL). Definitions under how measured.",
        ),
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=tuple(notes),
    )


def _why_no_latency(r: RunData, key: str) -> str:
    if not r.requests:
        return "no request was stored for this run"
    if not any(q.error is None for q in r.requests):
        return "every request failed"
    if key == "tpot_ms":
        return "no request produced more than one output token"
    if key == "itl_ms":
        return "no request produced two or more content chunks"
    return "the stored summary has no such block"


def _stage_points(r: RunData) -> list[dict[str, Any]]:
    config = r.info.config or {}
    stages = _stages(r.summary)
    if not stages:
        stages = [("", r.summary)] if r.summary else []
    points = []
    for name, st in stages:
        out_tps = _number(st.get("output_tokens_per_s"))
        tpot_p50 = _number(_block(st, "tpot_ms").get("p50"))
        points.append(
            {
                "stage": name or "whole run",
                "concurrency": _concurrency(name, st, config),
                "requests_per_s": _number(st.get("requests_per_s")),
                "output_tokens_per_s": out_tps,
                "output_tokens_per_s_per_gpu": out_tps / r.accelerators if out_tps is not None else None,
                "tokens_per_s_per_user": 1000.0 / tpot_p50 if tpot_p50 else None,
                "ttft_p50_ms": _number(_block(st, "ttft_ms").get("p50")),
                "tpot_p50_ms": tpot_p50,
                "num_ok": st.get("num_ok"),
            }
        )
    return points


def _throughput(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    conc_series = []
    pareto_series = []
    per_run_points = {}
    for i, r in enumerate(runs):
        pts = _stage_points(r)
        per_run_points[r.info.id] = pts
        r.extra["stage_points"] = pts
        if not _stages(r.summary):
            missing.append(
                f"{r.ref.name}: one load level only — throughput vs concurrency and the Pareto frontier need "
                "a sweep (gpuledger bench --sweep 1,4,16,64); its single point is shown"
            )
        for p in pts:
            rows.append(
                {
                    "run": r.ref.name,
                    "stage": p["stage"],
                    "concurrency": fmt.num(p["concurrency"]),
                    "req/s": fmt.num(p["requests_per_s"]),
                    "output tok/s": fmt.num(p["output_tokens_per_s"]),
                    "output tok/s per GPU": fmt.num(p["output_tokens_per_s_per_gpu"]),
                    "tok/s per user": fmt.num(p["tokens_per_s_per_user"]),
                    "TTFT p50 (ms)": fmt.num(p["ttft_p50_ms"]),
                    "TPOT p50 (ms)": fmt.num(p["tpot_p50_ms"]),
                }
            )
        conc = sorted(
            (p["concurrency"], p["output_tokens_per_s"])
            for p in pts
            if p["concurrency"] is not None and p["output_tokens_per_s"] is not None
        )
        if conc:
            conc_series.append(_xy_series(r.ref.name, conc, mode="lines+markers", color=i))
        else:
            missing.append(
                f"{r.ref.name}: throughput vs concurrency — the run's concurrency is not recorded "
                "(a request-rate run has no fixed concurrency)"
            )
        par = [
            (p["tokens_per_s_per_user"], p["output_tokens_per_s_per_gpu"])
            for p in pts
            if p["tokens_per_s_per_user"] is not None and p["output_tokens_per_s_per_gpu"] is not None
        ]
        if par:
            pareto_series.append(_xy_series(r.ref.name, par, mode="markers", group=r.info.id, color=i))
            front = pareto_front(par)
            if len(front) > 1:
                pareto_series.append(
                    _xy_series(
                        f"{r.ref.name} — frontier", front, mode="lines", dash="dot", group=r.info.id, color=i
                    )
                )
        else:
            zero = any(p["tpot_p50_ms"] == 0 for p in pts)
            missing.append(
                f"{r.ref.name}: Pareto view — "
                + (
                    "the median TPOT is 0 ms (every token of a request arrived at once), "
                    "so tokens/s per user "
                    "is unbounded"
                    if zero
                    else "needs output tokens and a TPOT (requests with more than one output token)"
                )
            )
    figures = []
    if conc_series:
        figures.append(
            Figure(
                key="throughput_vs_concurrency",
                title="Output throughput vs concurrency",
                kind="line",
                x_title="concurrent requests",
                y_title="output tokens/s",
                series=tuple(conc_series),
                provenance="Per sweep stage: output tokens ÷ the stage's measured window (client count or "
                "server usage, see how measured).",
                x_log=True,
            )
        )
    if pareto_series:
        figures.append(
            Figure(
                key="pareto",
                title="Throughput per GPU vs tokens/s per user (Pareto view)",
                kind="scatter",
                x_title="tokens/s per user (1000 ÷ median TPOT ms)",
                y_title="output tokens/s per GPU",
                series=tuple(pareto_series),
                provenance="Each point a sweep stage (or a whole run); per GPU = ÷ "
                "accelerators the telemetry "
                "saw (1 for CPU runs); dotted line = points no other stage beats on both axes.",
            )
        )
    notes = tuple(f"{r.ref.name}: {r.accelerator_note}." for r in runs)
    return Section(
        key="throughput",
        title="Throughput and the Pareto view",
        intro="What the machine delivers as load rises, and the trade-off between total throughput and how "
        "fast each user sees tokens (the InferenceX view).",
        tables=_tabulate(
            "throughput",
            "Throughput per load level",
            rows,
            "Rates over each stage's measured window; tok/s per user = 1000 ÷ median TPOT (ms).",
        ),
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=notes,
    )


_STATE_WHAT = "server state (the server's own /metrics: requests running and waiting, KV cache, preemptions)"


def _stage_concurrency(stage_name: str, config: Mapping[str, Any]) -> float | None:
    """The concurrency of a sweep stage named in ``server.state.stages``: from its name (``c=16``) or
    from the stage of the same name in ``RunInfo.config["load"]["stages"]``."""
    m = _CONCURRENCY_STAGE.match(stage_name)
    if m:
        return float(m.group(1))
    load = config.get("load")
    stages = load.get("stages") if isinstance(load, Mapping) else None
    for st in stages if isinstance(stages, list) else []:
        if isinstance(st, Mapping) and str(st.get("stage")) == stage_name:
            return _number(st.get("concurrency"))
    return None


def _no_server_state(runs: list[RunData]) -> str:
    """The one line saying why no run of the report has a server state."""
    whys = [state_part.why_no_state(r.info) for r in runs]
    if len(set(whys)) == 1:
        return f"{_STATE_WHAT}: {whys[0]}" + (" (every run)" if len(runs) > 1 else "")
    return f"{_STATE_WHAT}: " + "; ".join(f"{r.ref.name}: {w}" for r, w in zip(runs, whys, strict=True))


def _server_state(runs: list[RunData]) -> Section | None:
    """The server's own view of each run: one row per run (and per sweep stage), what it says about the
    numbers ("why" lines), and for sweeps waiting and running requests against concurrency. ``None``
    when no run records a state at all (``_no_server_state`` then says why)."""
    states = {r.info.id: state_part.state_of(r.info) for r in runs}
    if all(st is None for st in states.values()):
        return None
    several = len(runs) > 1
    rows: list[dict[str, str]] = []
    missing: list[str] = []
    notes: list[str] = []
    plotted: list[tuple[int, RunData, list[tuple[float, Mapping[str, Any]]]]] = []
    any_sweep = False
    for i, r in enumerate(runs):
        state = states[r.info.id]
        subject = f"{r.ref.name} server state"
        if state is None:
            missing.append(f"{subject}: {state_part.why_no_state(r.info)}")
            continue
        if not state_part.sampled(state):
            missing.append(f"{subject}: {fmt.text(state.get('reason') or 'no scrapes stored')}")
            continue
        if not state.get("scrapes"):
            last = state.get("last_error")
            missing.append(
                f"{subject}: no scrape of /metrics answered during the measured window"
                + (f" (last error: {fmt.text(last)})" if last else "")
            )
            continue
        prefix = f"{r.ref.name}: " if several else ""
        blocks = state_part.blocks(state)
        for b in blocks:
            rows.append({"run": r.ref.name, "stage": b.stage, **state_part.row_cells(r.info, state, b)})
        caveat = state_part.failed_scrapes_line(state)
        if caveat:
            notes.append(prefix + caveat)
        why_prefix = f"{r.ref.name} — why: " if several else "why: "
        notes.extend(why_prefix + fmt.text(n) for n in state.get("notes") or [])
        config = r.info.config or {}
        stage_blocks = [b for b in blocks if not b.whole]
        any_sweep = any_sweep or bool(stage_blocks)
        if stage_blocks:
            points = [(_stage_concurrency(b.stage, config), b.block) for b in stage_blocks]
        else:
            points = [(_concurrency("", {}, config), state)]
        known = [(c, block) for c, block in points if c is not None]
        if known:
            plotted.append((i, r, sorted(known, key=lambda p: p[0])))
        elif stage_blocks:
            missing.append(
                f"{r.ref.name}: waiting vs concurrency — the run's stages have no fixed concurrency "
                "(a request-rate load)"
            )
    figure = _waiting_figure(plotted, several) if any_sweep else None
    return Section(
        key="server_state",
        title="Server state",
        intro="What the server itself reported while it was measured: how many requests it was running, how "
        "many it kept waiting in its queue, how full its KV cache was and how often it preempted sequences "
        "— the reasons behind the latency and throughput above.",
        tables=_tabulate(
            "server_state",
            "Server state over the measured window",
            rows,
            "The server's own Prometheus /metrics (source column), scraped every interval over the measured "
            "window by gpuledger bench (RunInfo.server.state). Running and waiting = requests, summed over "
            "the series' label sets; KV cache used = % of the KV cache in use (the fullest engine's); mean = "
            "mean over the scrapes, max = the highest scrape; preemptions = increase of the server's "
            "preemption counter over the window (or stage).",
        ),
        figures=(figure,) if figure is not None else (),
        not_measured=tuple(missing),
        notes=tuple(notes),
        terminal_notes=True,
    )


def _waiting_figure(
    plotted: list[tuple[int, RunData, list[tuple[float, Mapping[str, Any]]]]], several: bool
) -> Figure | None:
    series: list[Series] = []
    lines: tuple[tuple[str, str, str, SeriesDash], ...] = (
        ("waiting", "max", "waiting (max)", "solid"),
        ("waiting", "mean", "waiting (mean)", "dash"),
        ("running", "max", "running (max)", "dot"),
    )
    for i, r, points in plotted:
        for k, (key, which, label, dash) in enumerate(lines):
            xy = [(c, v) for c, block in points if (v := state_part.stat(block, key, which)) is not None]
            if not xy:
                continue
            series.append(
                _xy_series(
                    f"{r.ref.name} — {label}" if several else label,
                    xy,
                    mode="lines+markers",
                    color=i if several else k,
                    group=r.info.id,
                    dash=dash,
                )
            )
    if not series:
        return None
    return Figure(
        key="waiting_vs_concurrency",
        title="Waiting requests vs concurrency",
        kind="line",
        x_title="concurrent requests",
        y_title="requests (waiting in the server's queue; running)",
        series=tuple(series),
        provenance="Per sweep stage, from the server's own /metrics scraped over the stage: the most and the "
        "mean requests it kept waiting, and the most it ran at once. Waiting rising above 0 while running "
        "stops growing is the saturation point: more concurrency only queues.",
        x_log=True,
    )


# (figure key, title, y axis, scale, stored metrics drawn): GPUs report util_ratio, the CPU cpu_util_ratio.
_TS_FIGURES: tuple[tuple[str, str, str, float, tuple[str, ...]], ...] = (
    ("power", "Power over time", "power (W)", 1.0, ("power_w",)),
    ("utilisation", "Utilisation over time", "utilisation (%)", 100.0, ("util_ratio", "cpu_util_ratio")),
)


def _telemetry(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    for r in runs:
        devices = r.info.telemetry_summary
        if not devices:
            missing.append(
                f"{r.ref.name}: no telemetry — the run was benched with --no-telemetry, or no source "
                "could be read (gpuledger sample lists each source and why)"
            )
            continue
        out_tokens = _number(r.summary.get("output_tokens_total"))
        for d in devices:
            energy = _number(d.get("energy_j"))
            jpt = energy / out_tokens if energy is not None and out_tokens else None
            subject = f"{r.ref.name} {fmt.text(d.get('device'))} ({fmt.text(d.get('name'))})"
            raw_unavailable = d.get("unavailable")
            unavailable: Mapping[str, Any] = raw_unavailable if isinstance(raw_unavailable, Mapping) else {}
            if d.get("mean_power_w") is None:
                why = unavailable.get("power_w") or d.get("energy_reason") or "no power readings"
                missing.append(f"{subject} power and energy: {fmt.text(why)}")
            elif energy is None:
                missing.append(f"{subject} energy: {fmt.text(d.get('energy_reason') or 'no energy figure')}")
            for metric, reason in unavailable.items():
                if metric not in ("power_w", "energy_j"):
                    missing.append(f"{subject} {metric}: {fmt.text(reason)}")
            method = d.get("energy_method")
            method_text = fmt.text(method) if method else fmt.MISSING
            if method and d.get("energy_reason"):
                method_text += f" ({fmt.text(d.get('energy_reason'))})"
            validity = "valid" if d.get("valid", True) else f"invalid: {fmt.text(d.get('validity_reason'))}"
            mem_total = d.get("memory_total_bytes")
            memory = fmt.gib(d.get("peak_memory_bytes")) + (f" / {fmt.gib(mem_total)}" if mem_total else "")
            rows.append(
                {
                    "run": r.ref.name,
                    "device": fmt.text(d.get("device")),
                    "name": fmt.text(d.get("name")),
                    "mean util (%)": fmt.pct(d.get("mean_util_ratio")),
                    "peak util (%)": fmt.pct(d.get("peak_util_ratio")),
                    "mean power (W)": fmt.num(d.get("mean_power_w")),
                    "peak power (W)": fmt.num(d.get("peak_power_w")),
                    "energy (J)": fmt.num(energy),
                    "energy method": method_text,
                    "J per output token": fmt.num(jpt),
                    "peak / total memory (GiB)": memory,
                    "samples": fmt.num(d.get("samples")),
                    "interval (s)": fmt.num(d.get("interval_s")),
                    "sources": fmt.text(d.get("sources")),
                    "validity": validity,
                }
            )
    figures = []
    for key, title, y_title, scale, metrics in _TS_FIGURES:
        series = []
        buckets = 1
        for r in runs:
            grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for sample in r.telemetry:
                if sample.metric in metrics:
                    grouped[sample.device].append((sample.t, sample.value * scale))
            for device, pts in sorted(grouped.items()):
                pts.sort()
                t, v, size = bucket_means([p[0] for p in pts], [p[1] for p in pts])
                buckets = max(buckets, size)
                series.append(
                    Series(
                        name=f"{r.ref.name} · {device}" if len(runs) > 1 else device,
                        x=tuple(t),
                        y=tuple(v),
                        mode=_line_mode(len(t)),
                    )
                )
        if not series:
            missing.append(f"{title}: no {' or '.join(metrics)} samples stored for any run in this report")
            continue
        how = (
            "raw samples"
            if buckets == 1
            else f"means of {buckets} consecutive samples (to keep the file small)"
        )
        figures.append(
            Figure(
                key=f"ts_{key}",
                title=title,
                kind="line",
                x_title="time since run start (s)",
                y_title=y_title,
                series=tuple(series),
                provenance=f"Telemetry samples from the store (source per device in the table), {how}.",
            )
        )
    return Section(
        key="telemetry",
        title="Power and utilisation",
        intro="What the hardware did during the measured window: utilisation, power, memory, energy.",
        tables=_tabulate(
            "telemetry",
            "Per device over the measured window",
            rows,
            "RunInfo.telemetry_summary from the telemetry sampler; energy = validated hardware counter, "
            "else integral of sampled power; J per output token = energy ÷ output tokens.",
        ),
        figures=tuple(figures),
        not_measured=tuple(missing),
    )


def _labour(runs: list[RunData], doctor_runs: list[DoctorRunRecord]) -> Section:
    machines = {m for m in (_machine_of(r.info) for r in runs) if m}
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
    relevant.sort(key=lambda d: _aware(d.created_at))
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
    doctor_table = _tabulate(
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
    from gpuledger.cost.labour import setup_labour_hours

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
    return _tabulate(
        "setup_labour",
        "Setup labour per machine",
        rows,
        "Hours of wall-clock time from each first doctor run with an error to the first all-clear run after "
        "it, summed over episodes (gpuledger.cost.labour.setup_labour_hours); not effort logged by a person.",
    )


def _flags(names: Any) -> str:
    """``["num_requests", "concurrency"]`` -> ``"--num-requests, --concurrency"`` (bench's flag names)."""
    if not isinstance(names, list | tuple):
        return ""
    return ", ".join("--" + str(n).replace("_", "-") for n in names)


def _workload_origins(runs: list[RunData]) -> tuple[dict[str, str], list[str]]:
    """Where each run's workload came from (a cell per run id), and lines naming the runs of this report
    that ran the same workload through ``bench --like``. Both empty when no run was made with --like."""
    likes = {r.info.id: _like_of(r.info) for r in runs}
    if all(like is None for like in likes.values()):
        return {}, []
    names = {r.info.id: r.ref.name for r in runs}
    flags = {rid: _flags(like.get("overridden")) for rid, like in likes.items() if like is not None}

    def run_text(run_id: str) -> str:
        name = names.get(run_id)
        return f"{name} (run {run_id})" if name is not None and name != run_id else f"run {run_id}"

    def root(run_id: str) -> str:
        """The run whose workload this one ran, following --like through the runs of this report."""
        seen = {run_id}
        like = likes.get(run_id)
        while like is not None:
            run_id = str(like["run_id"])
            if run_id in seen:
                break
            seen.add(run_id)
            like = likes.get(run_id)
        return run_id

    cells: dict[str, str] = {}
    for r in runs:
        like = likes[r.info.id]
        if like is not None:
            changed = flags[r.info.id]
            cells[r.info.id] = f"workload of {run_text(str(like['run_id']))}, " + (
                f"overridden: {changed}" if changed else "nothing overridden"
            )
        else:
            repeats = [c.ref.name for c in runs if c is not r and root(c.info.id) == r.info.id]
            cells[r.info.id] = "its own" + (f"; repeated by {', '.join(repeats)}" if repeats else "")
    lines: list[str] = []
    for source in dict.fromkeys(root(r.info.id) for r in runs):
        members = [r for r in runs if root(r.info.id) == source]
        copies = [r for r in members if r.info.id != source]
        if len(members) < 2:
            continue
        overrides = [f"{c.ref.name} overrode {flags[c.info.id]}" for c in copies if flags.get(c.info.id)]
        if source in names:
            line = (
                f"same workload: {' and '.join(c.ref.name for c in copies)} "
                f"{'repeats' if len(copies) == 1 else 'repeat'} the workload of {run_text(source)} "
                "with bench --like"
            )
        else:
            line = (
                f"same workload: {' and '.join(c.ref.name for c in copies)} all repeat the workload of "
                f"{run_text(source)} with bench --like"
            )
        lines.append(line + ("; except: " + "; ".join(overrides) if overrides else "; nothing overridden"))
    return cells, lines


def _how_measured(runs: list[RunData]) -> Section:
    rows = []
    origins, same_workload = _workload_origins(runs)
    for r in runs:
        s = r.summary
        token_source = s.get("token_source")
        ts_text = (
            ", ".join(f"{k}: {v}" for k, v in token_source.items())
            if isinstance(token_source, Mapping)
            else fmt.text(token_source)
        )
        mismatch = s.get("output_len_mismatch")
        if isinstance(mismatch, Mapping):
            mismatch = (
                f"{mismatch.get('count', 0)} of {mismatch.get('checked', 0)} requests"
                if mismatch.get("checked")
                else "not checked (no requested length)"
            )
        methods = sorted(
            {
                f"{d.get('device')}: {d.get('energy_method')}"
                for d in r.info.telemetry_summary
                if d.get("energy_method")
            }
        ) or [fmt.MISSING]
        slo = s.get("slo")
        client = r.info.client or {}
        cpu = client.get("cpu_percent") if isinstance(client, Mapping) else None
        if cpu is None and isinstance(client, Mapping):
            cpu = client.get("cpu_util_ratio")
            cpu = cpu * 100 if isinstance(cpu, int | float) else cpu
        rows.append(
            {
                "run": r.ref.name,
                **({"workload": origins[r.info.id]} if origins else {}),
                "summary": r.summary_source,
                "token counts from": ts_text or fmt.MISSING,
                "output length mismatch": fmt.text(mismatch),
                "energy method": ", ".join(methods),
                "SLOs": fmt.text(slo)
                if not isinstance(slo, Mapping)
                else ", ".join(f"{k}={v}" for k, v in slo.items()),
                "client CPU (%)": fmt.num(cpu),
                "unit of work": fmt.text(r.info.unit),
            }
        )
    return Section(
        key="how_measured",
        title="How measured",
        intro="Definitions used for every number in this report (the project's metric definitions, quoted "
        "verbatim, and the report's per-GPU / per-user figures), and how each run was counted. "
        f"Report built by gpuledger {__version__}.",
        tables=_tabulate(
            "provenance",
            "Provenance per run",
            rows,
            "Token counts: server usage when reported, else the server's tokenizer, else a client count "
            "(one token per content chunk)."
            + (
                " Workload: a run made with gpuledger bench --like RUN ran RUN's workload (dataset, lengths, "
                "load, counts, seed and SLOs copied; RunInfo.config.like), except the flags listed as "
                "overridden."
                if origins
                else ""
            ),
        ),
        definitions=METRIC_DEFINITIONS,
        notes=tuple(same_workload),
        terminal_notes=bool(same_workload),
    )
