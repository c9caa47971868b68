"""A stream of 8 tokens whose finish chunk is empty (llama.cpp's closing chunk, or an unprintable EOS) and
whose usage cannot be believed: the empty finish chunk is not counted as a token on the strength of a count
that says nothing — the request has 8 tokens, not 9 — while a believable usage still decides as before
(9 when it says 9, 8 when it says 8), and a stream without usage keeps counting it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hostile_server import HostileServer, completion_event, stream_handler, usage
from test_hostile_streams import run

from gpuledger.engines import GenRequest
from gpuledger.engines.openai import OpenAIEngine
from gpuledger.engines.sse import OpenAIStream

Hostile = Callable[..., HostileServer]


def events(final: Any, *, with_usage: bool = True) -> list[bytes]:
    """8 one-token chunks, an empty finish chunk carrying ``final`` as completion_tokens, ``[DONE]``."""
    out = [completion_event(" tok") for _ in range(8)]
    out.append(completion_event("", "stop", usage(final) if with_usage else None))
    return [*out, b"data: [DONE]\n\n"]


def parsed(body: list[bytes], max_tokens: int = 16) -> OpenAIStream:
    st = OpenAIStream(False, max_tokens)
    st.feed(b"".join(body), 1.0)
    st.finish()
    return st


@pytest.mark.parametrize("absurd", [10**15, 2**31, -1, "9", 9.0, True, None, 10_000])
def test_an_empty_finish_chunk_is_not_a_token_on_an_unbelievable_count(absurd: Any) -> None:
    st = parsed(events(absurd))
    assert st.error is None and len(st.chunk_times) == 8 and st.tokens_counted == 8


@pytest.mark.parametrize(("told", "tokens"), [(9, 9), (8, 8), (20, 9)])
def test_a_believable_count_still_decides_the_empty_finish_chunk(told: int, tokens: int) -> None:
    assert parsed(events(told)).tokens_counted == tokens


def test_without_usage_the_empty_finish_chunk_is_still_a_token() -> None:
    assert parsed(events(None, with_usage=False)).tokens_counted == 9


def test_the_engine_records_8_tokens_from_the_clients_count(hostile: Hostile) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(events(10**15))})
    (r,), _ = run(OpenAIEngine(srv.url, None), [GenRequest(index=0, prompt="hi", max_tokens=16)])
    assert r.error is None
    assert r.output_tokens == 8 and len(r.chunk_times) == 8 and r.token_source == "client_count"
    assert any("completion_tokens 1000000000000000 is 2^31 or more" in n for n in r.notes)
