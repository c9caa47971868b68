"""Prompt text of an exact token length, as the server's tokenizer counts it (``Composer``).

The token counts of a small vocabulary (``LEARN_WORDS`` words of ``workload.words``) are learnt from the
server once — each word alone and after another word, two /tokenize calls a word (``learn``) — and text is
composed locally to its exact count: the first word of a prompt costs what it costs alone, every later word
what it costs after another word. When those counts do not add up for a tokenizer (``workload.prompts``
checks the first prompts with the server), each prompt is cut to length with the server's /tokenize +
/detokenize instead (``Composer.exact``). On a chat endpoint the template's fixed tokens are measured too
(``ChatTokenizer.chat_tokens``) and left out of the content (``Composer.fixed``).

``Composer.span`` composes a piece of text of a given number of tokens, as the first words of a prompt or
as words that follow others: shared prefixes (``workload.shared``) and a trace's blocks (``workload.traces``)
are put together from such pieces, and their counts add up like one prompt's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gpuledger.errors import EngineError
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.words import WORDS

LEARN_WORDS = 32
FREQUENT_WORDS = 8  # WORDS is in frequency order: the commonest are one token in most vocabularies
TOKENIZE_PARALLEL = 8
YIELD_WORDS = 2048  # words composed between two yields to the event loop
MAX_WORD_TOKENS = 16  # a vocabulary word counted as more is not used (a count that cannot be right)

# What preparation reports as it goes: (what, done, total or None).
Step = Callable[[str, int, int | None], None]


@runtime_checkable
class ChatTokenizer(Protocol):
    """A tokenizer that counts a templated chat prompt as the server builds it (``chat_source`` says how)."""

    chat_source: str

    async def chat_tokens(self, messages: list[dict[str, str]]) -> int: ...


async def random_words(rng: random.Random, n: int) -> str:
    """``n`` words of ``WORDS`` drawn with ``rng`` (one word per token: the estimate without a tokenizer),
    yielding to the event loop every ``YIELD_WORDS`` words."""
    words: list[str] = []
    while len(words) < n:
        if words:
            await asyncio.sleep(0)
        words.extend(rng.choices(WORDS, k=min(YIELD_WORDS, n - len(words))))
    return " ".join(words)


class Composer:
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

    async def make(self, rng: random.Random, target: int, head: str = "") -> tuple[str, int]:
        """A prompt of ``target`` tokens (the fixed ones included) and its count; ``head``: text it starts
        with (a shared prefix, composed with ``span(first=True)``) when cut with the server's tokenizer."""
        if self.exact:
            try:
                async with self._sem:
                    return await self._cut(rng, target, head)
            except EngineError as exc:
                if not self.notes:
                    self.notes.append(
                        f"server tokenizer failed ({exc.message}): some prompt lengths estimated"
                    )
                words = await random_words(rng, max(1, target - len(head.split())))
                return (f"{head} {words}" if head else words), target
        return await self._compose(rng, target)

    async def span(self, rng: random.Random, tokens: int, *, first: bool) -> tuple[str, int]:
        """Text of ``tokens`` tokens by the learnt counts, as a prompt's first words (``first``) or as words
        that follow others, and the tokens it has (fewer only when no word fits the room left)."""
        left = tokens
        words: list[str] = []
        if first:
            costs, pool, fits = self._first, self._firsts, self._fit_first
        else:
            costs, pool, fits = self._cont, self._conts, self._fit_cont
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
        return " ".join(words), tokens - left

    async def _compose(self, rng: random.Random, target: int) -> tuple[str, int]:
        text, got = await self.span(rng, target - self.fixed, first=True)
        if not text:  # no word fits the room left: the cheapest one, over the target
            w = min(self._firsts, key=self._first.__getitem__)
            return w, self.fixed + self._first[w]
        return text, self.fixed + got

    async def _cut(self, rng: random.Random, target: int, head: str = "") -> tuple[str, int]:
        """A prompt of ``target`` tokens cut from the server's tokenization of ``head`` and random words (the
        closest of a few cuts when no cut is exact), and its count."""
        want = max(1, target - self.fixed)
        lead = head + " " if head else ""
        text = lead + await random_words(rng, want + 8)
        ids = await self.tok.tokenize(text, add_special=False)
        while len(ids) < want:
            text += " " + await random_words(rng, want - len(ids) + 8)
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


@dataclass(frozen=True, slots=True)
class _Counter:
    tok: Tokenizer
    chat: ChatTokenizer | None

    async def __call__(self, text: str) -> int:
        if self.chat is not None:
            return await self.chat.chat_tokens([{"role": "user", "content": text}])
        return len(await self.tok.tokenize(text, add_special=True))


async def learn(tok: Tokenizer, chat: bool, seed: int, meta: dict[str, Any],
                on_step: Step | None) -> Composer:
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
        return Composer(tok, count, fixed, {}, {}, how)
    return Composer(tok, count, fixed, first, cont, how)


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


__all__ = ["ChatTokenizer", "Composer", "Step", "learn", "random_words"]
