"""Multi-turn conversations (``--dataset sharegpt|jsonl --turns all|N``): each conversation is a session whose
turns are sent one after the other, every request carrying the whole history with the server's replies as
returned (``bench/sessions.py`` sends them).

Files:

- ``sharegpt``: ShareGPT JSON, ``[{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}]``.
  Every human turn is a turn of the session; the recorded reply after it gives its output length; a system
  message before the first human turn is sent first in every request.
- ``jsonl``: one conversation per line, ``{"conversation": [{"role": "system"|"user"|"assistant", "content":
  ...}, ...]}`` (``"messages"`` is read the same way when ``--turns`` is given). Every user message is a turn;
  it may carry ``"output_len"`` (exact output tokens wanted), else the recorded assistant reply after it
  gives the length; a top-level ``"output_len"`` applies to every turn of the line.

``--turns N`` replays the first N turns of each conversation (fewer when it has fewer), ``--turns all`` all
of them; ``--output-len`` forces every turn's length. Recorded replies are counted with the server's
tokenizer as each conversation is first used (``Replies``), else estimated at 1.3 tokens per word; a turn
without a recorded reply or a length of its own lets the model stop by itself. Conversations are handed out
in a seeded order and cycled, like the file datasets' prompts.

The record: ``workload.sessions`` (turns asked, conversations, turns per conversation, think time, how the
history is built); ``workload.prompt_prefixes`` is computed over the requests as sent (each turn repeats the
history before it: what a prefix cache can reuse).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson

from gpuledger.errors import EngineError, InvalidInputError
from gpuledger.records.spec import DatasetSpec
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.composer import TOKENIZE_PARALLEL
from gpuledger.workload.datasets import Prompt, Session, Turn, file_sha256, messages_of, read_file
from gpuledger.workload.source import LOOKAHEAD, SAMPLE_PROMPTS, Prompts

TOKENS_PER_WORD = 1.3  # the estimate of a recorded reply's length without the server's tokenizer
HISTORY = "each request carries the session's earlier turns with the server's replies as returned"


class Conversation:
    """A conversation as read: the system messages, and each turn's text, recorded reply and own length."""

    __slots__ = ("system", "turns")

    def __init__(self, system: list[tuple[str, str]],
                 turns: list[tuple[str, str | None, int | None]]) -> None:
        self.system = system
        self.turns = turns


class Replies:
    """Output lengths from recorded replies: reply k counted by the server's tokenizer once, when it is first
    used (estimated, and noted, where the tokenizer fails)."""

    def __init__(self, tokenizer: Tokenizer, replies: list[str], first: int) -> None:
        self._tok = tokenizer
        self._replies = replies
        self._sem = asyncio.Semaphore(TOKENIZE_PARALLEL)
        self._counted: dict[int, int] = {0: first}
        self.notes: list[str] = []

    @classmethod
    async def open(cls, tokenizer: Tokenizer, replies: list[str], meta: dict[str, Any]) -> Replies | None:
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
                    n = estimate(self._replies[k])
            self._counted[k] = n
        return self._counted[k]


def estimate(reply: str) -> int:
    """A recorded reply's tokens estimated from its words."""
    return max(1, round(len(reply.split()) * TOKENS_PER_WORD))


# -------------------------------------------------------------------------------------------- readers

_USER = ("human", "user")
_REPLY = ("gpt", "assistant", "chatgpt", "bard", "model")


def read_sharegpt_conversations(path: Path) -> list[Conversation]:
    """Every conversation with at least one human turn (see the module docstring)."""
    try:
        doc = orjson.loads(read_file(path))
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, list):
        raise InvalidInputError(f"{path}: a ShareGPT file is a JSON list of conversations")
    out = []
    for conv in doc:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        parsed = _turns(
            [(t.get("from"), t.get("value")) for t in turns if isinstance(t, dict)], "system", _USER, _REPLY
        )
        if parsed is not None:
            out.append(parsed)
    if not out:
        raise InvalidInputError(f"{path}: no conversation with a human turn")
    return out


def read_jsonl_conversations(path: Path) -> list[Conversation]:
    """One conversation per line (see the module docstring)."""
    out = []
    for lineno, raw in enumerate(read_file(path).splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"{where}: not valid JSON ({exc})") from exc
        value = obj.get("conversation", obj.get("messages")) if isinstance(obj, dict) else None
        if value is None:
            raise InvalidInputError(f'{where}: --turns reads a "conversation" (or "messages") list per line')
        every = _length(obj.get("output_len"), where)
        messages = messages_of(value, where)
        own = [_length(m.get("output_len"), where) if isinstance(m, dict) else None for m in value]
        parsed = _turns([(m["role"], m["content"]) for m in messages], "system", ("user",), ("assistant",),
                        [every if o is None else o for o in own])
        if parsed is None:
            raise InvalidInputError(f"{where}: the conversation has no user message")
        out.append(parsed)
    if not out:
        raise InvalidInputError(f"{path}: no conversations in the file")
    return out


def _length(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise InvalidInputError(f'{where}: "output_len" must be a positive integer')
    return value


def _turns(messages: list[tuple[Any, Any]], system: str, users: tuple[str, ...], replies: tuple[str, ...],
           lengths: list[int | None] | None = None) -> Conversation | None:
    """The conversation of ``(role, text)`` messages: system messages before the first user turn, each user
    message a turn with the reply that follows it (None when none does) and its own length."""
    sys_msgs: list[tuple[str, str]] = []
    turns: list[tuple[str, str | None, int | None]] = []
    for k, (role, text) in enumerate(messages):
        if not isinstance(text, str) or not text.strip():
            continue
        own = lengths[k] if lengths is not None else None
        if role == system and not turns:
            sys_msgs.append(("system", text))
        elif role in users:
            turns.append((text, None, own))
        elif role in replies and turns and turns[-1][1] is None:
            turns[-1] = (turns[-1][0], text, turns[-1][2])
    return Conversation(sys_msgs, turns) if turns else None


# --------------------------------------------------------------------------------------------- source


class SessionPrompts(Prompts):
    """Conversations as sessions; ``sent`` keeps the first requests' texts as they were sent (history
    included), which the record's prompt prefixes are computed over."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sent: list[str] = []

    def sent(self, messages: list[dict[str, str]]) -> None:
        if len(self._sent) < SAMPLE_PROMPTS:
            self._sent.append("\n".join(m["content"] for m in messages))

    def sample_texts(self) -> tuple[list[str], bool]:
        return list(self._sent), True


async def open_sessions(spec: DatasetSpec, tokenizer: Tokenizer | None) -> SessionPrompts:
    """The source of ``spec``'s conversations as sessions (the module docstring)."""
    assert spec.path is not None and spec.turns is not None
    convs = (read_sharegpt_conversations(spec.path) if spec.name == "sharegpt"
             else read_jsonl_conversations(spec.path))
    keep = None if spec.turns == "all" else spec.turns
    for c in convs:
        c.turns = c.turns[:keep]
    meta: dict[str, Any] = {"dataset": spec.name, "seed": spec.seed, "path": str(spec.path),
                            "sha256": file_sha256(spec.path), "distinct_prompts": len(convs)}
    lengths = [len(c.turns) for c in convs]
    meta["sessions"] = {
        "turns": spec.turns,
        "conversations": len(convs),
        "turns_total": sum(lengths),
        "turns_per_conversation_mean": sum(lengths) / len(lengths),
        "turns_per_conversation_max": max(lengths),
        "think_time_s": spec.think_time_s or 0.0,
        "history": HISTORY,
        "unit_of_concurrency": "session",
    }
    # Recorded replies, numbered across the file, for the turns that need one for their length.
    flat: list[str] = []
    index: list[list[int]] = []
    for c in convs:
        index.append([])
        for _text, reply, own in c.turns:
            if reply is not None and own is None:
                index[-1].append(len(flat))
                flat.append(reply)
            else:
                index[-1].append(-1)
    replies: Replies | None = None
    if spec.output_len is not None:
        meta["output_len"] = spec.output_len
    elif flat:
        meta["output_len_method"] = f"estimate: {TOKENS_PER_WORD:g} tokens per word of the recorded reply"
        if tokenizer is not None:
            replies = await Replies.open(tokenizer, flat, meta)
    order = list(range(len(convs)))
    random.Random(spec.seed).shuffle(order)

    async def length(k: int, t: int) -> int | None:
        if spec.output_len is not None:
            return spec.output_len
        text, reply, own = convs[k].turns[t]
        if own is not None or reply is None:
            return own
        j = index[k][t]
        return await replies.count(j) if replies is not None else estimate(reply)

    async def make(i: int) -> Prompt:
        k = order[i % len(convs)]
        conv = convs[k]
        outs = await asyncio.gather(*(length(k, t) for t in range(len(conv.turns))))
        session = Session(
            turns=tuple(Turn(text, out) for (text, _r, _o), out in zip(conv.turns, outs, strict=True)),
            system=tuple(conv.system),
            conversation=k,
        )
        return Prompt(text=session.turns[0].text, session=session)

    source = SessionPrompts(make, meta, lookahead=LOOKAHEAD if replies is not None else 0,
                            label="counting the replies' tokens")
    if replies is not None:
        source.notes = replies.notes
    return source


__all__ = [
    "Conversation",
    "Replies",
    "SessionPrompts",
    "open_sessions",
    "read_jsonl_conversations",
    "read_sharegpt_conversations",
]
