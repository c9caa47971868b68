"""Subprocess runner for the collectors: argument lists only, always a timeout, bytes decoded safely.

Every command the collectors run goes through a :class:`Runner`. The default one looks the program up
on ``PATH`` (the ``PATH`` of the environment it is given, so tests can put small scripts first), runs
it in its own process group with a timeout, kills the whole group when the timeout passes (a shell
script that started ``sleep`` does not keep the pipes open), and decodes the output with
``errors="replace"`` so non-UTF-8 bytes never raise. Failures are values, not exceptions: a missing
program is ``not_found``, a program that cannot be executed has ``error``, a hang is ``timed_out``.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEFAULT_TIMEOUT_S = 5.0
_KILL_GRACE_S = 1.0
_MAX_OUTPUT_BYTES = 8 * 1024 * 1024


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

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.not_found and self.error is None

    @property
    def ran(self) -> bool:
        """The program was found and started (it may still have failed)."""
        return not self.not_found and self.error is None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def summary(self) -> str:
        """One line saying how the command ended."""
        if self.not_found:
            return f"{self.argv[0]}: not found on PATH"
        if self.timed_out:
            return f"`{self.command}` did not finish within {self.timeout_s:g} s and was killed"
        if self.error is not None:
            return f"`{self.command}`: {self.error}"
        return f"`{self.command}` exited with status {self.rc}"

    def output_lines(self, limit: int = 6) -> list[str]:
        """The first non-empty lines of stdout then stderr, for evidence."""
        lines: list[str] = []
        for stream in (self.stdout, self.stderr):
            for raw in stream.splitlines():
                line = raw.strip()
                if line:
                    lines.append(line[:300])
                if len(lines) >= limit:
                    return lines
        return lines

    def evidence(self, limit: int = 6) -> list[str]:
        return [self.summary(), *self.output_lines(limit)]


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


def _decode(data: bytes | None) -> str:
    if not data:
        return ""
    return data[:_MAX_OUTPUT_BYTES].decode("utf-8", errors="replace")


class SubprocessRunner:
    """The real runner. ``env`` is the environment the commands see (and whose ``PATH`` is searched)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        base = dict(os.environ if env is None else env)
        # Stable, untranslated messages: the collectors match English error texts.
        base["LC_ALL"] = "C"
        base.pop("LANGUAGE", None)
        self._env = base
        self._path = base.get("PATH", os.defpath)

    def which(self, name: str) -> str | None:
        return find_program(name, self._path)

    def __call__(self, argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        args = tuple(argv)
        exe = self.which(args[0])
        if exe is None:
            return CommandResult(args, not_found=True, timeout_s=timeout_s)
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
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=_KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
        duration = time.monotonic() - start
        return CommandResult(
            args,
            rc=None if timed_out else proc.returncode,
            stdout=_decode(out),
            stderr=_decode(err),
            timed_out=timed_out,
            duration_s=duration,
            timeout_s=timeout_s,
            executable=exe,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    except PermissionError:
        proc.kill()
