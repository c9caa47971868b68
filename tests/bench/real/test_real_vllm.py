"""``gpuledger bench`` against a real vLLM server (CPU build, tiny random-weight Llama).

What is checked against what the server itself says: token counts against ``usage`` and vLLM's
own Prometheus counters, TTFT / E2E against vLLM's own histograms (read before and after the run),
and faults the real server produces (a prompt longer than the context -> HTTP 400; the context
capping the output; a ``data: {"error": ...}`` event inside a 200 stream).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
import realservers
from realservers import BenchRun, RealServer

pytestmark = [pytest.mark.realserver, pytest.mark.slow]

N = 12
OUT = 48
IN = 32


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('vllm-store') / 'gpuledger.sqlite'}"


@pytest.fixture(scope="module")
def completions_run(vllm_server: RealServer, db_url: str) -> Iterator[BenchRun]:
    """12 requests, 32 input tokens, 48 output tokens, 4 in flight, telemetry on, no warmup (so the
    server's counters hold exactly the measured requests)."""
    yield realservers.run_bench(
        vllm_server,
        db_url,
        "--dataset",
        "random",
        "--input-len",
        str(IN),
        "--output-len",
        str(OUT),
        "--concurrency",
        "4",
        "--num-requests",
        str(N),
        "--warmup",
        "0",
        "--label",
        "real-vllm",
    )


def _server_mean_ms(run: BenchRun, histogram: str) -> tuple[float, float]:
    count = run.delta(f"{histogram}_count")
    return count, run.delta(f"{histogram}_sum") / count * 1000.0


class TestCompletionsAgainstVllm:
    def test_run_completes_with_every_request_ok(self, completions_run: BenchRun) -> None:
        assert completions_run.doc["status"] == "complete"
        assert completions_run.summary["num_ok"] == N
        assert completions_run.summary["num_failed"] == 0
        assert len(completions_run.records) == N

    def test_server_is_identified_as_vllm_with_its_version(
        self, completions_run: BenchRun, vllm_server: RealServer
    ) -> None:
        status, text = realservers.get_text(vllm_server.base_url + "/version")
        assert status == 200
        server = completions_run.doc["server"]
        assert server["kind"] == "vllm"
        assert server["version"] == orjson.loads(text)["version"]
        assert server["details"]["context_length"] == realservers.VLLM_MAX_MODEL_LEN
        assert server["details"]["context_length_source"] == "GET /v1/models max_model_len"

    def test_every_request_counts_tokens_from_the_servers_usage(self, completions_run: BenchRun) -> None:
        assert completions_run.summary["token_source"] == {"server_usage": N}
        assert all(r.token_source == "server_usage" for r in completions_run.records)

    def test_ignore_eos_gives_exactly_the_requested_output_length(self, completions_run: BenchRun) -> None:
        assert [r.output_tokens for r in completions_run.records] == [OUT] * N
        assert completions_run.summary["output_len_mismatch"]["count"] == 0

    def test_random_prompts_have_the_exact_input_length_by_the_servers_tokenizer(
        self, completions_run: BenchRun
    ) -> None:
        assert completions_run.doc["workload"]["input_len_method"] == "server_tokenizer"
        assert [r.input_tokens for r in completions_run.records] == [IN] * N

    def test_totals_equal_vllms_own_token_counters(self, completions_run: BenchRun) -> None:
        summary = completions_run.summary
        assert summary["output_tokens_total"] == N * OUT
        assert completions_run.delta("vllm:generation_tokens_total") == N * OUT
        assert completions_run.delta("vllm:prompt_tokens_total") == summary["input_tokens_total"]
        assert completions_run.delta("vllm:request_success_total") == N

    def test_empty_text_chunks_still_count_as_tokens(self, completions_run: BenchRun) -> None:
        # The byte-level tokenizer makes vLLM stream "" for partial UTF-8 tokens: the chunks the
        # client timed must add up to the usage count, not to the chunks that carried text.
        for r in completions_run.records:
            timed = sum(r.chunk_tokens) if r.chunk_tokens is not None else len(r.chunk_times)
            assert timed == r.output_tokens, r.index

    def test_client_ttft_is_consistent_with_vllms_ttft_histogram(self, completions_run: BenchRun) -> None:
        count, server_ms = _server_mean_ms(completions_run, "vllm:time_to_first_token_seconds")
        client_ms = completions_run.summary["ttft_ms"]["mean"]
        assert count == N
        # The client sees the first token after the server produced it (HTTP both ways on
        # loopback): never earlier, and not by more than scheduling noise on a busy 2-core box.
        assert client_ms >= server_ms - 2.0
        # Upper bound: fresh-clone CI runs (only those; never reproduced alone) measured the client 250-530
        # ms later than vLLM's engine histogram on the first bench after start, with and without gpuledger
        # reading /metrics — time in vLLM's API process the engine does not see. Unexplained; the bound
        # still catches a clock or counting error (seconds off). See the session-2 note.
        assert client_ms - server_ms <= max(750.0, 0.5 * server_ms), (client_ms, server_ms)

    def test_client_e2e_is_consistent_with_vllms_e2e_histogram(self, completions_run: BenchRun) -> None:
        count, server_ms = _server_mean_ms(completions_run, "vllm:e2e_request_latency_seconds")
        client_ms = completions_run.summary["e2e_ms"]["mean"]
        assert count == N
        assert client_ms >= server_ms - 2.0
        # The last token reaches the client after vLLM's API process has detokenized and sent it. On a
        # 2-vCPU box that process, the engine core and the client share two cores, and a fresh CI run
        # measured the gap at 186 ms (client 554 ms, server 368 ms): the bound catches a clock or
        # counting error (seconds off), not that scheduling noise.
        assert client_ms - server_ms <= max(750.0, 0.5 * server_ms), (client_ms, server_ms)  # as for TTFT

    def test_output_throughput_is_tokens_over_the_window(self, completions_run: BenchRun) -> None:
        summary = completions_run.summary
        assert summary["output_tokens_per_s"] == pytest.approx(N * OUT / summary["window_s"], rel=1e-9)

    def test_client_cpu_use_is_recorded(self, completions_run: BenchRun) -> None:
        client = completions_run.doc["client"]
        assert client["cpu_user_s"] + client["cpu_system_s"] > 0
        assert client["wall_s"] > 0

    def test_every_finished_request_is_in_the_store(self, completions_run: BenchRun) -> None:
        assert sorted(r.index for r in completions_run.records) == list(range(N))
        assert all(r.error is None and r.t_first is not None for r in completions_run.records)


def test_chat_completions_counts_match_usage(vllm_server: RealServer, db_url: str) -> None:
    run = realservers.run_bench(
        vllm_server,
        db_url,
        "--endpoint",
        "chat",
        "--dataset",
        "random",
        "--input-len",
        "48",
        "--output-len",
        "24",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--no-telemetry",
    )
    assert run.summary["num_ok"] == 4
    assert [r.output_tokens for r in run.records] == [24] * 4
    assert all(r.token_source == "server_usage" for r in run.records)
    assert run.delta("vllm:generation_tokens_total") == 4 * 24
    assert run.delta("vllm:prompt_tokens_total") == run.summary["input_tokens_total"]


def test_chat_prompts_have_the_requested_length_with_the_template_counted(
    vllm_server: RealServer, db_url: str
) -> None:
    # Issue 15: 128 tokens asked on the chat endpoint were 632 sent (one word per token, the template not
    # counted). Now the requested length is the templated prompt, as vLLM counts it.
    run = realservers.run_bench(
        vllm_server, db_url, "--endpoint", "chat", "--dataset", "random", "--input-len", "128",
        "--output-len", "8", "--concurrency", "2", "--num-requests", "6", "--warmup", "0", "--no-telemetry",
    )
    wl = run.doc["workload"]
    # '<|im_start|>user\n' + content + '<|im_end|>\n<|im_start|>assistant\n' in the tiny Llama's tokens
    assert wl["chat_template_tokens"] > 0
    assert "/tokenize with the chat's messages" in wl["chat_template_method"]
    assert wl["input_len_method"] == "server_tokenizer"
    assert [r.input_tokens for r in run.records] == [128] * 6
    assert all(r.token_source == "server_usage" for r in run.records)
    assert run.delta("vllm:prompt_tokens_total") == 6 * 128
    assert wl["prompt_tokens_check"]["server_tokens_total"] == 6 * 128
    assert not any("prompt tokens" in w for w in run.doc["server"]["warnings"])


def test_like_a_completions_run_on_the_chat_endpoint_sends_the_same_prompt_tokens(
    vllm_server: RealServer, db_url: str
) -> None:
    a = realservers.run_bench(
        vllm_server, db_url, "--dataset", "random", "--input-len", "96", "--range-ratio", "0.5",
        "--output-len", "4", "--concurrency", "2", "--num-requests", "6", "--warmup", "0", "--no-telemetry",
    )
    b = realservers.run_bench(vllm_server, db_url, "--like", a.doc["id"], "--endpoint", "chat")
    assert b.doc["config"]["like"]["overridden"] == ["endpoint"]
    assert {r.index: r.input_tokens for r in b.records} == {r.index: r.input_tokens for r in a.records}
    assert b.delta("vllm:prompt_tokens_total") == a.delta("vllm:prompt_tokens_total")


def test_vllms_context_length_bounds_the_prompt(
    vllm_server: RealServer, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuledger.cli.main import main

    code = main(["bench", "--base-url", vllm_server.base_url, "--model", vllm_server.model, "--input-len",
                 "1500", "--db", db_url, "--no-telemetry", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "more than the server's context length, 1024 tokens (GET /v1/models max_model_len)" in err


def test_the_first_of_2000_requests_is_sent_within_2_s(vllm_server: RealServer) -> None:
    # Issue 15: ~7 s at 400 requests and >14 s at 2000 before the first request, nothing on screen. Here:
    # from the start of the run (in this process: no interpreter start-up) to the warm-up request being
    # sent, with 2,000 requests of 128 tokens planned; the run is interrupted there.
    import os
    import signal
    import time

    from gpuledger.bench.runner import Hooks, run_bench
    from gpuledger.errors import Interrupted
    from gpuledger.kinds.text.options import server_spec
    from gpuledger.store import open_store

    sent: list[float] = []

    def phase(text: str) -> None:
        if text.startswith("warm-up") and not sent:
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)  # the runner's handler: the run ends before its window

    spec = server_spec(base_url=vllm_server.base_url, model=vllm_server.model, dataset="random",
                       input_len=128, output_len=16, num_requests=2000, warmup=1, telemetry=False)
    store = open_store("sqlite://")
    t0 = time.perf_counter()
    try:
        with pytest.raises(Interrupted, match="no run was created"):
            run_bench(spec, store, hooks=Hooks(on_phase=phase))
    finally:
        store.close()
    assert sent, "the warm-up request was never sent"
    assert sent[0] - t0 < 2.0, sent[0] - t0


def test_sweep_runs_each_concurrency_as_a_stage(vllm_server: RealServer, db_url: str) -> None:
    run = realservers.run_bench(
        vllm_server,
        db_url,
        "--sweep",
        "1,3",
        "--dataset",
        "random",
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--num-requests",
        "3",
        "--warmup",
        "0",
        "--no-telemetry",
    )
    stages = run.summary["stages"]
    assert len(stages) == 2
    assert [s["num_ok"] for s in stages] == [3, 3]
    assert len({r.stage for r in run.records}) == 2
    assert run.summary["output_tokens_total"] == 6 * 16
    assert run.delta("vllm:generation_tokens_total") == 6 * 16
    assert run.delta("vllm:e2e_request_latency_seconds_count") == 6


def test_prompt_longer_than_the_context_fails_that_request_with_the_servers_400(
    vllm_server: RealServer, db_url: str, tmp_path: Path
) -> None:
    lines = [
        {"prompt": "The capital of France is", "output_len": 16},
        {"prompt": " ".join(["hello"] * 1500), "output_len": 16},  # > 1024 tokens: vLLM answers 400
        {"prompt": "Count: 1 2 3 4 5", "output_len": 16},
    ]
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    run = realservers.run_bench(
        vllm_server,
        db_url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        str(data),
        "--concurrency",
        "1",
        "--num-requests",
        "3",
        "--warmup",
        "0",
        "--no-telemetry",
    )
    assert run.doc["status"] == "complete"
    assert run.summary["num_ok"] == 2
    assert run.summary["num_failed"] == 1
    assert run.summary["error_rate"] == pytest.approx(1 / 3)
    failed = [r for r in run.records if r.error is not None]
    assert len(failed) == 1
    assert "400" in failed[0].error
    assert "maximum context length" in failed[0].error
    assert run.delta("vllm:request_success_total") == 2
    assert run.delta("vllm:generation_tokens_total") == 2 * 16


def test_output_capped_by_the_context_is_reported_as_a_length_mismatch(
    vllm_server: RealServer, db_url: str
) -> None:
    # 800 input + 400 output > max-model-len 1024: vLLM shortens the output to what fits (224
    # tokens) and says so in usage. gpuledger must count what came and report the shortfall.
    run = realservers.run_bench(
        vllm_server,
        db_url,
        "--dataset",
        "random",
        "--input-len",
        "800",
        "--output-len",
        "400",
        "--concurrency",
        "2",
        "--num-requests",
        "2",
        "--warmup",
        "0",
        "--no-telemetry",
    )
    assert run.summary["num_ok"] == 2, run.summary.get("error_examples")
    assert [r.output_tokens for r in run.records] == [1024 - 800] * 2
    mismatch = run.summary["output_len_mismatch"]
    assert mismatch["count"] == 2
    assert mismatch["requested_tokens_total"] == 2 * 400
    assert mismatch["received_tokens_total"] == 2 * (1024 - 800)
    assert run.delta("vllm:generation_tokens_total") == 2 * (1024 - 800)


async def _raw_stream(url: str, body: dict[str, object]) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        session.post(url, json=body) as resp,
    ):
        return resp.status, await resp.read()


def test_vllms_error_event_inside_a_200_stream_is_read_as_that_requests_error(
    vllm_server: RealServer,
) -> None:
    # vLLM validates some sampling parameters in the engine, after the 200 and the SSE headers have
    # gone out: the error then arrives as a data: {"error": ...} event. gpuledger never sends such a
    # request itself, so the real stream is captured here and fed to gpuledger's stream parser.
    from gpuledger.engines.sse import OpenAIStream

    body = {
        "model": vllm_server.model,
        "prompt": "hello",
        "max_tokens": 4,
        "stream": True,
        "logprobs": 50,
        "stream_options": {"include_usage": True},
    }
    status, raw = asyncio.run(_raw_stream(vllm_server.base_url + "/v1/completions", body))
    assert status == 200
    assert b'data: {"error"' in raw
    stream = OpenAIStream(chat=False)
    stream.feed(raw, 1.0)
    stream.finish()
    assert stream.error is not None
    assert "logprobs" in stream.error
    assert stream.chunk_times == []


def test_with_server_metrics_vllms_own_counters_are_read_where_it_is_idle(
    vllm_server: RealServer, db_url: str
) -> None:
    run = realservers.run_bench(
        vllm_server, db_url, "--dataset", "random", "--input-len", "16", "--output-len", "8",
        "--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--no-telemetry", "--server-metrics",
    )
    state = run.doc["server"]["state"]
    assert state["source"] == f"vLLM GET {run.doc['base_url']}/metrics"
    assert state["edges"] == 2 and state["scrapes"] == 0 and state["failed_scrapes"] == 0
    # vLLM's queue-time histogram over the window: every measured request left the queue once.
    assert state["queued_requests"] == 4 and state["queue_time_ms_mean"] >= 0.0
    assert state["preemptions"] == 0  # short sequences fit the 256 MiB KV cache
    assert "not sampled during the window" in state["gauges_reason"]
