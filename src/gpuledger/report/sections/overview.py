"""The overview section: one row per run with its counts and rates over the measured window."""

from __future__ import annotations

from gpuledger.report import fmt
from gpuledger.report.model import Section
from gpuledger.report.sections.base import RunData, tabulate


def overview_section(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    for r in runs:
        s = r.summary
        origin = r.info.summary.origin() if r.info.summary is not None else None
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
                "window (s)": fmt.MISSING if origin is not None else fmt.num(s.get("window_s")),
                "output tok/s": fmt.num(s.get("output_tokens_per_s")),
                "total tok/s": fmt.num(s.get("total_tokens_per_s")),
                "req/s": fmt.num(s.get("requests_per_s")),
                "goodput (req/s)": fmt.num(s.get("goodput_requests_per_s")),
            }
        )
        if not s:
            missing.append(f"{r.ref.name}: no summary — the run has no stored requests")
        if origin is not None:
            missing.append(
                f"{r.ref.name}: {origin.label} — its rates as published; no requests, window or telemetry "
                "of its own"
            )
        if r.info.status != "complete":
            missing.append(
                f"{r.ref.name}: status is {r.info.status!s} — numbers cover the requests that finished"
            )
    return Section(
        key="overview",
        title="Overview",
        intro=f"{len(runs)} run(s). Every number below is recomputable from the store.",
        tables=tabulate(
            "overview",
            "Runs",
            rows,
            "Counts and rates over the measured window (first send → last finish, warmup excluded); "
            "tokens as counted per request (see how measured); goodput only when SLOs were given.",
        ),
        not_measured=tuple(missing),
    )
