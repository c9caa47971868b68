"""What ``gpuledger bench`` prints for the production-like workloads, beside the usual tables: goodput in
tokens, reasoning and answer tokens with their TTFTs, sessions with TTFT by turn, a trace's schedule. Every
line is printed only for runs that have it (``bench.workload_metrics`` sets the summary's fields)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from gpuledger.bench.rundocs import ClientView, WorkloadView
    from gpuledger.kinds.text.summary import TextGenerationSummary
    from gpuledger.records.itemstats import Latency
    from gpuledger.records.load import Stage

Cells = Callable[[str, "Latency"], tuple[str, ...]]


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def throughput_rows(s: TextGenerationSummary) -> list[tuple[str, str]]:
    """Rows for the throughput table: goodput in tokens, answer tokens (of a reasoning run)."""
    rows: list[tuple[str, str]] = []
    if s.good_output_tokens_total is not None:
        rows.append(("goodput in tokens", _num(s.goodput_output_tokens_per_s, ",.1f", " tok/s")
                     + f"  ({s.good_output_tokens_total:,} output tokens of good requests)"))
    r = s.reasoning
    if r is not None:
        of = "" if r.reasoning_share is None else f", {r.reasoning_share:.0%} of generated"
        rows.append(("answer tokens", _num(s.answer_tokens_per_s, ",.1f", " tok/s")
                     + f"  ({r.answer_tokens_total:,} answer, {r.reasoning_tokens_total:,} reasoning{of})"))
    return rows


def latency_rows(s: TextGenerationSummary, cells: Cells) -> list[tuple[str, ...]]:
    """Rows for the latency table: TTFT to the first reasoning and to the first answer token."""
    r = s.reasoning
    if r is None:
        return []
    return [cells("TTFT reasoning", r.ttft_reasoning_ms), cells("TTFT answer", r.ttft_answer_ms)]


def print_extras(console: Console, s: TextGenerationSummary, stages: Sequence[Stage], workload: WorkloadView,
                 client: ClientView | None) -> None:
    """Sessions (TTFT and prompt tokens by turn) and a trace's schedule (replayed at the speed of the run's
    trace stage, ``stages``), as short paragraphs."""
    from gpuledger.records.load import TraceStage
    from gpuledger.report.layout import paragraph, print_table

    sessions = s.sessions
    if sessions is not None:
        mean = _num(sessions.turns_per_session_mean, ".1f")
        paragraph(console, f"{sessions.sessions} sessions, {sessions.complete} sent all their turns, {mean} "
                  "turns each on average", lead="sessions: ", indent=2)
        rows = [(str(t.turn), f"{t.num_ok} / {t.requests}", _num(t.ttft_ms.p50, ".1f"),
                 _num(t.ttft_ms.p99, ".1f"), _num(t.input_tokens_mean, ",.0f")) for t in sessions.by_turn]
        columns = ("turn", "ok / sent", "TTFT p50 ms", "TTFT p99 ms", "prompt tokens")
        print_table(console, "By turn (the history grows)", columns, rows)
    trace = workload.trace
    if trace is not None:
        schedule = client.send_schedule if client is not None else None
        lag = schedule.lag_ms if schedule is not None else None
        speed = next((st.speed for st in stages if isinstance(st, TraceStage)), None)
        span = _num(trace.span_s, ",.1f", " s")
        paragraph(console, f"{trace.arrivals:,} arrivals over {span} ({trace.format}) "
                  f"replayed at {_num(speed, 'g', 'x')}; lateness p99 "
                  f"{_num(lag.p99 if lag is not None else None, '.2f', ' ms')}, "
                  f"max {_num(lag.max if lag is not None else None, '.2f', ' ms')}", lead="trace: ", indent=2)
