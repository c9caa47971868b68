"""The text kind's ``checks`` facet: the validity rules of an LLM-inference run, whose items are requests
(``bench.validity`` applies ``RULES``, found through the registry). The rules judge what makes a measured
token rate and its latency percentiles trustworthy; docs/bench.md ("Validity verdict") gives each with its
thresholds and why:

==================  ==============================================================  ==========================
check               figure                                                          warn / fail
==================  ==============================================================  ==========================
client_bound        the client's CPU use over the window, share of one core         ≥ 85 % / ≥ 95 %
send_schedule       p99 of (actual − scheduled) send time, open-loop loads          ≥ 5 % / ≥ 25 % of p50 E2E
samples             successful requests behind each latency percentile              < 100 (p99 needs 100)
window              the measured window, in mean request lifetimes (E2E)            < 10
warmup              requests sent before the window, not measured                   0 and a cold start seen
steady_state        throughput drift: last half vs first half of the window         ≥ 10 % / ≥ 25 %
noise               spread (CV, population std) of throughput over time slices      ≥ 15 %
cpu_contention      the machine's usable CPUs busy during the window (a run that    ≥ 90 %
                    computes on the CPU: the share other processes kept busy)       (≥ 10 %)
prefix_cache        share of the input a server could serve from its prefix cache   ≥ 10 %
token_source        share of the finished requests whose tokens the client counted  > 0 %
energy              devices whose energy reading is not valid                       ≥ 1
server_queue        mean time requests waited in the server's queue (its /metrics)  ≥ 5 ms, any waiting
errors              share of requests that failed                                   > 0 % / ≥ 5 %
finished            the run ended as planned (not interrupted, not aborted)         interrupted / failed
==================  ==============================================================  ==========================

``client_bound``, ``cpu_contention`` and ``energy`` are the rules every kind shares (``bench.validity``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from gpuledger.bench.metrics import e2e_s, last_token_time, ttft_s
from gpuledger.bench.server_state import QUEUE_NOTE_MS
from gpuledger.bench.validity import (
    PREFIX_MIN_CHARS,
    SCHEDULE_FLOOR_MS,
    Records,
    Rule,
    client_bound,
    cpu_contention,
    drift,
    energy,
    error_check,
    finished_check,
    in_process,
    make_check,
    mapping,
    median,
    number,
    percentile_samples,
    variation,
    warmup_count,
)
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.records.spec import BatchStage, BenchSpec, ConcurrencyStage
from gpuledger.records.validity import Check, NotChecked

# send_schedule: the lag hidden from the latency figures, as a share of the median E2E latency.
SCHEDULE_WARN_SHARE = 0.05
SCHEDULE_FAIL_SHARE = 0.25
# window: the ramp-up and tail (fewer requests in flight) last about one request lifetime each.
WINDOW_LIFETIMES = 10.0
# warmup: without one, the first requests' median TTFT this many times the rest's shows a cold start.
COLD_START_RATIO = 1.5
# steady_state and noise: the window cut into this many equal time buckets; the first and last (ramp-up and
# tail) are left out.
BUCKETS = 10
DRIFT_WARN = 0.10
DRIFT_FAIL = 0.25
NOISE_WARN = 0.15
MIN_EVENTS = 50  # fewer token arrivals than this say nothing about the rate over time
TIME_CHECK_LIFETIMES = 5.0  # a shorter window's slices see single requests come and go
# prefix_cache: the share of the input a server's prefix cache could serve.
PREFIX_WARN = 0.10


def _stage_groups(
    summary: RunSummary, records: Sequence[RequestRecord]
) -> list[tuple[str | None, list[RequestRecord]]]:
    """The requests per sweep stage (name, requests), or the whole run as one group (None, requests)."""
    names = [s.stage_name() for s in summary.stage_summaries()]
    if len(names) < 2:
        return [(None, list(records))]
    return [(n, [r for r in records if r.stage == n]) for n in names]


def _token_events(records: Sequence[RequestRecord]) -> list[tuple[float, int]]:
    """(time, tokens) of every content chunk of the successful requests; a request without chunk times
    counts its output tokens at its end."""
    out: list[tuple[float, int]] = []
    for r in records:
        if not r.ok:
            continue
        if r.chunk_times:
            ks = r.chunk_tokens
            out.extend(
                (t, ks[i] if ks is not None and i < len(ks) else 1) for i, t in enumerate(r.chunk_times)
            )
        elif r.t_end is not None and r.output_tokens:
            out.append((r.t_end, r.output_tokens))
    return out


def bucket_rates(records: Sequence[RequestRecord], buckets: int = BUCKETS) -> list[float] | None:
    """Output tokens per second in each of ``buckets`` equal slices of the requests' window, the first and
    last slice left out (ramp-up and tail); None when there are too few token arrivals to tell."""
    events = _token_events(records)
    sends = [r.t_send for r in records]
    if len(events) < MIN_EVENTS or not sends:
        return None
    start, end = min(sends), max(t for t, _ in events)
    width = (end - start) / buckets
    if width <= 0:
        return None
    tokens = [0] * buckets
    for t, k in events:
        tokens[min(buckets - 1, max(0, int((t - start) / width)))] += k
    return [k / width for k in tokens[1:-1]]


# ------------------------------------------------------------------------------------------- the client


def _closed_loop(spec: BenchSpec) -> bool:
    stages = spec.stages()
    return bool(stages) and all(isinstance(s, ConcurrencyStage | BatchStage) for s in stages)


def _send_schedule(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "send_schedule"
    sched = info.client.get("send_schedule")
    if not isinstance(sched, Mapping) or not sched.get("requests"):
        if _closed_loop(info.config):
            return NotChecked(
                name=name,
                why="closed-loop load: each request is sent when another finishes, "
                "so there is no schedule to fall behind",
            )
        return NotChecked(name=name, why="the run did not record scheduled send times")
    lag = mapping(sched.get("lag_ms"))
    p99 = number(lag.get("p99"))
    e2e = summary.latency("e2e_ms").p50 if isinstance(summary, TextGenerationSummary) else None
    if p99 is None or e2e is None or e2e <= 0:
        return NotChecked(name=name, why="no successful request to compare the send lag with")
    warn, fail = (
        max(SCHEDULE_FLOOR_MS, SCHEDULE_WARN_SHARE * e2e),
        max(SCHEDULE_FLOOR_MS, SCHEDULE_FAIL_SHARE * e2e),
    )
    rule = (
        f"p99 of (actual − scheduled) send time: warn at ≥ {percent(SCHEDULE_WARN_SHARE)}, fail at ≥ "
        f"{percent(SCHEDULE_FAIL_SHARE)} of the median E2E latency ({e2e:.4g} ms)"
    )
    why = (
        f"p99 send lag {p99:.3g} ms ({percent(p99 / e2e, warn / e2e, fail / e2e)} of the median E2E): "
        "latency measured from the actual "
        "send hides that wait (coordinated omission)"
        if p99 >= warn
        else f"requests were sent on schedule (p99 lag {p99:.3g} ms)"
    )
    return make_check(name, p99, "ms", rule, why, warn=warn, fail=fail)


# ------------------------------------------------------------------------------------------- the sample


def _samples(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "samples"
    per_stage: list[tuple[str | None, int]] = []
    for st in [summary, *summary.stage_summaries()] if len(summary.stage_summaries()) > 1 else [summary]:
        if isinstance(st, TextGenerationSummary):
            counts = [b.n for b in (st.ttft_ms, st.tpot_ms, st.e2e_ms) if b.n]
            n = min(counts) if counts else 0
        else:
            n = st.num_ok
        per_stage.append((st.stage_name() or None, n))
    if all(n == 0 for _, n in per_stage):
        return NotChecked(name=name, why="no successful request: no percentile to support")
    stage, n = min(per_stage[1:] or per_stage, key=lambda p: p[1])
    return percentile_samples(n, "requests", stage=stage)


def _window(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "window"
    e2e = summary.latency("e2e_ms").mean if isinstance(summary, TextGenerationSummary) else None
    if not e2e or summary.window_s <= 0:
        return NotChecked(name=name, why="no successful request: no window to judge")
    lifetimes = summary.window_s / (e2e / 1e3)
    rule = (
        f"the window ÷ the mean E2E latency: warn below {WINDOW_LIFETIMES:g} request lifetimes (the ramp-up "
        "and the tail, with fewer requests in flight, last about one each)"
    )
    why = (
        f"the {summary.window_s:.3g} s window is {lifetimes:.3g} request lifetimes: ramp-up and tail weigh "
        f"~{percent(min(1.0, 2 / lifetimes))} of the rate"
        if lifetimes < WINDOW_LIFETIMES
        else f"the {summary.window_s:.3g} s window is {lifetimes:.3g} request lifetimes"
    )
    return make_check(name, lifetimes, "request lifetimes", rule, why, warn=WINDOW_LIFETIMES, lower=True)


def _warmup(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "warmup"
    count = warmup_count(info)
    if count is None:
        return NotChecked(
            name=name, why="the run does not record whether requests were sent before the window"
        )
    rule = (
        f"pass with ≥ 1 warm-up request; without one, warn when the first requests' median TTFT is ≥ "
        f"{COLD_START_RATIO:g}x the rest's (a cold start inside the window)"
    )
    if count > 0:
        return make_check(
            name,
            float(count),
            "requests",
            rule,
            f"{count} warm-up request{'s' if count != 1 else ''} sent before the window, not measured",
        )
    if records is None:
        return NotChecked(
            name=name, why="no warm-up, and the requests were not read to look for a cold start"
        )
    ok = sorted((r for r in records if r.ok and ttft_s(r) is not None), key=lambda r: r.t_send)
    # A cold start slows the first wave of requests: as many as the load keeps in flight.
    k = max(1, min(info.config.fixed_concurrency() or 4, len(ok) // 10))
    if len(ok) < k + 2:
        return make_check(
            name,
            0.0,
            "requests",
            rule,
            "no warm-up request, and too few requests to rule out a cold start",
            warn=0.5,
            lower=True,
        )
    first = median([ttft_s(r) or 0.0 for r in ok[:k]])
    rest = median([ttft_s(r) or 0.0 for r in ok[k:]])
    ratio = first / rest if rest > 0 else 1.0
    cold = ratio >= COLD_START_RATIO
    why = (
        f"no warm-up: the first {k} requests' median TTFT was {ratio:.2g}x the rest's (a cold start is in "
        "the window)"
        if cold
        else f"no warm-up, but the first {k} requests were not slower ({ratio:.2g}x)"
    )
    return Check(
        name=name, status="warn" if cold else "pass", figure=0.0, unit="requests", rule=rule, why=why
    )


# ------------------------------------------------------------------------------------------- over time


def _over_time(
    info: RunInfo, summary: RunSummary, records: Records
) -> list[tuple[str | None, list[float]]] | str:
    if records is None:
        return "the requests were not read"
    out = []
    short = False
    for stage, group in _stage_groups(summary, records):
        if _lifetimes(group) < TIME_CHECK_LIFETIMES:
            short = True
            continue
        rates = bucket_rates(group)
        if rates is not None and math.fsum(rates) > 0:
            out.append((stage, rates))
    if out:
        return out
    if short:
        return (
            f"the window is shorter than {TIME_CHECK_LIFETIMES:g} request lifetimes: its time slices see "
            "single requests come and go, not the rate"
        )
    return f"fewer than {MIN_EVENTS} token arrivals in the window: too few to see the rate over time"


def _lifetimes(records: Sequence[RequestRecord]) -> float:
    """The requests' window ÷ their mean E2E latency (0 without a successful request)."""
    e2e = [v for r in records if r.ok and (v := e2e_s(r)) is not None]
    ends = [t for r in records if (t := r.t_end if r.t_end is not None else last_token_time(r)) is not None]
    if not e2e or not ends:
        return 0.0
    mean = math.fsum(e2e) / len(e2e)
    return (max(ends) - min(r.t_send for r in records)) / mean if mean > 0 else 0.0


def _steady_state(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "steady_state"
    series = _over_time(info, summary, records)
    if isinstance(series, str):
        return NotChecked(name=name, why=series)

    stage, rates = max(series, key=lambda s: abs(drift(s[1])))
    d = drift(rates)
    rule = (
        f"output tok/s in {BUCKETS} equal time slices of the window (the first and last left out), last half "
        f"vs first half: warn at ≥ {percent(DRIFT_WARN)}, fail at ≥ {percent(DRIFT_FAIL)} change"
    )
    what = "rose" if d > 0 else "fell"
    why = (
        f"throughput {what} {percent(abs(d), DRIFT_WARN, DRIFT_FAIL)} from the first to the last half of the "
        "window: the rate is not "
        "steady (throttling, caches filling, other load)"
        if abs(d) >= DRIFT_WARN
        else f"throughput steady across the window ({percent(d, DRIFT_WARN, -DRIFT_WARN, signed=True)} last "
        "half vs first)"
    )
    return make_check(
        name, abs(d), "relative change", rule, why, warn=DRIFT_WARN, fail=DRIFT_FAIL, stage=stage
    )


def _noise(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "noise"
    series = _over_time(info, summary, records)
    if isinstance(series, str):
        return NotChecked(name=name, why=series)

    stage, rates = max(series, key=lambda s: variation(s[1]))
    value = variation(rates)
    rule = (
        f"coefficient of variation (population standard deviation ÷ mean) of output tok/s over {BUCKETS - 2} "
        f"time slices of the window: warn at ≥ {percent(NOISE_WARN)}"
    )
    spread = percent(value, NOISE_WARN)
    why = (
        f"throughput varied {spread} (CV) between time slices of the window: one run's rate is uncertain "
        "by about that much; repeat it (--repeat N) for an interval"
        if value >= NOISE_WARN
        else f"throughput varied {spread} (CV) between time slices of the window"
    )
    return make_check(name, value, "CV", rule, why, warn=NOISE_WARN, stage=stage)


# ------------------------------------------------------------------------------------------- the workload


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


RULES: tuple[Rule, ...] = (
    client_bound,
    _send_schedule,
    _samples,
    _window,
    _warmup,
    _steady_state,
    _noise,
    cpu_contention,
    _prefix_cache,
    _token_source,
    energy,
    _server_queue,
    _errors,
    _finished,
)

__all__ = ["BUCKETS", "RULES", "bucket_rates"]
