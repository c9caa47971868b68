"""What the verdict says about itself, to the last digit (issue 33): every share printed at the precision its
rule needs (one helper, ``quantity.percent``), token sources counted over the finished requests only, and a
run that computes on the CPU judged for the other load on its CPUs. Runs are summaries from
``bench.metrics.summarize`` (training: the training spec's own summary) over request records shaped like the
runner's, judged by the real rules."""

from __future__ import annotations

from typing import Any

import pytest
from test_verdict import check, closed_loop, run_of, skipped, stream

from gpuledger.bench.validity import verdict
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainStep
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.report.verdict import check_line, figure_text


def failing(ok: int, failed: int, **kw: Any) -> list[RequestRecord]:
    """``ok`` finished requests and ``failed`` ones that the server answered with HTTP 500."""
    good = closed_loop(ok, **kw)
    end = max(r.t_end or 0.0 for r in good)
    return good + [stream(ok + i, end * i / max(1, failed), error="http_500: boom") for i in range(failed)]


# -- one rule for every share ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "limits", "shown"),
    [
        (1 / 200, (0.0, 0.05), "0.5 %"),  # not "0 %" beside "warn at > 0 %"
        (19 / 400, (0.0, 0.05), "4.75 %"),  # not "5 %" beside "fail at ≥ 5 %"
        (0.05, (0.0, 0.05), "5 %"),  # on the threshold: it
        (0.97, (0.85, 0.95), "97 %"),
        (0.849999, (0.85,), "< 85 %"),  # too close for two decimals: the side it is on
        (0.0, (), "0 %"),
        (-0.0, (), "0 %"),  # never "-0 %"
        (0.0026, (), "0.26 %"),  # a nonzero share is never "0 %"
        (1e-6, (), "< 0.01 %"),
    ],
)
def test_a_share_is_printed_so_that_it_reads_on_its_own_side_of_the_rule(
    share: float, limits: tuple[float, ...], shown: str
) -> None:
    assert percent(share, *limits) == shown


def test_one_failed_request_of_200_is_half_a_percent_beside_its_rule() -> None:
    recs = failing(199, 1)
    c = check(run_of(recs), recs, "errors")
    assert c.status == "warn" and c.figure == pytest.approx(0.005)
    assert figure_text(c) == "0.5 % of requests"
    assert "warn at > 0 %" in c.rule and "fail at ≥ 5 %" in c.rule
    assert check_line(c).startswith("validity: errors WARN (0.5 % of requests): 1 of 200 requests failed")


def test_19_failed_of_400_is_not_printed_as_the_5_percent_it_has_not_reached() -> None:
    recs = failing(381, 19)
    c = check(run_of(recs), recs, "errors")
    assert c.status == "warn"  # 4.75 % < 5 %: not a failure
    assert figure_text(c) == "4.75 % of requests"


def test_the_checks_print_their_shares_and_thresholds_with_the_one_helper() -> None:
    # The client at 94.99 % of one core is below the 95 % fail line: it does not read as 95 %.
    recs = closed_loop(120)
    c = check(run_of(recs, client={"cpu_util_ratio": 0.9499, "cores_usable": 16}), recs, "client_bound")
    assert c.status == "warn"
    assert "94.99 %" in c.why and figure_text(c) == "94.99 % of one core"
    assert "warn at ≥ 85 %, fail at ≥ 95 %" in c.rule
    busy = run_of(recs, client={"cpu_util_ratio": 0.2, "cores_usable": 2, "machine_cpu_busy_ratio": 0.8996})
    contention = check(busy, recs, "cpu_contention")
    assert contention.status == "pass" and "89.96 %" in contention.why


def test_a_window_just_under_its_limit_is_not_printed_at_the_limit() -> None:
    recs = closed_loop(8, concurrency=4)
    c = check(run_of(recs), recs, "window")
    assert c.status == "warn" and c.figure is not None
    moved = c.model_copy(update={"figure": 9.996})
    assert figure_text(moved) == "9.996 request lifetimes"  # not "10.0" beside "warn below 10"


# -- token sources: finished requests only ---------------------------------------------------------


def test_failed_requests_are_not_counted_as_client_counted_tokens() -> None:
    # Every finished request has the server's usage; the failed ones have no tokens at all.
    recs = failing(392, 8)
    info = run_of(recs)
    assert info.summary is not None and info.summary.token_source == {"server_usage": 392}
    for records in (recs, None):  # judged with the requests, and from the summary alone
        c = check(info, records, "token_source")
        assert c.status == "pass", c.why
        assert "server_usage" in c.why and "client" not in c.why
        assert c.unit == "share of finished requests"


def test_client_counted_finished_requests_still_warn() -> None:
    recs = failing(95, 5, source="client_count")
    c = check(run_of(recs), recs, "token_source")
    assert c.status == "warn" and c.figure == 1.0
    assert "95 of 95 finished requests' tokens were counted by the client" in c.why


def test_a_summary_that_counted_its_failed_requests_is_judged_by_what_it_can_tell() -> None:
    # A summary stored before failed requests were left out of its token sources, read without the requests.
    recs = failing(96, 4)
    summary = run_of(recs).summary
    assert summary is not None
    old = summary.amended(token_source={"client_count": 4, "server_usage": 96})
    why = skipped(run_of(recs, summary=old), None, "token_source")
    assert "4 failed requests" in why and "not read" in why
    # With the requests the finished ones are counted exactly.
    assert check(run_of(recs, summary=old), recs, "token_source").status == "pass"
    # More client counts than there were failures: at least that many finished requests were client-counted.
    mixed = summary.amended(token_source={"client_count": 10, "server_usage": 90})
    c = check(run_of(recs, summary=mixed), None, "token_source")
    assert c.status == "warn" and "at least 6 of 96" in c.why


# -- a run that computes on the CPU ----------------------------------------------------------------


def _steps(n: int, took: float = 0.5) -> list[RequestRecord]:
    out = []
    for i in range(n):
        step = TrainStep(
            step=i,
            forward_s=took * 0.3,
            backward_s=took * 0.6,
            optimizer_s=took * 0.1,
            step_s=took,
            loss=2.0,
            tokens=128,
            samples=2,
            micro_batches=1,
        )
        out.append(
            RequestRecord(
                index=i,
                t_send=i * took,
                t_end=(i + 1) * took,
                stage="train",
                server_timings={"train": step.model_dump(mode="json")},
            )
        )
    return out


def _cpu_training(client: dict[str, Any], **spec: Any) -> tuple[RunInfo, list[RequestRecord]]:
    config = TrainSpec.model_validate(
        {
            "engine": "torch-train",
            "model": {"spec": "dummy:smollm2-135m"},
            "device": "cpu",
            "warmup_steps": 1,
            **spec,
        }
    )
    records = _steps(12)
    info = RunInfo(
        id="r1",
        engine="torch-train",
        status="complete",
        config=config,
        summary=config.summarize(records),
        workload={"warmup": {"requests": 1}},
        client={"in_process_engine": True, **client},
    )
    return info, records


def test_a_cpu_training_run_is_judged_for_the_other_load_on_its_cpus() -> None:
    # The training itself kept 1.9 of 2 CPUs busy; the machine was 99 % busy: others took 4 %.
    quiet, records = _cpu_training({"cpu_util_ratio": 1.9, "cores_usable": 2, "machine_cpu_busy_ratio": 0.99})
    c = check(quiet, records, "cpu_contention")
    assert c.status == "pass" and c.figure == pytest.approx(0.04)
    assert c.unit == "share of usable CPUs (other processes)"
    assert "other processes kept 4 % of the 2 usable CPUs busy" in c.why
    # Another process took a core's worth: the training shared its CPUs.
    shared, records = _cpu_training({"cpu_util_ratio": 1.0, "cores_usable": 2, "machine_cpu_busy_ratio": 1.0})
    c = check(shared, records, "cpu_contention")
    assert c.status == "warn" and c.figure == pytest.approx(0.5)
    assert "the run shared the CPUs it computes on" in c.why
    assert verdict(shared, records).status == "warn"


def test_a_cpu_training_run_over_several_ranks_says_why_it_cannot_tell() -> None:
    info, records = _cpu_training(
        {"cpu_util_ratio": 1.0, "cores_usable": 4, "machine_cpu_busy_ratio": 1.0}, world_size=2
    )
    assert "2 processes (ranks)" in skipped(info, records, "cpu_contention")


def test_an_in_process_cpu_inference_run_is_judged_the_same_way() -> None:
    recs = closed_loop(120, source="engine")
    client = {"in_process_engine": True, "cpu_util_ratio": 2.0, "cores_usable": 2}
    client["machine_cpu_busy_ratio"] = 1.0
    info = run_of(recs, client=client, config={"engine": "torch", "device": "cpu", "warmup": 1})
    c = check(info, recs, "cpu_contention")
    assert c.status == "pass" and c.figure == 0.0  # its busy CPUs were its own model's work
