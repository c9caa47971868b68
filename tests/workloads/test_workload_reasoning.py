"""Reasoning tokens: a recorded DeepSeek reasoner stream (``delta.reasoning_content``, then
``delta.content``, usage with ``completion_tokens_details.reasoning_tokens``) gives separate reasoning and
answer counts, the TTFT to the first reasoning token and to the first answer token, and a price per 1M answer
tokens beside the one per 1M generated tokens; ``<think>`` blocks in the content are counted the same way."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from workload_helpers import ReplayServer, bench

from gpuledger.cli.main import main
from gpuledger.engines.openai import answer_text
from gpuledger.engines.sse import OpenAIStream

DEEPSEEK = "servers/deepseek/vercel-ai-deepseek-reasoner-chat-stream.sse-payloads.txt"


def payloads(fixtures_dir: Path) -> list[bytes]:
    return [line for line in (fixtures_dir / DEEPSEEK).read_bytes().splitlines() if line.strip()]


def delta_of(payload: bytes) -> dict[str, Any]:
    delta: dict[str, Any] = orjson.loads(payload)["choices"][0]["delta"]
    return delta


def test_the_recorded_stream_splits_into_205_reasoning_and_14_answer_tokens(fixtures_dir: Path) -> None:
    body = b"".join(b"data: " + p + b"\n\n" for p in payloads(fixtures_dir)) + b"data: [DONE]\n\n"
    st = OpenAIStream(chat=True, max_tokens=1024)
    st.feed(body, 1.0)
    st.finish()
    assert st.error is None and st.tokens_counted == 219 == st.usage["completion_tokens"]  # type: ignore[index]
    assert st.reasoning_counted == 205 == st.usage["completion_tokens_details"]["reasoning_tokens"]  # type: ignore[index]
    # The preamble's empty reasoning_content is no token; the first reasoning chunk is the first chunk, the
    # first answer chunk comes after the 205 reasoning ones.
    assert (st.first_reasoning_chunk, st.first_answer_chunk) == (0, 205)
    answer = "".join(d["content"] for p in payloads(fixtures_dir) if (d := delta_of(p)).get("content"))
    assert answer_text(st.texts) == answer and "".join(st.texts) == answer
    assert "".join(st.reasoning_texts).startswith("We need")


def test_a_run_reports_reasoning_and_answer_tokens_and_both_ttfts(
    replay: Callable[..., ReplayServer], fixtures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunks = payloads(fixtures_dir)
    first_answer = next(i for i, p in enumerate(chunks) if delta_of(p).get("content"))
    # 20 ms before the first chunk, 1 ms between reasoning chunks, 80 ms of silence before the answer.
    delays = [0.02 if i == 0 else 0.08 if i == first_answer else 0.001 for i in range(len(chunks))]
    srv = replay(chunks, delays)
    run = bench("--base-url", srv.url, "--model", "deepseek-reasoner", "--endpoint", "chat", "--num-requests",
                "3", "--concurrency", "1", "--warmup", "0")
    assert run.code == 0, run.output
    s = run.summary
    assert s["output_tokens_total"] == 3 * 219 and s["token_source"] == {"server_usage": 3}
    r = s["reasoning"]
    assert (r["requests"], r["reasoning_tokens_total"], r["answer_tokens_total"]) == (3, 3 * 205, 3 * 14)
    assert r["token_source"] == {"server_usage": 3} and r["reasoning_share"] == pytest.approx(205 / 219)
    assert s["answer_tokens_total"] == 42
    assert s["answer_tokens_per_s"] == pytest.approx(42 / s["window_s"])
    # TTFT to the first reasoning token is the run's TTFT; the answer's comes 204 reasoning gaps and the
    # 80 ms of silence later.
    assert r["ttft_reasoning_ms"]["mean"] == pytest.approx(s["ttft_ms"]["mean"])
    assert r["ttft_answer_ms"]["min"] - r["ttft_reasoning_ms"]["max"] >= 80 + 204 * 1.0 - 5
    for rec in run.records:
        split = rec.server_timings["reasoning"]
        assert split["first_answer_chunk"] == 205 and split["client_reasoning_tokens"] == 205
    # The price per 1M answer tokens beside the one per 1M generated (output) tokens.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["cost", run.doc["id"], "--profile", "cpu-cloud", "--json"]) == 0
    cost = json.loads(out.getvalue())
    assert cost["usd_per_1m_answer_tokens"] == pytest.approx(cost["usd_per_1m_output_tokens"] * 219 / 14)
    assert cost["throughput"]["answer_tokens_per_s"] == pytest.approx(s["answer_tokens_per_s"])


def test_a_run_without_reasoning_has_no_answer_token_unit(
    replay: Callable[..., ReplayServer], fixtures_dir: Path
) -> None:
    plain = [p for p in payloads(fixtures_dir) if not delta_of(p).get("reasoning_content")]
    plain = [p.replace(b',"completion_tokens_details":{"reasoning_tokens":205}', b"")
             .replace(b'"completion_tokens":219', b'"completion_tokens":14') for p in plain]
    srv = replay(plain, [0.0] * len(plain))
    run = bench("--base-url", srv.url, "--model", "deepseek-reasoner", "--endpoint", "chat", "--num-requests",
                "2", "--warmup", "0")
    assert run.code == 0, run.output
    for key in ("reasoning", "answer_tokens_total", "answer_tokens_per_s", "good_output_tokens_total"):
        assert key not in run.summary
    assert all("reasoning" not in (r.server_timings or {}) for r in run.records)


def think_stream(parts: list[str]) -> list[bytes]:
    """A chat stream whose content carries a ``<think>`` block (a reasoning model served without a reasoning
    parser), one part a chunk, no usage split."""
    out = [orjson.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "finish_reason": None}]})]
    out += [orjson.dumps({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
            for p in parts]
    out.append(orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 4, "completion_tokens": len(parts),
                                       "total_tokens": 9}}))
    return out


@pytest.mark.parametrize(
    ("parts", "reasoning", "first_answer"),
    [
        (["<think>", "\n", "hm", "m", "</think>", "\n\n", "Yes", "."], 5, 5),
        # DeepSeek-R1's template opens the block in the prompt: the answer holds only its end.
        (["let", " me", " see", "</think>", "Yes"], 4, 4),
        # Cut by max_tokens inside the block: all reasoning, no answer.
        (["<think>", "still", " thinking"], 3, None),
        (["No", " think", " tags"], 0, 0),
    ],
)
def test_think_blocks_in_the_content_are_reasoning(
    replay: Callable[..., ReplayServer], parts: list[str], reasoning: int, first_answer: int | None
) -> None:
    srv = replay(think_stream(parts), [0.0] * (len(parts) + 2))
    run = bench("--base-url", srv.url, "--model", "deepseek-reasoner", "--endpoint", "chat", "--num-requests",
                "1", "--warmup", "0")
    assert run.code == 0, run.output
    split = (run.records[0].server_timings or {}).get("reasoning")
    if not reasoning:
        assert split is None and "reasoning" not in run.summary
        return
    assert split is not None
    assert (split["reasoning_tokens"], split["answer_tokens"]) == (reasoning, len(parts) - reasoning)
    assert split["source"] == "client_count" and split["first_answer_chunk"] == first_answer


def test_a_sessions_history_keeps_the_answer_and_leaves_the_reasoning_out(
    replay: Callable[..., ReplayServer], fixtures_dir: Path, tmp_path: Path
) -> None:
    chunks = payloads(fixtures_dir)
    srv = replay(chunks, [0.0] * len(chunks))
    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps({"conversation": [{"role": "user", "content": "count the r's"},
                                                 {"role": "user", "content": "and the e's?"}]}) + "\n")
    run = bench("--base-url", srv.url, "--model", "deepseek-reasoner", "--endpoint", "chat", "--dataset",
                "jsonl", "--dataset-path", str(conv), "--turns", "all", "--num-requests", "2",
                "--warmup", "0")
    assert run.code == 0, run.output
    answer = "".join(d["content"] for p in chunks if (d := delta_of(p)).get("content"))
    second = srv.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == answer and "We need" not in second[1]["content"]
