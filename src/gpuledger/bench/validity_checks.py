"""The validity checks of a run's workload and server (``bench.validity`` applies them with the client's,
the sample's and the window's): prompt prefixes a server could cache, where the token counts came from, the
energy readings, the server's queue, failed requests and whether the run ran to its end; and the helpers every
check uses. docs/bench.md ("Validity verdict") gives each rule with its thresholds and why.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuledger.bench.server_state import QUEUE_NOTE_MS
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.records.spec import BenchSpec
from gpuledger.records.validity import Check, CheckStatus, NotChecked

PREFIX_WARN = 0.10
PREFIX_MIN_CHARS = 64  # ~16 tokens: the KV block a prefix cache keeps (vLLM's default block size)
ERRORS_FAIL = 0.05

Records = Sequence[RequestRecord] | None
Rule = Callable[[RunInfo, RunSummary, Records], Check | NotChecked | None]


def status_of(
    value: float, warn: float | None, fail: float | None, lower_is_worse: bool = False
) -> CheckStatus:
    def bad(limit: float | None) -> bool:
        return limit is not None and (value < limit if lower_is_worse else value >= limit)

    return "fail" if bad(fail) else "warn" if bad(warn) else "pass"


def make_check(
    name: str,
    value: float,
    unit: str,
    rule: str,
    why: str,
    *,
    warn: float | None = None,
    fail: float | None = None,
    lower: bool = False,
    stage: str | None = None,
) -> Check:
    return Check(
        name=name,
        status=status_of(value, warn, fail, lower),
        figure=value,
        unit=unit,
        rule=rule,
        warn_at=warn,
        fail_at=fail,
        worse="lower" if lower else "higher",
        why=why,
        stage=stage,
    )


def in_process(info: RunInfo) -> bool:
    return bool(info.client.get("in_process_engine")) or info.config.kind == "torch" or info.engine == "torch"


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping (a stored JSON object), else an empty one."""
    return value if isinstance(value, Mapping) else {}


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def warmup_count(info: RunInfo) -> int | None:
    warm = info.workload.get("warmup") if isinstance(info.workload, Mapping) else None
    if isinstance(warm, Mapping) and isinstance(warm.get("requests"), int):
        return int(warm["requests"])
    if type(info.config) is BenchSpec:  # a spec that records nothing (a run written through the store API)
        return None
    return info.config.warmup_requests()


# ------------------------------------------------------------------------------------------- the workload


def prompt_prefixes(texts: Sequence[str], min_chars: int = PREFIX_MIN_CHARS) -> dict[str, Any]:
    """What the runner stores as ``RunInfo.workload["prompt_prefixes"]``: how much of the prompts' text a
    server's prefix cache could reuse. Sorted, each prompt shares with its predecessor the longest prefix
    it shares with any other; summed over neighbours, that is the text a cache has seen before (the first
    prompt of each shared prefix pays for it), counted where it is at least ``min_chars`` long."""
    ordered = sorted(texts)
    total = sum(len(t) for t in ordered)
    shared = 0
    longest = 0
    for a, b in zip(ordered, ordered[1:], strict=False):
        n = 0
        limit = min(len(a), len(b))
        while n < limit and a[n] == b[n]:
            n += 1
        if n >= min_chars:
            shared += n
            longest = max(longest, n)
    return {
        "prompts": len(ordered),
        "chars": total,
        "repeated_prefix_chars": shared,
        "repeated_prefix_share": shared / total if total else 0.0,
        "longest_repeated_prefix_chars": longest,
        "method": f"prefixes of ≥ {min_chars} characters shared between the run's prompts "
        "(sorted neighbours)",
    }


def _sends(info: RunInfo, summary: RunSummary) -> int:
    return summary.num_requests + (warmup_count(info) or 0)


def _dataset_share(info: RunInfo, summary: RunSummary) -> tuple[float, str] | None:
    """(share of the sent input a prefix cache could reuse, how it was found), from the workload record."""
    wl = info.workload if isinstance(info.workload, Mapping) else {}
    sends = _sends(info, summary)
    stats = wl.get("prompt_prefixes")
    if isinstance(stats, Mapping) and isinstance(stats.get("prompts"), int) and stats["prompts"] > 0:
        pool = int(stats["prompts"])
        share = number(stats.get("repeated_prefix_share")) or 0.0
        if stats.get("each_send_new") is True:  # a sample of prompts made new for every send: no repeats
            return share, (
                f"{pool} of the prompts sampled (each send had its own), {percent(share, PREFIX_WARN)} of "
                f"their input repeats a prefix of ≥ {PREFIX_MIN_CHARS} characters"
            )
        if sends > pool:  # the prompts were sent more than once: every further send is a whole repeat
            share = share * pool / sends + (sends - pool) / sends
        how = (
            f"{pool} prompts, {percent(share, PREFIX_WARN)} of the input repeats a prefix of ≥ "
            f"{PREFIX_MIN_CHARS} characters"
        )
        return share, how + (f" ({sends} sends cycle through them)" if sends > pool else "")
    distinct = wl.get("distinct_prompts")
    if isinstance(distinct, int) and distinct > 0:
        share = max(0.0, 1 - distinct / sends) if sends else 0.0
        return share, f"{distinct} dataset prompts for {sends} sends"
    return None


def _prefix_cache(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "prefix_cache"
    if in_process(info):
        return NotChecked(name=name, why="in-process engine: no prefix cache between requests")
    state = info.server.get("state") if isinstance(info.server, Mapping) else None
    hit = number(state.get("prefix_cache_hit_ratio")) if isinstance(state, Mapping) else None
    dataset = _dataset_share(info, summary)
    rule = (
        f"the share of the input a prefix cache could serve: the server's prefix-cache hit ratio over the "
        f"window where its /metrics have one, else the repeated prompt prefixes of the run; warn at ≥ "
        f"{percent(PREFIX_WARN)}"
    )
    if hit is not None:
        also = f"; the dataset: {dataset[1]}" if dataset is not None else ""
        why = (
            f"the server's prefix cache served {percent(hit, PREFIX_WARN)} of the prompt tokens: prefill was "
            "partly skipped, "
            f"TTFT and throughput are a cache-friendly workload's{also}"
            if hit >= PREFIX_WARN
            else f"the server's prefix cache served {percent(hit, PREFIX_WARN)} of the prompt tokens{also}"
        )
        return make_check(name, hit, "hit ratio (server)", rule, why, warn=PREFIX_WARN)
    if dataset is None:
        return NotChecked(
            name=name, why="the run records neither its prompts' repeats nor the server's cache hits"
        )
    share, how = dataset
    why = (
        f"{how}: a server with a prefix cache skips that prefill, so TTFT and throughput are a "
        "cache-friendly workload's (use more distinct prompts, or disable the server's prefix caching)"
        if share >= PREFIX_WARN
        else how
    )
    return make_check(name, share, "share of input (dataset)", rule, why, warn=PREFIX_WARN)


def _finished_sources(
    summary: TextGenerationSummary, records: Records
) -> tuple[int, int, int, str] | str:
    """(fewest, most) finished requests whose tokens the client counted, the finished requests and where
    that came from; or why it cannot be told. Only finished requests count: a failed one has no tokens in
    the throughput (its record says ``client_count`` by default, whatever the server would have said)."""
    if records is not None:
        finished = Counter[str](r.token_source for r in records if r.ok)
        client = finished.get("client_count", 0)
        return client, client, sum(finished.values()), ", ".join(sorted(finished))
    counts = dict(summary.token_source)
    total, client = sum(counts.values()), counts.get("client_count", 0)
    excess = total - summary.num_ok
    if excess <= 0:
        return client, client, total, ", ".join(sorted(counts))
    # A summary stored before its token sources left the failed requests out: they are in the counts.
    low, high = max(0, client - excess), min(client, summary.num_ok)
    if low != high and low == 0:
        return (
            f"the summary's token sources count its {excess} failed request{'s' if excess != 1 else ''} with "
            f"the finished ones ({client} client-counted in all), and the requests were not read to tell "
            "them apart"
        )
    return low, high, summary.num_ok, ", ".join(sorted(counts))


def _token_source(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "token_source"
    if not isinstance(summary, TextGenerationSummary) or (not summary.token_source and records is None):
        return NotChecked(name=name, why="the summary records no token sources")
    found = _finished_sources(summary, records)
    if isinstance(found, str):
        return NotChecked(name=name, why=found)
    low, high, total, sources = found
    if not total:
        return NotChecked(name=name, why="no request finished: no token counts to check")
    rule = (
        "the share of the finished requests whose token counts the client made (chunks counted), not the "
        "server's usage, tokenizer or the engine: warn at > 0 % (failed requests have no tokens in the "
        "figures and do not count)"
    )
    share = low / total
    at_least = "at least " if high != low else ""
    why = (
        f"{at_least}{low} of {total} finished requests' tokens were counted by the client, not reported by "
        "the server: throughput and cost per token rest on that count"
        if low
        else f"every finished request's tokens came from {sources}"
    )
    return Check(
        name=name,
        status="warn" if low else "pass",
        figure=share,
        unit="share of finished requests",
        rule=rule,
        warn_at=0.0,
        why=why,
    )


def _energy(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "energy"
    measured = [d for d in info.telemetry_summary if isinstance(d, Mapping) and d.get("energy_j") is not None]
    if not measured:
        return NotChecked(name=name, why="no device's energy was measured in the window")
    bad = [d for d in measured if d.get("valid") is False]
    rule = (
        "devices whose telemetry over the window is not valid (gaps, missing samples, counter mismatch): "
        "warn at ≥ 1"
    )
    if bad:
        first = bad[0]
        why = (
            f"energy of {len(bad)} of {len(measured)} device(s) is not valid — {first.get('device')}: "
            f"{first.get('validity_reason') or 'no reason given'}: J per unit rests on it"
        )
    else:
        why = f"energy of all {len(measured)} device(s) valid over the window"
    return make_check(name, float(len(bad)), "devices", rule, why, warn=1.0)


def _server_queue(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "server_queue"
    state = info.server.get("state") if isinstance(info.server, Mapping) else None
    if not isinstance(state, Mapping):
        return NotChecked(name=name, why="the server's /metrics were not read (bench --server-metrics)")
    if "reason" in state and len(state) == 1:
        return NotChecked(name=name, why=f"the server's /metrics: {state['reason']}")
    rule = (
        f"the server's /metrics: warn when requests waited ≥ {QUEUE_NOTE_MS:g} ms on average in its queue, "
        "when it kept requests waiting, or when it preempted sequences"
    )
    blocks = [
        (None, state),
        *((str(b.get("stage")), b) for b in state.get("stages") or [] if isinstance(b, Mapping)),
    ]
    found: list[tuple[str | None, str]] = []
    queue_ms: float | None = None
    for stage, block in blocks:
        q = number(block.get("queue_time_ms_mean"))
        if stage is None:
            queue_ms = q
        waiting = mapping(block.get("waiting"))
        peak = number(waiting.get("max"))
        pre = number(block.get("preemptions"))
        if q is not None and q >= QUEUE_NOTE_MS:
            found.append((stage, f"requests waited {q:.0f} ms on average in its queue"))
        elif peak:
            found.append((stage, f"it kept up to {peak:g} requests waiting"))
        elif pre:
            found.append((stage, f"it preempted sequences {pre:g} times"))
    if found and len(blocks) > 1 and found[0][0] is None:
        found = found[1:] or found
    if (
        queue_ms is None
        and not found
        and all(
            number(b.get("queue_time_ms_mean")) is None and not isinstance(b.get("waiting"), Mapping)
            for _, b in blocks
        )
    ):
        return NotChecked(name=name, why="the server's /metrics have no queue series")
    figure = queue_ms if queue_ms is not None else 0.0
    if found:
        stage, text = found[0]
        more = f" (and {len(found) - 1} more stage(s))" if len(found) > 1 else ""
        return Check(
            name=name,
            status="warn",
            figure=figure,
            unit="ms (mean queue time)",
            rule=rule,
            warn_at=QUEUE_NOTE_MS,
            stage=stage,
            why=f"the server was at capacity: {text}{more}; latency includes queueing",
        )
    return Check(
        name=name,
        status="pass",
        figure=figure,
        unit="ms (mean queue time)",
        rule=rule,
        warn_at=QUEUE_NOTE_MS,
        why="the server did not queue requests",
    )


MAX_KINDS_NAMED = 3
MAX_KIND_CHARS = 80


def failure_kinds(errors: Mapping[str, int] | None, failed: int) -> str:
    """``"all http_500"`` / ``"http_500 ×6, timeout ×2"``: the kinds the failures count under (the error's
    text up to its first ``:``), commonest first (a tie: the one seen first), at most ``MAX_KINDS_NAMED``;
    empty without kinds."""
    ranked = sorted(
        ((str(k)[:MAX_KIND_CHARS] or "no error text", int(v)) for k, v in (errors or {}).items() if v),
        key=lambda kv: -kv[1],
    )
    if not ranked:
        return ""
    if len(ranked) == 1 and ranked[0][1] == failed:
        return f"all {ranked[0][0]}"
    named = ", ".join(f"{k} ×{v}" for k, v in ranked[:MAX_KINDS_NAMED])
    more = len(ranked) - MAX_KINDS_NAMED
    return named + (f", and {more} more kind{'s' if more != 1 else ''}" if more > 0 else "")


def error_check(summary: RunSummary, items: str, note: str = "") -> Check | NotChecked:
    """The ``errors`` check: failed ``items`` (requests, steps) ÷ all of them, the failures' kinds named
    (``summary.errors``); ``note`` explains the rule."""
    name = "errors"
    if not summary.num_requests:
        return NotChecked(name=name, why=f"no {items.removesuffix('s')} was measured")
    failed, total = summary.num_failed, summary.num_requests
    rate = failed / total
    rule = f"failed {items} ÷ {items}: warn at > 0 %, fail at ≥ {percent(ERRORS_FAIL)}"
    rule += f" ({note})" if note else ""
    kinds = failure_kinds(summary.errors, failed)
    why = (
        f"{failed} of {total} {items} failed" + (f": {kinds}" if kinds else "")
        if failed
        else f"all {total} {items} succeeded"
    )
    status: CheckStatus = "fail" if rate >= ERRORS_FAIL else "warn" if rate > 0 else "pass"
    return Check(
        name=name,
        status=status,
        figure=rate,
        unit=f"share of {items}",
        rule=rule,
        warn_at=0.0,
        fail_at=ERRORS_FAIL,
        why=why,
    )


def finished_check(
    info: RunInfo, summary: RunSummary, items: str, *, planned: str, failed_why: str, done_why: str
) -> Check | NotChecked:
    """The ``finished`` check: whether the run reached ``planned`` (its end, its planned steps) without being
    interrupted or aborted; ``items``: what ``summary.num_requests`` counts."""
    name = "finished"
    rule = f"warn when the run was interrupted or aborted before {planned}; fail when it failed"
    done = float(summary.num_requests)
    status: CheckStatus = "pass"
    why = done_why
    if info.status == "failed":
        status, why = "fail", f"the run failed: {failed_why}"
    elif summary.interrupted is not None:
        status = "warn"
        why = (
            f"interrupted by {summary.interrupted.signal} after {summary.interrupted.finished_requests} "
            f"{items}: the window is shorter than planned"
        )
    elif summary.aborted or info.status == "incomplete":
        status, why = "warn", f"the run stopped early: {summary.aborted or 'it did not finish'}"
    return Check(name=name, status=status, figure=done, unit=items, rule=rule, why=why)


def _errors(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    note = (
        "failed requests free the server for the rest: "
        "the rate measured is not the rate of the load asked for"
    )
    return error_check(summary, "requests", note)


def _finished(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    return finished_check(
        info,
        summary,
        "requests",
        planned="its planned end",
        failed_why="every request failed or the run could not go on",
        done_why="the run ran to its end",
    )


WORKLOAD_RULES: tuple[Rule, ...] = (_prefix_cache, _token_source, _energy, _server_queue, _errors, _finished)
