"""The HTTP engines against the programmable loopback server (and replayed real Ollama streams)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.engines import GenRequest, GenResult, ServerInfo, make_engine
from gpuledger.engines.http import http_error_text, normalize_base_url
from gpuledger.engines.ollama import OllamaEngine, placement
from gpuledger.engines.openai import OpenAIEngine
from gpuledger.errors import EngineError

Serve = Callable[..., StreamServer]


def run_requests(
    engine: Any, reqs: list[GenRequest], concurrency: int | None = 4
) -> tuple[ServerInfo, list[GenResult], dict[str, Any]]:
    async def go() -> tuple[ServerInfo, list[GenResult], dict[str, Any]]:
        info = await engine.open(concurrency)
        try:
            results = list(await asyncio.gather(*(engine.generate(r) for r in reqs)))
            after = await engine.after_run()
        finally:
            await engine.close()
        return info, results, after

    return asyncio.run(go())


def gen(i: int = 0, n: int = 8, fixed: bool = True, prompt: str = "hello world") -> GenRequest:
    return GenRequest(index=i, prompt=prompt, max_tokens=n, fixed_output=fixed)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("identity", "kind", "ignore_eos", "min_tokens", "continuous", "tokenizer"),
    [
        # min_tokens only where ignore_eos is not accepted: next to ignore_eos it would turn vLLM's
        # context-capped max_tokens into an HTTP 400 instead of a reported length mismatch.
        ("vllm", "vllm", True, False, True, "/tokenize"),
        ("sglang", "sglang", True, False, True, None),
        ("llamacpp", "llamacpp", True, False, False, "/tokenize"),
        ("tgi", "tgi", False, False, False, None),
        ("plain", "unknown", False, False, False, None),
    ],
)
def test_server_is_identified_and_only_accepted_extensions_are_sent(
    serve: Serve,
    identity: str,
    kind: str,
    ignore_eos: bool,
    min_tokens: bool,
    continuous: bool,
    tokenizer: str | None,
) -> None:
    srv = serve(Scenario(identity=identity))
    info, results, _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 5)])
    assert info.kind == kind
    assert (info.version is not None) == (kind != "unknown")
    assert info.tokenizer_endpoint == tokenizer
    assert info.models == ["test-model"]
    body = [r for r in srv.requests if r.path == "/v1/completions"][0].body
    assert body is not None
    assert body["stream"] is True and body["max_tokens"] == 5 and body["model"] == "test-model"
    assert body["stream_options"]["include_usage"] is True
    assert ("ignore_eos" in body) == ignore_eos
    assert ("min_tokens" in body) == min_tokens
    assert body["stream_options"].get("continuous_usage_stats", False) == continuous
    assert results[0].error is None and results[0].output_tokens == 5


def test_natural_length_requests_do_not_force_the_length(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm"))
    _, results, _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 5, fixed=False)])
    body = srv.requests[-1].body
    assert body is not None and "ignore_eos" not in body and "min_tokens" not in body
    assert results[0].requested_output_tokens is None


def test_api_key_is_sent_as_bearer(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm"))
    run_requests(OpenAIEngine(srv.url, None, api_key="sk-test-key"), [gen()])
    gens = [r for r in srv.requests if r.path == "/v1/completions"]
    assert gens[0].headers["Authorization"] == "Bearer sk-test-key"
    assert all(r.headers.get("Authorization") == "Bearer sk-test-key" for r in srv.requests)


def test_usage_counts_come_from_the_server(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm", tokens_per_chunk=3))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 10)])
    assert r.token_source == "server_usage"
    assert r.output_tokens == 10 and r.requested_output_tokens == 10
    assert r.chunk_tokens == [3, 3, 3, 1]  # exact, from continuous usage
    assert r.input_tokens == srv.prompt_tokens("hello world")


def test_empty_text_chunks_count_as_tokens(serve: Serve) -> None:
    srv = serve(Scenario(identity="tgi", empty_every=3, usage=False))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 12)])
    assert r.token_source == "client_count"
    assert r.output_tokens == 12 and len(r.chunk_times) == 12
    assert r.output_chars == 8 * len("tok ")


def test_without_usage_the_servers_tokenizer_counts_the_text(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm", usage=False, text="word "))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 7, prompt="a b c")])
    assert r.token_source == "server_tokenizer"
    assert r.output_tokens == 7
    assert r.input_tokens == 4  # BOS + 3 words, from /tokenize
    assert any(q.path == "/tokenize" for q in srv.requests)


def test_without_usage_or_tokenizer_the_client_counts_chunks(serve: Serve) -> None:
    srv = serve(Scenario(identity="plain", usage=False, tokens_per_chunk=2))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None), [gen(0, 6)])
    assert r.token_source == "client_count"
    assert r.output_tokens == 3  # three chunks; the client cannot know they carried two tokens each
    assert r.input_tokens is None


def test_chat_endpoint_sends_messages_and_skips_the_role_preamble(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm", ttft_s=0.05))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None, endpoint="chat"), [gen(0, 4)])
    body = srv.requests[-1].body
    assert body is not None and body["messages"] == [{"role": "user", "content": "hello world"}]
    assert r.error is None and r.output_tokens == 4 and len(r.chunk_times) == 4
    assert r.chunk_times[0] - r.t_send >= 0.05  # the preamble (sent at once) is not the first token


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("http_500", "HTTP 500: programmed failure 500"),
        ("http_429", "HTTP 429: programmed failure 429"),
        ("http_400", "HTTP 400: programmed failure 400"),
        ("sse_error", "server error event: programmed engine failure"),
        ("malformed", "malformed JSON in stream"),
        ("cut", "stream cut"),
        ("no_done", "stream ended before completion"),
        ("no_stream", "the server answered without streaming"),
    ],
)
def test_each_fault_fails_only_its_request(serve: Serve, fault: str, expected: str) -> None:
    srv = serve(Scenario(identity="vllm", faults={1: fault}))
    eng = OpenAIEngine(srv.url, None)

    async def go() -> list[GenResult]:
        await eng.open(1)
        try:
            return [await eng.generate(gen(i, 6)) for i in range(3)]  # in order: #1 is the faulty one
        finally:
            await eng.close()

    results = asyncio.run(go())
    assert [r.error is None for r in results] == [True, False, True]
    assert results[1].error is not None and results[1].error.startswith(expected), results[1].error
    assert results[0].output_tokens == results[2].output_tokens == 6


def test_request_timeout_fails_the_request(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm", faults={0: "hang"}))
    _, (r,), _ = run_requests(OpenAIEngine(srv.url, None, request_timeout_s=0.5), [gen()])
    assert r.error == "timeout: no complete response within 0.5 s"
    assert 0.4 < r.t_end - r.t_send < 10


def test_server_down_at_start_is_an_engine_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match="cannot reach the inference server"):
        run_requests(OpenAIEngine(url, "m"), [])
    with pytest.raises(EngineError, match="cannot reach the inference server"):
        run_requests(OllamaEngine(url, "m"), [])


def test_unknown_model_on_vllm_is_an_engine_error(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm"))
    with pytest.raises(EngineError, match="'other' is not served"):
        run_requests(OpenAIEngine(srv.url, "other"), [])


def test_base_url_with_v1_suffix_is_accepted() -> None:
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000"
    with pytest.raises(EngineError):
        normalize_base_url("h:8000")


def test_http_error_text_prefers_the_servers_message() -> None:
    assert http_error_text(400, b'{"object":"error","message":"too long","code":400}') == "HTTP 400: too long"
    assert http_error_text(404, b'{"detail":"Not Found"}') == "HTTP 404: Not Found"
    assert http_error_text(502, b"<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"


# ---- Ollama -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "endpoint", "eval_count", "chunks"),
    [
        ("langchaingo-api-generate-stream-gemma3-1b.ndjson", "generate", 22, 21),
        ("langchaingo-api-chat-stream-gemma3-1b.ndjson", "chat", 22, 21),
        ("langchaingo-api-chat-stream-gemma3-1b-203tok.ndjson", "chat", 203, 202),
    ],
)
def test_ollama_replayed_real_streams_keep_the_servers_counters(
    serve: Serve, server_fixtures: Path, fixture: str, endpoint: str, eval_count: int, chunks: int
) -> None:
    srv = serve(
        Scenario(identity="ollama", ollama_fixture=server_fixtures / "ollama" / fixture, itl_s=0.001),
        model="gemma3:1b",
    )
    # num_predict above the recorded length (the recording was not capped; 64 would cap a live server's).
    engine = OllamaEngine(srv.url, "gemma3:1b", endpoint=endpoint)
    info, (r,), after = run_requests(engine, [gen(0, 256)])
    assert info.kind == "ollama" and info.version == "0.11.6"
    body = srv.requests[-1].body
    assert body is not None and body["options"] == {"num_predict": 256} and body["stream"] is True
    assert ("messages" in body) == (endpoint == "chat")
    assert r.error is None
    assert r.token_source == "server_usage"
    assert r.output_tokens == eval_count and len(r.chunk_times) == chunks
    st = r.server_timings
    assert st is not None
    for key in ("eval_count", "eval_duration", "prompt_eval_count", "prompt_eval_duration", "load_duration"):
        assert key in st
    assert st["decode_ms"] == pytest.approx(st["eval_duration"] / 1e6)
    assert after["placement"]["processor"] == "100% GPU"
    assert "warnings" not in after


@pytest.mark.parametrize(
    ("size_vram", "processor", "warning"),
    [
        (0, "100% CPU", "entirely on the CPU"),
        (600_000_000, "26%/74% CPU/GPU", "split"),
        (None, "100% GPU", None),
    ],
)
def test_ollama_model_placement_is_recorded_with_a_cpu_warning(
    serve: Serve, size_vram: int | None, processor: str, warning: str | None
) -> None:
    srv = serve(Scenario(identity="ollama", ollama_size_vram=size_vram), model="m:1b")
    _, (r,), after = run_requests(OllamaEngine(srv.url, "m:1b"), [gen(0, 5)])
    assert r.error is None and r.output_tokens == 5
    assert after["placement"]["processor"] == processor
    if warning is None:
        assert "warnings" not in after
    else:
        # The warnings of the start stay (the run's server record is updated with these).
        assert after["warnings"][0].startswith("Ollama cannot force an output length")
        assert warning in after["warnings"][1]


def test_ollama_real_ps_fixture_shows_partial_offload(server_fixtures: Path) -> None:
    import orjson

    ps = orjson.loads(
        (server_fixtures / "ollama/attogram-api-ps-partial-offload-mistral-7b.json").read_bytes()
    )
    pl = placement(ps, "mistral:7b")
    assert pl is not None and pl["processor"] == "13%/87% CPU/GPU"  # what `ollama ps` printed
    two = orjson.loads((server_fixtures / "ollama/attogram-api-ps-two-models-gpu.json").read_bytes())
    assert placement(two, "smollm2:1.7b")["processor"] == "100% GPU"  # type: ignore[index]
    assert placement(two, "absent") is None


def test_ollama_unknown_model_is_an_engine_error_with_a_pull_hint(serve: Serve) -> None:
    srv = serve(Scenario(identity="ollama"), model="m:1b")
    with pytest.raises(EngineError) as exc:
        run_requests(OllamaEngine(srv.url, "llama3"), [])
    assert "not on the Ollama server" in exc.value.message and exc.value.hint == "ollama pull llama3"


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("http_500", "HTTP 500"),
        ("sse_error", "server error event"),
        ("malformed", "malformed JSON"),
        ("cut", "stream cut"),
    ],
)
def test_ollama_faults_fail_only_their_request(serve: Serve, fault: str, expected: str) -> None:
    srv = serve(Scenario(identity="ollama", faults={0: fault}), model="m:1b")
    _, results, _ = run_requests(OllamaEngine(srv.url, "m:1b"), [gen(0, 6)], concurrency=1)
    assert results[0].error is not None and results[0].error.startswith(expected), results[0].error


def test_make_engine_rejects_unknown_engines() -> None:
    import re

    from gpuledger.engines import either, engine_names
    from gpuledger.errors import UsageError
    from gpuledger.kinds.text.spec import ServerSpec

    names = engine_names()
    assert names[:3] == ("openai", "ollama", "torch")  # every registered engine is named, in order
    with pytest.raises(UsageError, match=re.escape(f"--engine must be {either(names)}, got 'grpc'")):
        make_engine(ServerSpec(engine="grpc", base_url="http://x"))
