"""Subprocess runner for the collectors and the CLI telemetry sources: argument lists only, always a
timeout, output capped, bytes decoded safely, no process left behind.

Every command gpuledger runs on the machine goes through a :class:`Runner`. The default one looks the
program up on ``PATH`` (the ``PATH`` of the environment it is given, so tests can put small scripts
first) and runs it in its own session (so its own process group). It reads stdout and stderr itself:

- at most :data:`MAX_OUTPUT_BYTES` of each; a program that prints more is killed and its result says
  "printed more than N bytes" (``error``) — its output is not parsed;
- until the timeout; then the whole group is killed (a shell script's ``sleep`` child and its own
  children too) and the result is ``timed_out``;
- when the program itself has exited, whatever it left running in its group (a grandchild holding the
  pipes open, a background ``sleep``) is killed too, after :data:`DRAIN_S` for the pipes to empty.

Output is decoded as UTF-8 with ``errors="replace"`` and NUL bytes become U+FFFD, so no tool output
raises on decoding. Failures are values, not exceptions: a missing program is ``not_found``, a program
that cannot be executed or printed too much has ``error``, a hang is ``timed_out``.

A program that hung is remembered for :data:`HUNG_MEMORY_S` in this process (by its file's identity
and the environment it ran in): later commands of the same program return at once as timed out, saying
when it hung, instead of each waiting its own timeout (a wedged driver hangs every ``nvidia-smi``: the
fingerprint, each fallback format and the telemetry probe used to wait in turn).
"""

from __future__ import annotations

import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

DEFAULT_TIMEOUT_S = 5.0
MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # per stream; nvidia-smi -q -x of an 8-GPU server is ~200 KB
DRAIN_S = 0.5  # after the program exited: how long its leftovers may keep the pipes open
HUNG_MEMORY_S = 300.0
_KILL_GRACE_S = 1.0
_READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command did. ``rc`` is ``None`` when it never ran or was killed."""

    argv: tuple[str, ...]
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    not_found: bool = False
    error: str | None = None
    duration_s: float = 0.0
    timeout_s: float = DEFAULT_TIMEOUT_S
    executable: str | None = None
    note: str | None = None  # why a timed-out command was not run at all (hung earlier, budget spent)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.not_found and self.error is None

    @property
    def ran(self) -> bool:
        """The program was found and started (it may still have failed)."""
        return not self.not_found and self.error is None and self.note is None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def summary(self) -> str:
        """One line saying how the command ended."""
        if self.not_found:
            return f"{self.argv[0]}: not found on PATH"
        if self.note is not None:
            return f"`{self.command}` not run: {self.note}"
        if self.timed_out:
            return f"`{self.command}` did not finish within {self.timeout_s:g} s and was killed"
        if self.error is not None:
            return f"`{self.command}`: {self.error}"
        return f"`{self.command}` exited with status {self.rc}"

    def output_lines(self, limit: int = 6) -> list[str]:
        """The first non-empty lines of stdout then stderr, for evidence (each at most 300 characters)."""
        lines: list[str] = []
        for stream in (self.stdout, self.stderr):
            for raw in _first_lines(stream, limit):
                line = raw.strip()
                if line:
                    lines.append(line[:300])
                if len(lines) >= limit:
                    return lines
        return lines

    def evidence(self, limit: int = 6) -> list[str]:
        return [self.summary(), *self.output_lines(limit)]


def _first_lines(text: str, limit: int) -> list[str]:
    """The first lines of ``text`` that may hold ``limit`` non-empty ones, without splitting all of a
    4 MiB output."""
    out: list[str] = []
    start = 0
    while start < len(text) and len(out) < limit * 4:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        out.append(text[start:min(end, start + 1000)])
        start = end + 1
    return out


class Runner(Protocol):
    """Runs one command. Implementations never raise for command failures."""

    def __call__(self, argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CommandResult: ...


class CappedRunner:
    """Wraps a runner so no command waits longer than ``cap_s`` (``--timeout`` / tests)."""

    def __init__(self, inner: Runner, cap_s: float) -> None:
        self._inner = inner
        self._cap = cap_s

    def __call__(self, argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        return self._inner(argv, timeout_s=min(timeout_s, self._cap))


class BudgetRunner:
    """Wraps a runner so that all its commands together end within ``budget_s`` of its creation: each
    one waits at most the time left, and once the budget is spent commands are not started (their
    result is timed out, with a note saying so). Shared by concurrent collectors."""

    def __init__(self, inner: Runner, budget_s: float) -> None:
        self._inner = inner
        self.budget_s = budget_s
        self._deadline = time.monotonic() + budget_s

    def __call__(self, argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        left = self._deadline - time.monotonic()
        if left < 0.05:
            return CommandResult(tuple(argv), timed_out=True, timeout_s=0.0,
                                 note=f"the {self.budget_s:g} s allowed for all tools was spent")
        return self._inner(argv, timeout_s=min(timeout_s, left))


def find_program(name: str, path: str | None) -> str | None:
    """First file called ``name`` on ``path`` (executable or not: a non-executable file is reported
    as such by the runner instead of silently skipped)."""
    if os.sep in name:
        return name if Path(name).exists() else None
    for folder in (path or "").split(os.pathsep):
        if not folder:
            continue
        candidate = Path(folder) / name
        if candidate.is_file():
            return str(candidate)
    return None


def decode_output(data: bytes) -> str:
    """Tool bytes -> text that never raises: invalid UTF-8 and NUL bytes become U+FFFD."""
    if not data:
        return ""
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


# --------------------------------------------------------------------------- hung programs (per process)

_HungKey = tuple[str, int, int, int, int]
_hung: dict[_HungKey, tuple[float, float]] = {}  # program identity -> (when it hung, its timeout)
_hung_lock = threading.Lock()


def _identity(exe: str, env_hash: int) -> _HungKey | None:
    try:
        st = os.stat(exe)
    except OSError:
        return None
    return (os.path.realpath(exe), st.st_ino, st.st_mtime_ns, st.st_size, env_hash)


def _hung_note(key: _HungKey | None) -> str | None:
    if key is None:
        return None
    now = time.monotonic()
    with _hung_lock:
        seen = _hung.get(key)
        if seen is None or now - seen[0] > HUNG_MEMORY_S:
            _hung.pop(key, None)
            return None
    return (f"{Path(key[0]).name} did not finish within {seen[1]:g} s {now - seen[0]:.0f} s ago in this "
            f"process (tried again after {HUNG_MEMORY_S:g} s)")


def _remember_hung(key: _HungKey | None, timeout_s: float) -> None:
    if key is not None:
        with _hung_lock:
            _hung[key] = (time.monotonic(), timeout_s)


def forget_hung_programs() -> None:
    """Forget every program that hung (tests; a long-lived process after fixing the driver)."""
    with _hung_lock:
        _hung.clear()


# --------------------------------------------------------------------------- the real runner


class SubprocessRunner:
    """The real runner. ``env`` is the environment the commands see (and whose ``PATH`` is searched)."""

    def __init__(
        self, env: Mapping[str, str] | None = None, *, max_output_bytes: int = MAX_OUTPUT_BYTES
    ) -> None:
        base = dict(os.environ if env is None else env)
        # Stable, untranslated messages: the collectors match English error texts.
        base["LC_ALL"] = "C"
        base.pop("LANGUAGE", None)
        self._env = base
        self._env_hash = hash(tuple(sorted(base.items())))
        self._path = base.get("PATH", os.defpath)
        self.max_output_bytes = max_output_bytes

    def which(self, name: str) -> str | None:
        return find_program(name, self._path)

    def __call__(self, argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        args = tuple(argv)
        exe = self.which(args[0])
        if exe is None:
            return CommandResult(args, not_found=True, timeout_s=timeout_s)
        key = _identity(exe, self._env_hash)
        note = _hung_note(key)
        if note is not None:
            return CommandResult(args, timed_out=True, timeout_s=timeout_s, executable=exe, note=note)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                [exe, *args[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except PermissionError as exc:
            return CommandResult(
                args, error=f"permission denied ({exc.strerror or exc})", timeout_s=timeout_s, executable=exe
            )
        except OSError as exc:
            return CommandResult(
                args, error=f"cannot execute: {exc.strerror or exc}", timeout_s=timeout_s, executable=exe
            )
        try:
            out, err, timed_out, over = _collect(proc, start + timeout_s, self.max_output_bytes)
        finally:
            _kill_group(proc)
            _reap(proc)
        if timed_out:
            _remember_hung(key, timeout_s)
        error = None
        if over is not None:
            error = f"printed more than {self.max_output_bytes} bytes on {over}; stopped reading, killed it"
        return CommandResult(
            args,
            rc=None if timed_out or over else proc.returncode,
            stdout=decode_output(out),
            stderr=decode_output(err),
            timed_out=timed_out,
            error=error,
            duration_s=time.monotonic() - start,
            timeout_s=timeout_s,
            executable=exe,
        )


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the program has exited, WITHOUT reaping it: while it is a zombie its pid (= its process
    group id) cannot be reused, so killing the group later cannot hit another process."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):  # macOS before Python 3.13: reap (the pid may then be reused, rarely)
        return proc.poll() is not None
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, cap: int
) -> tuple[bytes, bytes, bool, str | None]:
    """Read both pipes until the program has exited and they are closed (or :data:`DRAIN_S` after its
    exit), the deadline passes, or one stream passes ``cap`` bytes.
    Returns (stdout, stderr, timed out, the stream that overflowed)."""
    streams: dict[int, tuple[str, IO[bytes], bytearray]] = {}
    sel = selectors.DefaultSelector()
    for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        if pipe is not None:
            os.set_blocking(pipe.fileno(), False)
            streams[pipe.fileno()] = (name, pipe, bytearray())
            sel.register(pipe.fileno(), selectors.EVENT_READ)
    exited_at: float | None = None
    over: str | None = None
    try:
        while over is None:
            now = time.monotonic()
            if exited_at is None and _exited(proc):
                exited_at = now
            limit = deadline if exited_at is None else min(deadline, exited_at + DRAIN_S)
            if not sel.get_map():  # both pipes closed: wait for the exit itself
                if exited_at is not None or now >= deadline:
                    break
                time.sleep(min(0.02, deadline - now))
                continue
            if now >= limit:
                break  # hung, or done while leftovers hold the pipes: the group is killed next
            for sel_key, _ in sel.select(timeout=min(0.1, limit - now)):
                fd = int(sel_key.fd)
                name, _pipe, buf = streams[fd]
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                buf.extend(chunk)
                if len(buf) > cap:
                    del buf[cap:]
                    over = name
                    break
        timed_out = over is None and not _exited(proc)
    finally:
        sel.close()
        for _, pipe, _ in streams.values():
            pipe.close()
    by_name = {name: bytes(buf) for name, _, buf in streams.values()}
    return by_name.get("stdout", b""), by_name.get("stderr", b""), timed_out, over


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the program's whole process group (it leads it: ``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    except PermissionError:
        if proc.returncode is None:
            proc.kill()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
