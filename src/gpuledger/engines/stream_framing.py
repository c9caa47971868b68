"""Line framing and bounds shared by the stream parsers (:mod:`gpuledger.engines.sse`): OpenAI-style SSE
and Ollama NDJSON.

Splitting reads into lines, the line / chunk / byte bounds every stream is held to, and the error texts both
parsers quote from a server's stream.

Bounds (every stream is bounded; the request fails with the reason and the connection is closed):

* a line (one event, or one NDJSON object) of more than ``max_line_bytes`` (``MAX_LINE_BYTES``, 8 MiB):
  ``"SSE line over N bytes"``. Lines are kept as a list of the reads' bytes until their newline
  arrives, so a long line costs one copy, not one per read;
* with ``max_tokens`` (what the engines pass): more than ``2 × max_tokens + 64`` content chunks
  (``gpuledger.engines.base.output_token_bound``), or more than ``max_line_bytes + 4096 × that``
  bytes in all: ``"endless stream: ..."``.
"""

from __future__ import annotations

from typing import Any

import orjson

from gpuledger.engines.base import MAX_COUNT, output_token_bound

MAX_LINE_BYTES = 8 * 1024 * 1024
BYTES_PER_CHUNK = 4096  # per content chunk allowed by the byte bound (a chunk event is ~100-500 bytes)


def stream_bounds(max_tokens: int | None, max_line_bytes: int, max_bytes: int | None) -> tuple[int, int]:
    """(most content chunks, most bytes) for a request of ``max_tokens`` (``MAX_COUNT`` each when None);
    an explicit ``max_bytes`` replaces the derived byte bound."""
    if max_tokens is None:
        return MAX_COUNT, max_bytes if max_bytes is not None else 2**62
    chunks = output_token_bound(max_tokens)
    return chunks, max_bytes if max_bytes is not None else max_line_bytes + BYTES_PER_CHUNK * chunks


class _Lines:
    """Splits reads into lines without copying a line once per read: the pieces of an unfinished line
    are kept in a list (``pend``) and joined once, when its newline arrives. :meth:`split` returns the
    complete lines of a read that come before any line over ``max_line`` bytes; ``too_long`` then says
    that such a line (finished or not) followed them. (``gpuledger.engines.sse.OpenAIStream.feed`` does
    the same inline.)"""

    __slots__ = ("max_line", "pend", "pend_len", "too_long")

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.pend: list[bytes] = []
        self.pend_len = 0
        self.too_long = False

    def split(self, data: bytes) -> list[bytes]:
        pend = self.pend
        if b"\n" not in data:
            pend.append(data)
            self.pend_len += len(data)
            self.too_long = self.pend_len > self.max_line
            return []
        if pend:
            data = pend[0] + data if len(pend) == 1 else b"".join(pend) + data
            pend.clear()
        lines = data.split(b"\n")
        rest = lines.pop()
        self.pend_len = len(rest)
        if rest:
            pend.append(rest)
        if len(data) > self.max_line:
            lines, self.too_long = _before_long(lines, self.max_line, self.pend_len)
        return lines

    def rest(self) -> bytes:
        """The unfinished last line (the body ended without its newline), taken out."""
        rest = b"".join(self.pend)
        self.pend.clear()
        self.pend_len = 0
        return rest


def _before_long(lines: list[bytes], cap: int, pending: int) -> tuple[list[bytes], bool]:
    """The lines before the first one over ``cap`` bytes, and whether there is one (or the unfinished
    last line, ``pending`` bytes so far, is over it)."""
    for i, line in enumerate(lines):
        if len(line) > cap:
            return lines[:i], True
    return lines, pending > cap


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
