"""Shared prefixes (``--prefix-len P`` / ``--prefix-ratio R``, ``--prefix-groups G``): prompt i starts with
group i mod G's prefix of exactly P tokens as the server counts them, each prompt still has its exact length,
and the run records the sharing the validity verdict reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from stream_server import Scenario, StreamServer
from workload_helpers import bench

from gpuledger.engines.openai import ServerTokenizer
from gpuledger.workload import DatasetSpec, build_dataset


def tokens_of(srv: StreamServer, texts: list[str]) -> list[list[int]]:
    """The loopback server's token ids of each text (its word-level /tokenize, vLLM's shape)."""

    async def go() -> list[list[int]]:
        async with aiohttp.ClientSession() as session:
            tok = ServerTokenizer(session, srv.url, "vllm", "test-model", {})
            return [await tok.tokenize(t, add_special=False) for t in texts]

    return asyncio.run(go())


def made(srv: StreamServer | None, spec: DatasetSpec, n: int):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        if srv is None:
            return await build_dataset(spec, n, None)
        async with aiohttp.ClientSession() as session:
            tok = ServerTokenizer(session, srv.url, "vllm", "test-model", {})
            return await build_dataset(spec, n, tok)

    return asyncio.run(go())


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_each_group_shares_exactly_its_prefix_tokens_and_every_prompt_has_its_length(
    serve: Callable[..., StreamServer],
) -> None:
    srv = serve(Scenario())
    spec = DatasetSpec(name="random", input_len=120, range_ratio=0.2, prefix_len=50, prefix_groups=3, seed=4)
    ds = made(srv, spec, 12)
    ids = tokens_of(srv, [p.text for p in ds.prompts])
    for i, p in enumerate(ds.prompts):
        assert len(ids[i]) + 1 == p.input_len == p.target_len  # the special token beside the words
        for j in range(i + 1, len(ds.prompts)):
            shared = common_prefix(ids[i], ids[j])
            if i % 3 == j % 3:
                assert shared >= 50  # the group's prefix, whole
            else:
                assert shared < 50  # another group's prompt shares at most a word or two by chance
    assert ds.meta["prefix_sharing"]["prefix_tokens"] == 50
    assert ds.meta["prefix_sharing"]["groups"] == 3
    assert ds.meta["prefix_sharing"]["assignment"] == "prompt i starts with the prefix of group i mod groups"


def test_prefix_ratio_is_a_share_of_the_input_length(serve: Callable[..., StreamServer]) -> None:
    srv = serve(Scenario())
    ds = made(srv, DatasetSpec(name="random", input_len=100, prefix_ratio=0.25, seed=1), 4)
    ids = tokens_of(srv, [p.text for p in ds.prompts])
    assert ds.meta["prefix_sharing"]["prefix_tokens"] == 25 and ds.meta["prefix_sharing"]["groups"] == 1
    assert all(common_prefix(ids[0], other) >= 25 for other in ids[1:])
    assert all(p.input_len == 100 for p in ds.prompts)


def test_without_a_tokenizer_the_prefix_is_words_and_the_lengths_estimates() -> None:
    ds = made(None, DatasetSpec(name="random", input_len=40, prefix_len=30, prefix_groups=2, seed=2), 4)
    words = [p.text.split() for p in ds.prompts]
    assert words[0][:30] == words[2][:30] and words[1][:30] == words[3][:30]
    assert words[0][:30] != words[1][:30]
    assert all(len(w) == 40 for w in words) and all(p.input_len is None for p in ds.prompts)
    assert "one word per token" in ds.meta["prefix_sharing"]["method"]


def test_the_run_records_the_sharing_and_the_verdict_reads_it(serve: Callable[..., StreamServer]) -> None:
    srv = serve(Scenario(tokens=4))
    run = bench("--base-url", srv.url, "--input-len", "200", "--prefix-len", "150", "--prefix-groups", "2",
                "--num-requests", "20", "--warmup", "0")
    assert run.code == 0, run.output
    wl = run.doc["workload"]
    assert wl["prefix_sharing"]["prefix_tokens"] == 150
    assert wl["input_len_exact_ratio"] == 1.0
    assert [r.input_tokens for r in run.records] == [200] * 20  # the server's usage.prompt_tokens
    # The verdict's prefix_cache check reads the prompts' repeated prefixes: about 3/4 of the input here.
    share = wl["prompt_prefixes"]["repeated_prefix_share"]
    assert 0.6 < share < 0.8
    check = next(c for c in run.summary["verdict"]["checks"] if c["name"] == "prefix_cache")
    assert check["status"] == "warn" and check["figure"] == share
    config = run.doc["config"]["dataset"]
    assert (config["prefix_len"], config["prefix_groups"]) == (150, 2)
    again = bench("--like", run.doc["id"], "--base-url", srv.url)
    assert again.code == 0, again.output
    assert again.doc["config"]["dataset"]["prefix_len"] == 150
    assert [r.input_tokens for r in again.records] == [200] * 20


def test_the_chat_template_counts_against_the_room_a_prefix_leaves(
    serve: Callable[..., StreamServer],
) -> None:
    srv = serve(Scenario(chat_template_tokens=12))
    run = bench("--base-url", srv.url, "--endpoint", "chat", "--input-len", "40", "--prefix-len", "30",
                "--num-requests", "2", "--warmup", "0")
    assert run.code == 2, run.output
    assert "a shared prefix of 30 tokens and the template's 12 leave no tokens of their own" in run.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--input-len", "100", "--prefix-len", "100"], "--prefix-len makes a prefix of 100 tokens, leaving"),
        (["--input-len", "100", "--prefix-len", "60", "--prefix-ratio", "0.5"], "give --prefix-len or"),
        (["--input-len", "100", "--prefix-groups", "4"], "--prefix-groups needs the shared prefix's length"),
        (["--input-len", "100", "--prefix-ratio", "1.5"], "--prefix-ratio must be between 0 and 1"),
        (["--input-len", "100", "--prefix-len", "10", "--prefix-groups", "0"],
         "--prefix-groups must be 1 to"),
        (["--dataset", "builtin", "--prefix-len", "10"],
         "--prefix-len shapes the prompts of --dataset random"),
    ],
)
def test_prefix_flags_that_cannot_hold_are_one_line_and_exit_2(flags: list[str], message: str) -> None:
    run = bench("--base-url", "http://127.0.0.1:9", *flags)
    assert run.code == 2, run.output
    assert message in run.output
