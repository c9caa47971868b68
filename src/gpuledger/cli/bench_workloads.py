"""What ``gpuledger bench`` prints for the production-like workloads, beside the usual tables: goodput in
tokens, reasoning and answer tokens with their TTFTs, sessions with TTFT by turn, a trace's schedule. Every
line is printed only for runs that have it (``bench.workload_metrics`` sets the summary's fields)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console

Cells = Callable[[str, Any], tuple[str, ...]]


def _num(v: Any, fmt: str, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def throughput_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the throughput table: goodput in tokens, answer tokens (of a reasoning run)."""
    rows: list[tuple[str, str]] = []
    if "goodput_output_tokens_per_s" in s:
        good = s.get("good_output_tokens_total", 0)
        rows.append(("goodput in tokens", _num(s["goodput_output_tokens_per_s"], ",.1f", " tok/s")
                     + f"  ({good:,} output tokens of good requests)"))
    r = s.get("reasoning")
    if r:
        share = r.get("reasoning_share")
        of = "" if share is None else f", {share:.0%} of generated"
        rows.append(("answer tokens", _num(s.get("answer_tokens_per_s"), ",.1f", " tok/s")
                     + f"  ({r.get('answer_tokens_total', 0):,} answer, "
                     f"{r.get('reasoning_tokens_total', 0):,} reasoning{of})"))
    return rows


def latency_rows(s: dict[str, Any], cells: Cells) -> list[tuple[str, ...]]:
    """Rows for the latency table: TTFT to the first reasoning and to the first answer token."""
    r = s.get("reasoning")
    if not r:
        return []
    return [cells("TTFT reasoning", r.get("ttft_reasoning_ms")),
            cells("TTFT answer", r.get("ttft_answer_ms"))]


def print_extras(console: Console, s: dict[str, Any], workload: dict[str, Any],
                 client: dict[str, Any]) -> None:
    """Sessions (TTFT and prompt tokens by turn) and a trace's schedule, as short paragraphs."""
    from gpuledger.report.layout import paragraph, print_table

    sessions = s.get("sessions")
    if sessions:
        mean = _num(sessions.get("turns_per_session_mean"), ".1f")
        paragraph(console, f"{sessions.get('sessions', 0)} sessions, {sessions.get('complete', 0)} sent "
                  f"all their turns, {mean} turns each on average", lead="sessions: ", indent=2)
        rows = []
        for t in sessions.get("by_turn", []):
            ttft = t.get("ttft_ms") or {}
            rows.append((str(t["turn"]), f"{t.get('num_ok', 0)} / {t.get('requests', 0)}",
                         _num(ttft.get("p50"), ".1f"), _num(ttft.get("p99"), ".1f"),
                         _num(t.get("input_tokens_mean"), ",.0f")))
        columns = ("turn", "ok / sent", "TTFT p50 ms", "TTFT p99 ms", "prompt tokens")
        print_table(console, "By turn (the history grows)", columns, rows)
    trace = workload.get("trace")
    if isinstance(trace, dict):
        lag = (client.get("send_schedule") or {}).get("lag_ms") or {}
        speed = next((st.get("speed") for st in (workload.get("load") or {}).get("stages", [])), None)
        span = _num(trace.get("span_s"), ",.1f", " s")
        paragraph(console, f"{trace.get('arrivals', 0):,} arrivals over {span} ({trace.get('format')}) "
                  f"replayed at {_num(speed, 'g', 'x')}; lateness p99 {_num(lag.get('p99'), '.2f', ' ms')}, "
                  f"max {_num(lag.get('max'), '.2f', ' ms')}", lead="trace: ", indent=2)
