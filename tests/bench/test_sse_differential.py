"""The SSE parser gives exactly what a plain reading of the documented token rules gives, however the
stream is cut into network reads.

The rules include where a stream ends and what bounds it (``gpuledger.engines.sse``): nothing is read
after ``[DONE]``, no content is counted after the choice's ``finish_reason`` (its usage still is), a
cumulative ``completion_tokens`` that is not an integer, goes down or passes ``2 × max_tokens + 64`` is
not believed, and a line over the line cap, more content chunks than ``2 × max_tokens + 64`` or more
bytes than the byte bound fail the request.

``OpenAIStream`` is the client's hot path and is written for speed. These tests hold it to a reference
written here the plain way — split the bytes into lines, fully parse every ``data:`` payload with
orjson, apply the token rules of ``gpuledger.engines.sse`` — on generated streams of every shape the
servers send (completions and chat, role preambles, empty texts, reasoning and tool-call deltas,
continuous usage, usage-only final chunks, errors, malformed and cut streams, CRLF framing, comments,
spaced JSON, escapes) and on the recorded server streams, split into reads every which way.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuledger.engines.sse import OpenAIStream

# ------------------------------------------------------------------------------------------------
# The reference: every event fully parsed, the documented rules applied one by one
# ------------------------------------------------------------------------------------------------


def _clip(b: bytes, n: int = 120) -> str:
    s = b[:n].decode("utf-8", "replace")
    return s + ("…" if len(b) > n else "")


def _error_text(obj: dict[str, Any]) -> str:
    err = obj.get("error", obj)
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or orjson.dumps(err).decode()
        code = err.get("code") or err.get("type")
        return f"{msg} ({code})" if code else str(msg)
    return str(err)


@dataclass
class Reference:
    """One stream, parsed line by line with a full ``orjson.loads`` of every payload."""

    chat: bool
    max_tokens: int | None = None
    max_line: int = 8 * 1024 * 1024
    max_bytes: int | None = None
    buf: bytes = b""
    t: float = 0.0
    received: int = 0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    continuous: bool = False
    last_ct: int = 0
    empty_finish_at: int = -1
    done: bool = False
    stopped: bool = False
    error: str | None = None
    finish_reason: str | None = None
    fingerprint: str | None = None
    texts: list[str] = field(default_factory=list)
    reasoning_texts: list[str] = field(default_factory=list)
    # Each timed chunk's (came from a reasoning field, its text): what the reasoning rules read.
    chunk_kinds: list[tuple[bool, Any]] = field(default_factory=list)
    timings: Any = None
    usage: Any = None
    usage_note: str | None = None

    @property
    def most_chunks(self) -> int:
        return 2**31 - 1 if self.max_tokens is None else 2 * self.max_tokens + 64

    @property
    def most_bytes(self) -> int:
        if self.max_bytes is not None:
            return self.max_bytes
        return 2**62 if self.max_tokens is None else self.max_line + 4096 * self.most_chunks

    @property
    def tail(self) -> bool:
        return self.stopped or self.finish_reason is not None

    def fail(self, error: str) -> None:
        self.error = error
        self.stopped = True

    def feed(self, data: bytes, t: float) -> int:
        if self.stopped:  # after [DONE], an error or a bound nothing more is read
            return 0
        self.t = t
        self.received += len(data)
        if self.received > self.most_bytes:
            self.fail(f"endless stream: over {self.most_bytes} bytes for max_tokens={self.max_tokens}")
            return 0
        *lines, self.buf = (self.buf + data).split(b"\n")
        n = 0
        for line in lines:
            if len(line) > self.max_line:
                self.fail(f"SSE line over {self.max_line} bytes: the stream was stopped")
                return n
            counted = self.event(line, t)
            if counted is None:  # an error, or the end: the rest of the read is not read
                return n
            n += counted
        if len(self.buf) > self.max_line:
            self.fail(f"SSE line over {self.max_line} bytes: the stream was stopped")
        return n

    def event(self, line: bytes, t: float) -> int | None:
        """The chunks one line counts (0 or 1), or None when it is an error or the stream's end."""
        if not line.startswith(b"data:"):
            return 0  # blank lines, comments, "event:" and "id:" lines
        payload = line[5:]
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if payload.strip() == b"[DONE]":
                self.done = self.stopped = True
                return None
            self.fail(f"malformed JSON in stream: {_clip(payload.strip())!r}")
            return None
        if type(obj) is not dict:
            self.fail(f"unexpected stream payload: {_clip(payload.strip())!r}")
            return None
        try:
            return self.fields(obj, t)
        except (AttributeError, TypeError, KeyError, IndexError):
            self.fail(f"malformed stream event: {_clip(payload.strip())!r}")
            return None

    def count_chunk(self, t: float, tokens: int | None, thought: bool, text: Any) -> bool:
        """Record one content chunk; False (and the error) when it is one too many."""
        if len(self.chunk_times) >= self.most_chunks:
            bound = self.most_chunks
            self.fail(f"endless stream: over {bound} content chunks for max_tokens={self.max_tokens}")
            return False
        self.chunk_times.append(t)
        self.chunk_kinds.append((thought, text))
        if tokens is not None:
            self.chunk_tokens.append(tokens)
        return True

    def reasoning(self) -> tuple[int, int | None, int | None]:
        """(reasoning tokens, first reasoning chunk, first answer chunk) by the documented rules, read off
        the timed chunks at the end: reasoning-field chunks; the content up to and including the first
        ``</think>``, or all of it when its first non-blank text opens ``<think>``; the rest is answer."""
        content = [i for i, (thought, _) in enumerate(self.chunk_kinds) if not thought]
        texts = [self.chunk_kinds[i][1] or "" for i in content]
        close = next((j for j, t in enumerate(texts) if "</think>" in t), None)
        if close is not None:
            think = content[: close + 1]
        else:
            first = next((t for t in texts if t.strip()), "")
            think = content if first.lstrip().startswith("<think>") else []
        reasoning = sorted({i for i, (thought, _) in enumerate(self.chunk_kinds) if thought} | set(think))
        answer = [i for i in content if i not in set(think)]
        tokens = [self.chunk_tokens[i] if self.continuous else 1 for i in reasoning]
        return sum(tokens), (reasoning[0] if reasoning else None), (answer[0] if answer else None)

    def fields(self, obj: dict[str, Any], t: float) -> int | None:
        choices = obj.get("choices")
        usage = obj.get("usage")
        if usage is not None and type(usage) is not dict:
            raise TypeError("usage is not an object")
        if not choices:
            if "error" in obj or obj.get("object") == "error":
                self.fail(f"server error event: {_error_text(obj)}")
                return None
            self.closing(obj, usage)
            return 0
        if self.finish_reason is not None:  # after the finish: no content, only totals and details
            self.closing(obj, usage)
            return 0
        choice = choices[0]
        finish = choice.get("finish_reason")
        # The text of the chunk, by the documented rule.
        text: Any = None
        role = thought = False
        if self.chat:
            delta = choice.get("delta")
            if delta:
                text = delta.get("content")
                if text is None:
                    text = delta.get("reasoning_content") or delta.get("reasoning")
                    thought = text is not None
                if text is None and delta.get("tool_calls"):
                    text = ""
                role = "role" in delta
        else:
            text = choice.get("text")
        if text is not None and type(text) is not str:
            raise TypeError("the chunk's text is not a string")
        if text:
            (self.reasoning_texts if thought else self.texts).append(text)
        counted = 0
        by_usage = False
        cumulative = usage and (finish is None or self.continuous) and "completion_tokens" in usage
        if cumulative and self.usage_note is None:
            ct = usage["completion_tokens"]
            if type(ct) is not int or ct < self.last_ct or ct > self.most_chunks:
                self.distrust(ct)
            else:
                by_usage = True
                if not self.continuous:  # cumulative usage from here on: the chunks before were 1 each
                    self.continuous = True
                    self.chunk_tokens = [1] * len(self.chunk_times)
                tokens = ct - self.last_ct
                self.last_ct = ct
                if tokens > 0:
                    if not self.count_chunk(t, tokens, thought, text):
                        return None
                    counted = 1
        if not by_usage and text is not None and (text != "" or not role):
            if not self.count_chunk(t, 1 if self.continuous else None, thought, text):
                return None
            counted = 1
            if text == "" and finish is not None:
                self.empty_finish_at = len(self.chunk_times)
        if finish is None:
            if usage:
                self.usage = usage
            return counted
        self.finish_reason = finish
        self.closing(obj, usage)
        return counted

    def distrust(self, ct: Any) -> None:
        shown = repr(ct) if len(repr(ct)) <= 40 else repr(ct)[:40] + "…"
        if type(ct) is not int:
            why = "is not an integer"
        elif ct < self.last_ct:
            why = f"went down (from {self.last_ct})"
        else:
            why = f"is over {self.most_chunks} (2 × max_tokens + 64, max_tokens={self.max_tokens})"
        self.usage_note = (
            f"the server's per-chunk usage was not believed: completion_tokens {shown} {why}; "
            "its counts were not used"
        )
        if self.continuous:
            self.continuous = False
            self.chunk_tokens = []

    def closing(self, obj: dict[str, Any], usage: Any) -> None:
        if usage:
            self.usage = usage
        if self.fingerprint is None and obj.get("system_fingerprint"):
            self.fingerprint = obj["system_fingerprint"]
        if obj.get("timings"):
            self.timings = obj["timings"]

    def finish(self) -> None:
        if self.buf and not self.stopped:
            rest, self.buf = self.buf, b""
            self.event(rest, self.t)
        if self.error is None and not self.done and self.finish_reason is None:
            self.error = "stream ended before completion (no finish_reason and no [DONE])"
        usage = self.usage
        # an empty finish chunk is no token when the final usage shows it carried none, or when that usage
        # cannot be believed (not an integer in 0 .. the chunk bound, or per-chunk usage distrusted)
        told = usage.get("completion_tokens") if usage is not None else None
        trusted = type(told) is int and 0 <= told <= self.most_chunks and self.usage_note is None
        believed = told if trusted else None
        if (
            self.empty_finish_at == len(self.chunk_times)
            and not self.continuous
            and usage is not None
            and "completion_tokens" in usage
            and (believed is None or len(self.chunk_times) > believed)
        ):
            self.chunk_times.pop()
            self.chunk_kinds.pop()


# ------------------------------------------------------------------------------------------------
# Running both on the same reads
# ------------------------------------------------------------------------------------------------


def outcome(parser: Any, reads: list[bytes], keep_feeding: bool) -> dict[str, Any]:
    """Feed the reads (read i arrives at time i + 1) as the client does — stopping at an error
    unless ``keep_feeding`` — then finish; everything a caller can observe."""
    per_read: list[int] = []
    for i, data in enumerate(reads):  # neither side may raise: a malformed event is the request's error
        per_read.append(parser.feed(data, float(i + 1)))
        if parser.error is not None and not keep_feeding:
            break
    parser.finish()
    if isinstance(parser, Reference):
        reasoning, first_reasoning, first_answer = parser.reasoning()
    else:
        reasoning = parser.reasoning_counted
        first_reasoning, first_answer = parser.first_reasoning_chunk, parser.first_answer_chunk
    return {
        "per_read": per_read,
        "chunk_times": parser.chunk_times,
        "chunk_tokens": parser.chunk_tokens,
        "continuous": parser.continuous,
        "texts": parser.texts,
        "reasoning_texts": parser.reasoning_texts,
        "output_chars": sum(map(len, parser.texts)) + sum(map(len, parser.reasoning_texts)),
        "reasoning_tokens": reasoning,
        "first_reasoning_chunk": first_reasoning,
        "first_answer_chunk": first_answer,
        "done": parser.done,
        "error": parser.error,
        "finish_reason": parser.finish_reason,
        "fingerprint": parser.fingerprint,
        "timings": parser.timings,
        "usage": parser.usage,
        "usage_note": parser.usage_note,
        "tail": parser.tail,
        "stopped": parser.stopped,
        "tokens_counted": sum(parser.chunk_tokens) if parser.continuous else len(parser.chunk_times),
    }


@dataclass
class Limits:
    """The bounds both parsers get (None: the parser's defaults)."""

    max_tokens: int | None = None
    max_line: int | None = None
    max_bytes: int | None = None

    def reference(self, chat: bool) -> Reference:
        ref = Reference(chat, self.max_tokens, max_bytes=self.max_bytes)
        if self.max_line is not None:
            ref.max_line = self.max_line
        return ref

    def parser(self, chat: bool) -> OpenAIStream:
        if self.max_line is None:
            return OpenAIStream(chat, self.max_tokens, max_bytes=self.max_bytes)
        return OpenAIStream(chat, self.max_tokens, max_line_bytes=self.max_line, max_bytes=self.max_bytes)


def assert_same(
    body: bytes, chat: bool, reads: list[bytes], keep_feeding: bool = False, limits: Limits | None = None
) -> None:
    assert b"".join(reads) == body
    limits = limits or Limits()
    want = outcome(limits.reference(chat), reads, keep_feeding)
    got = outcome(limits.parser(chat), reads, keep_feeding)
    assert got == want


def split_at(body: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted({c for c in cuts if 0 < c < len(body)}), len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:], strict=False)]


# ------------------------------------------------------------------------------------------------
# Generated streams
# ------------------------------------------------------------------------------------------------

PLAIN_WORDS = [" tok", " the", "ing", "Hello", " world", ".", ",", " 42", "é", "中文", " 🙂", "a"]
ODD_TEXTS = [
    "",  # a partial UTF-8 character, or an unprintable token
    '"',
    '\\"',
    "\\",
    "\n",
    "\r\n",
    "\t",
    "\x00",
    "\x1f",
    "\u2028",
    '","text":"',
    '"}]}\n\ndata: {"x":1}',
    "data: ",
    "gpuledger-probe",
    "gpuledger-probe-2",
    "<think>",
    "</think>",
    " </think>\n\nSo",
    "null",
    " " * 40,
]


def random_text(rng: random.Random, oddness: float, surrogates: bool) -> str:
    if rng.random() >= oddness:
        return rng.choice(PLAIN_WORDS)
    if rng.random() < 0.6:
        return rng.choice(ODD_TEXTS)
    chars = [
        chr(
            rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0x3000), rng.randrange(0x1F300, 0x1F600)])
        )
        for _ in range(rng.randrange(0, 6))
    ]
    if surrogates and rng.random() < 0.3:
        chars.append(chr(rng.randrange(0xD800, 0xE000)))  # a lone surrogate: invalid JSON text
    return "".join(chars)


@dataclass
class Style:
    """How one server writes its stream (fixed for a stream)."""

    chat: bool
    spaced: bool  # json.dumps with ", " and ": " (Python servers), else compact
    ascii_escapes: bool  # non-ASCII as \\uXXXX (json.dumps default)
    data_space: bool  # "data: " or "data:"
    crlf: bool
    comments: bool  # ": ping" and "event:" lines between events
    choices_first: bool
    extras: dict[str, Any]  # id, object, created, model, system_fingerprint ... in every chunk
    choice_extras: dict[str, Any]  # logprobs: null, stop_reason: null ...
    usage_null: bool  # "usage": null on every chunk (TGI)
    role_every_chunk: bool  # delta carries "role" on every chunk (TGI, Ollama)


@st.composite
def styles(draw: st.DrawFn, chat: bool) -> Style:
    extras: dict[str, Any] = {}
    if draw(st.booleans()):
        extras["id"] = draw(st.sampled_from(["cmpl-1", "chatcmpl-abc", ""]))
    if draw(st.booleans()):
        extras["object"] = "chat.completion.chunk" if chat else "text_completion"
    if draw(st.booleans()):
        extras["created"] = draw(st.integers(0, 2_000_000_000))
    if draw(st.booleans()):
        extras["model"] = draw(st.sampled_from(["m", "meta-llama/Llama-3.1-8B-Instruct", 'we"ird\\']))
    if draw(st.booleans()):
        extras["system_fingerprint"] = draw(st.sampled_from(["fp_1", "b6097-9515c613", None]))
    if draw(st.integers(0, 7)) == 0:  # another "text"/"content" key before the choice's
        extras["meta"] = {"text": "x", "content": "y"}
    choice_extras: dict[str, Any] = {}
    if draw(st.booleans()):
        choice_extras["logprobs"] = None
    if draw(st.booleans()):
        choice_extras["stop_reason"] = None
    if draw(st.booleans()):
        choice_extras["matched_stop"] = None
    return Style(
        chat=chat,
        spaced=draw(st.booleans()),
        ascii_escapes=draw(st.booleans()),
        data_space=draw(st.booleans()),
        crlf=draw(st.integers(0, 5)) == 0,
        comments=draw(st.integers(0, 5)) == 0,
        choices_first=draw(st.booleans()),
        extras=extras,
        choice_extras=choice_extras,
        usage_null=draw(st.integers(0, 3)) == 0,
        role_every_chunk=chat and draw(st.integers(0, 3)) == 0,
    )


def encode(style: Style, obj: Any) -> bytes:
    if style.spaced:
        return json.dumps(obj, ensure_ascii=style.ascii_escapes).encode("utf-8", "surrogatepass")
    if style.ascii_escapes:
        return json.dumps(obj, separators=(",", ":")).encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def frame(style: Style, payload: bytes) -> bytes:
    eol = b"\r\n" if style.crlf else b"\n"
    head = b"data: " if style.data_space else b"data:"
    return head + payload + eol + eol


def chunk(
    style: Style,
    text: Any,
    finish: str | None = None,
    usage: Any = "absent",
    delta: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0}
    if style.chat:
        if delta is None:
            delta = {"role": "assistant"} if style.role_every_chunk else {}
            delta["content"] = text
        choice["delta"] = delta
    else:
        choice["text"] = text
    choice.update(style.choice_extras)
    choice["finish_reason"] = finish
    obj: dict[str, Any] = {}
    if not style.choices_first:
        obj.update(style.extras)
    obj["choices"] = [choice]
    if style.choices_first:
        obj.update(style.extras)
    if usage != "absent":
        obj["usage"] = usage
    elif style.usage_null:
        obj["usage"] = None
    if extra:
        obj.update(extra)
    return obj


@st.composite
def streams(draw: st.DrawFn, max_tokens: int = 120) -> tuple[bytes, bool]:
    """One whole response body as a server would send it, and whether it is a chat stream."""
    chat = draw(st.booleans())
    style = draw(styles(chat))
    rng = random.Random(draw(st.integers(0, 2**32)))  # the per-event choices
    oddness = draw(st.sampled_from([0.0, 0.0, 0.01, 0.2, 0.6]))
    variation = draw(st.sampled_from([0.0, 0.0, 0.01, 0.1]))  # events of other shapes, changed fields
    continuous = draw(st.integers(0, 4)) == 0
    hostile = draw(st.sampled_from([0.0, 0.0, 0.0, 0.02, 0.2]))  # per-chunk counts that cannot be right
    eol = b"\r\n" if style.crlf else b"\n"
    out: list[bytes] = []

    def emit(obj: Any) -> None:
        out.append(frame(style, encode(style, obj)))
        if style.comments and rng.random() < 0.1:
            out.append(rng.choice([b": ping", b"event: message", b"id: 7", b":"]) + eol)

    def text() -> str:
        return random_text(rng, oddness, style.ascii_escapes and style.spaced)

    prompt = rng.randrange(0, 50)
    produced = 0

    def usage_now(extra_tokens: int = 0) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": produced + extra_tokens,
            "total_tokens": prompt + produced + extra_tokens,
        }

    if chat and draw(st.booleans()):  # the role preamble
        emit(
            chunk(
                style,
                None,
                delta={"role": "assistant", "content": rng.choice(["", None])},
                usage=usage_now() if continuous else "absent",
            )
        )
    # A reasoning model's stream: reasoning deltas first (vLLM, SGLang, DeepSeek), or a <think> block in the
    # content that opens and closes, or only closes (the opening tag in the prompt, DeepSeek-R1's template).
    reasoner = draw(st.sampled_from(["none", "none", "fields", "open", "close-only"]))
    think_until = rng.randrange(0, max_tokens + 2)
    for i in range(draw(st.integers(0, max_tokens))):
        if reasoner == "fields" and chat and i < think_until:
            produced += 1
            emit(chunk(style, None, delta={rng.choice(["reasoning_content", "reasoning"]): text() or "r"},
                       usage=usage_now() if continuous else "absent"))
            continue
        opening = reasoner == "open" and i == 0
        if opening or reasoner in ("open", "close-only") and i == think_until > 0:
            produced += 1
            emit(chunk(style, "<think>\n" if opening else "</think>\n\n",
                       usage=usage_now() if continuous else "absent"))
            continue
        roll = rng.random() < variation and rng.randrange(5)
        if roll == 1 and chat:
            emit(chunk(style, None, delta={"reasoning_content": text()}))
        elif roll == 2 and chat:
            emit(chunk(style, None, delta={"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}))
        elif roll == 3:  # a field that changes mid-stream (a new second in "created")
            style.extras["created"] = rng.randrange(10)
            emit(chunk(style, text()))
        elif roll == 4 and chat:
            emit(chunk(style, None, delta={"content": None}))
        else:
            produced += 1
            usage: Any = usage_now() if continuous else "absent"
            if continuous and rng.random() < hostile:
                bad = rng.choice([10**12, -1, produced - 2, 2**31, 2**63 - 1, 1.5, True, None, "3", 10**6])
                usage = {**usage, "completion_tokens": bad}
            emit(chunk(style, text(), usage=usage))
    ending = draw(
        st.sampled_from(
            [
                "finish",
                "finish+usage",
                "finish-with-usage",
                "cut",
                "error",
                "bare-error",
                "malformed",
                "not-a-dict",
                "done-only",
                "timings",
            ]
        )
    )
    finish = rng.choice(["stop", "length", "tool_calls"])
    last_text = rng.choice(["", " end", None])
    if ending in ("finish", "finish+usage", "timings"):
        emit(
            chunk(
                style,
                last_text,
                finish=finish,
                usage=usage_now(1) if continuous else "absent",
                extra={"timings": {"predicted_n": produced}} if ending == "timings" else None,
            )
        )
        if ending == "finish+usage":
            emit({**style.extras, "choices": [], "usage": usage_now(rng.randrange(-1, 2))})
        out.append(frame(style, b"[DONE]"))
    elif ending == "finish-with-usage":
        emit(chunk(style, last_text, finish=finish, usage=usage_now(rng.randrange(-1, 2))))
    elif ending == "error":
        emit(
            {
                "error": {
                    "object": "error",
                    "message": "engine died",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
        )
    elif ending == "bare-error":
        emit({"object": "error", "message": "prompt too long", "type": "BadRequestError", "code": 400})
    elif ending == "malformed":
        out.append(frame(style, b'{"choices":[{"text":'))
    elif ending == "not-a-dict":
        out.append(frame(style, rng.choice([b"[1,2]", b'"x"', b"5", b"null"])))
    elif ending == "done-only":
        out.append(frame(style, b"[DONE]"))
    if rng.random() < 0.25:  # more events after the end: not counted after a finish, not read after [DONE]
        for _ in range(rng.choice([1, 1, 5, 40])):
            emit(chunk(style, " after", usage=usage_now(1) if continuous else "absent"))
        if rng.random() < 0.3:
            out.append(frame(style, b"[DONE]"))
    body = b"".join(out)
    if draw(st.integers(0, 4)) == 0 and body:  # a damaged byte anywhere
        i = rng.randrange(len(body))
        body = body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
    if draw(st.integers(0, 5)) == 0:  # the last line without its newline
        body = body.rstrip(b"\r\n")
    return body, chat


@st.composite
def limits(draw: st.DrawFn) -> Limits:
    """Bounds small enough for generated streams to reach them now and then."""
    return Limits(
        max_tokens=draw(st.sampled_from([None, None, 0, 3, 20, 60])),
        max_line=draw(st.sampled_from([None, None, 60, 200, 600])),
        max_bytes=draw(st.sampled_from([None, None, None, 300, 4000])),
    )


@st.composite
def read_splits(draw: st.DrawFn, body: bytes) -> list[bytes]:
    how = draw(st.sampled_from(["one", "random", "events", "fixed"]))
    if how == "one" or not body:
        return [body]
    if how == "random":
        return split_at(body, draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=30)))
    if how == "events":  # each event in its own read, as a slow server streams
        cuts, pos = [], 0
        while (pos := body.find(b"\n\n", pos) + 2) > 1:
            cuts.append(pos)
        return split_at(body, cuts)
    size = draw(st.integers(1, 4096))
    return [body[i : i + size] for i in range(0, len(body), size)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_streams_give_what_a_full_parse_of_every_event_gives(data: st.DataObject) -> None:
    body, chat = data.draw(streams())
    reads = data.draw(read_splits(body))
    assert_same(body, chat, reads, limits=data.draw(limits()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_long_streams_in_few_reads_give_what_a_full_parse_gives(data: st.DataObject) -> None:
    # Hundreds of events per read: the bulk path, and a template that changes on its way.
    body, chat = data.draw(streams(max_tokens=400))
    cuts = data.draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=3))
    assert_same(body, chat, split_at(body, cuts), limits=data.draw(limits()))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_feeding_on_after_an_error_gives_what_a_full_parse_gives(data: st.DataObject) -> None:
    body, chat = data.draw(streams())
    reads = data.draw(read_splits(body))
    assert_same(body, chat, reads, keep_feeding=True, limits=data.draw(limits()))


# ------------------------------------------------------------------------------------------------
# Every byte boundary, for a few short streams
# ------------------------------------------------------------------------------------------------


def plain_completion(n: int, text: str = " tok", usage_chunk: bool = True) -> bytes:
    ev = [
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length" if i == n - 1 else None,
                }
            ],
        }
        for i in range(n)
    ]
    out = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev)
    if usage_chunk:
        out += b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,' % n
        out += b'"total_tokens":%d}}\n\n' % (n + 3)
    return out + b"data: [DONE]\n\n"


def chat_with_preamble(texts_: list[str]) -> bytes:
    ev: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    ]
    ev += [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts_]
    ev.append(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": len(texts_), "total_tokens": 9},
        }
    )
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"


SHORT_STREAMS = {
    "completion-6": (plain_completion(6), False),
    "completion-crlf": (plain_completion(5).replace(b"\n", b"\r\n"), False),
    "chat-preamble-escapes": (chat_with_preamble(["a", "\n", '"q"', "", "é", "b"]), True),
    "completion-40": (plain_completion(40), False),  # long enough for the bulk path in one read
    "chat-60-escapes": (chat_with_preamble(["x", "\\", "y\n"] * 20), True),
}


@pytest.mark.parametrize("name", list(SHORT_STREAMS))
def test_every_byte_boundary_between_two_reads_gives_the_same_result(name: str) -> None:
    body, chat = SHORT_STREAMS[name]
    for cut in range(len(body) + 1):
        assert_same(body, chat, [body[:cut], body[cut:]])


@pytest.mark.parametrize("name", ["completion-6", "chat-preamble-escapes"])
def test_every_pair_of_byte_boundaries_gives_the_same_result(name: str) -> None:
    body, chat = SHORT_STREAMS[name]
    step = max(1, len(body) // 90)
    for i in range(0, len(body) + 1, step):
        for j in range(i, len(body) + 1, step):
            assert_same(body, chat, [body[:i], body[i:j], body[j:]])


# ------------------------------------------------------------------------------------------------
# Recorded server streams
# ------------------------------------------------------------------------------------------------


def recorded_streams(servers: Path) -> list[tuple[str, bytes, bool]]:
    out = []
    for path in sorted(servers.rglob("*")):
        if path.name.endswith(".sse-payloads.txt"):
            body = b"".join(b"data: " + ln + b"\n\n" for ln in path.read_bytes().splitlines() if ln.strip())
        elif path.suffix == ".sse":
            body = path.read_bytes()
        else:
            continue
        out.append((path.name, body, b"chat.completion" in body or b'"delta"' in body))
    return out


def test_recorded_server_streams_give_what_a_full_parse_gives_however_they_are_read(
    server_fixtures: Path,
) -> None:
    streams_ = recorded_streams(server_fixtures)
    assert len(streams_) >= 8  # vLLM, SGLang x2, llama.cpp, TGI x4, Ollama
    rng = random.Random(7)
    for _name, body, chat in streams_:
        assert_same(body, chat, [body])
        for cut in range(0, len(body) + 1, 7):
            assert_same(body, chat, [body[:cut], body[cut:]])
        for _ in range(30):
            assert_same(body, chat, split_at(body, rng.sample(range(1, len(body)), 12)))
        # The stream's token events repeated many times over in one read (the bulk path).
        events = body.split(b"\n\n")
        tokens = [e for e in events if b'"finish_reason":null' in e and b'"usage":{' not in e]
        if tokens:
            long_body = b"".join(e + b"\n\n" for e in tokens * 20) + b"\n\n".join(events)
            assert_same(long_body, chat, [long_body])


def test_a_duplicate_text_key_counts_the_last_one_as_json_does() -> None:
    # A duplicate "text" key: JSON's last one wins, whatever the bytes around it look like.
    good = b'data: {"choices":[{"index":0,"text":"%s","finish_reason":null}]}\n\n'
    body = b"".join(good % b"t" for _ in range(50))
    body += good % b'a","text":"b'
    body += b"".join(good % b"t" for _ in range(50))
    body += b'data: {"choices":[{"index":0,"text":"","finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    assert_same(body, False, [body])
    s = OpenAIStream(False)
    s.feed(body, 1.0)
    s.finish()
    assert s.texts[50] == "b"


@pytest.mark.parametrize(
    "payload",
    [
        b'{"choices":"abc"}',
        b'{"choices":[5]}',
        b'{"choices":[{"index":0,"text":5,"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":"x","finish_reason":null}]}',
        b'{"choices":[],"usage":5}',
    ],
)
def test_an_event_of_the_wrong_shape_fails_the_request_instead_of_raising(payload: bytes) -> None:
    s = OpenAIStream(chat=b'"delta"' in payload)
    ok = b'data: {"choices":[{"index":0,"text":"t","delta":{"content":"t"},"finish_reason":null}]}\n\n'
    s.feed(ok + b"data: " + payload + b"\n\n" + ok, 1.0)
    s.finish()
    assert s.error is not None and s.error.startswith(("malformed stream event: ", "unexpected"))
    assert len(s.chunk_times) <= 1  # what came before it, nothing after it


@pytest.mark.parametrize("count", ['"1"', "1.0", "true", "null", "-1", "2147483648", "1000000000000"])
def test_a_per_chunk_count_that_cannot_be_right_is_not_believed_and_the_request_goes_on(count: str) -> None:
    # It is not the stream's shape that is wrong but the server's counter: the answer stands, counted
    # one token per chunk, and usage_note says why the server's counts were not used.
    event = b'data: {"choices":[{"index":0,"text":"t","finish_reason":%s}],'
    event += b'"usage":{"completion_tokens":%s}}\n\n'
    body = event % (b"null", b"1") + event % (b"null", count.encode()) + event % (b'"length"', b"3")
    body += b"data: [DONE]\n\n"
    assert_same(body, False, [body], limits=Limits(max_tokens=10))
    s = OpenAIStream(False, 10)
    s.feed(body, 1.0)
    s.finish()
    assert s.error is None and s.done and not s.continuous and s.chunk_tokens == []
    assert s.tokens_counted == len(s.chunk_times) == 3
    assert s.usage_note is not None and s.usage_note.startswith(
        f"the server's per-chunk usage was not believed: completion_tokens {json.loads(count)!r} "
    )


def test_nothing_after_done_is_read_and_no_content_after_finish_is_counted() -> None:
    tok = b'data: {"choices":[{"index":0,"text":"t","finish_reason":%s}]}\n\n'
    body = tok % b"null" + tok % b'"stop"' + tok % b"null" * 5
    body += b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\n\n'
    body += b"data: [DONE]\n\n" + tok % b"null" * 10 + b'data: {"error":"late"}\n\n'
    for cut in range(0, len(body) + 1, 11):
        assert_same(body, False, [body[:cut], body[cut:]])
    s = OpenAIStream(False, 10)
    assert s.feed(body, 1.0) == 2
    s.finish()
    assert s.error is None and s.done and s.stopped and len(s.chunk_times) == 2
    assert s.usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
