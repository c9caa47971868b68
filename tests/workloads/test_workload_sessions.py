"""Multi-turn conversations replayed as sessions (``--turns``): every later turn carries the history with
the server's replies as returned, sessions are the unit of concurrency, and the summary breaks TTFT down by
turn."""

from __future__ import annotations

import json
import signal
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer
from workload_helpers import bench, workload_of

CONVERSATIONS = [
    [
        {"role": "system", "content": "answer briefly"},
        {"role": "user", "content": f"question one of {k}"},
        {"role": "assistant", "content": "a recorded reply of five words"},
        {"role": "user", "content": f"question two of {k}", "output_len": 3},
        {"role": "assistant", "content": "two words"},
        {"role": "user", "content": "and the last question"},
    ]
    for k in range(4)
]


def conversations(tmp_path: Path, convs: list[list[dict[str, Any]]] = CONVERSATIONS) -> Path:
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps({"conversation": c}) + "\n" for c in convs))
    return path


def chat_bodies(srv: StreamServer) -> list[dict[str, Any]]:
    return [r.body for r in srv.requests if r.path == "/v1/chat/completions" and r.body]


def by_session(records: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for r in records:
        out[workload_of(r)["session"]].append(r)
    return {k: sorted(v, key=lambda r: workload_of(r)["turn"]) for k, v in out.items()}


def test_every_later_turn_carries_the_history_with_the_servers_replies_as_returned(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario(tokens=4, text="reply "))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--concurrency", "1", "--num-requests", "12",
                "--warmup", "0")
    assert run.code == 0, run.output
    bodies = chat_bodies(srv)
    assert len(bodies) == 12
    roles = [[m["role"] for m in b["messages"]] for b in bodies]
    # One session at a time: turn 1, 2, 3 of each conversation, the history growing by the answer each time.
    assert roles[:3] == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
        ["system", "user", "assistant", "user", "assistant", "user"],
    ]
    third = bodies[2]["messages"]
    # The history holds the server's reply as it streamed it, not the dataset's recorded one.
    assert third[2]["content"] == third[4]["content"] == "reply reply reply reply "
    assert third[1]["content"].startswith("question one") and third[3]["content"].startswith("question two")
    assert run.doc["workload"]["sessions"]["history"].startswith("each request carries")


def test_the_summary_breaks_ttft_and_prompt_tokens_down_by_turn(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario(tokens=4))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--concurrency", "2", "--num-requests", "12",
                "--warmup", "0")
    assert run.code == 0, run.output
    sessions = run.summary["sessions"]
    assert sessions["sessions"] == 4 and sessions["complete"] == 4
    assert sessions["turns_per_session_mean"] == 3.0
    assert sessions["session_ms"]["n"] == 4
    turns = sessions["by_turn"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["requests"] for t in turns] == [4, 4, 4]
    assert all(t["ttft_ms"]["n"] == 4 for t in turns)
    prompt = [t["input_tokens_mean"] for t in turns]
    assert prompt[0] < prompt[1] < prompt[2]  # the server counted the growing history
    # Each record names its session, turn and conversation.
    for turns_of in by_session(run.records).values():
        assert [workload_of(r)["turn"] for r in turns_of] == [1, 2, 3]
        assert {workload_of(r)["turns"] for r in turns_of} == {3}
        sends = [r.t_send for r in turns_of]
        ends = [r.t_end for r in turns_of]
        assert all(sends[i + 1] >= ends[i] for i in range(2))  # a turn is sent after the last answer


def test_a_turns_output_length_comes_from_its_own_field_else_from_the_recorded_reply(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario(identity="sglang"))  # no tokenizer endpoint: recorded replies are estimated
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "2", "--concurrency", "1", "--num-requests", "2",
                "--warmup", "0")
    assert run.code == 0, run.output
    wanted = [b["max_tokens"] for b in chat_bodies(srv)]
    assert wanted == [round(6 * 1.3), 3]  # six recorded words x 1.3; then the turn's own output_len
    assert run.doc["workload"]["sessions"]["turns"] == 2
    assert run.summary["sessions"]["by_turn"][-1]["turn"] == 2  # --turns 2: the third turn is never sent


def test_sharegpt_conversations_replay_their_human_turns(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "system", "value": "be kind"}, {"from": "human", "value": "hi there"},
                           {"from": "gpt", "value": "hello"}, {"from": "human", "value": "how are you"},
                           {"from": "gpt", "value": "fine thanks"}]},
        {"conversations": [{"from": "gpt", "value": "no human here"}]},
    ]))
    srv = serve(Scenario(tokens=2))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "sharegpt", "--dataset-path",
                str(path), "--turns", "all", "--num-requests", "2", "--concurrency", "1", "--warmup", "0")
    assert run.code == 0, run.output
    first, second = chat_bodies(srv)
    assert first["messages"] == [{"role": "system", "content": "be kind"},
                                 {"role": "user", "content": "hi there"}]
    assert [m["content"] for m in second["messages"]][-1] == "how are you"
    assert run.doc["workload"]["sessions"]["conversations"] == 1  # the one without a human turn is left out


def test_sessions_are_the_unit_of_concurrency(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario(tokens=3, ttft_s=0.02))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--concurrency", "2", "--num-requests", "12",
                "--warmup", "0")
    assert run.code == 0, run.output
    assert srv.max_active == 2  # two sessions at once, each one turn at a time
    active = [(r.t_send, r.t_end, workload_of(r)["session"]) for r in run.records]
    for t_send, _, sid in active:
        in_flight = {s for a, b, s in active if a <= t_send < b}
        assert len(in_flight) <= 2 and sid in in_flight


def test_think_time_passes_between_an_answer_and_the_next_turn(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario(tokens=2))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--think-time", "0.05", "--concurrency", "1",
                "--num-requests", "3", "--warmup", "0")
    assert run.code == 0, run.output
    r1, r2, r3 = run.records
    assert r2.t_send - r1.t_end >= 0.05 and r3.t_send - r2.t_end >= 0.05
    assert run.doc["config"]["dataset"]["think_time_s"] == 0.05


def test_a_turn_that_fails_ends_its_session(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario(tokens=2, faults={1: "http_500"}))  # the second request: turn 2 of session 1
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--concurrency", "1", "--num-requests", "5",
                "--warmup", "0")
    assert run.code == 0, run.output
    sessions = by_session(run.records)
    first = sessions[min(sessions)]
    assert [workload_of(r)["turn"] for r in first] == [1, 2] and first[1].error is not None
    assert run.summary["sessions"]["complete"] == 1  # 5 requests: session 1 broke, session 2 sent all 3


def test_sessions_can_start_at_poisson_arrivals(serve: Callable[..., StreamServer], tmp_path: Path) -> None:
    srv = serve(Scenario(tokens=2))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                str(conversations(tmp_path)), "--turns", "all", "--rate", "50", "--concurrency", "2",
                "--num-requests", "9", "--warmup", "0")
    assert run.code == 0, run.output
    assert run.summary["num_ok"] == 9 and run.summary["sessions"]["sessions"] == 3
    assert srv.max_active <= 2


def test_like_repeats_the_turns_and_the_think_time(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario(tokens=2))
    path = conversations(tmp_path)
    first = bench("--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                  str(path), "--turns", "2", "--think-time", "0.01", "--num-requests", "4", "--warmup", "0")
    assert first.code == 0, first.output
    again = bench("--like", first.doc["id"], "--base-url", srv.url)
    assert again.code == 0, again.output
    ds = again.doc["config"]["dataset"]
    assert (ds["turns"], ds["think_time_s"], ds["name"]) == (2, 0.01, "jsonl")
    assert again.summary["sessions"]["by_turn"][-1]["turn"] == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--dataset", "random", "--turns", "all"],
         "--turns replays the conversations of --dataset sharegpt"),
        (["--turns", "0"], "--turns must be all or 1 to 1000"),
        (["--turns", "some"], "--turns takes all or a number of turns"),
        (["--think-time", "1"], "--think-time is the pause between the turns of a session"),
        (["--turns", "all", "--think-time", "-1"], "--think-time must be 0 to 3600 seconds"),
        (["--turns", "all", "--workers", "2"], "--workers 2 cannot share this load: a session's turns"),
    ],
)
def test_session_flags_that_cannot_hold_are_one_line_and_exit_2(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    base = ["--dataset", "jsonl", "--dataset-path", str(conversations(tmp_path))]
    if flags[:2] == ["--dataset", "random"]:
        base = []
    run = bench("--base-url", "http://127.0.0.1:9", *base, *flags)
    assert run.code == 2, run.output
    assert message in run.output


def test_ctrl_c_during_sessions_keeps_the_finished_turns(tmp_path: Path) -> None:
    from test_bench_prepare import generations, start_bench, stop, wait_for

    with StreamServer(Scenario(tokens=2)) as srv:
        proc = start_bench(srv.url, "--endpoint", "chat", "--dataset", "jsonl", "--dataset-path",
                           str(conversations(tmp_path)), "--turns", "all", "--think-time", "0.5",
                           "--num-requests", "12", "--concurrency", "2", "--warmup", "0")
        try:
            wait_for(lambda: len(generations(srv)) >= 2, 60, proc)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "incomplete" and doc["summary"]["num_requests"] >= 2
    assert doc["summary"]["sessions"]["complete"] == 0  # each was waiting its think time before turn 2
