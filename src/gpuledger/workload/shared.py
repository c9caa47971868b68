"""Shared prompt prefixes: the random dataset's prompts in groups that start with the same text, to measure a
server's prefix cache (``--prefix-len P`` or ``--prefix-ratio R``, ``--prefix-groups G``).

Prompt ``i`` belongs to group ``i mod G``. Every prompt of a group starts with the group's prefix — ``P``
tokens of content as the server's tokenizer counts them (``--prefix-ratio R``: ``R × --input-len``), made once
per group from its own seed — followed by words of its own up to the prompt's drawn length. With the server's
tokenizer the prefix and the rest are composed from the learnt counts (``Composer.span``), so the prompt
has its exact length and the prefix exactly ``P`` tokens; when the counts do not add up, the rest is cut
after the prefix with the server's tokenizer. Without a tokenizer, one word is one token (an estimate).

The run records the plan in ``workload.prefix_sharing`` (tokens, groups, how prompts are assigned, the share
of the mean prompt that is shared); the validity verdict's ``prefix_cache`` check reads the repeated prefixes
of the prompts themselves (``workload.prompt_prefixes``), and the server's hit ratio where its /metrics have
one (``--server-metrics``).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gpuledger.errors import UsageError
from gpuledger.records.spec import DEFAULT_INPUT_LEN, DatasetSpec
from gpuledger.records.workloads import prefix_tokens
from gpuledger.workload.composer import Composer, random_words

CACHED_PREFIXES = 4096  # group prefixes kept made (the others are made again from their seed when needed)


@dataclass(frozen=True, slots=True)
class SharedPlan:
    """``tokens`` of content shared by the prompts of each of ``groups`` groups."""

    tokens: int
    groups: int


def shared_plan(spec: DatasetSpec, maker: Composer | None, lowest: int,
                meta: dict[str, Any]) -> SharedPlan | None:
    """The spec's shared prefixes (None: it asks for none), recorded in ``meta``. ``UsageError`` when the
    prefix leaves no room in the shortest prompt once the chat template's tokens (``maker.fixed``) are in."""
    tokens = prefix_tokens(spec, DEFAULT_INPUT_LEN)
    if tokens is None:
        return None
    fixed = maker.fixed if maker is not None else 0
    if tokens + fixed >= lowest:
        raise UsageError(
            f"a shared prefix of {tokens} tokens and the template's {fixed} leave no tokens of their own to "
            f"prompts of {lowest} tokens: give a shorter prefix or longer prompts"
        )
    groups = spec.prefix_groups or 1
    mean = spec.input_len or DEFAULT_INPUT_LEN
    meta["prefix_sharing"] = {
        "prefix_tokens": tokens,
        "groups": groups,
        "assignment": "prompt i starts with the prefix of group i mod groups",
        "shared_share_of_mean_prompt": tokens / mean,
        "method": "prefix composed once per group, the rest of each prompt its own"
        + ("" if maker is not None else " (lengths estimated: one word per token)"),
    }
    return SharedPlan(tokens, groups)


class SharedPrefixes:
    """The prompts of a ``SharedPlan`` (see the module docstring)."""

    def __init__(self, plan: SharedPlan, maker: Composer | None, seed: int) -> None:
        self.plan = plan
        self._maker = maker
        self._seed = seed
        self._cache: OrderedDict[int, tuple[str, int]] = OrderedDict()

    async def prefix(self, group: int) -> tuple[str, int]:
        """Group ``group``'s prefix and its content tokens."""
        hit = self._cache.get(group)
        if hit is not None:
            self._cache.move_to_end(group)
            return hit
        rng = random.Random(f"gpuledger-prefix/{self._seed}/{group}")
        want = self.plan.tokens
        maker = self._maker
        if maker is None:
            made = (await random_words(rng, want), want)
        elif maker.exact:
            text, n = await maker.make(rng, want + maker.fixed)
            made = (text, n - maker.fixed)
        else:
            made = await maker.span(rng, want, first=True)
        self._cache[group] = made
        if len(self._cache) > CACHED_PREFIXES:
            self._cache.popitem(last=False)
        return made

    async def prompt(self, i: int, rng: random.Random, target: int) -> tuple[str, int | None]:
        """Prompt ``i`` of ``target`` tokens (the template's included) and its count (None: estimated)."""
        head, shared = await self.prefix(i % self.plan.groups)
        maker = self._maker
        if maker is None:
            return f"{head} {await random_words(rng, max(1, target - shared))}", None
        if maker.exact:
            return await maker.make(rng, target, head=head)
        tail, own = await maker.span(rng, target - maker.fixed - shared, first=False)
        if not tail:
            return head, maker.fixed + shared
        return f"{head} {tail}", maker.fixed + shared + own


__all__ = ["SharedPlan", "SharedPrefixes", "shared_plan"]
