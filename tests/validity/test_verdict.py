"""The validity verdict (bench/validity.py) as a pure function over what a run stores: each check's
figure, rule and outcome, on requests shaped like the runner's (streamed chunks on the run's clock) and
summaries from ``bench.metrics.summarize``. The end-to-end cases (a real loopback server) are in
test_verdict_bench.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gpuledger.bench.metrics import summarize
from gpuledger.bench.validity import prompt_prefixes, run_verdict, schedule_summary, verdict
from gpuledger.records import RequestRecord, RunInfo, dump_summary, load_summary
from gpuledger.records.validity import Check, Verdict


def stream(
    index: int,
    t_send: float,
    *,
    ttft: float = 0.05,
    itl: float = 0.01,
    tokens: int = 20,
    stage: str = "",
    source: str = "server_usage",
    error: str | None = None,
) -> RequestRecord:
    """One request as the runner records it: ``tokens`` one-token chunks, the first after ``ttft``."""
    if error is not None:
        return RequestRecord(index=index, t_send=t_send, t_end=t_send + ttft, error=error, stage=stage)
    times = [t_send + ttft + i * itl for i in range(tokens)]
    return RequestRecord(
        index=index,
        t_send=t_send,
        t_first=times[0],
        t_end=times[-1],
        chunk_times=times,
        input_tokens=32,
        output_tokens=tokens,
        token_source=source,
        stage=stage,
    )  # type: ignore[arg-type]


def closed_loop(n: int, concurrency: int = 4, **kw: Any) -> list[RequestRecord]:
    """``n`` requests, ``concurrency`` in flight, each sent when the previous of its slot finished."""
    out: list[RequestRecord] = []
    free = [0.0] * concurrency
    for i in range(n):
        slot = min(range(concurrency), key=lambda s: free[s])
        r = stream(i, free[slot], **kw)
        out.append(r)
        free[slot] = r.t_end or free[slot]
    return out


SERVER_CONFIG = {
    "engine": "openai",
    "warmup": 1,
    "load": {"kind": "concurrency", "stages": [{"stage": "c=4", "concurrency": 4}]},
}


def run_of(records: Sequence[RequestRecord], **fields: Any) -> RunInfo:
    fields.setdefault("client", {"cpu_util_ratio": 0.2, "cores_usable": 2})
    fields.setdefault("workload", {"dataset": "builtin", "distinct_prompts": 1000, "warmup": {"requests": 1}})
    fields.setdefault("config", dict(SERVER_CONFIG))
    summary = fields.pop("summary", None) or summarize(records)
    return RunInfo(
        id="run1", engine="openai", status=fields.pop("status", "complete"), summary=summary, **fields
    )


def check(info: RunInfo, records: Sequence[RequestRecord] | None, name: str) -> Check:
    found = verdict(info, records).check(name)
    assert found is not None, verdict(info, records).not_checked
    return found


def skipped(info: RunInfo, records: Sequence[RequestRecord] | None, name: str) -> str:
    v = verdict(info, records)
    assert v.check(name) is None
    return next(n.why for n in v.not_checked if n.name == name)


# -- a clean run -----------------------------------------------------------------------------------


def test_a_clean_run_passes_every_check_it_can_apply() -> None:
    recs = closed_loop(200)
    v = verdict(run_of(recs), recs)
    assert v.status == "pass", [c.line() for c in v.problems()]
    assert {c.name for c in v.checks} >= {
        "client_bound",
        "samples",
        "window",
        "warmup",
        "steady_state",
        "noise",
        "prefix_cache",
        "token_source",
        "errors",
        "finished",
    }
    # Rules that need what this run did not record say why instead of passing silently.
    reasons = {n.name: n.why for n in v.not_checked}
    assert "closed-loop" in reasons["send_schedule"]
    assert "bench --server-metrics" in reasons["server_queue"]
    assert "energy" in reasons
    assert v.headline().startswith("valid: all")


def test_every_check_carries_its_figure_unit_rule_and_why() -> None:
    recs = closed_loop(120)
    for c in verdict(run_of(recs), recs).checks:
        assert c.figure is not None and c.unit and c.rule and c.why, c


# -- the client ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "status"), [(0.3, "pass"), (0.85, "warn"), (0.94, "warn"), (0.95, "fail"), (1.02, "fail")]
)
def test_client_bound_warns_at_85_and_fails_at_95_percent_of_one_core(ratio: float, status: str) -> None:
    recs = closed_loop(120)
    c = check(run_of(recs, client={"cpu_util_ratio": ratio, "cores_usable": 16}), recs, "client_bound")
    assert c.status == status
    assert c.figure == ratio and c.unit == "share of one core"
    assert (c.warn_at, c.fail_at) == (0.85, 0.95)


def test_an_event_loop_that_always_ran_or_waited_for_a_cpu_is_client_bound() -> None:
    # Half a core of its own CPU time, but the rest of the window waiting in the run queue: the loop always
    # had work, so the client set the pace (a busy machine took the other half).
    recs = closed_loop(120)
    client = {"cpu_util_ratio": 0.5, "event_loop_busy_ratio": 0.98, "event_loop_wait_ratio": 0.47}
    c = check(run_of(recs, client=client), recs, "client_bound")
    assert c.status == "fail" and c.figure == 0.98
    assert "waited 47 % for a CPU" in c.why and "limited the run" in c.why
    idle = {"cpu_util_ratio": 0.2, "event_loop_busy_ratio": 0.25, "event_loop_wait_ratio": 0.05}
    assert check(run_of(recs, client=idle), recs, "client_bound").status == "pass"


def test_an_in_process_engine_is_not_client_bound_by_its_own_model() -> None:
    recs = closed_loop(120)
    info = run_of(recs, client={"cpu_util_ratio": 1.0, "in_process_engine": True})
    assert "in-process" in skipped(info, recs, "client_bound")
    assert "in-process" in skipped(info, recs, "prefix_cache")


def test_send_schedule_fails_when_sends_lag_their_schedule_by_a_quarter_of_the_latency() -> None:
    recs = closed_loop(120)  # median E2E = 50 ms + 19 x 10 ms = 240 ms
    late = schedule_summary([0.001 * i for i in range(120)])  # up to 119 ms late
    c = check(run_of(recs, client={"cpu_util_ratio": 0.3, "send_schedule": late}), recs, "send_schedule")
    assert c.status == "fail" and c.unit == "ms"
    assert c.figure == pytest.approx(late["lag_ms"]["p99"])
    assert c.warn_at == pytest.approx(0.05 * 240, rel=1e-6) and c.fail_at == pytest.approx(
        0.25 * 240, rel=1e-6
    )
    assert "coordinated omission" in c.why
    on_time = schedule_summary([0.0002] * 120)
    ok = check(run_of(recs, client={"cpu_util_ratio": 0.3, "send_schedule": on_time}), recs, "send_schedule")
    assert ok.status == "pass"


# -- the sample ------------------------------------------------------------------------------------


def test_five_requests_warn_that_p99_is_not_supported_by_5_samples() -> None:
    recs = closed_loop(5)
    c = check(run_of(recs), recs, "samples")
    assert c.status == "warn" and c.figure == 5
    assert "p99" in c.why and "not supported by 5 samples" in c.why
    assert "p90" in c.why  # and p95/p90 are the largest value too


def test_a_hundred_requests_support_p99() -> None:
    recs = closed_loop(100)
    assert check(run_of(recs), recs, "samples").status == "pass"
    recs = closed_loop(99)
    assert check(run_of(recs), recs, "samples").status == "warn"


def test_a_window_of_few_request_lifetimes_warns() -> None:
    recs = closed_loop(8, concurrency=4)  # two waves: the window is two request lifetimes
    c = check(run_of(recs), recs, "window")
    assert c.status == "warn" and c.figure == pytest.approx(2.0, rel=0.05)
    assert check(run_of(closed_loop(200)), None, "window").status == "pass"


def test_no_warmup_with_a_cold_start_in_the_window_warns() -> None:
    recs = closed_loop(100)
    for r in recs[:4]:  # the first requests waited for the server to warm up
        delay = 0.5
        r.t_first = (r.t_first or 0) + delay
        r.chunk_times = [t + delay for t in r.chunk_times]
        r.t_end = r.chunk_times[-1]
    cold = run_of(recs, workload={"dataset": "builtin", "distinct_prompts": 1000, "warmup": {"requests": 0}})
    c = check(cold, recs, "warmup")
    assert c.status == "warn" and "cold start" in c.why
    warm = run_of(recs)
    assert check(warm, recs, "warmup").status == "pass"


def test_no_warmup_and_no_cold_start_passes() -> None:
    recs = closed_loop(100)
    info = run_of(recs, workload={"dataset": "builtin", "distinct_prompts": 1000, "warmup": {"requests": 0}})
    c = check(info, recs, "warmup")
    assert c.status == "pass" and "not slower" in c.why


# -- over time -------------------------------------------------------------------------------------


def test_throughput_that_halves_across_the_window_fails_steady_state() -> None:
    first = closed_loop(100, itl=0.01)
    start = max(r.t_end or 0 for r in first)
    second = [stream(100 + r.index, start + r.t_send, itl=0.02) for r in closed_loop(100, itl=0.02)]
    recs = first + second
    c = check(run_of(recs), recs, "steady_state")
    assert c.status == "fail" and "fell" in c.why
    assert c.figure is not None and c.figure >= 0.25


def test_a_steady_run_has_low_noise_and_says_its_spread() -> None:
    recs = closed_loop(200)
    steady, noise = check(run_of(recs), recs, "steady_state"), check(run_of(recs), recs, "noise")
    assert steady.status == "pass" and noise.status == "pass"
    assert noise.unit == "CV" and noise.figure is not None and noise.figure < 0.15
    assert "(CV)" in noise.why


def test_bursty_throughput_warns_noise() -> None:
    recs: list[RequestRecord] = []
    t = 0.0
    for burst in range(12):
        n = 12 if burst % 2 else 1
        recs += [stream(len(recs) + i, t, tokens=20) for i in range(n)]
        t += 0.25
    c = check(run_of(recs), recs, "noise")
    assert c.status == "warn" and c.figure is not None and c.figure >= 0.15
    assert "--repeat" in c.why


def test_without_the_requests_the_time_checks_say_so() -> None:
    info = run_of(closed_loop(100))
    assert skipped(info, None, "steady_state") == "the requests were not read"
    assert skipped(info, None, "noise") == "the requests were not read"


def test_cpu_contention_warns_when_the_machine_was_busy() -> None:
    recs = closed_loop(100)
    busy = run_of(recs, client={"cpu_util_ratio": 0.4, "cores_usable": 2, "machine_cpu_busy_ratio": 0.97})
    c = check(busy, recs, "cpu_contention")
    assert c.status == "warn" and "97 %" in c.why and "2 usable CPUs" in c.why
    assert "did not record" in skipped(run_of(recs), recs, "cpu_contention")


# -- the workload and the server -------------------------------------------------------------------


def test_a_dataset_that_repeats_one_long_prompt_warns_about_the_prefix_cache() -> None:
    recs = closed_loop(100)
    long_prompt = "Summarise the following contract clause by clause. " * 40
    stats = prompt_prefixes([long_prompt] * 101)
    assert stats["repeated_prefix_share"] == pytest.approx(100 / 101)
    info = run_of(
        recs,
        workload={
            "dataset": "jsonl",
            "distinct_prompts": 101,
            "prompt_prefixes": stats,
            "warmup": {"requests": 1},
        },
    )
    c = check(info, recs, "prefix_cache")
    assert c.status == "warn" and c.figure == pytest.approx(100 / 101)
    assert "prefix cache" in c.why


def test_distinct_prompts_pass_the_prefix_check() -> None:
    recs = closed_loop(100)
    prompts = [f"{i}: " + "word " * 50 for i in range(101)]
    info = run_of(
        recs,
        workload={"dataset": "jsonl", "prompt_prefixes": prompt_prefixes(prompts), "warmup": {"requests": 1}},
    )
    assert check(info, recs, "prefix_cache").status == "pass"


def test_prompts_cycled_more_than_once_count_as_repeats() -> None:
    recs = closed_loop(100)
    prompts = [f"{i}: " + "word " * 50 for i in range(10)]
    info = run_of(
        recs,
        workload={
            "dataset": "builtin",
            "prompt_prefixes": prompt_prefixes(prompts),
            "warmup": {"requests": 1},
        },
    )
    c = check(info, recs, "prefix_cache")
    assert c.status == "warn" and c.figure == pytest.approx(1 - 10 / 101)
    old = run_of(recs, workload={"dataset": "builtin", "distinct_prompts": 10, "warmup": {"requests": 1}})
    assert check(old, recs, "prefix_cache").figure == pytest.approx(1 - 10 / 101)


def test_the_server_prefix_cache_hit_ratio_is_the_figure_when_it_is_known() -> None:
    recs = closed_loop(100)
    info = run_of(recs, server={"state": {"prefix_cache_hit_ratio": 0.42, "queue_time_ms_mean": 1.0}})
    c = check(info, recs, "prefix_cache")
    assert c.status == "warn" and c.figure == 0.42 and c.unit == "hit ratio (server)"


def test_tokens_counted_by_the_client_warn() -> None:
    recs = closed_loop(100, source="client_count")
    c = check(run_of(recs), recs, "token_source")
    assert c.status == "warn" and c.figure == 1.0 and "counted by the client" in c.why


def test_energy_not_valid_warns_with_the_sampler_reason() -> None:
    recs = closed_loop(100)
    telemetry = [
        {
            "device": "nvidia:0",
            "energy_j": 5000.0,
            "valid": False,
            "validity_reason": "gap: no samples for 2.10 s from t=3.00 s",
        },
        {"device": "nvidia:1", "energy_j": 5100.0, "valid": True, "validity_reason": None},
    ]
    c = check(run_of(recs, telemetry_summary=telemetry), recs, "energy")
    assert c.status == "warn" and c.figure == 1 and "nvidia:0" in c.why and "gap" in c.why


def test_a_queueing_server_warns_and_names_the_stage() -> None:
    recs = closed_loop(100)
    state = {
        "queue_time_ms_mean": 1.0,
        "waiting": {"mean": 0.0, "max": 0.0},
        "stages": [
            {"stage": "c=1", "queue_time_ms_mean": 0.5},
            {"stage": "c=64", "queue_time_ms_mean": 80.0},
        ],
    }
    c = check(run_of(recs, server={"state": state}), recs, "server_queue")
    assert c.status == "warn" and c.stage == "c=64" and "80 ms" in c.why
    calm = check(run_of(recs, server={"state": {"queue_time_ms_mean": 0.4}}), recs, "server_queue")
    assert calm.status == "pass"
    why = skipped(run_of(recs, server={"state": {"reason": "not sampled: HTTP 404"}}), recs, "server_queue")
    assert "HTTP 404" in why


@pytest.mark.parametrize(("failed", "status"), [(0, "pass"), (1, "warn"), (5, "fail")])
def test_failed_requests_warn_and_fail_from_5_percent(failed: int, status: str) -> None:
    recs = closed_loop(100 - failed) + [stream(1000 + i, 0.1, error="http_500: boom") for i in range(failed)]
    c = check(run_of(recs), recs, "errors")
    assert c.status == status and c.figure == pytest.approx(failed / 100)


def test_an_interrupted_run_warns_that_it_did_not_finish() -> None:
    recs = closed_loop(50)
    summary = summarize(recs).amended(
        interrupted={"signal": "SIGINT", "finished_requests": 50, "cancelled_in_flight": 4}
    )
    c = check(run_of(recs, summary=summary, status="incomplete"), recs, "finished")
    assert c.status == "warn" and "SIGINT" in c.why


# -- stored with the summary -----------------------------------------------------------------------


def test_the_verdict_is_stored_in_the_summary_and_old_documents_stay_as_they_were() -> None:
    recs = closed_loop(100)
    plain = summarize(recs)
    assert "verdict" not in dump_summary(plain)  # a run stored before the verdict: no key appears
    info = run_of(recs, summary=plain)
    v = verdict(info, recs)
    stored = plain.amended(verdict=v)
    back = load_summary(dump_summary(stored, stored=True))
    assert back is not None and back.verdict == v
    assert isinstance(back.verdict, Verdict)
    assert run_verdict(run_of(recs, summary=back)) == v  # the stored one, not recomputed
    assert run_verdict(info, recs) == v  # computed on the fly for a run without one


def test_the_verdict_status_is_its_worst_check_and_problems_come_failures_first() -> None:
    recs = closed_loop(5, source="client_count")
    v = verdict(run_of(recs, client={"cpu_util_ratio": 0.99}), recs)
    assert v.status == "fail"
    names = [c.name for c in v.problems()]
    assert names[0] == "client_bound" and {"samples", "token_source"} <= set(names)
    assert v.headline().startswith("FAIL: 1 failed")
    assert "shorter than 5 request lifetimes" in next(n.why for n in v.not_checked if n.name == "noise")
