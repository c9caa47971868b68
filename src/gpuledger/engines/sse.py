"""Byte-level parsers for streamed responses: OpenAI-style SSE and Ollama NDJSON.

This is the client's hot path (one call per network read, one JSON parse per event), so it does
the minimum: split on newlines, take the read's arrival time for every event in it (events that
arrived in one read did arrive together), and parse each payload once with orjson for what is
needed — the text length, per-chunk usage when the server sends it, the final usage, errors.

Which chunks are tokens (docs/design.md: "TTFT: first content token received"):

* When a chunk carries cumulative usage (vLLM ``continuous_usage_stats``, SGLang), the chunk carried
  ``completion_tokens`` minus the previous value — exact, and that is the chunk's token count.
* Otherwise a chunk is one token when its choice has text (``text``, ``delta.content``, a reasoning
  delta, or a tool-call delta) that is not ``None``, unless the text is empty in a role preamble
  (``delta.role`` present). An empty text is a real token: the bytes of an incomplete UTF-8
  character (vLLM streams those with byte-level tokenizers) or an unprintable end-of-sequence token
  on the finish chunk — except when the final usage shows that the finish chunk carried no token, or
  when the server's usage cannot be believed (a total that is not an integer in 0 … the stream's chunk
  bound, or per-chunk usage that was dropped): a count that says nothing does not make the empty finish
  chunk a token, and the client counts the chunks that carried text.
* Reasoning (``reasoning_counted``, ``first_reasoning_chunk``, ``first_answer_chunk``): a chunk whose text is
  ``delta.reasoning_content`` / ``delta.reasoning`` (vLLM, SGLang, DeepSeek) is reasoning; so is the answer's
  text up to and including the first ``</think>`` (DeepSeek-R1's template opens the block in the prompt), or
  all of it when it opens with ``<think>`` and never closes. Every other content chunk, tool calls included,
  is an answer chunk. A chunk of k tokens (continuous usage) counts k.
* The answer ends at the choice's ``finish_reason``: later chunks carry no content (their usage,
  fingerprint and timings are still read). The stream ends at ``data: [DONE]``: nothing after it is
  read. A cumulative ``completion_tokens`` that is not an integer, goes down, or passes the request's
  chunk bound (:mod:`gpuledger.engines.stream_framing`) is not believed: per-chunk usage is dropped for
  the whole request (``usage_note`` says why) and the chunks count one token each.

Framing and bounds (line splitting, ``MAX_LINE_BYTES``, ``stream_bounds``) live in
:mod:`gpuledger.engines.stream_framing`; the names are re-exported here.
"""

from __future__ import annotations

from typing import Any

import orjson

from gpuledger.engines.stream_framing import (
    BYTES_PER_CHUNK,
    MAX_LINE_BYTES,
    _before_long,
    _clip,
    _error_text,
    _Lines,
    stream_bounds,
)

__all__ = ["BYTES_PER_CHUNK", "MAX_LINE_BYTES", "OllamaStream", "OpenAIStream", "stream_bounds"]

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class OpenAIStream:
    """Accumulates one OpenAI-compatible SSE stream (``/v1/completions`` or ``/v1/chat/completions``).

    ``chunk_tokens`` is filled only when the server sends cumulative usage on every chunk (otherwise
    every content chunk is one token and it stays empty). ``max_tokens`` (the request's) bounds the
    stream (:mod:`gpuledger.engines.stream_framing`); ``max_line_bytes`` and ``max_bytes`` override the
    bounds (tests)."""

    __slots__ = (
        "_after_close",
        "_bytes",
        "_c_first",
        "_chat",
        "_close_chunks",
        "_close_tokens",
        "_closed_at",
        "_decided",
        "_empty_finish_at",
        "_last_ct",
        "_max_bytes",
        "_max_chunks",
        "_buf",
        "_max_line",
        "_opened",
        "_pending",
        "_plain",
        "_pieces",
        "_r_chunks",
        "_r_first",
        "_r_tokens",
        "_t",
        "chunk_times",
        "chunk_tokens",
        "continuous",
        "done",
        "error",
        "finish_reason",
        "fingerprint",
        "max_tokens",
        "reasoning_texts",
        "stopped",
        "tail",
        "texts",
        "timings",
        "usage",
        "usage_note",
    )

    def __init__(
        self,
        chat: bool,
        max_tokens: int | None = None,
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        max_bytes: int | None = None,
    ) -> None:
        self._bytes = 0
        self._chat = chat
        self._empty_finish_at = -1
        self._last_ct = 0
        # Reasoning (module docstring); _closed_at: the chunk of the first </think> (-1: none yet).
        self._r_chunks = self._r_tokens = 0
        self._close_chunks = self._close_tokens = 0
        self._r_first = self._c_first = self._after_close = self._closed_at = -1
        self._decided = self._opened = self._plain = False
        self._max_line = max_line_bytes
        self._buf = b""  # the unfinished last line ...
        self._pieces: list[bytes] = []  # ... and the reads that continued it since (none usually)
        self._pending = 0  # bytes in _pieces
        self._max_chunks, self._max_bytes = stream_bounds(max_tokens, max_line_bytes, max_bytes)
        self._t = 0.0
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.continuous = False
        self.done = False
        self.error: str | None = None
        self.finish_reason: str | None = None
        self.fingerprint: str | None = None
        self.max_tokens = max_tokens
        self.stopped = False
        self.tail = False
        self.texts: list[str] = []  # the answer's texts; reasoning deltas' in reasoning_texts
        self.reasoning_texts: list[str] = []
        self.timings: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.usage_note: str | None = None

    def _fail(self, error: str) -> None:
        self.error = error
        self._stop()

    def _stop(self) -> None:
        self.stopped = self.tail = True
        self._max_bytes = -1  # feed reads nothing more

    def feed(self, data: bytes, t: float) -> int:
        """Consume one network read that arrived at ``t``. Returns the number of content chunks in it.
        After ``[DONE]``, an error event, a malformed payload or a bound, the rest is ignored."""
        received = self._bytes + len(data)
        if received > self._max_bytes:  # also after a stop, which sets the bound to -1
            if not self.stopped:
                self._fail(f"endless stream: over {self._max_bytes} bytes for max_tokens={self.max_tokens}")
            return 0
        self._bytes = received
        self._t = t
        # Lines: the unfinished last line waits in _buf; while it goes on without a newline, the reads
        # are kept in _pieces and joined once (not copied once per read). This is the hot path.
        buf = self._buf
        if buf:
            if b"\n" not in data:
                return self._longer(data)
            if self._pieces:
                data = b"".join([buf, *self._pieces, data])
                self._pieces.clear()
                self._pending = 0
            else:
                data = buf + data
        lines = data.split(b"\n")
        self._buf = lines.pop()
        too_long = False
        if len(data) > self._max_line:
            lines, too_long = _before_long(lines, self._max_line, len(self._buf))
        n = 0
        chat = self._chat
        times = self.chunk_times
        add_time = times.append
        add_text = self.texts.append
        max_chunks = self._max_chunks
        answering = self.finish_reason is None  # after the finish no chunk is content
        plain = self._plain
        for line in lines:
            if not line or not line.startswith(b"data:"):
                continue  # blank separators, ": comments", "event:" / "id:" lines
            try:
                obj = _loads(line[5:])  # JSON allows the surrounding blanks and "\r": no strip needed
            except _JSONDecodeError:
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                    self._stop()
                    return n
                self._fail(f"malformed JSON in stream: {_clip(payload)!r}")
                return n
            if type(obj) is not dict:
                self._fail(f"unexpected stream payload: {_clip(line[5:].strip())!r}")
                return n
            try:
                choices = obj.get("choices")
                usage = obj.get("usage")
                if usage is not None and type(usage) is not dict:
                    raise TypeError("usage is not an object")
                if choices and answering:
                    c = choices[0]
                    fr = c.get("finish_reason")
                    role = thought = False
                    if chat:
                        delta = c.get("delta")
                        if delta:
                            text = delta.get("content")
                            if text is None:
                                # Reasoning and tool-call deltas are generated tokens too.
                                text = delta.get("reasoning_content") or delta.get("reasoning")
                                thought = text is not None
                                if text is None and delta.get("tool_calls"):
                                    text = ""
                            role = "role" in delta
                        else:
                            text = None
                    else:
                        text = c.get("text")
                    if text is not None and type(text) is not str:
                        raise TypeError("the chunk's text is not a string")
                    if text:
                        (self.reasoning_texts.append if thought else add_text)(text)
                    if (
                        usage
                        and (fr is None or self.continuous)
                        and "completion_tokens" in usage
                        and self.usage_note is None
                        and (
                            type(ct := usage["completion_tokens"]) is int
                            and self._last_ct <= ct <= max_chunks
                            or self._drop_usage(ct)  # not believed: False, and the text rule below
                        )
                    ):
                        # Cumulative usage on every chunk: exact tokens per chunk. (Usage that first
                        # appears on the finish chunk is a final total, as llama.cpp sends it.)
                        if not self.continuous:
                            self.continuous = True
                            self.chunk_tokens = [1] * len(times)
                        k = ct - self._last_ct
                        self._last_ct = ct
                        if k > 0:
                            if len(times) >= max_chunks:
                                self._fail(self._endless())
                                return n
                            add_time(t)
                            self.chunk_tokens.append(k)
                            if thought or not plain or text and "</think>" in text:
                                plain = self._kind(text, thought, k)
                            n += 1
                    elif text is not None and (text or not role):
                        if len(times) >= max_chunks:
                            self._fail(self._endless())
                            return n
                        add_time(t)
                        if self.continuous:
                            self.chunk_tokens.append(1)
                        if thought or not plain or text and "</think>" in text:
                            plain = self._kind(text, thought, 1)
                        n += 1
                        if not text and fr is not None:
                            self._empty_finish_at = len(times)
                    if fr is None:
                        if usage:
                            self.usage = usage
                        continue
                    self.finish_reason = fr
                    self.tail = True
                    answering = False
                elif not choices and ("error" in obj or obj.get("object") == "error"):
                    self._fail(f"server error event: {_error_text(obj)}")
                    return n
                # The end of the answer (the finish chunk, usage-only chunks, anything after the
                # finish): totals and server details, no content.
                if usage:
                    self.usage = usage
                if self.fingerprint is None:
                    fp = obj.get("system_fingerprint")
                    if fp:
                        self.fingerprint = fp
                tm = obj.get("timings")
                if tm:
                    self.timings = tm
            except (AttributeError, TypeError, KeyError, IndexError):
                # A payload of the wrong shape ("choices" not a list of objects, a text that is not a
                # string, non-object usage): the request fails with it, the run goes on.
                self._fail(f"malformed stream event: {_clip(line[5:].strip())!r}")
                return n
        if too_long:
            self._fail(f"SSE line over {self._max_line} bytes: the stream was stopped")
        return n

    def _kind(self, text: str | None, thought: bool, k: int) -> bool:
        """Count the chunk just timed (``k`` tokens) as reasoning or answer; returns ``_plain`` (content
        chunks that cannot change anything, ``_plain`` and no ``</think>``, skip this)."""
        at = len(self.chunk_times) - 1
        if thought:
            self._r_chunks += 1
            self._r_tokens += k
            if self._r_first < 0:
                self._r_first = at
            return self._plain
        if self._c_first < 0:
            self._c_first = at
        if self._closed_at >= 0:
            if self._after_close < 0:
                self._after_close = at
        elif text:
            if not self._decided and not text.isspace():
                self._decided = True
                self._opened = text.lstrip().startswith("<think>")
            if "</think>" in text:
                self._closed_at = at
                self._close_chunks = at + 1 - self._r_chunks
                self._close_tokens = (sum(self.chunk_tokens) if self.continuous else at + 1) - self._r_tokens
        self._plain = self._decided and (self._closed_at < 0 or self._after_close >= 0)
        return self._plain

    @property
    def reasoning_counted(self) -> int:
        """Tokens of the reasoning chunks, counted as ``tokens_counted`` counts."""
        closed = self._closed_at >= 0
        if self.continuous:
            content = self.tokens_counted - self._r_tokens
            return self._r_tokens + (self._close_tokens if closed else content if self._opened else 0)
        content = len(self.chunk_times) - self._r_chunks
        return self._r_chunks + (self._close_chunks if closed else content if self._opened else 0)

    @property
    def first_reasoning_chunk(self) -> int | None:
        """Index of the first reasoning chunk in ``chunk_times`` (None: none)."""
        think = self._c_first if self._closed_at >= 0 or self._opened else -1
        return min((i for i in (self._r_first, think) if i >= 0), default=None)

    @property
    def first_answer_chunk(self) -> int | None:
        """Index of the first answer chunk in ``chunk_times`` (None: none)."""
        at = self._after_close if self._closed_at >= 0 else -1 if self._opened else self._c_first
        return at if at >= 0 else None

    def _longer(self, data: bytes) -> int:
        """A read that continues the unfinished line without ending it."""
        self._pieces.append(data)
        self._pending += len(data)
        if len(self._buf) + self._pending > self._max_line:
            self._fail(f"SSE line over {self._max_line} bytes: the stream was stopped")
        return 0

    def _endless(self) -> str:
        return f"endless stream: over {self._max_chunks} content chunks for max_tokens={self.max_tokens}"

    def _drop_usage(self, ct: object) -> bool:
        """A cumulative count that cannot be right: per-chunk usage is not used for this request.
        Returns False (the chunk is then counted by its text)."""
        shown = repr(ct) if len(repr(ct)) <= 40 else repr(ct)[:40] + "…"
        if type(ct) is not int:
            why = "is not an integer"
        elif ct < self._last_ct:
            why = f"went down (from {self._last_ct})"
        else:
            why = f"is over {self._max_chunks} (2 × max_tokens + 64, max_tokens={self.max_tokens})"
        self.usage_note = (
            f"the server's per-chunk usage was not believed: completion_tokens {shown} {why}; "
            "its counts were not used"
        )
        if self.continuous:
            self.continuous = False
            self.chunk_tokens = []
        return False

    def finish(self) -> None:
        """The body ended. Parse a last line that came without a newline; flag a cut stream."""
        rest = b"".join([self._buf, *self._pieces])
        if rest and not self.stopped:
            self._buf = b""
            self._pieces.clear()
            self._bytes -= len(rest) + 1  # counted on arrival already; the newline is ours
            self.feed(rest + b"\n", self._t)
        if self.error is None and not self.done and self.finish_reason is None:
            self.error = "stream ended before completion (no finish_reason and no [DONE])"
        # An empty finish chunk is a token (an unprintable EOS, or the last bytes of a character) unless
        # the server's final usage shows it carried none, as llama.cpp's closing chunk does, or the
        # server's usage cannot be believed (then it shows nothing, and the chunk did not carry text).
        usage = self.usage
        told = usage.get("completion_tokens") if usage is not None else None
        believed = (told if type(told) is int and 0 <= told <= self._max_chunks and self.usage_note is None
                    else None)
        if (
            self._empty_finish_at == len(self.chunk_times)
            and not self.continuous
            and usage is not None
            and "completion_tokens" in usage
            and (believed is None or len(self.chunk_times) > believed)
        ):
            self.chunk_times.pop()
            at = len(self.chunk_times)  # the closing chunk was an answer (content) chunk: no longer counted
            self._c_first = -1 if self._c_first == at else self._c_first
            self._after_close = -1 if self._after_close == at else self._after_close

    @property
    def output_chars(self) -> int:
        return sum(map(len, self.texts)) + sum(map(len, self.reasoning_texts))

    @property
    def tokens_counted(self) -> int:
        """Tokens the client saw: per-chunk usage when the server sent it, else one per content chunk."""
        return sum(self.chunk_tokens) if self.continuous else len(self.chunk_times)

    @property
    def completed(self) -> bool:
        return self.done or self.finish_reason is not None


class OllamaStream:
    """Accumulates one Ollama native NDJSON stream (``/api/generate`` or ``/api/chat``).

    Every ``done: false`` line with text is one token (Ollama emits one line per decoded token);
    the ``done: true`` line carries the server's counts and durations and ends the stream (nothing
    after it is read). Bounded like :class:`OpenAIStream` (``max_tokens`` is ``num_predict``)."""

    __slots__ = (
        "_bytes",
        "_chat",
        "_lines",
        "_max_bytes",
        "_max_chunks",
        "_t",
        "chunk_times",
        "done",
        "error",
        "final",
        "max_tokens",
        "output_chars",
        "stopped",
        "tail",
        "texts",
    )

    def __init__(
        self,
        chat: bool,
        max_tokens: int | None = None,
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        max_bytes: int | None = None,
    ) -> None:
        self._bytes = 0
        self._chat = chat
        self._lines = _Lines(max_line_bytes)
        self._max_chunks, self._max_bytes = stream_bounds(max_tokens, max_line_bytes, max_bytes)
        self._t = 0.0
        self.chunk_times: list[float] = []
        self.done = False
        self.error: str | None = None
        self.final: dict[str, Any] | None = None
        self.max_tokens = max_tokens
        self.output_chars = 0
        self.stopped = False
        self.tail = False
        self.texts: list[str] = []

    def _fail(self, error: str) -> None:
        self.error = error
        self.stopped = self.tail = True

    def feed(self, data: bytes, t: float) -> int:
        if self.stopped:
            return 0
        self._t = t
        self._bytes += len(data)
        if self._bytes > self._max_bytes:
            self._fail(f"endless stream: over {self._max_bytes} bytes for num_predict={self.max_tokens}")
            return 0
        splitter = self._lines
        n = self._events(splitter.split(data), t)
        if splitter.too_long and not self.stopped:
            self._fail(f"NDJSON line over {splitter.max_line} bytes: the stream was stopped")
        return n

    def _events(self, lines: list[bytes], t: float) -> int:
        n = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = _loads(line)
            except _JSONDecodeError:
                self._fail(f"malformed JSON in stream: {_clip(line)!r}")
                return n
            if type(obj) is not dict:
                self._fail(f"unexpected stream line: {_clip(line)!r}")
                return n
            if "error" in obj:
                self._fail(f"server error event: {_error_text(obj)}")
                return n
            if obj.get("done"):
                self.done = self.stopped = self.tail = True
                self.final = obj
                return n
            if self._chat:
                msg = obj.get("message")
                text = msg.get("content") if type(msg) is dict else None
            else:
                text = obj.get("response")
            if text is not None and type(text) is not str:
                self._fail(f"malformed stream line: {_clip(line)!r}")
                return n
            if text is not None:
                if len(self.chunk_times) >= self._max_chunks:
                    self._fail(
                        f"endless stream: over {self._max_chunks} content lines "
                        f"for num_predict={self.max_tokens}"
                    )
                    return n
                self.chunk_times.append(t)
                if text:
                    self.output_chars += len(text)
                    self.texts.append(text)
                n += 1
        return n

    def finish(self) -> None:
        rest = self._lines.rest()
        if rest and not self.stopped:
            self._events([rest], self._t)
        if self.error is None and not self.done:
            self.error = "stream ended before completion (no done:true line)"
