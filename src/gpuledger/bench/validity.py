"""The validity verdict of a run: a pure function over what the run stores (its header and requests).

``verdict(info, records)`` applies every rule below and returns a ``records.validity.Verdict``: each check
passed, warned or failed, with the figure it looked at, the rule with its thresholds and one line of why.
The run writer stores it with the summary at finish; ``run_verdict`` gives the stored one, or computes it
for runs stored before it existed. The rules and the reasons for their thresholds are in docs/bench.md
("Validity verdict"); in short:

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuledger.bench.metrics import e2e_s, last_token_time, percentile, ttft_s
from gpuledger.bench.validity_checks import (
    WORKLOAD_RULES,
    Records,
    Rule,
    in_process,
    make_check,
    mapping,
    number,
    prompt_prefixes,
    warmup_count,
)
from gpuledger.bench.validity_training import TRAINING_KIND, training_rules
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.records.spec import BatchStage, BenchSpec, ConcurrencyStage
from gpuledger.records.validity import Check, NotChecked, Verdict

__all__ = [
    "BUCKETS",
    "CLIENT_CPU_FAIL",
    "CLIENT_CPU_WARN",
    "PERCENTILE_SAMPLES",
    "prompt_prefixes",
    "run_verdict",
    "schedule_summary",
    "verdict",
]

# client_bound: the bench client is one asyncio event loop, so one core is its ceiling whatever the machine.
CLIENT_CPU_WARN = 0.85
CLIENT_CPU_FAIL = 0.95
# send_schedule: the lag hidden from the latency figures, as a share of the median E2E latency.
SCHEDULE_WARN_SHARE = 0.05
SCHEDULE_FAIL_SHARE = 0.25
SCHEDULE_FLOOR_MS = 1.0  # below this the lag is the timer's and the event loop's resolution
# samples: the q-quantile of n values differs from the largest value only when n ≥ 1 / (1 − q).
PERCENTILE_SAMPLES: tuple[tuple[str, int], ...] = (("p99", 100), ("p95", 20), ("p90", 10), ("p50", 2))
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
CONTENTION_WARN = 0.90
# cpu_contention of a run that computes on the CPU (in-process torch, --device cpu): the share of its CPUs
# other processes kept busy; the run loses about that share of its compute.
OTHER_LOAD_WARN = 0.10


def run_verdict(info: RunInfo, records: Records = None) -> Verdict | None:
    """The verdict stored with the run, or the one computed now (``records`` None: the checks that need
    the requests are not checked). None for a run without a summary."""
    if info.summary is None:
        return None
    if info.summary.verdict is not None:
        return info.summary.verdict
    return verdict(info, records)


def verdict(info: RunInfo, records: Records) -> Verdict:
    """Every check of the run (``info.summary`` must be set). ``records`` are the run's requests; None
    when they were not read (the checks that need them say so). A run measured elsewhere (a published
    point) is not judged: none of what the rules read is here."""
    summary = info.summary
    if summary is None:
        raise ValueError("verdict() needs the run's summary")
    origin = summary.origin()
    if origin is not None:
        why = f"{origin.label}: its requests, client and telemetry are not here to check"
        rules = rules_for(summary.kind)
        return Verdict.of([], [NotChecked(name=r.__name__.lstrip("_"), why=why) for r in rules])
    checks: list[Check] = []
    skipped: list[NotChecked] = []
    for rule in rules_for(summary.kind):
        out = rule(info, summary, records)
        if isinstance(out, Check):
            checks.append(out)
        elif isinstance(out, NotChecked):
            skipped.append(out)
    return Verdict.of(checks, skipped)


# ------------------------------------------------------------------------------------------- helpers


def _median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50)


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


def _client_bound(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "client_bound"
    ratio = number(info.client.get("cpu_util_ratio"))
    if in_process(info):
        return NotChecked(name=name, why="in-process engine: this process's CPU time is the model's own work")
    if ratio is None:
        return NotChecked(name=name, why="the run did not record the client's CPU use")
    demand = number(info.client.get("event_loop_busy_ratio"))
    wait = number(info.client.get("event_loop_wait_ratio")) or 0.0
    rule = (
        f"warn at ≥ {percent(CLIENT_CPU_WARN)}, fail at ≥ {percent(CLIENT_CPU_FAIL)} of one core: the "
        "client's CPU time ÷ the window, or — where Linux records it — the share of the window its event "
        "loop ran or waited for a CPU (the client is one event loop: one core is its ceiling, and a loop "
        "that always has work sets the pace itself)"
    )
    limits = (CLIENT_CPU_WARN, CLIENT_CPU_FAIL)
    figure, what = ratio, f"the client used {percent(ratio, *limits)} of one CPU core"
    if demand is not None and demand > ratio:
        figure = demand
        what = (
            f"the client's event loop ran {percent(demand - wait)} of the window and waited {percent(wait)} "
            f"for a CPU ({percent(demand, *limits)} in all)"
        )
    if figure >= CLIENT_CPU_FAIL:
        why = f"{what}: it, not the server, limited the run"
    elif figure >= CLIENT_CPU_WARN:
        why = f"{what}: it may have limited the run"
    else:
        why = what
    return make_check(
        name, figure, "share of one core", rule, why, warn=CLIENT_CPU_WARN, fail=CLIENT_CPU_FAIL
    )


def schedule_summary(lags_s: Sequence[float]) -> dict[str, Any]:
    """What the run writer stores as ``RunInfo.client["send_schedule"]``: how late each request of an
    open-loop load was sent against its scheduled time (seconds in, milliseconds out)."""
    lags = sorted(max(0.0, v) * 1e3 for v in lags_s if math.isfinite(v))
    if not lags:
        return {"requests": 0}
    return {
        "requests": len(lags),
        "lag_ms": {
            "mean": math.fsum(lags) / len(lags),
            "p50": percentile(lags, 50),
            "p99": percentile(lags, 99),
            "max": lags[-1],
        },
        "late_requests": sum(1 for v in lags if v >= SCHEDULE_FLOOR_MS),
        "source": "actual − scheduled send time of each request, on the run's clock (perf_counter)",
    }


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
    unsupported = [f"{p} needs ≥ {need}" for p, need in PERCENTILE_SAMPLES if n < need]
    rule = (
        "the q-th percentile of n values is more than the largest one only when n ≥ 1 / (1 − q): "
        + ", ".join(f"{p} ≥ {need}" for p, need in PERCENTILE_SAMPLES)
        + "; warn when p99 is not supported"
    )
    if unsupported:
        shown = [p for p, need in PERCENTILE_SAMPLES if n < need]
        why = (
            f"{'/'.join(shown)} not supported by {n} sample{'s' if n != 1 else ''} "
            f"({'; '.join(unsupported)}): they are the largest value seen"
        )
    else:
        why = f"{n} samples support every percentile shown (p99 needs 100)"
    return make_check(
        name, float(n), "requests", rule, why, warn=float(PERCENTILE_SAMPLES[0][1]), lower=True, stage=stage
    )


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
    first = _median([ttft_s(r) or 0.0 for r in ok[:k]])
    rest = _median([ttft_s(r) or 0.0 for r in ok[k:]])
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

    def drift(rates: list[float]) -> float:
        half = len(rates) // 2
        first, last = math.fsum(rates[:half]) / half, math.fsum(rates[-half:]) / half
        return (last - first) / (math.fsum(rates) / len(rates))

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

    def cv(rates: list[float]) -> float:
        # The population standard deviation (÷ n): the spread of these slices themselves.
        mean = math.fsum(rates) / len(rates)
        return math.sqrt(math.fsum((r - mean) ** 2 for r in rates) / len(rates)) / mean

    stage, rates = max(series, key=lambda s: cv(s[1]))
    value = cv(rates)
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


def _computes_on_cpu(info: RunInfo) -> bool:
    """The run's engine computes in this process, on the CPU (the torch engines with ``--device cpu``)."""
    return in_process(info) and str(getattr(info.config, "device", "") or "") == "cpu"


def _cpu_contention(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "cpu_contention"
    busy = number(info.client.get("machine_cpu_busy_ratio"))
    if busy is None:
        return NotChecked(name=name, why="the run did not record the machine's CPU use during the window")
    cores = number(info.client.get("cores_usable"))
    if _computes_on_cpu(info):
        return _other_load(info, busy, cores)
    rule = (
        f"the busy share of the CPUs this process may use, over the window: warn at ≥ "
        f"{percent(CONTENTION_WARN)} (the client then waits for a core and its timestamps are late)"
    )
    on = f" of {cores:g} usable CPU{'s' if cores != 1 else ''}" if cores else ""
    shown = percent(busy, CONTENTION_WARN)
    why = (
        f"the machine's CPUs were {shown} busy{on}: the client shared them, its timings are noisy"
        if busy >= CONTENTION_WARN
        else f"the machine's CPUs were {shown} busy{on}"
    )
    return make_check(name, busy, "share of usable CPUs", rule, why, warn=CONTENTION_WARN)


def _other_load(info: RunInfo, busy: float, cores: float | None) -> Check | NotChecked:
    """``cpu_contention`` of a run that computes on the CPU: its own work keeps the CPUs busy, so the
    figure is what other processes kept busy — the machine's busy share less this process's CPU time."""
    name = "cpu_contention"
    own = number(info.client.get("cpu_util_ratio"))
    if own is None or not cores:
        return NotChecked(
            name=name,
            why="the run computes on the CPU and did not record its own CPU time and usable CPUs: other "
            "processes' load cannot be told from its own",
        )
    ranks = getattr(info.config, "world_size", None)
    if isinstance(ranks, int) and ranks > 1:
        return NotChecked(
            name=name,
            why=f"the run computes on the CPU in {ranks} processes (ranks): only this one's CPU time is "
            "recorded, so other processes' load cannot be told from the other ranks'",
        )
    mine = min(1.0, own / cores)
    other = max(0.0, busy - mine)
    rule = (
        "a run computing on the CPU: the machine's busy share of the CPUs this process may use, less this "
        f"process's CPU time ÷ those CPUs, over the window: warn at ≥ {percent(OTHER_LOAD_WARN)} (other "
        "processes then take CPU time the run computes with, and its rate is lower by about that share)"
    )
    what = (
        f"other processes kept {percent(other, OTHER_LOAD_WARN)} of the {cores:g} usable "
        f"CPU{'s' if cores != 1 else ''} busy (the machine {percent(busy)}, this run {percent(mine)})"
    )
    why = f"{what}: the run shared the CPUs it computes on, its rate is lower for it" if (
        other >= OTHER_LOAD_WARN
    ) else what
    return make_check(
        name, other, "share of usable CPUs (other processes)", rule, why, warn=OTHER_LOAD_WARN
    )


_RULES: tuple[Rule, ...] = (
    _client_bound,
    _send_schedule,
    _samples,
    _window,
    _warmup,
    _steady_state,
    _noise,
    _cpu_contention,
    *WORKLOAD_RULES,
)

# A kind of run whose items are not requests judges itself with its own rules, given the rules above by name
# (training: optimizer steps, bench/validity_training.py).
KindRules = Callable[[Mapping[str, Rule]], Sequence[Rule]]
KIND_RULES: dict[str, KindRules] = {TRAINING_KIND: training_rules}


def rules_for(kind: str) -> tuple[Rule, ...]:
    """The rules a run of ``kind`` is judged by: every rule above, or its kind's own set (``KIND_RULES``)."""
    make = KIND_RULES.get(kind)
    return _RULES if make is None else tuple(make({r.__name__.lstrip("_"): r for r in _RULES}))
