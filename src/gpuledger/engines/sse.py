"""Byte-level parsers for streamed responses: OpenAI-style SSE and Ollama NDJSON.

This is the client's hot path (one call per network read, one JSON parse per event), so it does
the minimum: split on newlines, take the read's arrival time for every event in it (events that
arrived in one read did arrive together), and parse each payload once with orjson for what is
needed — the text length, per-chunk usage when the server sends it, the final usage, errors.

Which chunks are tokens (DESIGN.md: "TTFT: first content token received"):

* When a chunk carries cumulative usage (vLLM ``continuous_usage_stats``, SGLang), the chunk carried
  ``completion_tokens`` minus the previous value — exact, and that is the chunk's token count.
* Otherwise a chunk is one token when its choice has text (``text``, ``delta.content``, a reasoning
  delta, or a tool-call delta) that is not ``None``, unless the text is empty in a role preamble
  (``delta.role`` present). An empty text is a real token: the bytes of an incomplete UTF-8
  character (vLLM streams those with byte-level tokenizers) or an unprintable end-of-sequence token
  on the finish chunk — except when the final usage shows that the finish chunk carried no token.
"""

from __future__ import annotations

from typing import Any

import orjson

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


def _error_text(obj: dict[str, Any]) -> str:
    err = obj.get("error", obj)
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or orjson.dumps(err).decode()
        code = err.get("code") or err.get("type")
        return f"{msg} ({code})" if code else str(msg)
    return str(err)


def _clip(b: bytes, n: int = 120) -> str:
    s = b[:n].decode("utf-8", "replace")
    return s + ("…" if len(b) > n else "")


class OpenAIStream:
    """Accumulates one OpenAI-compatible SSE stream (``/v1/completions`` or ``/v1/chat/completions``).

    ``chunk_tokens`` is filled only when the server sends cumulative usage on every chunk (otherwise
    every content chunk is one token and it stays empty)."""

    __slots__ = (
        "_buf",
        "_chat",
        "_empty_finish_at",
        "_last_ct",
        "_t",
        "chunk_times",
        "chunk_tokens",
        "continuous",
        "done",
        "error",
        "finish_reason",
        "fingerprint",
        "texts",
        "timings",
        "usage",
    )

    def __init__(self, chat: bool) -> None:
        self._buf = b""
        self._chat = chat
        self._empty_finish_at = -1
        self._last_ct = 0
        self._t = 0.0
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.continuous = False
        self.done = False
        self.error: str | None = None
        self.finish_reason: str | None = None
        self.fingerprint: str | None = None
        self.texts: list[str] = []
        self.timings: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, data: bytes, t: float) -> int:
        """Consume one network read that arrived at ``t``. Returns the number of content chunks in it.
        After an error event or a malformed payload, ``error`` is set and the rest is ignored."""
        self._t = t
        if self._buf:
            data = self._buf + data
        lines = data.split(b"\n")
        self._buf = lines.pop()
        n = 0
        chat = self._chat
        add_time = self.chunk_times.append
        add_text = self.texts.append
        for line in lines:
            if not line or not line.startswith(b"data:"):
                continue  # blank separators, ": comments", "event:" / "id:" lines
            try:
                obj = _loads(line[5:])  # JSON allows the surrounding blanks and "\r": no strip needed
            except _JSONDecodeError:
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                    continue
                self.error = f"malformed JSON in stream: {_clip(payload)!r}"
                return n
            if type(obj) is not dict:
                self.error = f"unexpected stream payload: {_clip(line[5:].strip())!r}"
                return n
            try:
                choices = obj.get("choices")
                usage = obj.get("usage")
                if usage is not None and type(usage) is not dict:
                    raise TypeError("usage is not an object")
                if choices:
                    c = choices[0]
                    fr = c.get("finish_reason")
                    role = False
                    if chat:
                        delta = c.get("delta")
                        if delta:
                            text = delta.get("content")
                            if text is None:
                                # Reasoning and tool-call deltas are generated tokens too.
                                text = delta.get("reasoning_content") or delta.get("reasoning")
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
                        add_text(text)
                    if usage and (fr is None or self.continuous) and "completion_tokens" in usage:
                        # Cumulative usage on every chunk: exact tokens per chunk. (Usage that first
                        # appears on the finish chunk is a final total, as llama.cpp sends it.)
                        if not self.continuous:
                            self.continuous = True
                            self.chunk_tokens = [1] * len(self.chunk_times)
                        ct = usage["completion_tokens"]
                        k = ct - self._last_ct
                        self._last_ct = ct
                        if k > 0:
                            add_time(t)
                            self.chunk_tokens.append(k)
                            n += 1
                    elif text is not None and (text or not role):
                        add_time(t)
                        if self.continuous:
                            self.chunk_tokens.append(1)
                        n += 1
                        if not text and fr is not None:
                            self._empty_finish_at = len(self.chunk_times)
                    if fr is None:
                        if usage:
                            self.usage = usage
                        continue
                    self.finish_reason = fr
                elif "error" in obj or obj.get("object") == "error":
                    self.error = f"server error event: {_error_text(obj)}"
                    return n
                # The end of the stream (finish or usage-only chunks): totals and server details.
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
                # string, non-numeric usage): the request fails with it, the run goes on.
                self.error = f"malformed stream event: {_clip(line[5:].strip())!r}"
                return n
        return n

    def finish(self) -> None:
        """The body ended. Parse a last line that came without a newline; flag a cut stream."""
        if self._buf and self.error is None:
            rest, self._buf = self._buf, b""
            self.feed(rest + b"\n", self._t)
        if self.error is None and not self.done and self.finish_reason is None:
            self.error = "stream ended before completion (no finish_reason and no [DONE])"
        # An empty finish chunk is a token (an unprintable EOS, or the last bytes of a character) unless
        # the server's final usage shows it carried none, as llama.cpp's closing chunk does.
        usage = self.usage
        if (
            self._empty_finish_at == len(self.chunk_times)
            and not self.continuous
            and usage is not None
            and isinstance(usage.get("completion_tokens"), int)
            and len(self.chunk_times) > usage["completion_tokens"]
        ):
            self.chunk_times.pop()

    @property
    def output_chars(self) -> int:
        return sum(map(len, self.texts))

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
    the ``done: true`` line carries the server's counts and durations."""

    __slots__ = ("_buf", "_chat", "_t", "chunk_times", "done", "error", "final", "output_chars", "texts")

    def __init__(self, chat: bool) -> None:
        self._buf = b""
        self._chat = chat
        self._t = 0.0
        self.chunk_times: list[float] = []
        self.done = False
        self.error: str | None = None
        self.final: dict[str, Any] | None = None
        self.output_chars = 0
        self.texts: list[str] = []

    def feed(self, data: bytes, t: float) -> int:
        self._t = t
        if self._buf:
            data = self._buf + data
        lines = data.split(b"\n")
        self._buf = lines.pop()
        n = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = _loads(line)
            except _JSONDecodeError:
                self.error = f"malformed JSON in stream: {_clip(line)!r}"
                return n
            if type(obj) is not dict:
                self.error = f"unexpected stream line: {_clip(line)!r}"
                return n
            if "error" in obj:
                self.error = f"server error event: {_error_text(obj)}"
                return n
            if obj.get("done"):
                self.done = True
                self.final = obj
                continue
            if self._chat:
                msg = obj.get("message")
                text = msg.get("content") if type(msg) is dict else None
            else:
                text = obj.get("response")
            if text is not None and type(text) is not str:
                self.error = f"malformed stream line: {_clip(line)!r}"
                return n
            if text is not None:
                self.chunk_times.append(t)
                if text:
                    self.output_chars += len(text)
                    self.texts.append(text)
                n += 1
        return n

    def finish(self) -> None:
        if self._buf and self.error is None:
            rest, self._buf = self._buf, b""
            self.feed(rest + b"\n", self._t)
        if self.error is None and not self.done:
            self.error = "stream ended before completion (no done:true line)"
