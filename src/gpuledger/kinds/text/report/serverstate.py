"""The server's own view in a report: what ``RunInfo.server["state"]`` holds, as table cells and plot points.

``gpuledger bench`` samples a vLLM, SGLang or llama.cpp server's ``/metrics`` over the measured window and
stores the means and peaks of requests running and waiting, the KV-cache use and the preemptions, per sweep
stage too, with the notes saying what they mean for the numbers (``gpuledger.bench.server_state``). A run
made without it stores ``{"reason": ...}``; a run made before gpuledger sampled ``/metrics``, or a torch
run, stores nothing. Every missing value here says which of these it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuledger.engines.server_metrics import STATE_SERIES
from gpuledger.records import RunInfo
from gpuledger.report import fmt

NOT_EXPORTED = "n/a — not exported by this server"
NO_SCRAPE = "n/a — no scrape in this stage"
COUNTER_NEEDS_TWO = "n/a — fewer than 2 scrapes (a counter needs two)"
NOT_SAMPLED = "n/a — not sampled during the window (bench --server-metrics-interval S samples it)"
EDGE_FAILED = "n/a — a read of /metrics at the window's edges failed"
NOT_READ = "n/a — not read from the server's /metrics"
NOT_RECORDED = "n/a — not recorded by the gpuledger that made this run"

# Column headers of the server-state table (units in the headers).
COL_RUNNING = "running (requests, mean / max)"
COL_WAITING = "waiting (requests, mean / max)"
COL_QUEUE = "queue time (ms, mean)"
COL_KV = "KV cache used (%, mean / max)"
COL_PREEMPTIONS = "preemptions (count)"
COL_SCRAPES = "scrapes"
COL_SOURCE = "source"


def state_of(info: RunInfo) -> Mapping[str, Any] | None:
    """The run's stored server state (sampled, or ``{"reason": ...}``), or ``None`` when it has none."""
    server = info.server if isinstance(info.server, Mapping) else {}
    state = server.get("state")
    return state if isinstance(state, Mapping) else None


def sampled(state: Mapping[str, Any] | None) -> bool:
    """True for a state that holds scrapes (not a ``{"reason": ...}``)."""
    return state is not None and "reason" not in state and isinstance(state.get("scrapes"), int)


def why_no_state(info: RunInfo) -> str:
    """Why a run has no ``server.state`` at all (not even a reason)."""
    if info.engine == "torch":
        return "torch run: no server, the model ran in-process"
    asked = info.config.records_server_metrics()
    if asked is None:
        return "made before gpuledger sampled the server's /metrics"
    if asked is False:
        return "benched without --server-metrics"
    kind = (info.server or {}).get("kind") if isinstance(info.server, Mapping) else None
    if kind not in STATE_SERIES:
        supported = ", ".join(s.label for s in STATE_SERIES.values())
        return f"gpuledger reads the scheduler state of {supported} servers; this one is {fmt.text(kind)}"
    return "no server state stored with the run"


def _exports_queue_time(info: RunInfo) -> bool | None:
    """Whether the run's server family has a queue-time histogram (``None``: unknown family)."""
    kind = (info.server or {}).get("kind") if isinstance(info.server, Mapping) else None
    series = STATE_SERIES.get(kind) if isinstance(kind, str) else None
    return None if series is None else series.queue_time is not None


def _exports_preemptions(info: RunInfo) -> bool | None:
    """Whether the run's server family has a preemption counter (``None``: unknown family)."""
    kind = (info.server or {}).get("kind") if isinstance(info.server, Mapping) else None
    series = STATE_SERIES.get(kind) if isinstance(kind, str) else None
    return None if series is None else series.preemptions is not None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _mean_max(block: Any, *, percent: bool, why: str) -> str:
    if not isinstance(block, Mapping):
        return why
    mean, peak = _number(block.get("mean")), _number(block.get("max"))
    if mean is None or peak is None:
        return why
    if percent:
        return f"{fmt.pct(mean)} / {fmt.pct(peak)}"
    return f"{fmt.num(mean)} / {fmt.num(peak)}"


@dataclass(frozen=True, slots=True)
class StateBlock:
    """One row's worth of state: the whole window (``stage`` "whole run" / "all stages") or one stage."""

    stage: str
    block: Mapping[str, Any]
    whole: bool


def blocks(state: Mapping[str, Any]) -> list[StateBlock]:
    """The whole-window block, then one block per sweep stage (when the state has stages)."""
    stages = [s for s in state.get("stages") or [] if isinstance(s, Mapping)]
    out = [StateBlock("all stages" if stages else "whole run", state, True)]
    out.extend(StateBlock(fmt.text(s.get("stage")), s, False) for s in stages)
    return out


def row_cells(info: RunInfo, state: Mapping[str, Any], b: StateBlock) -> dict[str, str]:
    """The table cells of one block (without the run and stage columns), a reason in every missing one."""
    scrapes = b.block.get("scrapes")
    n = int(scrapes) if isinstance(scrapes, int) else 0
    # A stage shorter than the scrape interval has no scrape of its own; otherwise a missing series is
    # one the server does not export (bench stores None for those).
    edges = "edges" in state  # counters read at the idle edges of the window (and of each stage)
    if state.get("gauges_reason"):
        why = NOT_SAMPLED
    else:
        why = NO_SCRAPE if not b.whole and n == 0 else NOT_EXPORTED
    pre = _number(b.block.get("preemptions"))
    if pre is not None:
        pre_text = fmt.num(pre)
    elif _exports_preemptions(info) is False:
        pre_text = NOT_EXPORTED
    elif edges and not state.get("interval_s"):
        pre_text = EDGE_FAILED
    elif not b.whole and n == 0:
        pre_text = NO_SCRAPE
    elif n < 2:
        pre_text = COUNTER_NEEDS_TWO
    else:
        pre_text = NOT_EXPORTED
    queue = _number(b.block.get("queue_time_ms_mean"))
    if queue is not None:
        queue_text = fmt.num(queue)
    elif _exports_queue_time(info) is False:
        queue_text = NOT_EXPORTED
    else:
        queue_text = NOT_READ if edges else NOT_RECORDED
    scrapes_text = fmt.num(n)
    failed = state.get("failed_scrapes")
    if b.whole and isinstance(failed, int) and failed > 0:
        scrapes_text += f" ({failed} failed)"
    interval = _number(state.get("interval_s"))
    source = fmt.text(state.get("source")) + (f", every {interval:g} s" if interval else "")
    return {
        COL_RUNNING: _mean_max(b.block.get("running"), percent=False, why=why),
        COL_WAITING: _mean_max(b.block.get("waiting"), percent=False, why=why),
        COL_QUEUE: queue_text,
        COL_KV: _mean_max(b.block.get("kv_cache_usage_ratio"), percent=True, why=why),
        COL_PREEMPTIONS: pre_text,
        COL_SCRAPES: scrapes_text,
        COL_SOURCE: source,
    }


def stat(block: Mapping[str, Any], key: str, which: str) -> float | None:
    """``block[key][which]`` (``which`` = "mean" or "max") as a number, or ``None``."""
    value = block.get(key)
    return _number(value.get(which)) if isinstance(value, Mapping) else None


def failed_scrapes_line(state: Mapping[str, Any]) -> str | None:
    """A caveat when some scrapes failed: the means and peaks are over the ones that answered."""
    failed = state.get("failed_scrapes")
    if not isinstance(failed, int) or failed <= 0:
        return None
    scrapes = state.get("scrapes")
    ok = scrapes if isinstance(scrapes, int) else 0
    last = state.get("last_error")
    return (
        f"{failed} of {failed + ok} scrapes of /metrics failed"
        + (f" (last: {fmt.text(last)})" if last else "")
        + f"; means and peaks are over the {ok} that answered"
    )
