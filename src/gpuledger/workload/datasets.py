"""Datasets: where prompts come from, and how long the outputs should be — the files' readers and the
prompt record. ``workload.prompts`` makes a run's prompts from them, one at a time, as the run asks.

- ``builtin``: the prompt set shipped with gpuledger (``gpuledger/data/prompts.jsonl``).
- ``random``: synthetic prompts of controlled token lengths: input and output lengths drawn
  uniformly from ``[len·(1−r), len·(1+r)]`` (``r`` = range ratio) with a fixed seed. Prompts are
  words from a fixed list (``workload.words``); with the server's tokenizer they have the exact token
  count, otherwise the length is an estimate (one word ≈ one token) and the record says so.
- ``jsonl``: one JSON object per line: ``{"prompt": "..."}`` or ``{"messages": [...]}``, optional
  ``"output_len"`` (exact output tokens wanted).
- ``sharegpt``: ShareGPT JSON (a list of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``):
  the first human turn is the prompt, the reply's length is the output length.
- ``random-token-ids`` (the in-process engine's, ``records.spec.TokenIdDataset``): prompts of a fixed
  number of token ids and a forced output length; the engine draws the ids from its vocabulary.
- multi-turn conversations (``--turns``: ``workload.conversations``) and traces (``--trace``:
  ``workload.traces``) have their own readers; their prompts carry a ``Session`` or an arrival time.

The dataset specs are typed in ``records.spec`` (what a run stores). A dataset file is read whole, so it
is bounded: at most ``MAX_DATASET_BYTES``.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records.spec import DATASETS, DEFAULT_INPUT_LEN, DatasetSpec, TokenIdDataset

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetSpec",
    "Prompt",
    "Session",
    "TokenIdDataset",
    "Turn",
    "file_sha256",
    "read_file",
]

DEFAULT_MAX_TOKENS = 256  # cap for natural-length outputs when no output length is asked
DEFAULT_RANDOM_INPUT_LEN = DEFAULT_INPUT_LEN
MAX_DATASET_BYTES = 2 * 1024**3  # a dataset file is read whole (ShareGPT's largest public file: ~0.7 GB)


@dataclass(slots=True)
class Prompt:
    """One prompt. ``output_len`` set = that many output tokens are wanted exactly; ``None`` = the
    model stops by itself (capped at ``DEFAULT_MAX_TOKENS``). ``input_len`` is the prompt's token
    count as the server's tokenizer counts it (None: not known); ``target_len`` the prompt tokens the run
    asked for (the random dataset's drawn length, chat template included; None: the dataset's own)."""

    text: str
    messages: list[dict[str, str]] | None = None
    output_len: int | None = None
    input_len: int | None = None
    target_len: int | None = None
    # A conversation replayed as a session (``--turns``): ``text`` is its first turn's.
    session: Session | None = None
    # A trace's arrival: seconds after the trace's first (``--trace``).
    arrival_s: float | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a session: what the user says, and the output tokens wanted (None: the model's own
    length, capped at ``DEFAULT_MAX_TOKENS``)."""

    text: str
    output_len: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A conversation replayed turn by turn (``workload.conversations``): every request carries ``system``
    first, then the turns so far with the server's replies as returned, then the turn's own text.
    ``conversation``: which of the dataset's conversations it is."""

    turns: tuple[Turn, ...]
    system: tuple[tuple[str, str], ...] = ()
    conversation: int = 0


@dataclass(slots=True)
class Dataset:
    """``n`` prompts made at once (``workload.prompts.build_dataset``) and the dataset's record."""

    prompts: list[Prompt]
    meta: dict[str, Any] = field(default_factory=dict)


def read_builtin() -> list[Prompt]:
    text = resources.files("gpuledger").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(text=str(orjson.loads(line)["prompt"])) for line in text.splitlines() if line.strip()]


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a dataset file's bytes (read in 1 MiB blocks), kept in the run's workload so
    that a repeat (``bench --like``) can prove it read the same file."""
    check_file(path)
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


def check_file(path: Path) -> None:
    """A dataset file must be a regular file of at most ``MAX_DATASET_BYTES`` (a FIFO or ``/dev/zero``
    would never end): ``NotFoundError`` / ``InvalidInputError`` otherwise."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise NotFoundError(f"dataset file not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"cannot read dataset file {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInputError(f"dataset file {path} is not a regular file")
    if st.st_size > MAX_DATASET_BYTES:
        raise InvalidInputError(
            f"dataset file {path} is {st.st_size / 1024**3:.1f} GiB: at most "
            f"{MAX_DATASET_BYTES // 1024**3} GiB is read (the file is read whole)"
        )


def read_file(path: Path) -> bytes:
    """A dataset file's bytes (``check_file`` first); the errors as ``check_file`` raises them."""
    check_file(path)
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise NotFoundError(f"dataset file not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"cannot read dataset file {path}: {exc.strerror or exc}") from exc


def messages_of(value: Any, where: str) -> list[dict[str, str]]:
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
    for lineno, raw in enumerate(read_file(path).splitlines(), 1):
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
            msgs = messages_of(obj["messages"], where)
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
        doc = orjson.loads(read_file(path))
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
