"""Prompt sources: a run's prompts, made as the run asks for them (``open_source``).

A source hands out one prompt per request (``await source.next()``, the warm-up's first), in an order fixed
by the spec and its seed, and holds only a few ahead: a run of 10^6 requests builds no list of 10^6 prompts,
and a timed run sends fresh prompts for as long as it lasts. ``prepare(n)`` makes the first ``n`` before the
measured window (what the first requests need), in small steps that a signal cuts short. A source may end
(``next()`` returns None): a finite trace would; the datasets here never do.

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
- ``builtin`` / ``jsonl`` / ``sharegpt``: the file's prompts in a seeded order, cycled; ShareGPT's output
  lengths are counted with the server's tokenizer as each conversation is first used.
- ``random-token-ids``: the in-process engine draws the ids; its prompts carry the lengths only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol, runtime_checkable

from gpuledger.errors import EngineError, UsageError
from gpuledger.records.spec import DatasetSpec, TokenIdDataset
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.datasets import (
    DEFAULT_RANDOM_INPUT_LEN,
    DEFAULT_RANDOM_OUTPUT_LEN,
    Dataset,
    Prompt,
    file_sha256,
    read_builtin,
    read_jsonl,
    read_sharegpt,
)
from gpuledger.workload.words import WORDS

LEARN_WORDS = 32
FREQUENT_WORDS = 8  # WORDS is in frequency order: the commonest are one token in most vocabularies
CHECK_PROMPTS = 3
LOOKAHEAD = 32
SAMPLE_PROMPTS = 256  # prompts whose texts the record's prompt_prefixes is computed over
TOKENIZE_PARALLEL = 8
YIELD_WORDS = 2048  # words composed between two yields to the event loop
MAX_WORD_TOKENS = 16  # a vocabulary word counted as more is not used (a count that cannot be right)
TOKEN_ID_PROMPTS = "token ids drawn uniformly from the vocabulary, fixed seed, special ids avoided"

# What preparation reports as it goes: (what, done, total or None).
Step = Callable[[str, int, int | None], None]


@runtime_checkable
class ChatTokenizer(Protocol):
    """A tokenizer that counts a templated chat prompt as the server builds it (``chat_source`` says how)."""

    chat_source: str

    async def chat_tokens(self, messages: list[dict[str, str]]) -> int: ...


class PromptSource(Protocol):
    """What the runner pulls prompts from (see the module docstring)."""

    meta: dict[str, Any]

    async def next(self) -> Prompt | None: ...

    async def prepare(self, count: int, on_step: Step | None = None) -> None: ...

    def report(self) -> dict[str, Any]: ...

    def sample_texts(self) -> tuple[list[str], bool]: ...

    async def aclose(self) -> None: ...


Make = Callable[[int], Awaitable[Prompt]]


class Prompts:
    """A source over ``make(i)``, the i-th prompt (deterministic in i). ``lookahead``: how many prompts to
    start making ahead of the one asked for (for makers that wait on the server). ``pool``: the texts of a
    dataset's own prompts (the record's prompt prefixes are over them); None: every prompt is new, and the
    prefixes are over the first ``SAMPLE_PROMPTS`` handed out."""

    def __init__(self, make: Make, meta: dict[str, Any], *, lookahead: int = 0,
                 pool: list[str] | None = None, label: str = "making prompts") -> None:
        self._make = make
        self.meta = meta
        self._lookahead = lookahead
        self._pool = pool
        self._label = label
        self._next = 0
        self._ready: dict[int, Prompt] = {}
        self._ahead: dict[int, asyncio.Task[Prompt]] = {}
        self._sample: list[str] = []
        self.handed_out = 0
        self.waits = 0
        self.waited_s = 0.0
        self.exact = 0
        self.targets = 0
        self.notes: list[str] = []

    async def next(self) -> Prompt | None:
        i = self._next
        self._next += 1
        prompt = self._ready.pop(i, None)
        if prompt is None:
            task = self._ahead.pop(i, None)
            t = perf_counter()
            prompt = await (task if task is not None else self._make(i))
            waited = perf_counter() - t
            if waited > 1e-3:
                self.waits += 1
                self.waited_s += waited
        self._refill()
        self._count(prompt)
        return prompt

    def _count(self, prompt: Prompt) -> None:
        self.handed_out += 1
        if prompt.target_len is not None:
            self.targets += 1
            self.exact += prompt.input_len == prompt.target_len
        if self._pool is None and len(self._sample) < SAMPLE_PROMPTS and prompt.text:
            self._sample.append(prompt.text)

    def _refill(self) -> None:
        for j in range(self._next, self._next + self._lookahead):
            if j not in self._ready and j not in self._ahead:
                self._ahead[j] = asyncio.ensure_future(self._make(j))

    async def take(self, count: int) -> list[Prompt]:
        """The next ``count`` prompts as a list (for a load process that is handed its prompts)."""
        await self.prepare(count)
        return [p for _ in range(count) if (p := await self.next()) is not None]

    async def prepare(self, count: int, on_step: Step | None = None) -> None:
        """Make prompts ``next()`` will hand out until ``count`` are ready (in small steps)."""
        todo = [j for j in range(self._next, self._next + count) if j not in self._ready]
        if not todo:
            return
        done = 0
        if on_step is not None:
            on_step(self._label, 0, len(todo))
        tasks = {j: self._ahead.pop(j) if j in self._ahead else asyncio.ensure_future(self._make(j))
                 for j in todo}
        try:
            for j, task in tasks.items():
                self._ready[j] = await task
                done += 1
                if on_step is not None:
                    on_step(self._label, done, len(todo))
        finally:
            for task in tasks.values():
                task.cancel()

    def report(self) -> dict[str, Any]:
        """What making the prompts handed out found (merged into the run's workload record at its end)."""
        out: dict[str, Any] = {}
        if self.targets and self.meta.get("input_len_method") == "server_tokenizer":
            out["input_len_exact_ratio"] = self.exact / self.targets
        if self.waits:
            out["prompt_waits"] = {"requests": self.waits, "seconds": self.waited_s}
        if self.notes:
            out["prompt_notes"] = list(self.notes)
        return out

    def sample_texts(self) -> tuple[list[str], bool]:
        """(texts, each send new): the dataset's own prompts, or the first ones handed out of prompts made
        new for every send."""
        if self._pool is not None:
            return list(self._pool), False
        return list(self._sample), True

    async def aclose(self) -> None:
        tasks = list(self._ahead.values())
        self._ahead.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


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
    replies: _Replies | None = None
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
            replies = await _Replies.open(tokenizer, [r for _, r in pairs], meta)
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


class _Replies:
    """ShareGPT output lengths: conversation k's reply counted by the server's tokenizer once, when it is
    first used (estimated, and noted, where the tokenizer fails)."""

    def __init__(self, tokenizer: Tokenizer, replies: list[str], first: int) -> None:
        self._tok = tokenizer
        self._replies = replies
        self._sem = asyncio.Semaphore(TOKENIZE_PARALLEL)
        self._counted: dict[int, int] = {0: first}
        self.notes: list[str] = []

    @classmethod
    async def open(cls, tokenizer: Tokenizer, replies: list[str], meta: dict[str, Any]) -> _Replies | None:
        """None (estimates, noted in ``meta``) when the tokenizer fails at once."""
        try:
            first = max(1, len(await tokenizer.tokenize(replies[0], add_special=False)))
        except EngineError as exc:
            meta["output_len_note"] = f"server tokenizer failed ({exc.message}); lengths estimated"
            return None
        meta["output_len_method"] = "server_tokenizer"
        return cls(tokenizer, replies, first)

    async def count(self, k: int) -> int:
        if k not in self._counted:
            async with self._sem:
                try:
                    n = max(1, len(await self._tok.tokenize(self._replies[k], add_special=False)))
                except EngineError as exc:
                    if not self.notes:
                        self.notes.append(
                            f"server tokenizer failed ({exc.message}): some output lengths estimated"
                        )
                    n = max(1, round(len(self._replies[k].split()) * 1.3))
            self._counted[k] = n
        return self._counted[k]


# ------------------------------------------------------------------------------------ the random dataset


def _index_rng(seed: int, i: int) -> random.Random:
    """The i-th prompt's own random stream: prompt i is the same whatever was made before it."""
    return random.Random(f"gpuledger-random/{seed}/{i}")


def _lengths(spec: DatasetSpec) -> tuple[int, int, int, int]:
    """(lowest, highest) input and output lengths the random dataset draws from."""
    in_len = spec.input_len or DEFAULT_RANDOM_INPUT_LEN
    out_len = spec.output_len or DEFAULT_RANDOM_OUTPUT_LEN
    r = spec.range_ratio
    lo_i, lo_o = max(1, int(in_len * (1 - r))), max(1, int(out_len * (1 - r)))
    return lo_i, max(lo_i, int(in_len * (1 + r))), lo_o, max(lo_o, int(out_len * (1 + r)))


async def _random(spec: DatasetSpec, tok: Tokenizer | None, chat: bool, on_step: Step | None) -> Prompts:
    lo_i, hi_i, lo_o, hi_o = _lengths(spec)
    meta: dict[str, Any] = {
        "dataset": "random", "seed": spec.seed, "input_len": spec.input_len or DEFAULT_RANDOM_INPUT_LEN,
        "output_len": spec.output_len or DEFAULT_RANDOM_OUTPUT_LEN, "range_ratio": spec.range_ratio,
    }
    maker: _Maker | None = None
    if tok is not None:
        try:
            maker = await _learn(tok, chat, spec.seed, meta, on_step)
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

    async def make(i: int) -> Prompt:
        rng = _index_rng(spec.seed, i)
        target, out = rng.randint(lo_i, hi_i), rng.randint(lo_o, hi_o)
        if maker is None:
            return Prompt(text=await _words(rng, target), output_len=out, target_len=target)
        text, got = await maker.make(rng, target)
        return Prompt(text=text, output_len=out, input_len=got, target_len=target)

    source = Prompts(make, meta, label="making prompts")
    if maker is not None and not await maker.checked(source, on_step):
        source._lookahead = LOOKAHEAD  # the exact cut waits on the server: keep some ready ahead
    if maker is not None:
        source.notes = maker.notes
    return source


async def _words(rng: random.Random, n: int) -> str:
    words: list[str] = []
    while len(words) < n:
        if words:
            await asyncio.sleep(0)
        words.extend(rng.choices(WORDS, k=min(YIELD_WORDS, n - len(words))))
    return " ".join(words)


class _Maker:
    """Exact-length prompts with the server's tokenizer: composed from the learnt word counts, or (once
    ``exact`` is set) cut one by one with the server's tokenizer. ``fixed``: the tokens every prompt has
    beside its words (special tokens; on a chat endpoint the template's)."""

    def __init__(self, tok: Tokenizer, count: Callable[[str], Awaitable[int]], fixed: int,
                 first: dict[str, int], cont: dict[str, int], how: str) -> None:
        self.tok = tok
        self.count = count
        self.fixed = fixed
        self.exact = not first
        self.how = how
        self.notes: list[str] = []
        self._sem = asyncio.Semaphore(TOKENIZE_PARALLEL)
        self._first, self._cont = first, cont
        self._firsts, self._conts = list(first), list(cont)
        self._max = max([*first.values(), *cont.values(), 1])
        self._fit_first = [[w for w, c in first.items() if c <= k] for k in range(self._max + 1)]
        self._fit_cont = [[w for w, c in cont.items() if c <= k] for k in range(self._max + 1)]

    async def make(self, rng: random.Random, target: int) -> tuple[str, int]:
        if self.exact:
            try:
                async with self._sem:
                    return await self._cut(rng, target)
            except EngineError as exc:
                if not self.notes:
                    self.notes.append(
                        f"server tokenizer failed ({exc.message}): some prompt lengths estimated"
                    )
                return await _words(rng, target), target
        return await self._compose(rng, target)

    async def _compose(self, rng: random.Random, target: int) -> tuple[str, int]:
        left = target - self.fixed
        words: list[str] = []
        costs, pool, fits = self._first, self._firsts, self._fit_first
        while left > 0:
            if words and len(words) % YIELD_WORDS == 0:
                await asyncio.sleep(0)
            choices = pool if left >= self._max else fits[left]
            if not choices:
                break
            w = rng.choice(choices)
            words.append(w)
            left -= costs[w]
            costs, pool, fits = self._cont, self._conts, self._fit_cont
        if not words:  # no word fits the room left: the cheapest one, over the target
            w = min(self._firsts, key=self._first.__getitem__)
            return w, self.fixed + self._first[w]
        return " ".join(words), target - left

    async def _cut(self, rng: random.Random, target: int) -> tuple[str, int]:
        """A prompt of ``target`` tokens cut from the server's tokenization of random words (the closest
        of a few cuts when no cut is exact), and its count."""
        want = max(1, target - self.fixed)
        text = await _words(rng, want + 8)
        ids = await self.tok.tokenize(text, add_special=False)
        while len(ids) < want:
            text += " " + await _words(rng, want - len(ids) + 8)
            ids = await self.tok.tokenize(text, add_special=False)
        cut = want
        best_text, best_n = text, len(ids) + self.fixed
        for _ in range(4):
            candidate = await self.tok.detokenize(ids[:cut])
            n = await self.count(candidate)
            if abs(n - target) < abs(best_n - target):
                best_text, best_n = candidate, n
            if n == target:
                break
            cut = max(1, cut + (target - n))
        return best_text, best_n

    async def checked(self, source: Prompts, on_step: Step | None) -> bool:
        """Count the first prompts with the server: True when the composed counts hold; else switch to
        cutting each prompt with the server's tokenizer (the record says why) and return False."""
        if self.exact:
            return False
        await source.prepare(CHECK_PROMPTS, on_step)
        wrong = []
        for j in range(CHECK_PROMPTS):
            p = source._ready[j]
            n = await self.count(p.text)
            if n != p.input_len:
                wrong.append((p.input_len, n))
        meta = source.meta
        if not wrong:
            meta["input_len_how"] = f"{self.how}; {CHECK_PROMPTS} of {CHECK_PROMPTS} prompts checked exact"
            return True
        source._ready.clear()
        self.exact = True
        meta["input_len_how"] = (
            "each prompt cut to length with the server's /tokenize + /detokenize: the learnt word counts "
            f"did not add up ({len(wrong)} of {CHECK_PROMPTS} checked prompts off, e.g. {wrong[0][1]} tokens "
            f"where {wrong[0][0]} were composed)"
        )
        return False


@dataclass(frozen=True, slots=True)
class _Counter:
    tok: Tokenizer
    chat: ChatTokenizer | None

    async def __call__(self, text: str) -> int:
        if self.chat is not None:
            return await self.chat.chat_tokens([{"role": "user", "content": text}])
        return len(await self.tok.tokenize(text, add_special=True))


async def _learn(tok: Tokenizer, chat: bool, seed: int, meta: dict[str, Any], on_step: Step | None) -> _Maker:
    """Learn what the server's tokenizer makes of the vocabulary (and, on a chat endpoint, of its template).
    ``EngineError`` when the tokenizer cannot be used at all."""
    chat_tok = tok if chat and isinstance(tok, ChatTokenizer) else None
    count = _Counter(tok, chat_tok)
    sem = asyncio.Semaphore(TOKENIZE_PARALLEL)
    rng = random.Random(f"gpuledger-vocabulary/{seed}")
    frequent = list(WORDS[:FREQUENT_WORDS])
    words = frequent + rng.sample(WORDS[FREQUENT_WORDS:], LEARN_WORDS - FREQUENT_WORDS)
    total = 2 * len(words) + 1
    done = 0

    async def n_tokens(text: str) -> int:
        nonlocal done
        async with sem:
            n = len(await tok.tokenize(text, add_special=False))
        done += 1
        if on_step is not None:
            on_step("learning the server's tokenizer", done, total)
        return n

    if on_step is not None:
        on_step("learning the server's tokenizer", 0, total)
    special = len(await tok.tokenize("", add_special=True))
    done += 1
    alone = await asyncio.gather(*(n_tokens(w) for w in words))
    twice = await asyncio.gather(*(n_tokens(f"{w} {w}") for w in words))
    first = {w: a for w, a in zip(words, alone, strict=True) if 1 <= a <= MAX_WORD_TOKENS}
    cont = {w: b - a for w, a, b in zip(words, alone, twice, strict=True) if 1 <= b - a <= MAX_WORD_TOKENS}
    meta["input_len_method"] = "server_tokenizer"
    how = f"composed from the server's counts of {len(words)} words ({total} /tokenize calls)"
    fixed = special
    if chat:
        fixed = await _template_tokens(tok, chat_tok, meta)
    if not first or not cont:
        return _Maker(tok, count, fixed, {}, {}, how)
    return _Maker(tok, count, fixed, first, cont, how)


async def _template_tokens(tok: Tokenizer, chat_tok: ChatTokenizer | None, meta: dict[str, Any]) -> int:
    """The chat template's fixed tokens: a templated one-message chat counted by the server, less its
    content (two probes: the larger difference is kept, and noted when they differ). 0 when the server
    cannot count a chat (noted: the lengths then leave the template out)."""
    if chat_tok is None:
        meta["chat_template_tokens"] = None
        meta["chat_template_note"] = "the server cannot count a chat's template: prompt lengths leave it out"
        return 0
    probes = ("hello", " ".join(WORDS[:24]))
    diffs = []
    try:
        for text in probes:
            templated = await chat_tok.chat_tokens([{"role": "user", "content": text}])
            diffs.append(templated - len(await tok.tokenize(text, add_special=False)))
    except EngineError as exc:
        meta["chat_template_tokens"] = None
        meta["chat_template_note"] = (
            f"the chat template could not be counted ({exc.message}): lengths leave it out"
        )
        return 0
    overhead = max(0, *diffs)
    meta["chat_template_tokens"] = overhead
    meta["chat_template_method"] = chat_tok.chat_source
    if len(set(diffs)) > 1:
        meta["chat_template_note"] = (
            f"the template's tokens differ with the content ({diffs}): {overhead} kept"
        )
    return overhead
