"""Training data from a file: plain text (``.txt``, any other name) or JSONL (``.jsonl``: one JSON object per
line with a ``"text"`` string), tokenised with the model folder's tokenizer
(``AutoTokenizer.from_pretrained``), the documents joined with the tokenizer's end-of-sequence token.

The file is read in order only as far as the run needs (every rank's micro-batches of the warm-up and the
measured steps): a large corpus costs the tokens it trains on, not its size. A file shorter than the run
is reused from its start (the run records how many times: ``epochs``). A line that is not a JSON object
with a text is counted and the first one reported; a file with no text at all is refused (exit 4).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.engines.torch.imports import import_torch, import_transformers
from gpuledger.errors import InvalidInputError, NotFoundError

CHUNK_CHARS = 1 << 20  # plain text is tokenised a megabyte at a time, cut at a line end
MAX_LINE_BYTES = 64 << 20


@dataclass(slots=True)
class FileTokens:
    """The token ids read (a 1-D CPU tensor), what they came from and what the run makes of them."""

    ids: Any
    path: str
    format: str
    sha256: str
    tokenizer: str
    epochs: float
    skipped_lines: int
    first_problem: str | None


def _format(path: Path) -> str:
    return "jsonl" if path.suffix.lower() in (".jsonl", ".ndjson") else "text"


def _texts(path: Path, fmt: str, problems: list[str]) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        if fmt == "text":
            while chunk := f.read(CHUNK_CHARS):
                rest = f.readline()  # finish the line: a token is not cut in two
                yield chunk + rest
            return
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line) if len(line) <= MAX_LINE_BYTES else None
            except json.JSONDecodeError as exc:
                problems.append(f"line {number}: not JSON ({exc.msg})")
                continue
            text = doc.get("text") if isinstance(doc, dict) else None
            if not isinstance(text, str) or not text:
                problems.append(f'line {number}: no "text" string')
                continue
            yield text


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def load_tokens(path_text: str, model_folder: str, needed: int, vocab: int) -> FileTokens:
    """Up to ``needed`` token ids of the file (module docstring); ``NotFoundError`` (exit 3) for a missing
    file, ``InvalidInputError`` (exit 4) for one without text or with ids the model's vocabulary lacks."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise NotFoundError(f"--data {path_text}: no such file")
    transformers = import_transformers()
    torch = import_torch()
    try:
        tok = transformers.AutoTokenizer.from_pretrained(model_folder)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(
            f"--data needs the model folder's tokenizer, and {model_folder} has none usable: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
        ) from exc
    fmt = _format(path)
    eos = tok.eos_token_id if isinstance(tok.eos_token_id, int) else None
    problems: list[str] = []
    ids: list[int] = []
    for text in _texts(path, fmt, problems):
        ids.extend(int(x) for x in tok(text, add_special_tokens=False)["input_ids"])
        if eos is not None and fmt == "jsonl":
            ids.append(eos)
        if len(ids) >= needed:
            break
    if not ids:
        why = f"; the first problem: {problems[0]}" if problems else ""
        raise InvalidInputError(f"--data {path_text}: no text to train on{why}")
    top = max(ids)
    if top >= vocab:
        raise InvalidInputError(
            f"--data {path_text}: the tokenizer of {model_folder} made id {top}, beyond the model's "
            "vocabulary "
            f"of {vocab}"
        )
    kept = ids[:needed]
    return FileTokens(
        ids=torch.tensor(kept, dtype=torch.long),
        path=str(path.resolve()),
        format=fmt,
        sha256=sha256_of(path),
        tokenizer=str(getattr(tok, "name_or_path", model_folder) or model_folder),
        epochs=needed / len(kept),
        skipped_lines=len(problems),
        first_problem=problems[0] if problems else None,
    )
