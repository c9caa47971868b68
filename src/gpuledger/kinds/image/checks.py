"""The image kind's ``checks`` facet: the validity rules of an image-generation run. Its items are requests
(pipeline calls, queued prompts), each yielding a batch of images, and its figures are seconds per image and
images per second, so the rules judge those: how many requests are behind the seconds-per-image percentiles,
how much of the window the requests fill, a cold start in the first requests' seconds per image, and how the
seconds per image move over the run. ``bench.validity`` applies ``RULES`` to every run of this kind (found
through the registry); docs/image.md ("Validity") lists each rule with its thresholds.

==============  =================================================================  =======================
check           figure                                                             warn / fail
==============  =================================================================  =======================
samples         successful requests behind the seconds-per-image percentiles       < 100 (p99 needs 100)
window          share of the window's request slots (concurrency × window) the     < 90 %
                requests fill
warmup          requests sent before the window; without one, the first requests'  0 and ≥ 1.5x the rest's
                median seconds per image against the rest's
steady_state    seconds per image, last half of the requests against the first     ≥ 10 % / ≥ 25 %
noise           spread (CV, population std) of the requests' seconds per image     ≥ 15 %
errors          failed requests                                                    > 0 % / ≥ 5 %
finished        the run made its planned images (not interrupted, not aborted)     interrupted / failed
==============  =================================================================  =======================

``client_bound``, ``energy`` and ``cpu_contention`` are the rules every kind shares (``bench.validity``).
``send_schedule`` (an image load is closed-loop), ``prefix_cache``, ``token_source`` and ``server_queue``
are not checked, each with its reason.
"""

from __future__ import annotations

import math

from gpuledger.bench.validity import (
    ItemTimes,
    Records,
    Rule,
    client_bound,
    cpu_contention,
    energy,
    error_check,
    finished_check,
    in_process,
    item_noise,
    item_steady_state,
    make_check,
    median,
    not_checked,
    percentile_samples,
    warmup_count,
)
from gpuledger.kinds.image.summary import ImageSummary, timing_of
from gpuledger.quantity import percent
from gpuledger.records import RunInfo, RunSummary
from gpuledger.records.validity import Check, CheckStatus, NotChecked

WINDOW_FILL_WARN = 0.90
COLD_START_RATIO = 1.5
MIN_REQUESTS_OVER_TIME = 4


def _image(summary: RunSummary) -> ImageSummary:
    if not isinstance(summary, ImageSummary):
        raise TypeError(f"an image rule was given a {summary.kind} summary")
    return summary


def _seconds_per_image(records: Records) -> list[float] | None:
    """Seconds per image of each successful request that made images, in the order they were sent (None
    when the records were not read)."""
    if records is None:
        return None
    out: list[float] = []
    for r in sorted((r for r in records if r.ok and r.t_end is not None), key=lambda r: r.t_send):
        timing = timing_of(r)
        if timing is not None and timing.images and r.t_end is not None:
            out.append(max(r.t_end - r.t_send, 0.0) / timing.images)
    return out


def _samples(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    n = _image(summary).seconds_per_image.n
    if n == 0:
        return NotChecked(name="samples", why="no request made an image: no percentile to support")
    return percentile_samples(n, "requests", of="the requests behind the seconds-per-image percentiles: ")


def _window(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "window"
    s = _image(summary)
    busy = s.request_s.mean
    if not s.request_s.n or busy is None or s.window_s <= 0:
        return NotChecked(name=name, why="no request finished: no window to judge")
    slots = info.config.fixed_concurrency() or 1
    fill = min(1.0, busy * s.request_s.n / (slots * s.window_s))
    on = f"{slots} request slots over " if slots > 1 else ""
    shown = percent(fill, WINDOW_FILL_WARN)
    rule = (
        "Σ request times ÷ (requests in flight × the measured window): warn below "
        f"{percent(WINDOW_FILL_WARN)} (the rates count the whole window: time no request ran — between "
        "requests, or slots left idle at the start and the end — lowers them)"
    )
    why = (
        f"the requests fill {shown} of {on}the {s.window_s:.3g} s window: "
        f"{percent(1 - fill, 1 - WINDOW_FILL_WARN)} of it no request ran"
        if fill < WINDOW_FILL_WARN
        else f"the requests fill {shown} of {on}the {s.window_s:.3g} s window"
    )
    return make_check(name, fill, "share of the window", rule, why, warn=WINDOW_FILL_WARN, lower=True)


def _warmup(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    name = "warmup"
    count = warmup_count(info)
    if count is None:
        return NotChecked(
            name=name, why="the run does not record whether requests were sent before the window"
        )
    rule = (
        f"pass with ≥ 1 warm-up request; without one, warn when the first requests' median seconds per image "
        f"is ≥ {COLD_START_RATIO:g}x the rest's (a cold start inside the window: the pipeline's first call "
        "allocates its memory and picks its kernels)"
    )
    if count > 0:
        return make_check(
            name,
            float(count),
            "requests",
            rule,
            f"{count} warm-up request{'s' if count != 1 else ''} sent before the window, not measured",
        )
    times = _seconds_per_image(records)
    if times is None:
        return NotChecked(
            name=name, why="no warm-up, and the requests were not read to look for a cold start"
        )
    # A cold start slows the first wave of requests: as many as the load keeps in flight.
    k = max(1, min(info.config.fixed_concurrency() or 1, len(times) // 10))
    if len(times) < k + 2:
        return make_check(
            name,
            0.0,
            "requests",
            rule,
            "no warm-up request, and too few requests to rule out a cold start",
            warn=0.5,
            lower=True,
        )
    first, rest = median(times[:k]), median(times[k:])
    ratio = first / rest if rest > 0 else 1.0
    cold = ratio >= COLD_START_RATIO
    wave = f"the first {k} requests'" if k > 1 else "the first request's"
    why = (
        f"no warm-up: {wave} seconds per image were {ratio:.2g}x the rest's median (a cold start is in the "
        "window)"
        if cold
        else f"no warm-up, but {wave} seconds per image were not slower ({ratio:.2g}x the rest's median)"
    )
    status: CheckStatus = "warn" if cold else "pass"
    return Check(name=name, status=status, figure=0.0, unit="requests", rule=rule, why=why)


def _over_time(records: Records) -> list[float] | str:
    times = _seconds_per_image(records)
    if times is None:
        return "the requests were not read"
    if len(times) < MIN_REQUESTS_OVER_TIME:
        return (
            f"fewer than {MIN_REQUESTS_OVER_TIME} requests made images: too few to see the seconds per image "
            "change"
        )
    if math.fsum(times) <= 0:
        return "the requests took no measurable time"
    return times


TIMES = ItemTimes(
    series=_over_time,
    figure="seconds per image",
    items="requests",
    order=" (in the order sent)",
    of_items="the requests' seconds per image",
    varied="seconds per image varied {} (CV) between requests",
    span="the run",
)


def _server_queue(info: RunInfo, summary: RunSummary, records: Records) -> NotChecked:
    if in_process(info):
        return NotChecked(name="server_queue", why="in-process pipeline: no server and no queue")
    return NotChecked(
        name="server_queue",
        why="an image server's queue is measured per request (the queue wait of the stage times), not judged",
    )


def _errors(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    note = (
        "failed requests free the engine for the rest: "
        "the rate measured is not the rate of the load asked for"
    )
    return error_check(summary, "requests", note)


def _finished(info: RunInfo, summary: RunSummary, records: Records) -> Check | NotChecked:
    return finished_check(
        info,
        summary,
        "requests",
        planned="its planned images",
        failed_why="every request failed or the run could not go on",
        done_why="the run made its planned images",
    )


RULES: tuple[Rule, ...] = (
    client_bound,
    not_checked(
        "send_schedule",
        "an image load is closed-loop: each request is sent when another finishes, so there is no schedule "
        "to fall behind",
    ),
    _samples,
    _window,
    _warmup,
    item_steady_state(TIMES),
    item_noise(TIMES),
    cpu_contention,
    not_checked(
        "prefix_cache",
        "image generation has no prompt-prefix cache (a ComfyUI node served from its cache is counted in the "
        "node table)",
    ),
    not_checked(
        "token_source",
        "an image run's images and denoising steps are counted by the engine: the client counts nothing",
    ),
    energy,
    _server_queue,
    _errors,
    _finished,
)

__all__ = ["RULES"]
