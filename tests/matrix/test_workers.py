"""``bench --workers N``: the load of one run sent by N local processes, each with its own event loop and a
share of the concurrency or rate, their requests merged on the run's clock into one run — against the
programmable loopback server (127.0.0.1) with no delays: the instant server."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.workers import split_stage
from gpuledger.cli.main import main
from gpuledger.records import RequestRecord
from gpuledger.records.spec import ConcurrencyStage, RateStage
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]
LOAD = ("--dataset", "random", "--input-len", "8", "--output-len", "64", "--warmup", "0", "--no-telemetry",
        "--no-progress")


def bench(capsys: pytest.CaptureFixture[str], url: str, *args: str, code: int = 0) -> dict[str, Any]:
    got = main(["bench", "--base-url", url, *LOAD, *args, "--json"])
    out = capsys.readouterr()
    assert got == code, out.err
    doc: dict[str, Any] = json.loads(out.out) if out.out.strip() else {}
    doc["stderr"] = out.err
    return doc


def requests_of(run_id: str) -> list[RequestRecord]:
    with open_store(None) as store:
        return store.get_requests(run_id)


def shape(r: RequestRecord) -> tuple[Any, ...]:
    """What a request record holds, times left out: the fields set, the counts, the stage."""
    return (r.index, r.stage, r.token_source, r.input_tokens, r.output_tokens, r.requested_output_tokens,
            len(r.chunk_times), r.chunk_tokens is None, r.t_first is None, r.t_end is None, r.error,
            r.server_timings is None, r.output_chars)


def test_two_workers_count_every_token_and_store_requests_shaped_as_one_process_does(
        serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(batch=64))
    one = bench(capsys, srv.url, "--concurrency", "8", "--num-requests", "200")
    two = bench(capsys, srv.url, "--concurrency", "8", "--num-requests", "200", "--workers", "2")
    assert two["status"] == "complete"
    assert two["summary"]["output_tokens_total"] == one["summary"]["output_tokens_total"] == 200 * 64
    assert two["summary"]["num_ok"] == 200 and two["summary"]["token_source"] == {"server_usage": 200}
    single, merged = requests_of(one["id"]), requests_of(two["id"])
    assert [shape(r) for r in merged] == [shape(r) for r in single]
    # Every time on the run's clock: inside the window, each request's own times in order.
    for r in merged:
        assert 0 <= r.t_send <= (r.t_first or r.t_send) <= (r.t_end or 0) <= two["summary"]["window_s"] + 1
        assert r.chunk_times == sorted(r.chunk_times)
    workers = two["client"]["load_workers"]
    assert workers["count"] == 2 and workers["kind"] == "local process"
    assert sorted(w["requests_sent"] for w in workers["workers"]) == [100, 100]  # 4 + 4 in flight
    for w in workers["workers"]:
        assert w["pid"] != os.getpid() and w["clock_offset_s"] == 0.0
        assert abs(w["clock_offset_measured_s"]) <= w["clock_uncertainty_s"] + 1e-6
        assert w["cpu_util_ratio"] > 0 and w["wall_s"] > 0
    # The client's figures are the busiest load process's (each is one event loop: one core its ceiling).
    busiest = max(workers["workers"],
                  key=lambda w: max(w["cpu_util_ratio"], w.get("event_loop_busy_ratio", 0)))
    assert two["client"]["cpu_util_ratio"] == busiest["cpu_util_ratio"]
    assert "cpu_util_ratio" in workers["coordinator"]


def test_a_rate_is_split_between_the_workers_and_every_send_keeps_its_schedule(
        serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario())
    run = bench(capsys, srv.url, "--rate", "400", "--concurrency", "16", "--num-requests", "120",
                "--workers", "2")
    assert run["summary"]["num_ok"] == 120 and run["summary"]["output_tokens_total"] == 120 * 64
    assert sorted(r.index for r in requests_of(run["id"])) == list(range(120))
    assert run["client"]["send_schedule"]["requests"] == 120


def test_a_timed_stage_over_workers_numbers_every_request_once(
        serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(itl_s=0.001))
    run = bench(capsys, srv.url, "--concurrency", "4", "--duration", "1", "--workers", "2")
    indexes = [r.index for r in requests_of(run["id"])]
    assert len(indexes) == len(set(indexes)) == run["summary"]["num_ok"] > 0


def test_the_shares_of_a_stage() -> None:
    c5 = split_stage(ConcurrencyStage(stage="c=5", concurrency=5), 10, 2, 0, 7)
    assert [(s.stage.concurrency, s.count, s.first, s.stride) for s in c5] == [(3, 6, 0, 1), (2, 4, 6, 1)]
    assert {s.stage.stage for s in c5} == {"c=5"} and len({s.seed for s in c5}) == 2
    rate = split_stage(RateStage(stage="r", rate_requests_per_s=30.0, max_concurrency=8), None, 3, 100, 0)
    assert [(s.stage.rate_requests_per_s, s.stage.max_concurrency, s.first, s.stride) for s in rate] == [
        (10.0, 3, 100, 3), (10.0, 3, 101, 3), (10.0, 2, 102, 3)]


@pytest.mark.parametrize(("args", "message"), [
    (("--concurrency", "2", "--workers", "4"),
     "--workers 4 needs at least one request in flight per worker: --concurrency of stage c=2 is 2"),
    (("--ray", "auto"), "--ray places the load processes of --workers N"),
])
def test_a_load_that_cannot_be_split_is_refused_before_anything_runs(
        serve: Serve, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str) -> None:
    srv = serve(Scenario())
    doc = bench(capsys, srv.url, *args, code=2)
    assert message in " ".join(doc["stderr"].split())
    assert srv.generation_requests == 0


def test_ctrl_c_keeps_the_finished_requests_and_leaves_no_load_process_behind(
        serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(itl_s=0.01))
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while srv.generation_requests < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    run = bench(capsys, srv.url, "--concurrency", "4", "--num-requests", "400", "--workers", "2", code=130)
    assert run["status"] == "incomplete"
    it = run["summary"]["interrupted"]
    assert it["finished_requests"] == run["summary"]["num_ok"] > 0 and it["cancelled_in_flight"] <= 4
    time.sleep(0.5)
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
