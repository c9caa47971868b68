"""What a matrix's cells come to and how a matrix is stopped, shared by its backends (``bench.matrix_run``
runs them in this process or on Ray, ``bench.matrix_slurm`` on Slurm): what the matrix announces when it
starts (``MatrixStart``), a cell's outcome (``CellOutcome``, with ``SlurmTaskInfo`` on Slurm), the stopping
state, the signal handling that stops it, and the command that resumes it.

The models are frozen; a ``CellOutcome`` is what a cell returns from wherever it ran (it pickles across to
the matrix from a Ray worker or a Slurm task), what ``Events.on_cell`` hears and what ``--json`` lists."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

_DOC = ConfigDict(extra="forbid", frozen=True)
OutcomeStatus = Literal["complete", "failed", "incomplete", "skipped", "not run"]


class MatrixStart(BaseModel):
    """What the matrix announces once it knows what it will run (``Events.on_start``): its id, the runs its
    plan makes, how many of them this invocation runs and how many were complete before, where the cells
    run, and whether it takes up an earlier matrix."""

    model_config = _DOC

    matrix_id: str
    planned: int
    to_run: int
    already_complete: int
    where: str
    resumed: bool


class SlurmTaskInfo(BaseModel):
    """Where a cell ran on Slurm: its array task's job id, its log file and the log's last lines."""

    model_config = _DOC

    job_id: str
    log: str | None = None
    log_tail: list[str] = []


class CellOutcome(BaseModel):
    """How one cell × repeat ended in this invocation."""

    model_config = _DOC

    key: str
    repeat: int
    status: OutcomeStatus
    run_id: str | None = None
    reason: str | None = None
    attempt: int = 0
    interrupted: bool = False
    slurm: SlurmTaskInfo | None = None


@dataclass
class State:
    """Whether the matrix is being stopped, and whether that was announced (store, events) yet."""

    stopping: bool = False
    announced: bool = False


def resume_hint(where: str, matrix_id: str) -> str:
    return f"gpuledger matrix {where} --resume {matrix_id}"


@contextlib.contextmanager
def first_signal_stops(state: State) -> Iterator[None]:
    """While cells run elsewhere (Ray, Slurm): the first Ctrl-C / SIGTERM sets ``state.stopping``; the next
    raises."""
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if state.stopping:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        state.stopping = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing is installed
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, old)


__all__ = ["CellOutcome", "MatrixStart", "OutcomeStatus", "SlurmTaskInfo", "State", "first_signal_stops",
           "resume_hint"]
