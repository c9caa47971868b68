"""The latency section of a text-generation report: the percentile table from each run's summary and the
TTFT / ITL / E2E distributions from the stored per-request timestamps; and how many requests' chunk times a
report reads for the ITL plot (``request_stride``)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger.bench.metrics import e2e_s, itl_s, ttft_s
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo
from gpuledger.records.itemstats import Latency
from gpuledger.report import fmt
from gpuledger.report.kinds import ReportOptions
from gpuledger.report.model import Figure, Section, Series
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import line_mode, tabulate
from gpuledger.report.series import cdf_points, stride_for

# At most this many per-token gaps are drawn in the ITL distribution; beyond it, every k-th
# request is taken (the table's percentiles still come from all requests, via the summary).
ITL_GAP_BUDGET = 200_000

LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)
# The latency table's columns: the fields of each metric's block in the summary.
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "std", "min", "max", "n")


def request_stride(info: RunInfo) -> int:
    """Every how-many-th request's chunk times a report reads: a finalised run's numbers come from its
    stored summary, so the ITL plot needs the chunk times of a systematic sample of requests only (at most
    ``ITL_GAP_BUDGET`` token gaps), which keeps 100k-request runs fast."""
    summary = info.summary
    if summary is None:
        return 1
    w = summary.work().get(summary.headline())
    n = summary.num_ok or info.num_requests
    gaps = max(0, int(w.count) - int(n)) if w is not None else 0
    return stride_for(gaps, ITL_GAP_BUDGET)


def _block(r: RunData, key: str) -> Latency:
    s = r.info.summary
    return s.latency(key) if isinstance(s, TextGenerationSummary) else Latency()


def _latency_samples(r: RunData, gap_budget: int) -> tuple[dict[str, list[float]], str]:
    """Per-request TTFT and E2E (all requests) and per-token ITL (every k-th request past
    ``gap_budget`` gaps), in ms, from the stored timestamps, by the bench's metric functions."""

    ok = [q for q in r.requests if q.error is None]
    ttft = [v * 1000.0 for v in (ttft_s(q) for q in ok) if v is not None]
    e2e = [v * 1000.0 for v in (e2e_s(q) for q in ok) if v is not None]
    with_chunks = [q for q in ok if q.chunk_times]
    total_gaps = sum(len(q.chunk_times) - 1 for q in with_chunks)
    step = stride_for(total_gaps, gap_budget)
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


def latency_section(runs: Sequence[RunData], options: ReportOptions) -> Section:
    """Percentiles per run and metric; the distributions draw at most ``ITL_GAP_BUDGET`` token gaps (ITL)."""
    rows = []
    missing = []
    for r in runs:
        for key, label in LATENCY_METRICS:
            b = _block(r, key)
            if not b.n:
                missing.append(f"{r.ref.name} {label}: {_why_no_latency(r, key)}")
                continue
            stats = {k: fmt.num(getattr(b, k)) for k in LATENCY_STATS}
            rows.append({"run": r.ref.name, "metric": label, **stats})
    samples = {r.info.id: _latency_samples(r, ITL_GAP_BUDGET) for r in runs}
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
                Series(name=r.ref.name, x=tuple(x), y=tuple(y), mode=line_mode(len(x)), shape="hv", color=i)
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
        tables=tabulate(
            "latency",
            "Latency (ms)",
            rows,
            "Milliseconds, client-side timestamps (time.perf_counter) of every successful request; "
            "n = requests (TTFT, TPOT, E2E) or tokens (ITL); std = the population standard deviation (÷ n) "
            "of those values. Definitions under how measured.",
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
