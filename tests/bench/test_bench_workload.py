"""Datasets and load patterns."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from stream_server import Scenario, StreamServer

from gpuledger.engines.openai import ServerTokenizer
from gpuledger.errors import InvalidInputError, NotFoundError, UsageError
from gpuledger.records.spec import checked
from gpuledger.workload import DatasetSpec, build_dataset, load_from_flags, parse_sweep, poisson_gaps


def build(spec: DatasetSpec, n: int, tokenizer_url: str | None = None, chat: bool = False):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        if tokenizer_url is None:
            return await build_dataset(spec, n, None, chat=chat)
        async with aiohttp.ClientSession() as session:
            tok = ServerTokenizer(session, tokenizer_url, "vllm", "test-model", {})
            return await build_dataset(spec, n, tok, chat=chat)

    return asyncio.run(go())


def test_builtin_dataset_ships_64_distinct_prompts_and_is_seeded() -> None:
    ds = build(DatasetSpec(name="builtin", seed=3), 64)
    assert len({p.text for p in ds.prompts}) == 64
    assert all(p.output_len is None for p in ds.prompts)  # natural length, capped
    again = build(DatasetSpec(name="builtin", seed=3), 64)
    other = build(DatasetSpec(name="builtin", seed=4), 64)
    assert [p.text for p in ds.prompts] == [p.text for p in again.prompts]
    assert [p.text for p in ds.prompts] != [p.text for p in other.prompts]
    assert ds.meta["distinct_prompts"] == 64


def test_builtin_dataset_with_output_len_forces_that_length() -> None:
    ds = build(DatasetSpec(name="builtin", output_len=33), 100)
    assert len(ds.prompts) == 100 and {p.output_len for p in ds.prompts} == {33}


def test_random_dataset_lengths_stay_in_the_range_and_repeat_with_the_seed() -> None:
    spec = DatasetSpec(name="random", input_len=100, output_len=50, range_ratio=0.2, seed=7)
    ds = build(spec, 200)
    outs = [p.output_len for p in ds.prompts]
    assert all(40 <= o <= 60 for o in outs)  # type: ignore[operator]
    assert len(set(outs)) > 5
    words = [len(p.text.split()) for p in ds.prompts]
    assert all(80 <= w <= 120 for w in words)
    assert ds.meta["input_len_method"].startswith("estimate")
    assert [p.text for p in build(spec, 200).prompts] == [p.text for p in ds.prompts]


def test_random_dataset_hits_exact_lengths_with_the_servers_tokenizer(
    serve: Callable[..., StreamServer],
) -> None:
    srv = serve(Scenario(identity="vllm"))
    spec = DatasetSpec(name="random", input_len=64, output_len=16, range_ratio=0.5, seed=1)
    ds = build(spec, 30, tokenizer_url=srv.url)
    assert ds.meta["input_len_method"] == "server_tokenizer"
    assert ds.meta["input_len_exact_ratio"] == 1.0
    for p in ds.prompts:
        assert p.input_len == srv.prompt_tokens(p.text)  # what the server will count
        assert 32 <= p.input_len <= 96
    assert len({p.text for p in ds.prompts}) == 30  # no shared prefixes to cache


def test_jsonl_dataset_reads_prompts_messages_and_output_lengths(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"prompt": "one", "output_len": 5})
        + "\n\n"
        + json.dumps({"messages": [{"role": "user", "content": "two"}]})
        + "\n"
        + json.dumps("three")
        + "\n"
    )
    ds = build(DatasetSpec(name="jsonl", path=f), 3)
    by_text = {p.text: p for p in ds.prompts}
    assert set(by_text) == {"one", "two", "three"}
    assert by_text["one"].output_len == 5
    assert by_text["two"].messages == [{"role": "user", "content": "two"}]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": \n', "p.jsonl:2: not valid JSON"),
        ('{"text": "x"}\n', 'p.jsonl:1: expected a non-empty "prompt"'),
        ('{"prompt": "x", "output_len": 0}\n', 'p.jsonl:1: "output_len" must be a positive integer'),
        ('{"messages": [{"role": "user"}]}\n', "p.jsonl:1: each message needs"),
        ("\n\n", "no prompts in the file"),
    ],
)
def test_bad_jsonl_names_the_line(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        build(DatasetSpec(name="jsonl", path=f), 1)


def test_missing_dataset_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        build(DatasetSpec(name="jsonl", path=tmp_path / "nope.jsonl"), 1)


def test_sharegpt_takes_first_human_turn_and_reply_length(
    tmp_path: Path, serve: Callable[..., StreamServer]
) -> None:
    f = tmp_path / "sg.json"
    f.write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "conversations": [
                        {"from": "human", "value": "hello there"},
                        {"from": "gpt", "value": "one two three four"},
                    ],
                },
                {"id": "b", "conversations": [{"from": "human", "value": "no reply"}]},
                {
                    "id": "c",
                    "conversations": [
                        {"from": "system", "value": "be brief"},
                        {"from": "human", "value": "why"},
                        {"from": "gpt", "value": "because"},
                    ],
                },
            ]
        )
    )
    est = build(DatasetSpec(name="sharegpt", path=f), 2)
    assert est.meta["conversations"] == 2
    assert est.meta["output_len_method"].startswith("estimate")
    srv = serve(Scenario(identity="vllm"))
    exact = build(DatasetSpec(name="sharegpt", path=f), 2, tokenizer_url=srv.url)
    assert exact.meta["output_len_method"] == "server_tokenizer"
    assert {p.text: p.output_len for p in exact.prompts} == {"hello there": 4, "why": 1}


def test_sharegpt_that_is_not_a_list_is_invalid(tmp_path: Path) -> None:
    f = tmp_path / "sg.json"
    f.write_text('{"conversations": []}')
    with pytest.raises(InvalidInputError, match="JSON list"):
        build(DatasetSpec(name="sharegpt", path=f), 1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "jsonl"}, "needs --dataset-path"),
        ({"name": "builtin", "input_len": 10}, "--input-len only applies"),
        ({"name": "random", "path": "x"}, "--dataset-path is only for"),
        ({"name": "random", "range_ratio": 1.0}, "--range-ratio"),
        ({"name": "random", "output_len": 0}, "--output-len must be at least 1"),
        ({"name": "bogus"}, "--dataset must be one of"),
    ],
)
def test_invalid_dataset_flags_are_usage_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        checked(DatasetSpec, fields)


def test_load_patterns_make_stages() -> None:
    sweep = load_from_flags(sweep=(1, 4, 16))
    assert [s.stage for s in sweep.run_stages()] == ["c=1", "c=4", "c=16"] and sweep.max_in_flight() == 16
    rate = load_from_flags(rate=5.0, concurrency=3)
    assert rate.model_dump() == {
        "kind": "rate", "stages": [{"stage": "rate=5", "rate_requests_per_s": 5.0, "max_concurrency": 3}]
    }
    assert load_from_flags(rate=5.0).max_in_flight() is None
    default = load_from_flags()
    assert default.kind == "concurrency" and default.fixed_concurrency() == 8
    assert parse_sweep("1, 4,16") == (1, 4, 16)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"sweep": (1, 2), "concurrency": 3}, "--sweep runs its own"),
        ({"sweep": (1, 2), "rate": 3.0}, "--sweep runs its own"),
        ({"concurrency": 0}, "--concurrency must be at least 1"),
        ({"rate": 0.0}, "--rate must be a positive"),
        ({"rate": float("inf")}, "--rate must be a positive"),
        ({"sweep": (1, 1)}, "twice"),
        ({"sweep": (0, 1)}, "at least 1"),
    ],
)
def test_invalid_load_patterns_are_usage_errors(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_from_flags(**flags)


def test_bad_sweep_text_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_sweep("1,x")


def test_poisson_gaps_have_the_asked_mean_and_repeat_with_the_seed() -> None:
    gaps = list(islice(poisson_gaps(20.0, seed=5), 20000))
    assert statistics.fmean(gaps) == pytest.approx(1 / 20.0, rel=0.05)
    assert statistics.pstdev(gaps) == pytest.approx(1 / 20.0, rel=0.05)  # exponential: std == mean
    assert list(islice(poisson_gaps(20.0, seed=5), 10)) == gaps[:10]
