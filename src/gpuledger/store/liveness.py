"""Is the process that writes a ``running`` run still alive?

A run records who writes it: host name, PID namespace, PID and the process start time. A reader on
the same host and PID namespace asks the kernel whether that process (the same one, not a reused
PID) still exists. A reader elsewhere cannot, and uses the heartbeat instead: the run's
``updated_at``, refreshed by every write, must be younger than ``STALE_AFTER_S``.

A run whose writer is alive is not deleted (``Store.delete_run``: :class:`RunBeingWritten`, exit 4,
unless forced); :func:`who_writes` says who holds it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

import psutil

from gpuledger.errors import InvalidInputError

# A writer seen from another host counts as gone after this long without a write.
STALE_AFTER_S = 600.0
# Process start times are compared with this tolerance (they are read from /proc in clock ticks).
_START_TOLERANCE_S = 1.0


@dataclass(frozen=True, slots=True)
class Writer:
    host: str
    pid: int
    pidns: str | None
    started: float | None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def current_writer() -> Writer:
    pid = os.getpid()
    return Writer(socket.gethostname(), pid, _pid_namespace(), _process_start(pid))


def writer_alive(writer: Writer | None, updated_at: datetime, now: datetime) -> bool:
    """True when the run's writer may still be writing it."""
    if writer is None:
        # Imported or legacy runs have no writer: nobody can finish them.
        return False
    here = current_writer()
    if writer.host == here.host and writer.pidns == here.pidns:
        verdict = _local_process_alive(writer)
        if verdict is not None:
            return verdict
    return (now - updated_at).total_seconds() < STALE_AFTER_S


def _local_process_alive(writer: Writer) -> bool | None:
    """True/False when the kernel can tell; None when it cannot (no permission)."""
    try:
        proc = psutil.Process(writer.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return None
    # A different start time means the PID now belongs to another process.
    return writer.started is None or abs(started - writer.started) <= _START_TOLERANCE_S


class RunBeingWritten(InvalidInputError):
    """A ``running`` run whose writer is alive, which a delete would pull from under it (exit 4)."""


def who_writes(writer: Writer | None, updated_at: datetime, now: datetime) -> str:
    """Who is writing a run whose writer is alive, in words: ``process 1234 on this host`` or
    ``host gpu-7, last written 12 s ago``."""
    if writer is None:
        return "no recorded writer"
    here = current_writer()
    if writer.host == here.host and writer.pidns == here.pidns and _local_process_alive(writer) is not None:
        return f"process {writer.pid} on this host"
    age = max((now - updated_at).total_seconds(), 0.0)
    return (f"host {writer.host[:64]}, last written {age:.0f} s ago (a writer elsewhere counts as alive for "
            f"{STALE_AFTER_S / 60:g} minutes after its last write)")
