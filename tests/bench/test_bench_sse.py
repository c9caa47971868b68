"""The stream parsers read real recorded server streams (tests/fixtures/captures/servers) correctly."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.engines.sse import OllamaStream, OpenAIStream


def sse_from_payload_lines(path: Path) -> bytes:
    """``*.sse-payloads.txt`` (one payload per line, framing removed) → a raw SSE body."""
    return b"".join(b"data: " + line + b"\n\n" for line in path.read_bytes().splitlines() if line.strip())


def parse(body: bytes, chat: bool, reads: list[int] | None = None) -> OpenAIStream:
    s = OpenAIStream(chat)
    if reads is None:
        s.feed(body, 1.0)
    else:
        pos, t = 0, 0.0
        for n in reads:
            t += 1.0
            s.feed(body[pos : pos + n], t)
            pos += n
        if pos < len(body):
            s.feed(body[pos:], t + 1)
    s.finish()
    return s


def test_vllm_continuous_usage_gives_exact_tokens_per_chunk(server_fixtures: Path) -> None:
    body = server_fixtures / "vllm/discourse-ai-v1-chat-completions-stream-continuous-usage-llama-3.1-70b.sse"
    s = parse(body.read_bytes(), chat=True)
    assert s.error is None and s.done
    assert s.continuous
    # The role preamble carries 0 tokens; 25 text chunks + the finish chunk (EOS) carry 1 each.
    assert sum(s.chunk_tokens) == 26 == s.usage["completion_tokens"]  # type: ignore[index]
    assert len(s.chunk_times) == 26
    assert s.usage == {"prompt_tokens": 46, "total_tokens": 72, "completion_tokens": 26}


def test_sglang_continuous_usage_stream_counts_chunk_deltas(server_fixtures: Path) -> None:
    body = sse_from_payload_lines(
        server_fixtures / "sglang/octollm-kimi-k2-chat-stream-continuous-usage.sse-payloads.txt"
    )
    s = parse(body, chat=True)
    assert s.error is None and s.done and s.continuous
    assert sum(s.chunk_tokens) == 15  # the per-chunk usage reaches 15 ...
    assert s.usage is not None and s.usage["completion_tokens"] == 16  # ... the final usage says 16


def test_sglang_tool_call_deltas_are_tokens_and_final_usage_is_kept(server_fixtures: Path) -> None:
    body = sse_from_payload_lines(
        server_fixtures / "sglang/octollm-kimi-k2-chat-stream-toolcall-usage.sse-payloads.txt"
    )
    s = parse(body, chat=True)
    assert s.error is None and s.done and not s.continuous
    assert s.finish_reason == "tool_calls"
    assert s.usage is not None and s.usage["completion_tokens"] == 69
    # 14 payloads: role preamble, 10 content/tool-call deltas, the finish chunk (content "": the stop
    # token, a token as SGLang's continuous usage counts it), the usage chunk, [DONE].
    assert len(s.chunk_times) == 11


def test_llamacpp_stream_keeps_timings_and_fingerprint(server_fixtures: Path) -> None:
    body = sse_from_payload_lines(
        server_fixtures / "llamacpp/askopenai-b6097-v1-chat-completions-stream.sse-payloads.txt"
    )
    s = parse(body, chat=True)
    assert s.error is None and s.finish_reason == "stop"
    assert s.fingerprint == "b6097-9515c613"
    assert s.usage is not None and s.usage["completion_tokens"] == 43
    assert s.timings is not None and s.timings["predicted_n"] == 43
    # First chunk has content null (role only); last has an empty delta: 41 token chunks in between.
    payloads = [orjson.loads(x[6:]) for x in body.split(b"\n\n") if x.startswith(b"data: {")]
    assert len(s.chunk_times) == len(payloads) - 2


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        ("tgi/hfhub-v1-chat-completions-stream-tgi-1.4.3-zephyr-7b.sse", 20),
        ("tgi/hfhub-v1-chat-completions-stream-tgi-3.2.1-llama-3.1-8b.sse", 20),
        ("tgi/hfhub-v1-chat-completions-stream-tgi-3.0.1-llama-3-8b.sse", None),
        ("ollama/askopenai-v1-chat-completions-stream-qwen2.5-coder-7b.sse", 6),
    ],
)
def test_streams_without_usage_or_done_are_complete_and_client_counted(
    server_fixtures: Path, name: str, tokens: int | None
) -> None:
    s = parse((server_fixtures / name).read_bytes(), chat=True)
    assert s.error is None, s.error
    assert s.usage is None
    assert s.completed
    assert s.finish_reason in ("length", "stop")
    if tokens is not None:
        assert len(s.chunk_times) == tokens


def test_tgi_data_without_space_is_parsed(server_fixtures: Path) -> None:
    s = parse(
        (server_fixtures / "tgi/hfhub-v1-chat-completions-stream-tgi-1.4.3-zephyr-7b.sse").read_bytes(), True
    )
    assert s.fingerprint == "1.4.3-sha-e6bb3ff"
    assert "".join(s.texts).startswith("Deep learning is a sub")


def test_empty_finish_chunk_is_dropped_when_final_usage_shows_it_carried_no_token() -> None:
    ev = [
        {"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "b", "finish_reason": None}]},
        {
            "choices": [{"index": 0, "text": "", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    assert len(parse(body, chat=False).chunk_times) == 2
    ev[2]["usage"]["completion_tokens"] = 3  # type: ignore[index]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    assert len(parse(body, chat=False).chunk_times) == 3


def test_empty_text_chunk_of_a_partial_utf8_token_counts_as_a_token() -> None:
    ev = [
        {"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "", "finish_reason": None}]},  # first bytes of a multi-byte char
        {"choices": [{"index": 0, "text": "é", "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}},
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    s = parse(body, chat=False)
    assert len(s.chunk_times) == 3 == s.usage["completion_tokens"]  # type: ignore[index]
    assert s.output_chars == 2


def test_error_event_inside_a_200_stream_is_an_error() -> None:
    body = (
        b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
        b'data: {"error": {"object": "error", "message": "engine died", "type": "InternalServerError", '
        b'"code": 500}}\n\n'
    )
    s = parse(body, chat=False)
    assert s.error is not None and "engine died" in s.error and s.error.startswith("server error event")
    assert len(s.chunk_times) == 1


def test_bare_error_object_event_is_an_error() -> None:
    s = parse(
        b'data: {"object":"error","message":"prompt too long","type":"BadRequestError","code":400}\n\n',
        chat=False,
    )
    assert s.error is not None and "prompt too long" in s.error


def test_malformed_json_chunk_is_an_error_naming_the_bytes() -> None:
    s = parse(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":\n\n', chat=False)
    assert s.error is not None and s.error.startswith("malformed JSON in stream")
    assert '{"choices":[{"text":' in s.error


def test_stream_that_stops_without_finish_or_done_is_cut() -> None:
    s = parse(b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n', chat=False)
    assert s.error is not None and "stream ended before completion" in s.error


def test_crlf_framing_and_comments_are_accepted() -> None:
    body = (
        b': ping\r\n\r\nevent: message\r\ndata: {"choices":[{"index":0,"text":"x",'
        b'"finish_reason":"length"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    )
    s = parse(body, chat=False)
    assert s.error is None and s.done and len(s.chunk_times) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=300), max_size=40))
def test_how_the_bytes_are_split_into_reads_never_changes_what_is_counted(reads: list[int]) -> None:
    lines = Path(__file__).resolve().parents[1] / "fixtures/captures/servers/llamacpp"
    body = sse_from_payload_lines(lines / "askopenai-b6097-v1-chat-completions-stream.sse-payloads.txt")
    whole = parse(body, chat=True)
    split = parse(body, chat=True, reads=reads)
    assert split.error is None
    assert len(split.chunk_times) == len(whole.chunk_times)
    assert split.texts == whole.texts
    assert split.usage == whole.usage
    assert split.chunk_times == sorted(split.chunk_times)


def test_events_arriving_in_one_read_share_that_reads_arrival_time() -> None:
    one = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
    s = OpenAIStream(False)
    assert s.feed(one * 3, 5.0) == 3
    assert s.feed(one, 6.0) == 1
    assert s.chunk_times == [5.0, 5.0, 5.0, 6.0]


@pytest.mark.parametrize(
    ("name", "chat", "content_lines", "eval_count"),
    [
        ("langchaingo-api-generate-stream-gemma3-1b.ndjson", False, 21, 22),
        ("langchaingo-api-chat-stream-gemma3-1b.ndjson", True, 21, 22),
        ("langchaingo-api-chat-stream-gemma3-1b-203tok.ndjson", True, 202, 203),
    ],
)
def test_ollama_ndjson_streams_keep_the_final_counters(
    server_fixtures: Path, name: str, chat: bool, content_lines: int, eval_count: int
) -> None:
    s = OllamaStream(chat)
    data = (server_fixtures / "ollama" / name).read_bytes()
    for i in range(0, len(data), 97):  # odd read sizes: lines split across reads
        s.feed(data[i : i + 97], float(i))
    s.finish()
    assert s.error is None and s.done
    assert len(s.chunk_times) == content_lines
    assert s.final is not None and s.final["eval_count"] == eval_count
    assert isinstance(s.final["eval_duration"], int)


def test_ollama_error_line_is_an_error() -> None:
    s = OllamaStream(False)
    s.feed(b'{"model":"m","response":"a","done":false}\n{"error":"model runner crashed"}\n', 1.0)
    s.finish()
    assert s.error == "server error event: model runner crashed"


def test_ollama_stream_without_done_line_is_cut() -> None:
    s = OllamaStream(False)
    s.feed(b'{"model":"m","response":"a","done":false}\n', 1.0)
    s.finish()
    assert s.error is not None and "no done:true line" in s.error
