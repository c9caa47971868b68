"""The throughput section of a text-generation report: rates per load level (sweep stage), throughput
against concurrency and the Pareto view (throughput per GPU against tokens/s per user); and, when no run
records the server's own view, the line saying why (where the server-state section would have been)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuledger.kinds.text.report.load import concurrency_of
from gpuledger.kinds.text.report.server_state import no_server_state, server_state_section
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunSummary
from gpuledger.report import fmt
from gpuledger.report.kinds import ReportOptions
from gpuledger.report.model import Figure, Section
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import tabulate, xy_series
from gpuledger.report.series import pareto_front


def _p50(st: RunSummary, key: str) -> float | None:
    return st.latency(key).p50 if isinstance(st, TextGenerationSummary) else None


def _stage_points(r: RunData) -> list[dict[str, Any]]:
    config = r.info.config
    summary = r.info.summary
    if summary is None:
        return []
    stages = [(st.stage_name(), st) for st in summary.stage_summaries()] or [("", summary)]
    points = []
    for name, st in stages:
        out_tps = st.rate("output_token")
        tpot_p50 = _p50(st, "tpot_ms")
        points.append(
            {
                "stage": name or "whole run",
                "concurrency": concurrency_of(name, st, config),
                "requests_per_s": st.rate("request"),
                "output_tokens_per_s": out_tps,
                "output_tokens_per_s_per_gpu": out_tps / r.accelerators if out_tps is not None else None,
                "tokens_per_s_per_user": 1000.0 / tpot_p50 if tpot_p50 else None,
                "ttft_p50_ms": _p50(st, "ttft_ms"),
                "tpot_p50_ms": tpot_p50,
                "num_ok": st.num_ok if "num_ok" in st.model_fields_set else None,
            }
        )
    return points


def throughput_section(runs: Sequence[RunData], options: ReportOptions) -> Section:
    rows = []
    missing = []
    conc_series = []
    pareto_series = []
    per_run_points = {}
    for i, r in enumerate(runs):
        pts = _stage_points(r)
        per_run_points[r.info.id] = pts
        r.extra["stage_points"] = pts
        if r.info.summary is None or not r.info.summary.stage_summaries():
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
            conc_series.append(xy_series(r.ref.name, conc, mode="lines+markers", color=i))
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
            pareto_series.append(xy_series(r.ref.name, par, mode="markers", group=r.info.id, color=i))
            front = pareto_front(par)
            if len(front) > 1:
                pareto_series.append(
                    xy_series(
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
    if server_state_section(runs, options) is None:
        # No run records the server's view: one line says why, where the section would have been.
        missing.append(no_server_state(runs))
    return Section(
        key="throughput",
        title="Throughput and the Pareto view",
        intro="What the machine delivers as load rises, and the trade-off between total throughput and how "
        "fast each user sees tokens (the InferenceX view).",
        tables=tabulate(
            "throughput",
            "Throughput per load level",
            rows,
            "Rates over each stage's measured window; tok/s per user = 1000 ÷ median TPOT (ms).",
        ),
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=notes,
    )
