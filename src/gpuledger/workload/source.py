"""The prompt source a run pulls its prompts from (``Prompts``), one at a time, as it sends them.

A source hands out one prompt per request (``await source.next()``), in an order fixed by the spec and its
seed, and holds only a few ahead: a run of 10^6 requests builds no list of 10^6 prompts. ``prepare(n)`` makes
the first ``n`` before the measured window, in small steps that a signal cuts short. A source may end
(``next()`` returns None): a trace does; the other datasets never do. ``workload.prompts`` opens the source
of a dataset spec.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, Protocol

from gpuledger.workload.composer import Composer, Step
from gpuledger.workload.datasets import Prompt

CHECK_PROMPTS = 3
LOOKAHEAD = 32
SAMPLE_PROMPTS = 256  # prompts whose texts the record's prompt_prefixes is computed over


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
    prefixes are over the first ``SAMPLE_PROMPTS`` handed out. ``limit``: the source ends after that many
    prompts (a trace); None: it never ends."""

    def __init__(self, make: Make, meta: dict[str, Any], *, lookahead: int = 0, pool: list[str] | None = None,
                 label: str = "making prompts", limit: int | None = None) -> None:
        self._make = make
        self.limit = limit
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

    def _within(self, i: int) -> bool:
        return self.limit is None or i < self.limit

    async def next(self) -> Prompt | None:
        i = self._next
        if not self._within(i):
            return None
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
            if j not in self._ready and j not in self._ahead and self._within(j):
                self._ahead[j] = asyncio.ensure_future(self._make(j))

    async def take(self, count: int) -> list[Prompt]:
        """The next ``count`` prompts as a list (for a load process that is handed its prompts)."""
        await self.prepare(count)
        return [p for _ in range(count) if (p := await self.next()) is not None]

    async def prepare(self, count: int, on_step: Step | None = None) -> None:
        """Make prompts ``next()`` will hand out until ``count`` are ready (in small steps)."""
        todo = [j for j in range(self._next, self._next + count) if j not in self._ready and self._within(j)]
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


async def check_counts(maker: Composer, source: Prompts, on_step: Step | None) -> bool:
    """Count the first prompts with the server: True when the composed counts hold; else switch to cutting
    each prompt with the server's tokenizer (the record says why) and return False."""
    if maker.exact:
        return False
    await source.prepare(CHECK_PROMPTS, on_step)
    wrong = []
    for j in range(CHECK_PROMPTS):
        p = source._ready.get(j)
        if p is None:  # a source with fewer prompts (a short trace)
            break
        n = await maker.count(p.text)
        if n != p.input_len:
            wrong.append((p.input_len, n))
    meta = source.meta
    if not wrong:
        meta["input_len_how"] = f"{maker.how}; {CHECK_PROMPTS} of {CHECK_PROMPTS} prompts checked exact"
        return True
    source._ready.clear()
    maker.exact = True
    meta["input_len_how"] = (
        "each prompt cut to length with the server's /tokenize + /detokenize: the learnt word counts "
        f"did not add up ({len(wrong)} of {CHECK_PROMPTS} checked prompts off, e.g. {wrong[0][1]} tokens "
        f"where {wrong[0][0]} were composed)"
    )
    return False
