"""The tokenizer seam shared by two sibling layers: an engine *provides* one (a server's ``/tokenize``,
``Engine.tokenizer()``), a workload *uses* one (prompts of an exact token length, ``build_dataset``). It
lives below both so that neither imports the other."""

from __future__ import annotations

from typing import Protocol


class Tokenizer(Protocol):
    """A server's own tokenizer, reached over HTTP (vLLM and llama.cpp ``/tokenize``)."""

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]: ...

    async def detokenize(self, ids: list[int]) -> str: ...
