"""Reading what a user or a server hands over, never more than a cap, whatever it is.

A size check (``stat().st_size``) says nothing about a character device (``/dev/zero`` reports 0 bytes),
a FIFO, ``/dev/stdin`` or a pipe, and ``Path.read_bytes()`` then reads until memory runs out. Every reader
of a user-given file goes through :func:`read_file` (or :func:`read_file_arg`, which takes ``-`` for stdin,
or :func:`iter_lines` for a file read line by line); every body a server streams goes through
:func:`read_body`:

- at most ``limit`` bytes are read, one more to tell that there is more; more than ``limit`` is
  :class:`TooLarge` (``InvalidInputError``, exit 4) naming what was read and the bound;
- ``text=True`` (a JSON or text document, which never holds a NUL byte): a NUL byte is refused as soon as
  it is read (``InvalidInputError``: not a text file), so ``/dev/zero`` costs one chunk, not the cap;
- a FIFO is opened without waiting for a writer (``O_NONBLOCK``, then blocking reads): one nobody writes
  to reads as empty instead of hanging;
- memory that runs out while reading is a ``ResourceError`` (exit 8) saying how much was read, never a
  traceback.

Errors of the file system (``FileNotFoundError``, ``IsADirectoryError``, other ``OSError``) reach the
caller as they are: it knows what a missing file means there (not found, a usage error, a default).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from gpuledger.errors import InvalidInputError, ResourceError

CHUNK_BYTES = 1024 * 1024
# A JSON document a user hands over whole (``gpuledger import``: a run's export): read into memory, parsed.
MAX_DOCUMENT_BYTES = 2 * 1024**3


class TooLarge(InvalidInputError):
    """More bytes than the reader's cap (exit 4). ``limit`` is the cap, ``what`` what was read."""

    def __init__(self, what: str, limit: int, *, hint: str | None = None) -> None:
        super().__init__(f"{what}: more than {limit:,} bytes ({_size(limit)}), the most it may be", hint=hint)
        self.what = what
        self.limit = limit


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _out_of_memory(what: str, read: int) -> ResourceError:
    return ResourceError(f"{what}: ran out of memory after reading {read:,} bytes of it")


def _binary(what: str, at: int) -> InvalidInputError:
    return InvalidInputError(f"{what}: not a text file (a NUL byte at byte {at:,})")


def read_stream(fh: BinaryIO, limit: int, *, what: str, hint: str | None = None, text: bool = False) -> bytes:
    """At most ``limit`` bytes of an open binary stream, up to its end; :class:`TooLarge` when it holds
    more (at most ``limit + 1`` bytes are read to tell). ``text``: a NUL byte is refused when read."""
    buf = bytearray()
    try:
        while len(buf) <= limit:
            chunk = fh.read(min(CHUNK_BYTES, limit + 1 - len(buf)))
            if not chunk:
                return bytes(buf)
            if text and (nul := chunk.find(b"\0")) >= 0:
                raise _binary(what, len(buf) + nul)
            buf += chunk
    except MemoryError:
        read = len(buf)
        buf = bytearray()
        raise _out_of_memory(what, read) from None
    raise TooLarge(what, limit, hint=hint)


def _open(path: Path | str) -> BinaryIO:
    """``path`` opened for reading; a FIFO without a writer does not block the open (module docstring)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        os.set_blocking(fd, True)
        return io.FileIO(fd, "rb", closefd=True)
    except OSError as exc:  # a directory: FileIO refuses it, naming the descriptor
        os.close(fd)
        raise _named(exc, path) from None
    except BaseException:
        os.close(fd)
        raise


def _named(exc: OSError, path: Path | str) -> OSError:
    """``exc`` naming ``path`` (a read through a file descriptor names the descriptor's number)."""
    if isinstance(exc.filename, str):
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def read_file(path: Path | str, limit: int, *, what: str | None = None, hint: str | None = None,
              text: bool = False) -> bytes:
    """The bytes of the file at ``path`` (regular, FIFO, device, ``/dev/stdin``), at most ``limit``;
    :class:`TooLarge` beyond (``text``: a NUL byte refused). ``OSError`` from opening or reading reaches the
    caller (a directory: ``IsADirectoryError`` when it is read)."""
    with _open(path) as fh:
        try:
            return read_stream(fh, limit, what=what or str(path), hint=hint, text=text)
        except OSError as exc:
            raise _named(exc, path) from None


def read_text(path: Path | str, limit: int, *, what: str | None = None, hint: str | None = None,
              encoding: str = "utf-8") -> str:
    """:func:`read_file` of a text file (``text=True``), decoded (``UnicodeDecodeError`` reaches the
    caller)."""
    return read_file(path, limit, what=what, hint=hint, text=True).decode(encoding)


def read_file_arg(arg: str, limit: int, *, what: str | None = None, hint: str | None = None,
                  text: bool = True) -> bytes:
    """A text document named on the command line, ``-`` for stdin, at most ``limit`` bytes
    (:func:`read_file`, ``text`` by default); a missing file is ``NotFoundError`` (exit 3), one that cannot be
    read ``InvalidInputError`` (exit 4)."""
    from gpuledger.errors import NotFoundError

    if arg == "-":
        return read_stream(sys.stdin.buffer, limit, what=what or "stdin", hint=hint, text=text)
    try:
        return read_file(arg, limit, what=what or arg, hint=hint, text=text)
    except FileNotFoundError:
        raise NotFoundError(f"no such file: {arg}") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{arg} is a directory, not a file") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {arg}: {exc.strerror or exc}") from None


def iter_lines(path: Path | str, limit: int, *, max_line: int, what: str | None = None,
               hint: str | None = None) -> Iterator[bytes]:
    """The lines of the file at ``path`` (without their ``\\n``), read ``CHUNK_BYTES`` at a time: at most
    ``limit`` bytes in all (:class:`TooLarge` beyond, raised when the reading gets there), and of a line
    longer than ``max_line`` bytes its first ``max_line + 1`` (enough to tell it is too long; the rest is
    skipped unread into memory). Memory held: one chunk and one line."""
    shown = what or str(path)
    with _open(path) as fh:
        total = 0
        pend: list[bytes] = []
        pend_len = 0
        while True:
            try:
                chunk = fh.read(min(CHUNK_BYTES, limit + 1 - total))
            except OSError as exc:
                raise _named(exc, path) from None
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise TooLarge(shown, limit, hint=hint)
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                if nl < 0:
                    room = max_line + 1 - pend_len
                    if room > 0:
                        piece = chunk[start:start + room]
                        pend.append(piece)
                        pend_len += len(piece)
                    break
                room = max_line + 1 - pend_len
                if room > 0:
                    pend.append(chunk[start:min(nl, start + room)])
                yield b"".join(pend)
                pend.clear()
                pend_len = 0
                start = nl + 1
        if pend_len:
            yield b"".join(pend)


class _Body(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


async def read_body(content: _Body, limit: int, *, what: str) -> bytes:
    """A streamed HTTP body (``aiohttp``'s ``resp.content``) read to its end, at most ``limit`` bytes;
    :class:`TooLarge` beyond. (``content.read(n)`` returns what is buffered, not ``n`` bytes: one call
    reads a part of any body larger than a buffer.)"""
    buf = bytearray()
    try:
        while len(buf) <= limit:
            chunk = await content.read(min(CHUNK_BYTES, limit + 1 - len(buf)))
            if not chunk:
                return bytes(buf)
            buf += chunk
    except MemoryError:
        read = len(buf)
        buf = bytearray()
        raise _out_of_memory(what, read) from None
    raise TooLarge(what, limit)


__all__ = ["CHUNK_BYTES", "MAX_DOCUMENT_BYTES", "TooLarge", "iter_lines", "read_body", "read_file",
           "read_file_arg", "read_stream", "read_text"]
