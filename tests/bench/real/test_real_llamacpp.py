"""``gpuledger bench`` against a real llama.cpp ``llama-server`` (SmolLM2-135M-Instruct Q4_1, CPU).

Checked against what the server itself says: ``usage`` and the ``timings`` object of each stream's
last chunk (``predicted_n``, ``prompt_ms``, ``predicted_ms``), and llama.cpp's own ``/metrics``
counters read before and after the run.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import pytest
import realservers
from realservers import BenchRun, RealServer

pytestmark = [pytest.mark.realserver, pytest.mark.slow]

N = 8
OUT = 32
IN = 32


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('llamacpp-store') / 'gpuledger.sqlite'}"


@pytest.fixture(scope="module")
def completions_run(llamacpp_server: RealServer, db_url: str) -> Iterator[BenchRun]:
    """8 requests, 32 input / 32 output tokens, 4 in flight (= the server's 4 slots: no queueing)."""
    yield realservers.run_bench(
        llamacpp_server, db_url, "--dataset", "random", "--input-len", str(IN), "--output-len", str(OUT),
        "--concurrency", "4", "--num-requests", str(N), "--warmup", "0", "--no-telemetry",
        "--label", "real-llamacpp",
    )


def _ok(run: BenchRun) -> list[Any]:
    ok = [r for r in run.records if r.error is None]
    assert ok, f"no request succeeded: {run.summary.get('error_examples')}"
    return ok


def _timings(record: Any) -> dict[str, Any]:
    timings = record.server_timings
    assert isinstance(timings, dict), f"request {record.index} kept no llama.cpp timings"
    return timings


class TestCompletionsAgainstLlamaCpp:
    def test_run_completes_with_every_request_ok(self, completions_run: BenchRun) -> None:
        assert completions_run.doc["status"] == "complete"
        assert completions_run.summary["num_failed"] == 0, completions_run.summary.get("error_examples")
        assert completions_run.summary["num_ok"] == N

    def test_server_is_identified_as_llamacpp(self, completions_run: BenchRun) -> None:
        server = completions_run.doc["server"]
        assert server["kind"] == "llamacpp"
        assert server["details"]["context_length_source"].startswith("GET /props")
        assert server["details"]["context_length"] <= realservers.LLAMA_CTX_SIZE
        assert server["version"]  # the build, from /props (b0-unknown for a build without git)

    def test_token_counts_come_from_the_servers_usage(self, completions_run: BenchRun) -> None:
        assert all(r.token_source == "server_usage" for r in _ok(completions_run))

    def test_ignore_eos_gives_exactly_the_requested_output_length(self, completions_run: BenchRun) -> None:
        ok = _ok(completions_run)
        assert [r.output_tokens for r in ok] == [OUT] * len(ok)
        assert completions_run.summary["output_len_mismatch"]["count"] == 0

    def test_output_tokens_equal_the_servers_predicted_n(self, completions_run: BenchRun) -> None:
        for r in _ok(completions_run):
            assert _timings(r)["predicted_n"] == r.output_tokens, r.index

    def test_random_prompts_have_the_exact_input_length_by_the_servers_tokenizer(
        self, completions_run: BenchRun
    ) -> None:
        assert completions_run.doc["workload"]["input_len_method"] == "server_tokenizer"
        ok = _ok(completions_run)
        assert [r.input_tokens for r in ok] == [IN] * len(ok)

    def test_totals_equal_llamacpps_own_counters(self, completions_run: BenchRun) -> None:
        ok = _ok(completions_run)
        assert completions_run.summary["output_tokens_total"] == OUT * len(ok)
        assert completions_run.delta("llamacpp:tokens_predicted_total") == OUT * len(ok)
        # prompt_tokens_total counts the prompt tokens the server evaluated (cache hits excluded).
        evaluated = sum(_timings(r)["prompt_n"] for r in ok)
        assert completions_run.delta("llamacpp:prompt_tokens_total") == evaluated

    def test_timed_chunks_add_up_to_the_usage_count(self, completions_run: BenchRun) -> None:
        # llama.cpp ends with an empty-text finish chunk that carries no token: it must not count.
        for r in _ok(completions_run):
            timed = sum(r.chunk_tokens) if r.chunk_tokens is not None else len(r.chunk_times)
            assert timed == r.output_tokens, r.index

    def test_client_ttft_is_never_before_the_server_finished_the_prompt(
        self, completions_run: BenchRun
    ) -> None:
        client, server = [], []
        for r in _ok(completions_run):
            ttft_ms = (r.t_first - r.t_send) * 1000.0
            prompt_ms = _timings(r)["prompt_ms"]
            assert ttft_ms >= prompt_ms - 2.0, (r.index, ttft_ms, prompt_ms)
            client.append(ttft_ms)
            server.append(prompt_ms)
        c, s = statistics.mean(client), statistics.mean(server)
        assert c - s <= max(150.0, 0.5 * s), (c, s)

    def test_client_e2e_is_consistent_with_the_servers_prompt_plus_decode_time(
        self, completions_run: BenchRun
    ) -> None:
        client, server = [], []
        for r in _ok(completions_run):
            e2e_ms = (r.t_end - r.t_send) * 1000.0
            busy_ms = _timings(r)["prompt_ms"] + _timings(r)["predicted_ms"]
            assert e2e_ms >= busy_ms - 2.0, (r.index, e2e_ms, busy_ms)
            client.append(e2e_ms)
            server.append(busy_ms)
        c, s = statistics.mean(client), statistics.mean(server)
        assert c - s <= max(150.0, 0.2 * s), (c, s)

    def test_summary_sets_client_timings_beside_the_servers(self, completions_run: BenchRun) -> None:
        compared = completions_run.summary["server_timings"]
        assert compared["servers"] == ["llamacpp"]
        assert compared["n"] == len(_ok(completions_run))
        assert compared["ttft_client_minus_server_ms"] >= -2.0


def test_no_request_fails_when_the_server_closes_a_kept_alive_connection(
    llamacpp_server: RealServer, db_url: str
) -> None:
    # llama-server answers "Keep-Alive: timeout=5, max=100" and then closes the connection after
    # each streamed response; a client that reuses the pooled connection fails to write the next
    # request body. Requests one after the other hit exactly that.
    run = realservers.run_bench(
        llamacpp_server, db_url, "--dataset", "random", "--input-len", "8", "--output-len", "4",
        "--concurrency", "1", "--num-requests", "6", "--warmup", "0", "--no-telemetry",
    )
    assert run.summary["num_failed"] == 0, run.summary.get("error_examples")
    assert run.delta("llamacpp:tokens_predicted_total") == 6 * 4


def test_chat_completions_counts_match_usage_and_predicted_n(
    llamacpp_server: RealServer, db_url: str
) -> None:
    # The requested input length is the templated prompt (SmolLM2's template adds a system prompt): 96.
    run = realservers.run_bench(
        llamacpp_server, db_url, "--endpoint", "chat", "--dataset", "random", "--input-len", "96",
        "--output-len", "16", "--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--no-telemetry",
    )
    ok = _ok(run)
    wl = run.doc["workload"]
    assert wl["chat_template_tokens"] > 0 and "/apply-template" in wl["chat_template_method"]
    assert [r.input_tokens for r in ok] == [96] * len(ok)  # llama.cpp's usage.prompt_tokens
    assert all(_timings(r)["prompt_n"] <= 96 for r in ok)  # prompt_n: tokens evaluated (a cached prefix not)
    assert [r.output_tokens for r in ok] == [16] * len(ok)
    assert all(r.token_source == "server_usage" for r in ok)
    assert all(_timings(r)["predicted_n"] == 16 for r in ok)
    assert run.delta("llamacpp:tokens_predicted_total") == 16 * len(ok)


def test_output_capped_by_the_context_is_reported_as_a_length_mismatch(
    llamacpp_server: RealServer, db_url: str
) -> None:
    # 1900 input + 200 output > --ctx-size 2048: llama.cpp stops at the context (148 tokens,
    # finish_reason "length") and says so in usage. gpuledger counts what came and reports it.
    ctx = realservers.LLAMA_CTX_SIZE
    run = realservers.run_bench(
        llamacpp_server, db_url, "--dataset", "random", "--input-len", "1900", "--output-len", "200",
        "--concurrency", "1", "--num-requests", "1", "--warmup", "0", "--no-telemetry",
    )
    assert run.summary["num_ok"] == 1, run.summary.get("error_examples")
    (record,) = run.records
    assert record.input_tokens == 1900
    assert record.output_tokens == ctx - 1900
    assert _timings(record)["predicted_n"] == ctx - 1900
    mismatch = run.summary["output_len_mismatch"]
    assert mismatch["count"] == 1
    assert mismatch["requested_tokens_total"] == 200
    assert mismatch["received_tokens_total"] == ctx - 1900


def test_with_server_metrics_llamacpps_page_is_read_where_it_is_idle(
    llamacpp_server: RealServer, db_url: str
) -> None:
    run = realservers.run_bench(
        llamacpp_server, db_url, "--dataset", "random", "--input-len", "16", "--output-len", "8",
        "--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--no-telemetry", "--server-metrics",
    )
    state = run.doc["server"]["state"]
    assert state["source"] == f"llama.cpp GET {run.doc['base_url']}/metrics"
    assert state["edges"] == 2 and state["failed_scrapes"] == 0
    # llama.cpp exports no queue-time histogram or preemption counter: unknown, not zero.
    assert state["queue_time_ms_mean"] is None and state["preemptions"] is None
