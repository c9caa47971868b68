"""What the production-like workloads add to a text-generation summary, as pure functions over the stored
requests (``bench.metrics.summarize`` calls ``workload_fields``). Every field is set only for runs that have
it, so the summaries of other runs read as they always did.

- **Reasoning** (requests whose record has ``server_timings["reasoning"]``, engines/openai.py): reasoning and
  answer tokens of the successful requests (a request without reasoning answers with all its output
  tokens), ``answer_tokens_per_s`` = answer tokens ÷ window (the unit ``answer_token``), TTFT to the first
  reasoning token and to the first answer token (first such chunk received − request sent), where the
  split came from (``server_usage``: ``completion_tokens_details.reasoning_tokens``; ``client_count``).
- **Goodput in tokens** (with ``--slo``): output tokens of the requests that met every SLO
  (``good_output_tokens_total``) ÷ window (``goodput_output_tokens_per_s``, the unit ``good_output_token``).
- **Sessions** (``server_timings["workload"]["session"]``, bench/sessions.py): sessions, those that sent
  all their turns successfully, turns per session, a complete session's duration (first send → last token
  of its last turn), and per turn index: requests, TTFT, E2E and the server's prompt tokens (which grow with
  the history).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from gpuledger.kinds.text.summary import (
    REASONING_KEY,
    WORKLOAD_KEY,
    ReasoningSummary,
    SessionSummary,
    TurnSummary,
)
from gpuledger.records import RequestRecord
from gpuledger.records.itemstats import Latency

Stats = Callable[[list[float]], Latency]


def _extra(r: RequestRecord, key: str) -> dict[str, Any] | None:
    value = (r.server_timings or {}).get(key)
    return value if isinstance(value, dict) else None


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _chunk_ms(r: RequestRecord, index: Any) -> float | None:
    """Milliseconds from the request's send to its chunk ``index`` (None: no such chunk)."""
    if type(index) is not int or not 0 <= index < len(r.chunk_times):
        return None
    return (r.chunk_times[index] - r.t_send) * 1e3


def workload_fields(records: Sequence[RequestRecord], ok: Sequence[RequestRecord], window: float,
                    slo: dict[str, float], stats: Stats,
                    meets: Callable[[RequestRecord], bool]) -> dict[str, Any]:
    """The summary fields of the module docstring that ``records`` have (``ok``: the successful ones);
    ``stats`` makes a latency block, ``meets`` says whether a request met every SLO."""
    out: dict[str, Any] = {}
    if slo:
        good = sum(r.output_tokens or 0 for r in ok if meets(r))
        out["good_output_tokens_total"] = good
        out["goodput_output_tokens_per_s"] = good / window if window > 0 else None
    reasoning = _reasoning(ok, stats)
    if reasoning is not None:
        out["reasoning"] = reasoning
        out["answer_tokens_total"] = reasoning.answer_tokens_total
        out["answer_tokens_per_s"] = reasoning.answer_tokens_total / window if window > 0 else None
    sessions = _sessions(records, stats)
    if sessions is not None:
        out["sessions"] = sessions
    return out


def _reasoning(ok: Sequence[RequestRecord], stats: Stats) -> ReasoningSummary | None:
    splits = [(r, _extra(r, REASONING_KEY)) for r in ok]
    if not any(s is not None for _, s in splits):
        return None
    reasoning = answer = with_reasoning = 0
    first_reasoning: list[float] = []
    first_answer: list[float] = []
    sources: Counter[str] = Counter()
    for r, split in splits:
        if split is None:
            answer += r.output_tokens or 0
            ms = _chunk_ms(r, 0)
            if ms is not None:
                first_answer.append(ms)
            continue
        with_reasoning += 1
        reasoning += _count(split.get("reasoning_tokens")) or 0
        answer += _count(split.get("answer_tokens")) or 0
        sources[str(split.get("source") or "client_count")] += 1
        for index, into in ((split.get("first_reasoning_chunk"), first_reasoning),
                            (split.get("first_answer_chunk"), first_answer)):
            ms = _chunk_ms(r, index)
            if ms is not None:
                into.append(ms)
    generated = reasoning + answer
    return ReasoningSummary(
        requests=with_reasoning,
        reasoning_tokens_total=reasoning,
        answer_tokens_total=answer,
        reasoning_share=reasoning / generated if generated else None,
        ttft_reasoning_ms=stats(first_reasoning),
        ttft_answer_ms=stats(first_answer),
        token_source=dict(sorted(sources.items())),
    )


def _sessions(records: Sequence[RequestRecord], stats: Stats) -> SessionSummary | None:
    groups: dict[int, list[tuple[int, int, RequestRecord]]] = defaultdict(list)
    for r in records:
        w = _extra(r, WORKLOAD_KEY)
        sid, turn = (w.get("session"), w.get("turn")) if w is not None else (None, None)
        if type(sid) is int and type(turn) is int and turn >= 1:
            groups[sid].append((turn, _count(w.get("turns") if w else None) or turn, r))
    if not groups:
        return None
    complete = 0
    durations: list[float] = []
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for turns in groups.values():
        turns.sort(key=lambda x: x[0])
        planned = max(p for _, p, _ in turns)
        for turn, _, r in turns:
            by_turn[turn].append(r)
        if len(turns) == planned and all(r.ok for _, _, r in turns):
            complete += 1
            last = turns[-1][2]
            end = last.chunk_times[-1] if last.chunk_times else last.t_end
            if end is not None:
                durations.append((end - turns[0][2].t_send) * 1e3)
    return SessionSummary(
        sessions=len(groups),
        complete=complete,
        turns_per_session_mean=math.fsum(len(t) for t in groups.values()) / len(groups),
        session_ms=stats(durations),
        by_turn=[_turn(t, by_turn[t], stats) for t in sorted(by_turn)],
    )


def _turn(turn: int, records: list[RequestRecord], stats: Stats) -> TurnSummary:
    ok = [r for r in records if r.ok]
    prompts = [r.input_tokens for r in ok if r.input_tokens is not None]
    return TurnSummary(
        turn=turn,
        requests=len(records),
        num_ok=len(ok),
        ttft_ms=stats([ms for r in ok if (ms := _chunk_ms(r, 0)) is not None]),
        e2e_ms=stats([(e - r.t_send) * 1e3 for r in ok
                      if (e := r.chunk_times[-1] if r.chunk_times else r.t_end) is not None]),
        input_tokens_mean=math.fsum(prompts) / len(prompts) if prompts else None,
    )


__all__ = ["workload_fields"]
