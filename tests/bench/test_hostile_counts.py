"""Token counts a server reports are checked before they are believed (issue 16, item 3): negative,
2^31 and more, or implausible against max_tokens and the chunks received. Such a count is replaced by the
client's own, the request says why (``GenResult.notes``), the run's warnings count such requests, and
every count that reaches the record is one the store can keep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hostile_server import HostileServer, completion_stream, ndjson_handler, ollama_stream, stream_handler

from gpuledger.engines import GenRequest, GenResult
from gpuledger.engines.base import MAX_COUNT, implausible_input_count, implausible_output_count
from gpuledger.engines.ollama import OllamaEngine
from gpuledger.engines.openai import OpenAIEngine

Hostile = Callable[..., HostileServer]


def gen(i: int = 0, n: int = 40, hint: int | None = 7) -> GenRequest:
    return GenRequest(index=i, prompt="hello world", max_tokens=n, fixed_output=True, input_tokens_hint=hint)


def run(engine: Any, reqs: list[GenRequest]) -> tuple[list[GenResult], dict[str, Any]]:
    async def go() -> tuple[list[GenResult], dict[str, Any]]:
        await engine.open(4)
        try:
            results = list(await asyncio.gather(*(engine.generate(r) for r in reqs)))
            return results, await engine.after_run()
        finally:
            await engine.close()

    return asyncio.run(go())


def storable(r: GenResult) -> bool:
    rec = r.to_record(r.t_send)
    counts = [rec.input_tokens, rec.output_tokens, rec.requested_output_tokens, *(rec.chunk_tokens or [])]
    return all(c is None or (type(c) is int and 0 <= c <= MAX_COUNT) for c in counts)


HOSTILE_COUNTS = [-1, -(10**12), 2**31, 2**63 - 1, 10**12, True, 40.0, "40", None]


@pytest.mark.parametrize("count", HOSTILE_COUNTS)
def test_continuous_usage_that_cannot_be_right_falls_back_to_the_clients_count(
    hostile: Hostile, count: Any
) -> None:
    # From the third chunk on, every chunk's cumulative usage says ``count``.
    events = completion_stream(40, continuous=lambda i: i if i < 3 else count, final=count)
    srv = hostile({("POST", "/v1/completions"): stream_handler(events)})
    results, after = run(OpenAIEngine(srv.url, None), [gen(i) for i in range(3)])
    for r in results:
        assert r.error is None
        assert r.output_tokens == 40 and len(r.chunk_times) == 40 and r.chunk_tokens is None
        assert r.token_source == "client_count"
        assert r.input_tokens == 7  # the client's count: the server's usage as a whole is not believed
        assert any("per-chunk usage was not believed" in n for n in r.notes), r.notes
        assert storable(r)
    warning = "3 requests: the server's per-chunk usage was not believed"
    assert any(w.startswith(warning) for w in after["warnings"])


@pytest.mark.parametrize("count", HOSTILE_COUNTS[:-1])
def test_a_final_completion_count_that_cannot_be_right_is_replaced_by_the_clients(
    hostile: Hostile, count: Any
) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(40, final=count))},
                  identity="plain")
    (r,), after = run(OpenAIEngine(srv.url, None), [gen()])
    assert r.error is None and r.output_tokens == 40 and r.token_source == "client_count"
    assert r.input_tokens == 7
    assert r.notes and r.notes[0].startswith("the server's completion_tokens ")
    assert r.notes[0].endswith(": the client's count (40) was used")
    assert after["warnings"] == r.notes  # one request: its note is the run's warning
    assert storable(r)


@pytest.mark.parametrize(
    ("count", "believed"),
    [(40, True), (41, True), (0, False), (20, True), (19, False), (144, True), (145, False)],
)
def test_a_count_is_believed_within_half_the_chunks_and_twice_max_tokens_plus_64(
    hostile: Hostile, count: int, believed: bool
) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(40, final=count))},
                  identity="plain")
    (r,), _ = run(OpenAIEngine(srv.url, None), [gen(0, 40)])
    assert (r.token_source == "server_usage") == believed
    assert r.output_tokens == (count if believed else 40)
    assert bool(r.notes) != believed


@pytest.mark.parametrize("count", [-1, 2**31, 2**63 - 1, 10**12, 1.5])
def test_a_prompt_count_that_cannot_be_right_is_replaced_by_the_clients(hostile: Hostile, count: Any) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(40, prompt=count))},
                  identity="plain")
    (r,), _ = run(OpenAIEngine(srv.url, None), [gen()])
    assert r.output_tokens == 40 and r.token_source == "server_usage"  # the output count is fine
    assert r.input_tokens == 7
    assert r.notes == [f"the server's prompt_tokens {implausible_input_count(count, prompt_chars=11)}: "
                       "the client's count (7) was used"]
    assert storable(r)


@pytest.mark.parametrize("count", [-1, 2**31, 2**63 - 1, 10**12])
def test_ollama_counts_that_cannot_be_right_are_replaced_by_the_clients(hostile: Hostile, count: int) -> None:
    out = ndjson_handler(ollama_stream(30, eval_count=count))
    srv = hostile({("POST", "/api/generate"): out}, identity="ollama")
    (r,), _ = run(OllamaEngine(srv.url, "hostile-model"), [gen(0, 30)])
    assert r.error is None and r.output_tokens == 30 and r.token_source == "client_count"
    assert r.notes and r.notes[0].startswith("Ollama's eval_count ")
    assert r.server_timings is not None and "decode_tokens" not in r.server_timings
    assert storable(r)

    prompt = ndjson_handler(ollama_stream(30, prompt_eval_count=count))
    srv = hostile({("POST", "/api/generate"): prompt}, identity="ollama")
    (r,), _ = run(OllamaEngine(srv.url, "hostile-model"), [gen(0, 30)])
    assert r.output_tokens == 30 and r.token_source == "server_usage" and r.input_tokens == 7
    assert r.notes and r.notes[0].startswith("Ollama's prompt_eval_count ")
    assert storable(r)


def test_the_rules_as_documented() -> None:
    assert implausible_output_count(40, max_tokens=40, chunks=40) is None
    assert implausible_output_count(10**12, max_tokens=40, chunks=40) == (
        "1000000000000 is 2^31 or more"
    )
    assert implausible_output_count(145, max_tokens=40, chunks=40) == (
        "145 is over 2 × max_tokens + 64 = 144 (max_tokens=40)"
    )
    assert implausible_output_count(3, max_tokens=40, chunks=40) == (
        "3 is under half of the 40 content chunks received"
    )
    assert implausible_output_count(True, max_tokens=40, chunks=1) == "True is not an integer"
    assert implausible_output_count(-1, max_tokens=40, chunks=0) == "-1 is negative"
    assert implausible_input_count(8192 + 44, prompt_chars=11) is None
    assert implausible_input_count(8192 + 45, prompt_chars=11) is not None
