"""Streams from hostile servers are bounded (issue 16, item 7): a line over the cap, chunks after the end,
a connection held open after the answer, a stream that never ends. Each fails (or ends) only its own
request, quickly, and leaves the other requests' timings alone. Servers: ``hostile_server`` on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from time import perf_counter
from typing import Any

import pytest
from hostile_server import (
    HostileServer,
    Reply,
    Request,
    completion_event,
    completion_stream,
    ndjson,
    ndjson_handler,
    ollama_stream,
    stream_handler,
)

from gpuledger.bench.metrics import itl_s
from gpuledger.engines import GenRequest, GenResult
from gpuledger.engines.http import TAIL_GRACE_S
from gpuledger.engines.ollama import OllamaEngine
from gpuledger.engines.openai import OpenAIEngine
from gpuledger.engines.sse import MAX_LINE_BYTES, OllamaStream, OpenAIStream

Hostile = Callable[..., HostileServer]


def gen(i: int = 0, n: int = 40, prompt: str = "hello") -> GenRequest:
    return GenRequest(index=i, prompt=prompt, max_tokens=n, fixed_output=True)


def run(engine: Any, reqs: list[GenRequest], concurrency: int = 4) -> tuple[list[GenResult], dict[str, Any]]:
    async def go() -> tuple[list[GenResult], dict[str, Any]]:
        await engine.open(concurrency)
        try:
            results = list(await asyncio.gather(*(engine.generate(r) for r in reqs)))
            return results, await engine.after_run()
        finally:
            await engine.close()

    return asyncio.run(go())


def by_prompt(handlers: dict[str, Any]) -> Any:
    """One POST handler that picks the behaviour by the request's prompt."""

    async def handler(req: Request, reply: Reply) -> None:
        await handlers[req.json()["prompt"]](req, reply)

    return handler


def paced(n: int, gap_s: float) -> Any:
    """A well-behaved stream of ``n`` tokens, one every ``gap_s``."""

    async def handler(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "text/event-stream"})
        for e in completion_stream(n):
            await reply.write(e)
            await asyncio.sleep(gap_s)
        await reply.end()

    return handler


# ---- a line over the cap ------------------------------------------------------------------------------


def test_a_100_mb_line_fails_its_request_at_the_cap_without_stalling_the_others(hostile: Hostile) -> None:
    async def long_line(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "text/event-stream"})
        await reply.write(b'data: {"choices":[{"index":0,"text":"')
        piece = b"a" * 65536
        for _ in range(100 * 16):  # 100 MiB, no newline
            if not await reply.write(piece):
                return  # the client hung up
        await reply.write(b'","finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
        await reply.end()

    srv = hostile({("POST", "/v1/completions"): by_prompt({"long": long_line, "normal": paced(40, 0.01)})})
    t0 = perf_counter()
    engine = OpenAIEngine(srv.url, None, request_timeout_s=20)
    (bad, good), _ = run(engine, [gen(0, prompt="long"), gen(1, prompt="normal")])
    wall = perf_counter() - t0
    assert bad.error == f"SSE line over {MAX_LINE_BYTES} bytes: the stream was stopped"
    assert good.error is None and good.output_tokens == 40 and len(good.chunk_times) == 40
    # The long line did not hold up the event loop: the paced request's chunks kept their 10 ms pace.
    gaps = [b - a for a, b in zip(good.chunk_times, good.chunk_times[1:], strict=False)]
    assert max(gaps) < 0.5, max(gaps)
    assert wall < 8, wall
    assert srv.hangups == 1  # the client closed the long line's connection


def test_the_line_buffer_is_linear_in_the_bytes_of_a_long_line() -> None:
    # 8 MiB arriving 1 KiB at a time: rebuilding the buffer on every read copied ~32 GB here.
    s = OpenAIStream(False, 16)
    piece = b"x" * 1024
    t0 = perf_counter()
    s.feed(b'data: {"choices":[{"index":0,"text":"', 0.0)
    for i in range(MAX_LINE_BYTES // 1024 - 1):
        s.feed(piece, float(i))
    s.feed(b'","finish_reason":"length"}]}\n\ndata: [DONE]\n\n', 1.0)
    s.finish()
    elapsed = perf_counter() - t0
    assert s.error is None and s.done and len(s.chunk_times) == 1
    assert s.output_chars == (MAX_LINE_BYTES // 1024 - 1) * 1024
    assert elapsed < 1.5, elapsed


@pytest.mark.parametrize("cut", [0, 1, 7, 64])
def test_a_line_over_the_cap_fails_whether_or_not_its_newline_came(cut: int) -> None:
    event = {"choices": [{"index": 0, "text": "y" * 200, "finish_reason": None}]}
    line = b"data: " + json.dumps(event).encode()
    ok = completion_event("a")
    for tail in (b"\n\n", b""):  # finished (newline seen) or not
        s = OpenAIStream(False, 16, max_line_bytes=150)
        body = ok + line + tail
        n = sum(s.feed(body[i : i + cut or len(body)], 1.0) for i in range(0, len(body), cut or len(body)))
        assert n == 1  # the chunk before it counts
        assert s.error == "SSE line over 150 bytes: the stream was stopped" and s.stopped


# ---- after the end ----------------------------------------------------------------------------------------


def test_chunks_after_done_are_not_recorded(hostile: Hostile) -> None:
    junk = [completion_event(" junk") for _ in range(10_000)]
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(40), after=junk)})
    (r,), _ = run(OpenAIEngine(srv.url, None), [gen(0, 40)])
    assert r.error is None
    assert len(r.chunk_times) == 40 and r.output_tokens == 40 and r.token_source == "server_usage"
    assert len(itl_s(r.to_record(r.t_send))) == 39  # it was 10,039 gaps for 40 tokens


def test_content_after_finish_reason_is_not_counted_but_the_usage_after_it_is(hostile: Hostile) -> None:
    events = completion_stream(40)
    # 500 more content chunks between the finish chunk and the usage chunk.
    events[40:40] = [completion_event(" late") for _ in range(500)]
    srv = hostile({("POST", "/v1/completions"): stream_handler(events)})
    (r,), _ = run(OpenAIEngine(srv.url, None), [gen(0, 40)])
    assert r.error is None and len(r.chunk_times) == 40
    assert r.output_tokens == 40 and r.token_source == "server_usage"
    assert r.output_chars == 40 * len(" tok")


@pytest.mark.parametrize("ending", ["done", "finish+usage"])
def test_a_connection_held_open_after_the_answer_does_not_turn_it_into_a_timeout(
    hostile: Hostile, ending: str
) -> None:
    events = completion_stream(40)
    if ending == "finish+usage":
        events = events[:-1]  # no [DONE]: the finish chunk and the usage, then silence
    srv = hostile({("POST", "/v1/completions"): stream_handler(events, then="hold")})
    t0 = perf_counter()
    (r,), _ = run(OpenAIEngine(srv.url, None, request_timeout_s=10), [gen(0, 40)])
    assert r.error is None and r.output_tokens == 40 and r.token_source == "server_usage"
    assert perf_counter() - t0 < TAIL_GRACE_S + 3


def test_a_well_behaved_server_keeps_its_connection_across_requests(hostile: Hostile) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(20))})
    eng = OpenAIEngine(srv.url, None)

    async def go() -> list[GenResult]:
        await eng.open(1)
        try:
            return [await eng.generate(gen(i, 20)) for i in range(10)]
        finally:
            await eng.close()

    results = asyncio.run(go())
    assert all(r.error is None and r.output_tokens == 20 for r in results)
    # Reading ends at [DONE], yet the body's end is still read: one connection for the probes and all ten.
    assert len({q.connection for q in srv.of("POST", "/v1/completions")}) == 1


# ---- a stream that never ends ----------------------------------------------------------------------------


def endless(event: bytes) -> Any:
    async def handler(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "text/event-stream"})
        while await reply.write(event * 32):
            await asyncio.sleep(0)

    return handler


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (completion_event(" more"), "endless stream: over 96 content chunks for max_tokens=16"),
        (b": keep-alive\n\n", "endless stream: over"),  # no content at all, only bytes
        (completion_event(None, usage={"completion_tokens": 1}), "endless stream: over"),
    ],
)
def test_an_endless_stream_stops_at_the_bound_from_max_tokens_and_is_closed(
    hostile: Hostile, event: bytes, expected: str
) -> None:
    srv = hostile({("POST", "/v1/completions"): endless(event)})
    t0 = perf_counter()
    (r,), _ = run(OpenAIEngine(srv.url, None, request_timeout_s=30), [gen(0, 16)])
    assert r.error is not None and r.error.startswith(expected), r.error
    assert len(r.chunk_times) <= 96
    assert perf_counter() - t0 < 10
    deadline = perf_counter() + 5
    while srv.hangups < 1 and perf_counter() < deadline:
        asyncio.run(asyncio.sleep(0.05))
    assert srv.hangups == 1  # the client closed the connection


# ---- Ollama's NDJSON ---------------------------------------------------------------------------------------


def test_ollama_lines_after_done_are_not_read_and_a_held_connection_ends_at_done(hostile: Hostile) -> None:
    after = [ndjson("junk") for _ in range(5000)]
    srv = hostile({("POST", "/api/generate"): ndjson_handler(ollama_stream(30), after=after, then="hold")},
                  identity="ollama")
    t0 = perf_counter()
    (r,), _ = run(OllamaEngine(srv.url, "hostile-model", request_timeout_s=10), [gen(0, 30)])
    assert r.error is None and len(r.chunk_times) == 30 and r.output_tokens == 30
    assert perf_counter() - t0 < TAIL_GRACE_S + 3


def test_ollama_endless_stream_and_long_line_fail_their_request(hostile: Hostile) -> None:
    async def long_line(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "application/x-ndjson"})
        while await reply.write(b"z" * 65536):
            pass

    async def forever(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "application/x-ndjson"})
        while await reply.write(ndjson() * 16):
            await asyncio.sleep(0)

    async def pick(req: Request, reply: Reply) -> None:
        await (long_line if req.json()["prompt"] == "long" else forever)(req, reply)

    srv = hostile({("POST", "/api/generate"): pick}, identity="ollama")
    (line, endless_), _ = run(
        OllamaEngine(srv.url, "hostile-model", request_timeout_s=30), [gen(0, 8, "long"), gen(1, 8, "x")]
    )
    assert line.error == f"NDJSON line over {MAX_LINE_BYTES} bytes: the stream was stopped"
    assert endless_.error == "endless stream: over 80 content lines for num_predict=8"
    assert len(endless_.chunk_times) == 80


def test_ollama_parser_ignores_everything_after_done() -> None:
    s = OllamaStream(False, 10)
    body = b"".join(ollama_stream(3)) + ndjson("after") + b'{"error": "late"}\n'
    assert s.feed(body, 1.0) == 3
    s.finish()
    assert s.error is None and s.done and s.stopped and len(s.chunk_times) == 3
