"""Issue 23's workloads against a real vLLM server (CPU build, tiny random-weight Llama): a multi-turn
conversation whose later turns carry the history (vLLM's own prompt-token counts grow turn by turn), a
prefix-shared dataset that vLLM's prefix cache serves (its counters say so), and a trace of 50 arrivals
replayed on schedule."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import realservers
from realservers import RealServer

pytestmark = [pytest.mark.realserver, pytest.mark.slow]


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('vllm-workloads') / 'gpuledger.sqlite'}"


def workload_of(record: Any) -> dict[str, Any]:
    value = (record.server_timings or {}).get("workload", {})
    assert isinstance(value, dict)
    return value


def test_a_three_turn_conversations_later_turns_carry_the_history(
    vllm_server: RealServer, db_url: str, tmp_path: Path
) -> None:
    conv = tmp_path / "conversations.jsonl"
    conv.write_text("".join(json.dumps({"conversation": [
        {"role": "system", "content": "You answer in a few words."},
        {"role": "user", "content": f"Tell me about the number {k}.", "output_len": 24},
        {"role": "user", "content": "Why is that?", "output_len": 24},
        {"role": "user", "content": "Say it once more, shorter.", "output_len": 24},
    ]}) + "\n" for k in range(2)))
    run = realservers.run_bench(vllm_server, db_url, "--endpoint", "chat", "--dataset", "jsonl",
                                "--dataset-path", str(conv), "--turns", "all", "--concurrency", "2",
                                "--num-requests", "6", "--warmup", "0")
    assert run.doc["status"] == "complete" and run.summary["num_ok"] == 6
    sessions: dict[int, list[Any]] = defaultdict(list)
    for r in run.records:
        sessions[workload_of(r)["session"]].append(r)
    assert len(sessions) == 2
    for turns in sessions.values():
        turns.sort(key=lambda r: workload_of(r)["turn"])
        assert [workload_of(r)["turn"] for r in turns] == [1, 2, 3]
        assert all(r.token_source == "server_usage" and r.output_tokens == 24 for r in turns)
        prompts = [r.input_tokens for r in turns]
        # vLLM's usage.prompt_tokens: each turn's prompt holds the previous one, the 24 tokens vLLM answered
        # (its text, tokenized again) and the new question.
        for before, after in zip(prompts, prompts[1:], strict=False):
            assert after > before + 12, prompts
    assert run.delta("vllm:prompt_tokens_total") == run.summary["input_tokens_total"]
    by_turn = run.summary["sessions"]["by_turn"]
    assert [t["turn"] for t in by_turn] == [1, 2, 3]
    assert by_turn[0]["input_tokens_mean"] < by_turn[1]["input_tokens_mean"] < by_turn[2]["input_tokens_mean"]


def test_a_prefix_shared_dataset_shows_vllms_prefix_cache_hits(vllm_server: RealServer, db_url: str) -> None:
    run = realservers.run_bench(vllm_server, db_url, "--dataset", "random", "--input-len", "256",
                                "--prefix-len", "192", "--prefix-groups", "2", "--output-len", "4",
                                "--num-requests", "12", "--concurrency", "1", "--warmup", "0",
                                "--server-metrics")
    assert run.doc["status"] == "complete" and run.summary["num_ok"] == 12
    assert [r.input_tokens for r in run.records] == [256] * 12
    queries, hits = run.delta("vllm:prefix_cache_queries_total"), run.delta("vllm:prefix_cache_hits_total")
    # 10 of the 12 prompts find their group's 192-token prefix cached, in whole KV blocks (vLLM's CPU
    # backend keeps 128-token blocks: 128 of the 192 tokens each); the groups' first prompts find nothing.
    assert queries == 12 * 256 and hits >= 10 * 128, (queries, hits)
    ratio = run.doc["server"]["state"]["prefix_cache_hit_ratio"]
    assert ratio == pytest.approx(hits / queries)
    sharing = run.doc["workload"]["prefix_sharing"]
    assert (sharing["prefix_tokens"], sharing["groups"]) == (192, 2)
    check = next(c for c in run.summary["verdict"]["checks"] if c["name"] == "prefix_cache")
    assert check["unit"] == "hit ratio (server)" and check["status"] == "warn"


def test_a_trace_of_50_arrivals_replays_on_its_schedule_with_its_lateness_recorded(
    vllm_server: RealServer, db_url: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": i * 80, "input_length": 24 + i % 7, "output_length": 4, "hash_ids": [0, 1 + i]}
            for i in range(50)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = realservers.run_bench(vllm_server, db_url, "--trace", str(trace), "--warmup", "1")
    assert run.doc["status"] == "complete" and run.summary["num_ok"] == 50
    records = sorted(run.records, key=lambda r: r.index)
    # What the code controls, not how loaded the machine is: the schedule it stored is the trace's, each
    # request left at its scheduled time plus the lateness it recorded, and send_schedule is that lateness.
    first, lag0 = records[0].t_send, workload_of(records[0])["lag_s"]
    for r, row in zip(records, rows, strict=True):
        w = workload_of(r)
        assert w["scheduled_s"] == pytest.approx(row["timestamp"] / 1000) and w["lag_s"] >= 0
        assert r.t_send - first == pytest.approx(w["scheduled_s"] + w["lag_s"] - lag0, abs=1e-6)
    assert [(r.input_tokens, r.output_tokens) for r in records] == [(row["input_length"], 4) for row in rows]
    sched = run.doc["client"]["send_schedule"]
    assert sched["requests"] == 50
    assert sched["lag_ms"]["max"] == pytest.approx(max(workload_of(r)["lag_s"] for r in records) * 1e3)
    assert run.delta("vllm:request_success_total") == 51  # the 50 arrivals and the warm-up
