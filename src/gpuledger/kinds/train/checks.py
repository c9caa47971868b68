"""The train kind's ``checks`` facet: the validity rules of a training run. Its items are optimizer steps, not
requests, so the rules that judge requests (their latency percentiles, send schedule, token counts, a server's
queue and prefix cache) give way to what makes a training measurement trustworthy: the step time and the
loss. ``bench.validity`` applies ``RULES`` to every run of this kind (found through the registry);
docs/train.md ("Validity") lists each rule with its thresholds.

==============  =================================================================  =======================
check           figure                                                             warn / fail
==============  =================================================================  =======================
samples         measured steps behind the rate and the step-time percentiles       < 10
window          share of the measured window the steps themselves fill             < 95 %
warmup          steps run before the window; without one, the first step's time    0 and ≥ 1.5x the rest's
                against the rest's median (allocation, compilation in the window)
steady_state    step time, last half of the steps against the first half           ≥ 10 % / ≥ 25 %
noise           spread (CV, population std) of the step times                      ≥ 15 %
loss            steps whose loss is not a finite number (NaN, inf); fp16 skips     NaN: fail; skips ≥ 25 %
errors          failed steps                                                       > 0 % / ≥ 5 %
finished        the run ran its planned steps (not interrupted, not aborted)       interrupted / failed
==============  =================================================================  =======================

``client_bound``, ``energy`` and ``cpu_contention`` are the rules every kind shares (``bench.validity``);
for a run that trains on the CPU, ``cpu_contention`` judges the share of the CPUs other processes kept busy
(the training's own work keeps them busy). ``send_schedule``, ``prefix_cache``, ``token_source`` and
``server_queue`` are not checked, each with its reason.
"""

from __future__ import annotations

from gpuledger.bench.validity import (
    ItemTimes,
    Records,
    Rule,
    client_bound,
    cpu_contention,
    energy,
    error_check,
    finished_check,
    item_noise,
    item_steady_state,
    make_check,
    median,
    not_checked,
    warmup_count,
)
from gpuledger.kinds.train.summary import TrainingSummary, step_of
from gpuledger.quantity import percent
from gpuledger.records import RunInfo, RunSummary
from gpuledger.records.validity import Check, CheckStatus, NotChecked

MIN_STEPS = 10
WINDOW_FILL_WARN = 0.95
COLD_START_RATIO = 1.5
MIN_STEPS_OVER_TIME = 4
SKIPPED_WARN = 0.25


def _steps(records: Records) -> list[float] | None:
    """The measured steps' times in step order (None when the records were not read)."""
    if records is None:
        return None
    steps = sorted((s for r in records if r.ok and (s := step_of(r)) is not None), key=lambda s: s.step)
    return [s.step_s for s in steps]


def _training(summary: RunSummary) -> TrainingSummary:
    if not isinstance(summary, TrainingSummary):
        raise TypeError(f"a training rule was given a {summary.kind} summary")
    return summary


def _samples(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "samples"
    n = _training(summary).steps_total
    if n == 0:
        return NotChecked(name=name, why="no step finished: no rate to support")
    rule = (
        f"measured steps: warn below {MIN_STEPS} (one slow step moves a rate over fewer by more than 10 %; "
        "p90 of the step time needs 10, p99 100)"
    )
    why = (
        f"{n} measured step{'s' if n != 1 else ''}: one slow step weighs {percent(1 / n)} of the rate"
        if n < MIN_STEPS
        else f"{n} measured steps"
    )
    return make_check(name, float(n), "steps", rule, why, warn=float(MIN_STEPS), lower=True)


def _window(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "window"
    s = _training(summary)
    if not s.steps_total or s.window_s <= 0 or s.step_time_s.mean is None:
        return NotChecked(name=name, why="no step finished: no window to judge")
    fill = min(1.0, s.step_time_s.mean * s.steps_total / s.window_s)
    shown = percent(fill, WINDOW_FILL_WARN)
    rule = (
        f"Σ step times ÷ the measured window: warn below {percent(WINDOW_FILL_WARN)} (the rates count the "
        "whole window: time between steps — storing, logging, the data — lowers them)"
    )
    why = (
        f"the steps fill {shown} of the {s.window_s:.3g} s window: {percent(1 - fill, 1 - WINDOW_FILL_WARN)} "
        "went between steps"
        if fill < WINDOW_FILL_WARN
        else f"the steps fill {shown} of the {s.window_s:.3g} s window"
    )
    return make_check(name, fill, "share of the window", rule, why, warn=WINDOW_FILL_WARN, lower=True)


def _warmup(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "warmup"
    count = warmup_count(info)
    if count is None:
        return NotChecked(name=name, why="the run does not record its warm-up steps")
    rule = (
        f"pass with ≥ 1 warm-up step; without one, warn when the first measured step took ≥ "
        f"{COLD_START_RATIO:g}x the median of the rest (the optimizer's states, the allocator's pools, a "
        "compilation are made in the first step)"
    )
    if count > 0:
        return make_check(
            name,
            float(count),
            "steps",
            rule,
            f"{count} warm-up step{'s' if count != 1 else ''} run before the window, not measured",
        )
    times = _steps(records)
    if times is None:
        return NotChecked(name=name, why="no warm-up, and the steps were not read to look for a cold start")
    if len(times) < 3:
        return make_check(
            name,
            0.0,
            "steps",
            rule,
            "no warm-up step, and too few steps to rule out a cold start",
            warn=0.5,
            lower=True,
        )
    rest = median(times[1:])
    ratio = times[0] / rest if rest > 0 else 1.0
    cold = ratio >= COLD_START_RATIO
    why = (
        f"no warm-up: the first step took {ratio:.2g}x the rest's median (a cold start is in the window)"
        if cold
        else f"no warm-up, but the first step was not slower ({ratio:.2g}x the rest's median)"
    )
    status: CheckStatus = "warn" if cold else "pass"
    return Check(name=name, status=status, figure=0.0, unit="steps", rule=rule, why=why)


def _over_time(records: Records) -> list[float] | str:
    times = _steps(records)
    if times is None:
        return "the steps were not read"
    if len(times) < MIN_STEPS_OVER_TIME:
        return f"fewer than {MIN_STEPS_OVER_TIME} measured steps: too few to see the step time change"
    return times


TIMES = ItemTimes(
    series=_over_time,
    figure="step time",
    items="steps",
    order="",
    of_items="the step times",
    varied="step times varied {} (CV)",
    span="the window",
)


def _loss(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "loss"
    s = _training(summary)
    if not s.steps_total:
        return NotChecked(name=name, why="no step finished: no loss to judge")
    rule = (
        f"fail when a step's loss is not a finite number (the device computed NaN or inf, or the run "
        f"diverged); warn when the fp16 grad scaler skipped ≥ {percent(SKIPPED_WARN)} of the updates"
    )
    if s.nonfinite_loss_steps:
        return Check(
            name=name,
            status="fail",
            figure=float(s.nonfinite_loss_steps),
            unit="steps",
            rule=rule,
            why=f"{s.nonfinite_loss_steps} of {s.steps_total} steps had a loss that is NaN or inf: the "
            "figures measure a computation that does not train",
        )
    skipped = s.skipped_steps / s.steps_total
    if skipped >= SKIPPED_WARN:
        return Check(
            name=name,
            status="warn",
            figure=float(s.skipped_steps),
            unit="steps",
            rule=rule,
            why=f"the fp16 grad scaler skipped {s.skipped_steps} of {s.steps_total} updates (inf/NaN "
            "gradients): those steps did no optimizer work",
        )
    first, last = s.loss_first, s.loss_last
    moved = f" ({first:.4g} → {last:.4g})" if first is not None and last is not None else ""
    return Check(
        name=name,
        status="pass",
        figure=0.0,
        unit="steps",
        rule=rule,
        why=f"every step's loss was finite{moved}",
    )


def _errors(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    return error_check(summary, "steps")


def _finished(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    return finished_check(
        info,
        summary,
        "steps",
        planned="its planned steps",
        failed_why="no step finished",
        done_why="the run ran its planned steps",
    )


RULES: tuple[Rule, ...] = (
    client_bound,
    not_checked("send_schedule", "a training run takes one step after the other: there is no send schedule"),
    _samples,
    _window,
    _warmup,
    item_steady_state(TIMES),
    item_noise(TIMES),
    cpu_contention,
    not_checked("prefix_cache", "a training run sends no prompts to a server: there is no prefix cache"),
    not_checked("token_source", "training tokens are counted by the engine: sequences × sequence length"),
    energy,
    not_checked("server_queue", "a training run has no server and no queue"),
    _loss,
    _errors,
    _finished,
)

__all__ = ["RULES"]
