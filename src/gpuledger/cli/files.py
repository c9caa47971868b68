"""The one way every command writes an output file (``export -o``, ``report --html/--md``, ``lock -o``,
``run --html``); docs/contracts.md, "Output files".

- A new path, or an existing regular file: written atomically (a temporary file in the same directory,
  flushed to disk, then renamed over the target), so a reader sees the old file or the new one, never
  half of one, and a failed write leaves the old file as it was. A replaced file keeps its permission
  bits; a new one gets the usual ``0666 & ~umask``.
- Anything else is refused with one line, exit 4, and left untouched: a symbolic link (not followed:
  a link can point anywhere, ``/dev/full`` or a file the user did not mean), a FIFO, a device node, a
  socket, a directory. Output to stdout is each command's own option (no ``-o``; ``--md -``).
- The directory must exist (exit 4 naming it): a typo in a path does not create a tree of directories.
  Only gpuledger's own default locations (``run``'s reports folder in the data dir) are created.
- ``overwrite=False`` refuses an existing file (``lock -o`` without ``--force``).
- A disk that is full or failing is exit 74 ("output error"); a path that cannot be written
  (permission, read-only file system, not a directory) is exit 4.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from gpuledger.errors import InvalidInputError, OutputError

# Failures of the device rather than of the path the user gave.
_DEVICE_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_target(path: Path, *, overwrite: bool = True, make_parents: bool = False,
                 force_hint: str = "--force") -> os.stat_result | None:
    """Refuse a target that ``write_output`` would refuse, before any work is done. Returns the
    existing file's status (None for a new path)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InvalidInputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInputError(
                f"cannot write {path}: it is {_kind(st.st_mode)}, not a regular file; gpuledger writes "
                "output only to a new path or over a regular file, and leaves this one untouched",
                hint="give a file path (for a link, the file it points to); to print to stdout leave "
                "out the output option (export) or use --md - (report)",
            )
        if not overwrite:
            raise InvalidInputError(f"{path} exists; pass {force_hint} to replace it")
        return st
    parent = path.parent
    if not make_parents and not parent.is_dir():
        raise InvalidInputError(
            f"cannot write {path}: the directory {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}) or give another path",
        )
    return None


def _fsync_dir(directory: Path) -> None:
    # Makes the rename durable; a file system that cannot open or sync a directory still has the file.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_error(path: Path, exc: OSError) -> InvalidInputError | OutputError:
    text = f"cannot write {path}: {exc.strerror or exc}"
    if exc.errno in _DEVICE_ERRNOS:
        return OutputError(text + " (the previous file, if any, is unchanged)")
    return InvalidInputError(text)


def write_output(path: Path, data: bytes | str, *, overwrite: bool = True, make_parents: bool = False,
                 force_hint: str = "--force") -> int:
    """Write ``data`` (str as UTF-8) to ``path`` by the rules above; returns the number of bytes."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    st = check_target(path, overwrite=overwrite, make_parents=make_parents, force_hint=force_hint)
    directory = path.parent
    if make_parents:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _write_error(path, exc) from exc
    tmp = directory / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        # O_EXCL: never write through something that appeared under the temporary name; 0o666 lets
        # the umask decide a new file's permissions, as for any file the user creates.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as out:
            if st is not None:
                with contextlib.suppress(OSError):  # a file we cannot chmod keeps the umask's mode
                    os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # interrupted or failed: no temporary file is left behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from exc
        raise
    _fsync_dir(directory)
    return len(payload)
