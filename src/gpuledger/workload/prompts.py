"""Prompt sources: a run's prompts, made as the run asks for them (``open_source``).

A source (``workload.source.Prompts``) hands out one prompt per request (``await source.next()``, the
warm-up's first), in an order fixed by the spec and its seed, and holds only a few ahead: a run of 10^6
requests builds no list of 10^6 prompts, and a timed run sends fresh prompts for as long as it lasts.
``prepare(n)`` makes the first ``n`` before the measured window (what the first requests need), in small
steps that a signal cuts short. A trace's source ends with the trace; the other datasets' never do.

How each dataset makes its prompts:

- ``random`` with the server's tokenizer: the token counts of a small vocabulary (``LEARN_WORDS`` words of
  ``workload.words``) are learnt from the server once — each word alone and after another word, two
  /tokenize calls a word — and every prompt is composed locally to its exact count; the first
  ``CHECK_PROMPTS`` are counted by the server to prove the counts add up for this tokenizer. When they do
  not, each prompt is cut to length with the server's /tokenize + /detokenize instead (about three calls a
  prompt, made up to ``LOOKAHEAD`` prompts ahead of the requests, on the tokenizer's own connections).
  On a chat endpoint the requested length is the whole templated prompt: the template's fixed tokens are
  measured (``ChatTokenizer.chat_tokens``: vLLM's /tokenize with messages, llama.cpp's /apply-template) and
  the content made that much shorter; the record's ``chat_template_tokens`` says how many.
- ``random`` without one: one word per token (an estimate; the record says so).
  With ``--prefix-len`` / ``--prefix-ratio`` the prompts fall in groups that start with the same prefix
  (``workload.shared``).
- ``builtin`` / ``jsonl`` / ``sharegpt``: the file's prompts in a seeded order, cycled; ShareGPT's output
  lengths are counted with the server's tokenizer as each conversation is first used. With ``--turns`` a
  prompt is a whole conversation, replayed turn by turn as a session (``workload.conversations``).
- ``trace``: a trace file's arrivals in their order, each a prompt of the recorded lengths, shared blocks
  included (``workload.traces``); the source ends with the trace.
- ``random-token-ids``: the in-process engine draws the ids; its prompts carry the lengths only.

How text of an exact token length is made is ``workload.composer``'s.
"""

from __future__ import annotations

import random
from typing import Any

from gpuledger.errors import EngineError, UsageError
from gpuledger.records.spec import DatasetSpec, TokenIdDataset
from gpuledger.records.workloads import DEFAULT_RANDOM_OUTPUT_LEN, random_lengths
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.composer import Composer, Step, learn, random_words
from gpuledger.workload.conversations import Replies, open_sessions
from gpuledger.workload.datasets import (
    DEFAULT_RANDOM_INPUT_LEN,
    Dataset,
    Prompt,
    file_sha256,
    read_builtin,
    read_jsonl,
    read_sharegpt,
)
from gpuledger.workload.shared import SharedPrefixes, shared_plan
from gpuledger.workload.source import CHECK_PROMPTS, LOOKAHEAD, Prompts, PromptSource, check_counts
from gpuledger.workload.traces import open_trace

TOKEN_ID_PROMPTS = "token ids drawn uniformly from the vocabulary, fixed seed, special ids avoided"

# --------------------------------------------------------------------------------------------- opening


async def open_source(spec: DatasetSpec | TokenIdDataset, tokenizer: Tokenizer | None, *,
                      chat: bool = False, on_step: Step | None = None) -> Prompts:
    """The prompt source of ``spec`` (see the module docstring). ``on_step`` hears how learning the
    server's tokenizer goes. ``UsageError``: the asked lengths cannot be made (shorter than the chat
    template); file errors as the readers raise them."""
    if isinstance(spec, TokenIdDataset):
        return _token_ids(spec)
    if spec.name == "random":
        return await _random(spec, tokenizer, chat, on_step)
    if spec.name == "trace":
        return await open_trace(spec, tokenizer, chat, on_step)
    if spec.turns is not None:
        return await open_sessions(spec, tokenizer)
    return await _file(spec, tokenizer)


async def build_dataset(spec: DatasetSpec | TokenIdDataset, n: int, tokenizer: Tokenizer | None, *,
                        chat: bool = False) -> Dataset:
    """The first ``n`` prompts of ``spec``'s source and its record (for a few prompts at once)."""
    source = await open_source(spec, tokenizer, chat=chat)
    try:
        prompts = [p for _ in range(n) if (p := await source.next()) is not None]
        return Dataset(prompts, {**source.meta, **source.report()})
    finally:
        await source.aclose()


def _token_ids(spec: TokenIdDataset) -> Prompts:
    prompt = Prompt(text="", output_len=spec.output_tokens, input_len=spec.input_tokens)

    async def make(i: int) -> Prompt:
        return Prompt(prompt.text, None, prompt.output_len, prompt.input_len)

    meta = {
        "dataset": "random-token-ids",
        "input_tokens": spec.input_tokens,
        "output_tokens": spec.output_tokens,
        "fixed_output": True,
        "num_requests": spec.count,
        "seed": spec.seed,
        "prompts": TOKEN_ID_PROMPTS,
    }
    return Prompts(make, meta, pool=[])


async def _file(spec: DatasetSpec, tokenizer: Tokenizer | None) -> Prompts:
    """The file's (or the built-in set's) prompts in a seeded order, cycled."""
    rng = random.Random(spec.seed)
    meta: dict[str, Any] = {"dataset": spec.name, "seed": spec.seed}
    if spec.path is not None:
        meta["path"] = str(spec.path)
        meta["sha256"] = file_sha256(spec.path)
    replies: Replies | None = None
    if spec.name == "builtin":
        base = read_builtin()
    elif spec.name == "jsonl":
        assert spec.path is not None
        base = read_jsonl(spec.path)
    else:
        assert spec.path is not None
        pairs = read_sharegpt(spec.path)
        base = [Prompt(text=h, output_len=max(1, round(len(r.split()) * 1.3))) for h, r in pairs]
        meta["conversations"] = len(pairs)
        meta["output_len_method"] = "estimate: 1.3 tokens per word of the recorded reply"
        if tokenizer is not None and spec.output_len is None:
            replies = await Replies.open(tokenizer, [r for _, r in pairs], meta)
    order = list(range(len(base)))
    rng.shuffle(order)
    meta["distinct_prompts"] = len(base)
    if spec.output_len is not None:
        meta["output_len"] = spec.output_len

    async def make(i: int) -> Prompt:
        k = order[i % len(base)]
        p = base[k]
        want = spec.output_len if spec.output_len is not None else p.output_len
        if replies is not None:
            want = await replies.count(k)
        return Prompt(text=p.text, messages=p.messages, output_len=want, input_len=p.input_len)

    source = Prompts(make, meta, lookahead=LOOKAHEAD if replies is not None else 0,
                     pool=[p.text for p in base], label="counting the replies' tokens")
    if replies is not None:
        source.notes = replies.notes
    return source


# ------------------------------------------------------------------------------------ the random dataset


def _index_rng(seed: int, i: int) -> random.Random:
    """The i-th prompt's own random stream: prompt i is the same whatever was made before it."""
    return random.Random(f"gpuledger-random/{seed}/{i}")


def _lengths(spec: DatasetSpec) -> tuple[int, int, int, int]:
    """(lowest, highest) input and output lengths the random dataset draws from."""
    return random_lengths(spec, DEFAULT_RANDOM_INPUT_LEN)


async def _random(spec: DatasetSpec, tok: Tokenizer | None, chat: bool, on_step: Step | None) -> Prompts:
    lo_i, hi_i, lo_o, hi_o = _lengths(spec)
    meta: dict[str, Any] = {
        "dataset": "random", "seed": spec.seed, "input_len": spec.input_len or DEFAULT_RANDOM_INPUT_LEN,
        "output_len": spec.output_len or DEFAULT_RANDOM_OUTPUT_LEN, "range_ratio": spec.range_ratio,
    }
    maker: Composer | None = None
    if tok is not None:
        try:
            maker = await learn(tok, chat, spec.seed, meta, on_step)
        except EngineError as exc:
            meta["input_len_note"] = f"server tokenizer failed ({exc.message}); lengths estimated"
    if maker is not None:
        fixed = maker.fixed
        if lo_i <= fixed:
            what = "the chat template's" if chat else "the special tokens'"
            raise UsageError(
                f"--input-len {spec.input_len} (from {lo_i}) leaves no room for content after {what} "
                f"{fixed} tokens: give at least {fixed + 1}"
                + (f" with --range-ratio {spec.range_ratio:g}" if spec.range_ratio else "")
            )
    else:
        meta["input_len_method"] = "estimate: one word per token" + (
            " (chat template tokens not counted)" if chat else "")
    plan = shared_plan(spec, maker, lo_i, meta)
    shared = SharedPrefixes(plan, maker, spec.seed) if plan is not None else None

    async def make(i: int) -> Prompt:
        rng = _index_rng(spec.seed, i)
        target, out = rng.randint(lo_i, hi_i), rng.randint(lo_o, hi_o)
        if shared is not None:
            text, n = await shared.prompt(i, rng, target)
            return Prompt(text=text, output_len=out, input_len=n, target_len=target)
        if maker is None:
            return Prompt(text=await random_words(rng, target), output_len=out, target_len=target)
        text, got = await maker.make(rng, target)
        return Prompt(text=text, output_len=out, input_len=got, target_len=target)

    source = Prompts(make, meta, label="making prompts")
    if maker is not None and not await check_counts(maker, source, on_step):
        source._lookahead = LOOKAHEAD  # the exact cut waits on the server: keep some ready ahead
    if maker is not None:
        source.notes = maker.notes
    return source


__all__ = ["CHECK_PROMPTS", "PromptSource", "Prompts", "Step", "build_dataset", "check_counts", "open_source"]
