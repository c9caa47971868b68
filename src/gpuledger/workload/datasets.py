"""Datasets: where prompts come from, and how long the outputs should be.

- ``builtin``: the prompt set shipped with gpuledger (``gpuledger/data/prompts.jsonl``).
- ``random``: synthetic prompts of controlled token lengths: input and output lengths drawn
  uniformly from ``[len·(1−r), len·(1+r)]`` (``r`` = range ratio) with a fixed seed. Prompts are
  words from a fixed list; when the server has a tokenizer endpoint each prompt is cut to the exact
  token count, otherwise the length is an estimate (one word ≈ one token) and the record says so.
- ``jsonl``: one JSON object per line: ``{"prompt": "..."}`` or ``{"messages": [...]}``, optional
  ``"output_len"`` (exact output tokens wanted).
- ``sharegpt``: ShareGPT JSON (a list of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``):
  the first human turn is the prompt, the reply's length is the output length.
- ``random-token-ids`` (the in-process engine's, ``records.spec.TokenIdDataset``): prompts of a fixed
  number of token ids and a forced output length; the engine draws the ids from its vocabulary.

The dataset specs are typed in ``records.spec`` (what a run stores); ``build_dataset`` finds the builder
registered for the spec's type (``DATASET_BUILDERS``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from gpuledger.errors import EngineError, InvalidInputError, NotFoundError
from gpuledger.records.spec import DATASETS, DatasetSpec, TokenIdDataset
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.words import WORDS

__all__ = ["DATASETS", "Dataset", "DatasetSpec", "Prompt", "TokenIdDataset", "build_dataset", "file_sha256"]

DEFAULT_MAX_TOKENS = 256  # cap for natural-length outputs when no output length is asked
DEFAULT_RANDOM_INPUT_LEN = 128
DEFAULT_RANDOM_OUTPUT_LEN = 128
_TOKENIZE_PARALLEL = 8


@dataclass(slots=True)
class Prompt:
    """One prompt. ``output_len`` set = that many output tokens are wanted exactly; ``None`` = the
    model stops by itself (capped at ``DEFAULT_MAX_TOKENS``). ``input_len`` is the prompt's token
    count when it was measured with the server's tokenizer."""

    text: str
    messages: list[dict[str, str]] | None = None
    output_len: int | None = None
    input_len: int | None = None


@dataclass(slots=True)
class Dataset:
    prompts: list[Prompt]
    meta: dict[str, Any] = field(default_factory=dict)


def _read_builtin() -> list[Prompt]:
    text = resources.files("gpuledger").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(text=str(orjson.loads(line)["prompt"])) for line in text.splitlines() if line.strip()]


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a dataset file's bytes (read in 1 MiB blocks), kept in the run's workload so
    that a repeat (``bench --like``) can prove it read the same file."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError as exc:
        raise NotFoundError(f"dataset file not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"cannot read dataset file {path}: {exc.strerror or exc}") from exc
    return "sha256:" + h.hexdigest()


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise NotFoundError(f"dataset file not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"cannot read dataset file {path}: {exc.strerror or exc}") from exc


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise InvalidInputError(f'{where}: "messages" must be a non-empty list')
    out = []
    for m in value:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise InvalidInputError(f'{where}: each message needs string "role" and "content"')
        out.append({"role": m["role"], "content": m["content"]})
    return out


def read_jsonl(path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    for lineno, raw in enumerate(_read_file(path).splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"{where}: not valid JSON ({exc})") from exc
        if isinstance(obj, str):
            obj = {"prompt": obj}
        if not isinstance(obj, dict):
            raise InvalidInputError(f'{where}: expected an object with "prompt" or "messages"')
        out_len = obj.get("output_len", obj.get("max_tokens"))
        if out_len is not None and (not isinstance(out_len, int) or isinstance(out_len, bool) or out_len < 1):
            raise InvalidInputError(f'{where}: "output_len" must be a positive integer')
        if "messages" in obj:
            msgs = _messages(obj["messages"], where)
            prompts.append(
                Prompt(text="\n".join(m["content"] for m in msgs), messages=msgs, output_len=out_len)
            )
        elif isinstance(obj.get("prompt"), str) and obj["prompt"]:
            prompts.append(Prompt(text=obj["prompt"], output_len=out_len))
        else:
            raise InvalidInputError(f'{where}: expected a non-empty "prompt" string or "messages"')
    if not prompts:
        raise InvalidInputError(f"{path}: no prompts in the file")
    return prompts


def read_sharegpt(path: Path) -> list[tuple[str, str]]:
    """(first human turn, first reply after it) pairs; conversations without a reply are skipped."""
    try:
        doc = orjson.loads(_read_file(path))
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, list):
        raise InvalidInputError(f"{path}: a ShareGPT file is a JSON list of conversations")
    pairs: list[tuple[str, str]] = []
    for conv in doc:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        human: str | None = None
        for t in turns:
            if not isinstance(t, dict) or not isinstance(t.get("value"), str):
                continue
            who = t.get("from")
            if human is None and who in ("human", "user"):
                human = t["value"]
            elif human is not None and who in ("gpt", "assistant", "chatgpt", "bard"):
                if human.strip() and t["value"].strip():
                    pairs.append((human, t["value"]))
                break
    if not pairs:
        raise InvalidInputError(f"{path}: no conversation with a human turn followed by a reply")
    return pairs


def _lengths(rng: random.Random, n: int, base: int, ratio: float) -> list[int]:
    lo = max(1, int(base * (1 - ratio)))
    hi = max(lo, int(base * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def _exact_prompt(tok: Tokenizer, rng: random.Random, target: int, n_special: int) -> tuple[str, int]:
    """A prompt of exactly ``target`` tokens (special tokens included) when the tokenizer allows it;
    returns the text and its measured count."""
    want = max(1, target - n_special)
    text = _words(rng, want + 8)
    ids = await tok.tokenize(text, add_special=False)
    while len(ids) < want:
        text += " " + _words(rng, want - len(ids) + 8)
        ids = await tok.tokenize(text, add_special=False)
    cut = want
    best_text, best_n = text, len(ids) + n_special
    for _ in range(4):
        candidate = await tok.detokenize(ids[:cut])
        n = len(await tok.tokenize(candidate, add_special=True))
        if abs(n - target) < abs(best_n - target):
            best_text, best_n = candidate, n
        if n == target:
            break
        cut = max(1, cut + (target - n))
    return best_text, best_n


async def build_dataset(
    spec: DatasetSpec | TokenIdDataset, n: int, tokenizer: Tokenizer | None, *, chat: bool = False
) -> Dataset:
    """``n`` prompts of the dataset ``spec`` describes (the builder registered for its type)."""
    return await DATASET_BUILDERS[type(spec)](spec, n, tokenizer, chat)


TOKEN_ID_PROMPTS = "token ids drawn uniformly from the vocabulary, fixed seed, special ids avoided"


async def _token_ids(spec: DatasetSpec | TokenIdDataset, n: int, tokenizer: Tokenizer | None,
                     chat: bool) -> Dataset:
    """``n`` prompts of ``input_tokens`` token ids each, asking for exactly ``output_tokens``; the engine
    draws the ids (seeded) from its vocabulary, so the prompts here carry the lengths only."""
    assert isinstance(spec, TokenIdDataset)
    prompts = [Prompt(text="", output_len=spec.output_tokens, input_len=spec.input_tokens) for _ in range(n)]
    meta = {
        "dataset": "random-token-ids",
        "input_tokens": spec.input_tokens,
        "output_tokens": spec.output_tokens,
        "fixed_output": True,
        "num_requests": spec.count,
        "seed": spec.seed,
        "prompts": TOKEN_ID_PROMPTS,
    }
    return Dataset(prompts, meta)


async def _text(spec: DatasetSpec | TokenIdDataset, n: int, tokenizer: Tokenizer | None,
                chat: bool) -> Dataset:
    """``n`` text prompts (cycling through the dataset in a seeded order when it has fewer)."""
    assert isinstance(spec, DatasetSpec)
    rng = random.Random(spec.seed)
    meta: dict[str, Any] = {"dataset": spec.name, "seed": spec.seed}
    if spec.path is not None:
        meta["path"] = str(spec.path)
        meta["sha256"] = file_sha256(spec.path)
    if spec.name == "random":
        in_len = spec.input_len or DEFAULT_RANDOM_INPUT_LEN
        out_len = spec.output_len or DEFAULT_RANDOM_OUTPUT_LEN
        ins = _lengths(rng, n, in_len, spec.range_ratio)
        outs = _lengths(rng, n, out_len, spec.range_ratio)
        meta.update(input_len=in_len, output_len=out_len, range_ratio=spec.range_ratio)
        prompts: list[Prompt] = []
        if tokenizer is not None and not chat:
            try:
                n_special = len(await tokenizer.tokenize("", add_special=True))
                sem = asyncio.Semaphore(_TOKENIZE_PARALLEL)
                seeds = [rng.getrandbits(64) for _ in range(n)]

                async def one(i: int) -> Prompt:
                    async with sem:
                        text, got = await _exact_prompt(tokenizer, random.Random(seeds[i]), ins[i], n_special)
                    return Prompt(text=text, output_len=outs[i], input_len=got)

                prompts = list(await asyncio.gather(*(one(i) for i in range(n))))
                exact = sum(1 for p, want in zip(prompts, ins, strict=True) if p.input_len == want)
                meta["input_len_method"] = "server_tokenizer"
                meta["input_len_exact_ratio"] = exact / n if n else None
            except EngineError as exc:
                prompts = []
                meta["input_len_note"] = f"server tokenizer failed ({exc.message}); lengths estimated"
        if not prompts:
            prompts = [Prompt(text=_words(rng, k), output_len=o) for k, o in zip(ins, outs, strict=True)]
            meta["input_len_method"] = "estimate: one word per token" + (
                " (chat template tokens not counted)" if chat else ""
            )
        return Dataset(prompts, meta)

    if spec.name == "builtin":
        base = _read_builtin()
    elif spec.name == "jsonl":
        assert spec.path is not None
        base = read_jsonl(spec.path)
    else:
        assert spec.path is not None
        pairs = read_sharegpt(spec.path)
        base = []
        if tokenizer is not None:
            try:
                sem = asyncio.Semaphore(_TOKENIZE_PARALLEL)

                async def count(reply: str) -> int:
                    async with sem:
                        return max(1, len(await tokenizer.tokenize(reply, add_special=False)))

                lens = await asyncio.gather(*(count(r) for _, r in pairs))
                base = [Prompt(text=h, output_len=k) for (h, _), k in zip(pairs, lens, strict=True)]
                meta["output_len_method"] = "server_tokenizer"
            except EngineError as exc:
                base = []
                meta["output_len_note"] = f"server tokenizer failed ({exc.message}); lengths estimated"
        if not base:
            base = [Prompt(text=h, output_len=max(1, round(len(r.split()) * 1.3))) for h, r in pairs]
            meta["output_len_method"] = "estimate: 1.3 tokens per word of the recorded reply"
        meta["conversations"] = len(pairs)
    order = list(range(len(base)))
    rng.shuffle(order)
    prompts = []
    for i in range(n):
        p = base[order[i % len(base)]]
        want = spec.output_len if spec.output_len is not None else p.output_len
        prompts.append(Prompt(text=p.text, messages=p.messages, output_len=want, input_len=p.input_len))
    meta["distinct_prompts"] = len(base)
    if spec.output_len is not None:
        meta["output_len"] = spec.output_len
    return Dataset(prompts, meta)


Builder = Callable[[DatasetSpec | TokenIdDataset, int, Tokenizer | None, bool], Awaitable[Dataset]]
DATASET_BUILDERS: dict[type[DatasetSpec | TokenIdDataset], Builder] = {
    DatasetSpec: _text,
    TokenIdDataset: _token_ids,
}
