"""The validity verdict of a run: the framework every workload kind's rules run in, and the rules they share.

``verdict(info, records)`` applies the rules of the run's kind and returns a ``records.validity.Verdict``:
each check passed, warned or failed, with the figure it looked at, the rule with its thresholds and one line
of why. The rules of a kind are its ``checks`` facet's ``RULES`` (``kinds/<kind>/checks.py``), found through
the registry (``records.kinds.kind_of_summary``) for the kind of the run's summary; a summary no kind stores
is judged by ``GENERIC_RULES``. The run writer stores the verdict with the summary at finish; ``run_verdict``
gives the stored one, or computes it for runs stored before it existed.

A rule is a function ``(info, summary, records) -> Check | NotChecked``; its name (the function's, less a
leading ``_``) is the check's. This module holds what every kind's rules use (``make_check``, ``number``,
``warmup_count``, ``not_checked``, ``drift``, ``variation``, the ``errors`` and ``finished`` checks worded
for a kind's items) and the rules that mean the same for every kind:

==================  ==============================================================  ==========================
check               figure                                                          warn / fail
==================  ==============================================================  ==========================
client_bound        the client's CPU use over the window, share of one core         ≥ 85 % / ≥ 95 %
cpu_contention      the machine's usable CPUs busy during the window (a run that    ≥ 90 %
                    computes on the CPU: the share other processes kept busy)       (≥ 10 %)
energy              devices whose energy reading is not valid                       ≥ 1
==================  ==============================================================  ==========================

It also makes two records the runner and writer store for the rules to read: ``prompt_prefixes`` (the
prompts' repeated prefixes) and ``schedule_summary`` (the send lag of an open-loop load). docs/bench.md
("Validity verdict") gives every rule with its thresholds and why; docs/train.md and docs/image.md the
training and image rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuledger.bench.metrics import percentile
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.records.kinds import kind_of_summary
from gpuledger.records.spec import BenchSpec
from gpuledger.records.validity import Check, CheckStatus, NotChecked, Verdict

__all__ = [
    "CLIENT_CPU_FAIL",
    "CLIENT_CPU_WARN",
    "GENERIC_RULES",
    "PERCENTILE_SAMPLES",
    "PREFIX_MIN_CHARS",
    "SCHEDULE_FLOOR_MS",
    "Records",
    "Rule",
    "client_bound",
    "cpu_contention",
    "drift",
    "energy",
    "error_check",
    "failure_kinds",
    "finished_check",
    "in_process",
    "make_check",
    "mapping",
    "median",
    "not_checked",
    "number",
    "percentile_samples",
    "prompt_prefixes",
    "rule_name",
    "rules_for",
    "run_verdict",
    "schedule_summary",
    "status_of",
    "variation",
    "verdict",
    "warmup_count",
]

Records = Sequence[RequestRecord] | None
Rule = Callable[[RunInfo, RunSummary, Records], Check | NotChecked | None]

# client_bound: the bench client is one asyncio event loop, so one core is its ceiling whatever the machine.
CLIENT_CPU_WARN = 0.85
CLIENT_CPU_FAIL = 0.95
CONTENTION_WARN = 0.90
# cpu_contention of a run that computes on the CPU (in-process torch, --device cpu): the share of its CPUs
# other processes kept busy; the run loses about that share of its compute.
OTHER_LOAD_WARN = 0.10
ERRORS_FAIL = 0.05
# samples: the q-quantile of n values differs from the largest value only when n ≥ 1 / (1 − q).
PERCENTILE_SAMPLES: tuple[tuple[str, int], ...] = (("p99", 100), ("p95", 20), ("p90", 10), ("p50", 2))
# prompt_prefixes: ~16 tokens, the KV block a prefix cache keeps (vLLM's default block size).
PREFIX_MIN_CHARS = 64
# schedule_summary: below this the lag is the timer's and the event loop's resolution.
SCHEDULE_FLOOR_MS = 1.0
MAX_KINDS_NAMED = 3
MAX_KIND_CHARS = 80


# ------------------------------------------------------------------------------------------- the verdict


def rule_name(rule: Rule) -> str:
    """The name of the check a rule makes: its function's name less a leading ``_``."""
    return rule.__name__.lstrip("_")


def rules_for(kind: str) -> tuple[Rule, ...]:
    """The rules a run whose summary is of ``kind`` is judged by: the ``RULES`` of the workload kind that
    stores such summaries (its ``checks`` facet), else ``GENERIC_RULES``."""
    owner = kind_of_summary(kind)
    facet = owner.facet("checks") if owner is not None else None
    if facet is None:
        return GENERIC_RULES
    rules = getattr(facet, "RULES", None)
    if not isinstance(rules, tuple):
        raise TypeError(f"{facet.__name__} defines no RULES tuple")
    return rules


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
    rules = rules_for(summary.kind)
    origin = summary.origin()
    if origin is not None:
        why = f"{origin.label}: its requests, client and telemetry are not here to check"
        return Verdict.of([], [NotChecked(name=rule_name(r), why=why) for r in rules])
    checks: list[Check] = []
    skipped: list[NotChecked] = []
    for rule in rules:
        out = rule(info, summary, records)
        if isinstance(out, Check):
            checks.append(out)
        elif isinstance(out, NotChecked):
            skipped.append(out)
    return Verdict.of(checks, skipped)


# ------------------------------------------------------------------------------------------- helpers


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


def not_checked(name: str, why: str) -> Rule:
    """A rule that never applies to a kind's runs: always not checked, saying why."""

    def rule(info: RunInfo, summary: RunSummary, records: Records) -> NotChecked:
        return NotChecked(name=name, why=why)

    rule.__name__ = name
    return rule


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
    """How many items (requests, steps) ran before the window, as the run recorded it; None when it does
    not say."""
    warm = info.workload.get("warmup") if isinstance(info.workload, Mapping) else None
    if isinstance(warm, Mapping) and isinstance(warm.get("requests"), int):
        return int(warm["requests"])
    if type(info.config) is BenchSpec:  # a spec that records nothing (a run written through the store API)
        return None
    return info.config.warmup_requests()


def median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50)


def drift(values: Sequence[float]) -> float:
    """The mean of the last half of ``values`` less that of the first half, relative to the mean of all
    (``values`` in time order, at least two)."""
    half = len(values) // 2
    first, last = math.fsum(values[:half]) / half, math.fsum(values[-half:]) / half
    return (last - first) / (math.fsum(values) / len(values))


def variation(values: Sequence[float]) -> float:
    """The coefficient of variation: the population standard deviation (÷ n: the spread of these values
    themselves) ÷ their mean; 0 for a mean of 0."""
    mean = math.fsum(values) / len(values)
    if mean <= 0:
        return 0.0
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values)) / mean


# A run of items timed one by one (an image run's requests, a training run's steps): the time each item took,
# in the order they ran, judged for drift and spread by the same two rules in each kind's own words.
ITEM_DRIFT_WARN = 0.10
ITEM_DRIFT_FAIL = 0.25
ITEM_NOISE_WARN = 0.15


@dataclass(frozen=True, slots=True)
class ItemTimes:
    """How a kind reads and words the time each of its items took: ``series(records)`` is the times in the
    order the items ran, or why they cannot be judged; ``figure`` names one time ("seconds per image",
    "step time"), ``items`` the items ("requests", "steps"), ``order`` how they are ordered (" (in the order
    sent)" or ""), ``of_items`` the times as the noise rule names them ("the requests' seconds per image"),
    ``varied`` how their spread is said ("seconds per image varied {} (CV) between requests"), ``span`` what
    a steady rate was steady across ("the run")."""

    series: Callable[[Records], list[float] | str]
    figure: str
    items: str
    order: str
    of_items: str
    varied: str
    span: str


def item_steady_state(times: ItemTimes) -> Rule:
    """``steady_state``: the mean time of the last half of the items against the first half."""

    def steady_state(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
        name = "steady_state"
        values = times.series(records)
        if isinstance(values, str):
            return NotChecked(name=name, why=values)
        change = drift(values)
        rule = (
            f"mean {times.figure} of the last half of the {times.items}{times.order} against the first half: "
            f"warn at ≥ {percent(ITEM_DRIFT_WARN)}, fail at ≥ {percent(ITEM_DRIFT_FAIL)} change"
        )
        what = "rose" if change > 0 else "fell"
        moved = percent(abs(change), ITEM_DRIFT_WARN, ITEM_DRIFT_FAIL)
        why = (
            f"the {times.figure} {what} {moved} from the first to the last half of the {times.items}: the "
            "rate is not steady (throttling, memory filling, other load)"
            if abs(change) >= ITEM_DRIFT_WARN
            else f"{times.figure} steady across {times.span} "
            f"({percent(change, ITEM_DRIFT_WARN, -ITEM_DRIFT_WARN, signed=True)} last half vs first)"
        )
        return make_check(name, abs(change), "relative change", rule, why, warn=ITEM_DRIFT_WARN,
                          fail=ITEM_DRIFT_FAIL)

    return steady_state


def item_noise(times: ItemTimes) -> Rule:
    """``noise``: the coefficient of variation of the items' times."""

    def noise(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
        name = "noise"
        values = times.series(records)
        if isinstance(values, str):
            return NotChecked(name=name, why=values)
        cv = variation(values)
        rule = (
            f"coefficient of variation (population standard deviation ÷ mean) of {times.of_items}: "
            f"warn at ≥ {percent(ITEM_NOISE_WARN)}"
        )
        spread = times.varied.format(percent(cv, ITEM_NOISE_WARN))
        why = (
            f"{spread}: one run's rate is uncertain by about that much; repeat it (--repeat N) for an "
            "interval"
            if cv >= ITEM_NOISE_WARN
            else spread
        )
        return make_check(name, cv, "CV", rule, why, warn=ITEM_NOISE_WARN)

    return noise


def percentile_samples(n: int, unit: str, *, stage: str | None = None, of: str = "") -> Check:
    """The ``samples`` check of ``n`` values behind the percentiles a run prints (``unit``: what each value
    is of, e.g. requests; ``of``: what the percentiles are, put before the rule)."""
    unsupported = [f"{p} needs ≥ {need}" for p, need in PERCENTILE_SAMPLES if n < need]
    rule = (
        of
        + "the q-th percentile of n values is more than the largest one only when n ≥ 1 / (1 − q): "
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
        "samples", float(n), unit, rule, why, warn=float(PERCENTILE_SAMPLES[0][1]), lower=True, stage=stage
    )


# ------------------------------------------------------------------------------------------- shared rules


def client_bound(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
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


def _computes_on_cpu(info: RunInfo) -> bool:
    """The run's engine computes in this process, on the CPU (the torch engines with ``--device cpu``)."""
    return in_process(info) and str(getattr(info.config, "device", "") or "") == "cpu"


def cpu_contention(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
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


def energy(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "energy"
    measured = [d for d in info.telemetry_summary if d.energy_j is not None]
    if not measured:
        return NotChecked(name=name, why="no device's energy was measured in the window")
    bad = [d for d in measured if d.valid is False]
    rule = (
        "devices whose telemetry over the window is not valid (gaps, missing samples, counter mismatch): "
        "warn at ≥ 1"
    )
    if bad:
        first = bad[0]
        why = (
            f"energy of {len(bad)} of {len(measured)} device(s) is not valid — {first.device}: "
            f"{first.validity_reason or 'no reason given'}: J per unit rests on it"
        )
    else:
        why = f"energy of all {len(measured)} device(s) valid over the window"
    return make_check(name, float(len(bad)), "devices", rule, why, warn=1.0)


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
    return error_check(summary, "items")


def _finished(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    return finished_check(
        info,
        summary,
        "items",
        planned="its planned end",
        failed_why="every item failed or the run could not go on",
        done_why="the run ran to its end",
    )


# What a run whose summary no workload kind stores (``WorkSummary``) is judged by: what does not depend on
# what its items are.
GENERIC_RULES: tuple[Rule, ...] = (client_bound, cpu_contention, energy, _errors, _finished)


# ------------------------------------------------------------------------------------------- records


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
