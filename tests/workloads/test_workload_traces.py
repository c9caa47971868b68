"""Trace replay (``--trace FILE``): the public layouts read from real rows (Mooncake JSONL, BurstGPT CSV),
each arrival sent at its recorded time (``--trace-speed`` compresses it) with its lengths, shared hash blocks
as shared text, and the lateness of every send measured and stored."""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from stream_server import Scenario, StreamServer
from workload_helpers import Bench, bench, workload_of

from gpuledger.engines.openai import ServerTokenizer
from gpuledger.errors import InvalidInputError
from gpuledger.workload import DatasetSpec, build_dataset
from gpuledger.workload.traces import BLOCK_TOKENS, describe, read_trace


def test_the_real_mooncake_rows_are_read_with_times_in_seconds_and_their_blocks(fixtures_dir: Path) -> None:
    trace = read_trace(fixtures_dir / "traces/mooncake-conversation-trace-first-30.jsonl")
    assert trace.format == "mooncake" and len(trace) == 30
    assert list(trace.times[:10]) == [0.0] * 10 and trace.times[10] == 3.0 and trace.times[26] == 5.999
    assert (trace.inputs[0], trace.outputs[0]) == (6758, 500)
    assert trace.blocks is not None and trace.blocks[0] == tuple(range(14))
    assert all(len(b) == -(-n // BLOCK_TOKENS) for b, n in zip(trace.blocks, trace.inputs, strict=True))
    info = describe(trace)
    assert info["arrivals"] == 30 and info["span_s"] == 9.0
    # Block 0 (the system prompt) is every row's: 29 of its 30 uses repeat it; no other block repeats.
    blocks = info["hash_blocks"]
    assert blocks["block_tokens"] == 512 and blocks["blocks"] - blocks["distinct"] == 29


def test_the_real_burstgpt_rows_are_read_with_times_from_the_first(fixtures_dir: Path) -> None:
    trace = read_trace(fixtures_dir / "traces/burstgpt-1-first-3.csv")
    assert trace.format == "burstgpt-csv" and trace.blocks is None
    assert list(trace.times) == [0.0, 40.0, 113.0]
    assert list(trace.inputs) == [472, 1087, 417] and list(trace.outputs) == [18, 230, 276]


def test_burstgpt_jsonl_and_its_session_columns_and_failed_rows(tmp_path: Path) -> None:
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in [
        {"Timestamp": 10, "Model": "ChatGPT", "Request tokens": 5, "Response tokens": 7},
        {"Timestamp": 12.5, "Model": "GPT-4", "Request tokens": 9, "Response tokens": 0},  # failed: left out
    ]))
    t = read_trace(jsonl)
    assert t.format == "burstgpt-jsonl" and list(t.times) == [0.0] and t.skipped == 1
    csv = tmp_path / "b3.csv"  # BurstGPT_3's columns: Session ID and Elapsed time beside the others
    csv.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
                   "Log Type\n9,s-1,1.5,ChatGPT,10,20,30,Conversation log\n3,s-2,0.5,GPT-4,4,5,9,API log\n")
    t = read_trace(csv)
    assert list(t.times) == [0.0, 6.0] and list(t.inputs) == [4, 10] and t.sorted  # replayed in time order
    assert describe(t)["sorted"].startswith("the file was out of time order")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"timestamp": 0, "input_length": -3, "output_length": 4}\n', "input_length must be a whole number"),
        ('{"timestamp": "soon", "input_length": 3, "output_length": 4}\n', "the timestamp must be a number"),
        ('{"timestamp": 0, "input_length": 3, "output_length": 4, "hash_ids": ["a"]}\n',
         '"hash_ids" must be'),
        ('{"when": 0}\n', "not a trace line"),
        ("a,b,c\n1,2,3\n", "not a trace: a JSONL line of Mooncake's layout, or BurstGPT's CSV header"),
        ('{"timestamp": 0, "input_length": 3, "output_length": 0}\n', "no arrival with input and output"),
    ],
)
def test_a_trace_that_cannot_be_read_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(InvalidInputError) as err:
        read_trace(path)
    assert message in err.value.message


def test_a_csv_trace_with_a_field_over_the_csv_limit_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n0," + "x" * 200_000 + ",3,4\n")
    with pytest.raises(InvalidInputError) as err:
        read_trace(path)
    assert "not a readable CSV trace (field larger than field limit" in err.value.message


def mooncake(tmp_path: Path, n: int = 40, gap_ms: int = 20, input_len: int = 600) -> Path:
    """A trace in Mooncake's layout: n arrivals gap_ms apart, two shared 512-token blocks in turn."""
    path = tmp_path / "trace.jsonl"
    rows = [{"timestamp": i * gap_ms, "input_length": input_len + i, "output_length": 3,
             "hash_ids": [0, 1 + i % 2]} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sends_on_schedule(run: Bench) -> list[float]:
    """Each request's scheduled time (seconds after the stage's start), once checked against its send time:
    sent at its scheduled time plus the lateness it recorded, on the run's clock."""
    first = run.records[0]
    lag0 = workload_of(first)["lag_s"]
    schedule = []
    for r in run.records:
        w = workload_of(r)
        assert w["lag_s"] >= 0  # never sent early
        assert r.t_send - first.t_send == pytest.approx(w["scheduled_s"] + w["lag_s"] - lag0, abs=1e-6)
        schedule.append(w["scheduled_s"])
    return schedule


def test_every_arrival_is_sent_on_schedule_with_its_lengths_and_the_lateness_is_stored(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario())
    run = bench("--base-url", srv.url, "--trace", str(mooncake(tmp_path)), "--warmup", "1")
    assert run.code == 0, run.output
    assert run.summary["num_requests"] == 40  # no count: the whole trace, the warm-up took none of it
    # What the code controls, not how fast a loaded machine is: the schedule it stored is the trace's, each
    # request left at its scheduled time plus the lateness it recorded (nothing unaccounted for), and the
    # run's send_schedule is those lateness figures.
    assert sends_on_schedule(run) == [pytest.approx(0.02 * i) for i in range(40)]
    for i, r in enumerate(run.records):
        assert (r.input_tokens, r.output_tokens, r.requested_output_tokens) == (600 + i, 3, 3)
    lags_ms = sorted(workload_of(r)["lag_s"] * 1e3 for r in run.records)
    sched = run.doc["client"]["send_schedule"]
    assert sched["requests"] == 40 and sched["lag_ms"]["max"] == pytest.approx(lags_ms[-1])
    assert sched["lag_ms"]["p50"] == pytest.approx(statistics.median(lags_ms))
    assert run.doc["workload"]["trace"]["arrivals"] == 40
    assert run.doc["workload"]["prompt_tokens_check"]["requests_off_by_more_than_5_percent"] == 0
    checks = {c["name"]: c for c in run.summary["verdict"]["checks"]}
    assert checks["send_schedule"]["figure"] == pytest.approx(sched["lag_ms"]["p99"])


def test_trace_speed_compresses_the_schedule(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario())
    trace = str(mooncake(tmp_path, n=10, gap_ms=100))
    run = bench("--base-url", srv.url, "--trace", trace, "--trace-speed", "5", "--warmup", "0")
    assert run.code == 0, run.output
    assert sends_on_schedule(run) == [pytest.approx(0.02 * i) for i in range(10)]  # 900 ms of trace at 5x
    assert run.doc["config"]["load"]["stages"][0]["speed"] == 5.0


def test_shared_hash_blocks_are_shared_text(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario())
    spec = DatasetSpec(name="trace", path=mooncake(tmp_path, n=4))

    async def go() -> list[list[int]]:
        async with aiohttp.ClientSession() as session:
            tok = ServerTokenizer(session, srv.url, "vllm", "test-model", {})
            ds = await build_dataset(spec, 4, tok)
            assert [p.input_len for p in ds.prompts] == [600, 601, 602, 603]
            assert [p.arrival_s for p in ds.prompts] == [0.0, 0.02, 0.04, 0.06]
            return [await tok.tokenize(p.text, add_special=True) for p in ds.prompts]

    ids = asyncio.run(go())
    block0 = ids[0][:BLOCK_TOKENS]
    assert all(i[:BLOCK_TOKENS] == block0 for i in ids)  # block 0 is every prompt's
    assert ids[0][BLOCK_TOKENS:BLOCK_TOKENS + 80] == ids[2][BLOCK_TOKENS:BLOCK_TOKENS + 80]  # block 1 again
    assert ids[0][BLOCK_TOKENS:BLOCK_TOKENS + 80] != ids[1][BLOCK_TOKENS:BLOCK_TOKENS + 80]  # block 2


def test_a_count_or_a_duration_cuts_the_replay(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario())
    trace = str(mooncake(tmp_path, n=20, gap_ms=50))
    counted = bench("--base-url", srv.url, "--trace", trace, "--num-requests", "5", "--warmup", "0")
    assert counted.code == 0 and counted.summary["num_requests"] == 5
    timed = bench("--base-url", srv.url, "--trace", trace, "--duration", "0.32", "--warmup", "0")
    assert timed.code == 0 and timed.summary["num_requests"] == 7  # arrivals at 0, 50, ..., 300 ms


def test_like_repeats_a_trace_and_refuses_another_file(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario())
    path = mooncake(tmp_path, n=5)
    first = bench("--base-url", srv.url, "--trace", str(path), "--trace-speed", "2", "--warmup", "0")
    assert first.code == 0, first.output
    again = bench("--like", first.doc["id"], "--base-url", srv.url)
    assert again.code == 0, again.output
    assert again.doc["config"]["load"] == first.doc["config"]["load"]
    assert again.summary["num_requests"] == 5
    path.write_text(path.read_text() + '{"timestamp": 500, "input_length": 9, "output_length": 2}\n')
    changed = bench("--like", first.doc["id"], "--base-url", srv.url)
    assert changed.code == 4 and "is not the one run" in changed.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rate", "3"], "a trace replays its own arrival times: do not combine --trace with --rate"),
        (["--trace-speed", "0"], "--trace-speed must be 0.001 to 1e+06"),
        (["--dataset", "random"], "--trace FILE is the run's dataset"),
        (["--workers", "2", "--concurrency", "4"], "--workers 2 cannot share this load: a trace's schedule"),
    ],
)
def test_trace_flags_that_cannot_hold_are_one_line_and_exit_2(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    run = bench("--base-url", "http://127.0.0.1:9", "--trace", str(mooncake(tmp_path, n=2)), *flags)
    assert run.code == 2, run.output
    assert message in run.output


def test_trace_speed_without_a_trace_is_refused() -> None:
    run = bench("--base-url", "http://127.0.0.1:9", "--trace-speed", "2")
    assert run.code == 2 and "--trace-speed replays a trace: give --trace FILE" in run.output


def test_a_bad_trace_file_is_exit_4_and_a_missing_one_exit_3(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 3}\n')
    run = bench("--base-url", srv.url, "--trace", str(bad))
    assert run.code == 4 and "output_length must be a whole number" in run.output and not run.doc
    missing = bench("--base-url", srv.url, "--trace", str(tmp_path / "none.jsonl"))
    assert missing.code == 3 and "dataset file not found" in missing.output


def test_ctrl_c_during_a_replay_keeps_what_finished_and_sends_nothing_more(tmp_path: Path) -> None:
    from test_bench_prepare import generations, start_bench, stop, wait_for

    trace = mooncake(tmp_path, n=30, gap_ms=100, input_len=20)
    with StreamServer(Scenario()) as srv:
        proc = start_bench(srv.url, "--trace", str(trace), "--warmup", "0")
        try:
            wait_for(lambda: len(generations(srv)) >= 3, 60, proc)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            sent = len(generations(srv))
            time.sleep(0.3)  # the next arrivals were due: none of them is sent any more
            assert len(generations(srv)) == sent
        finally:
            stop(proc)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "incomplete" and 3 <= doc["summary"]["num_requests"] <= sent < 30
    assert doc["summary"]["interrupted"]["signal"] == "SIGINT"


def test_more_block_ids_than_the_longest_prompt_has_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 3, "output_length": 1,
                                "hash_ids": list(range(20_000))}) + "\n")
    with pytest.raises(InvalidInputError) as err:
        read_trace(path)
    assert '"hash_ids" must be a list of at most 19,532 block ids' in err.value.message
