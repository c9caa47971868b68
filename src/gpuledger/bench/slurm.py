"""Slurm: the one module of gpuledger that imports submitit, lazily (the optional extra ``gpuledger[slurm]``),
and the one that runs Slurm's client commands.

submitit writes a job array's sbatch script and each task's pickle (the function and its arguments) into
a folder every node must see, submits the array with ``sbatch``, and in each task runs the function and
pickles its result next to them (``submit_array``, ``TaskJob.result``). Job states come from ``squeue``
(``queue_states``): submitit's own watcher reads ``sacct``, which needs slurmdbd, and without it knows no
state at all. ``sinfo`` checks that a controller answers before anything is submitted (``check_client``),
``scancel`` cancels (``cancel``). These three go through the project's runner (``facts.runner``: argument
lists, a timeout, the process group killed); what they print is parsed strictly (a line that is not a
job id and a state is ignored), like anything else from outside.

Every client command needs to find the controller: ``SLURM_CONF`` (or the site's /etc/slurm/slurm.conf).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuledger.errors import InvalidInputError, MissingDependencyError, ResourceError
from gpuledger.facts.runner import CommandResult, Runner, SubprocessRunner
from gpuledger.textsafe import one_line
from gpuledger.urls import redact_text

INSTALL_HINT = 'pip install "gpuledger[slurm]" (submitit)'
CLIENT_PROGRAMS = ("sbatch", "srun", "squeue", "scancel", "sinfo")
COMMAND_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 12
_LOG_TAIL_BYTES = 64 * 1024
# squeue states of a task that is still in the queue (the others have ended).
QUEUED = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                    "RESV_DEL_HOLD"})
_QUEUE_LINE = re.compile(r"^(\d{1,12}(?:_\d{1,7})?)\|([A-Z_]{1,32})$")  # an array's task, or a lone job
_JOB_ID = re.compile(r"^\d{1,12}$")


def available() -> bool:
    """Is submitit installed here (without importing it)?"""
    return importlib.util.find_spec("submitit") is not None


def _submitit() -> ModuleType:
    try:
        import submitit
    except ImportError as exc:
        raise MissingDependencyError(f"submitit is not installed ({exc})", hint=INSTALL_HINT) from exc
    # submitit's logger writes its notices to stdout, which is --json's: they go to stderr only.
    log = logging.getLogger("submitit")
    for handler in list(log.handlers):
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            log.removeHandler(handler)
    return submitit


def runner() -> SubprocessRunner:
    """The runner of the Slurm commands, with this process's environment (``SLURM_CONF`` included)."""
    return SubprocessRunner()


def _failed(result: CommandResult) -> str:
    lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
    why = f": {one_line(redact_text(lines[0]), 300)}" if lines else ""
    return f"{result.summary()}{why}"


def check_client(run: Runner) -> list[str]:
    """The partitions of the cluster this machine's Slurm commands talk to; ``MissingDependencyError``
    when they are not installed, ``ResourceError`` (naming the command and why) when the controller does
    not answer."""
    folders = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    absent = [p for p in CLIENT_PROGRAMS if not any(Path(d, p).is_file() for d in folders)]
    if absent:
        raise MissingDependencyError(
            f"--backend slurm needs Slurm's client commands, and {', '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} not on PATH",
            hint="run it on a login node of the cluster (Debian: apt-get install slurm-client)")
    if not available():
        raise MissingDependencyError("--backend slurm submits the cells with submitit, which is not "
                                     "installed", hint=INSTALL_HINT)
    result = run(["sinfo", "-h", "-o", "%P"], timeout_s=COMMAND_TIMEOUT_S)
    if not result.ok:
        raise ResourceError(f"Slurm does not answer: {_failed(result)}",
                            hint="is slurmctld running, and SLURM_CONF set to its slurm.conf? "
                            "(docs/matrix.md)")
    names = []
    for line in result.stdout.splitlines():
        name = line.strip().rstrip("*")
        if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+@-]{0,127}", name):
            names.append(name)
    return names


@dataclass(frozen=True)
class TaskJob:
    """One task of a submitted array: its job id (``ARRAY_INDEX``) and submitit's handle on it."""

    job_id: str
    array_id: str
    handle: Any

    def result_ready(self) -> bool:
        return bool(self.handle.paths.result_pickle.exists())

    def result(self) -> tuple[bool, Any]:
        """``(True, what the function returned)``, or ``(False, the last line of what it raised)``; only
        once ``result_ready``."""
        utils = _submitit().core.utils
        try:
            return True, self.handle.result()
        except utils.UncompletedJobError as exc:
            return False, _raised(str(exc))

    @property
    def log(self) -> Path:
        return Path(self.handle.paths.stderr)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last lines of the task's log (stderr, else stdout), each made safe to show."""
        for path in (Path(self.handle.paths.stderr), Path(self.handle.paths.stdout)):
            text = _tail(path)
            kept = [one_line(redact_text(ln), 300) for ln in text.splitlines() if ln.strip()]
            if kept:
                return kept[-lines:]
        return []


def has_result(folder: Path, job_id: str) -> bool:
    """Whether the task ``job_id`` submitted from ``folder`` has left its result there (it is ending)."""
    paths = _submitit().core.utils.JobPaths(folder, job_id=job_id, task_id=0)
    return bool(paths.result_pickle.exists())


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _LOG_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _raised(text: str) -> str:
    """The exception line of a traceback that submitit kept (the last line of its trace block)."""
    block = text.split("-" * 22)
    trace = block[1] if len(block) >= 3 else text
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip() and not ln.startswith(" ")]
    return one_line(redact_text(lines[-1] if lines else text.strip() or "no trace"), 300)


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``extra`` in this process's environment while sbatch runs (it exports the environment to the
    tasks), then the environment as it was."""
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def submit_array(folder: Path, parameters: Mapping[str, Any], fn: Callable[..., Any],
                 arguments: Sequence[tuple[Any, ...]], *, python: str | None = None,
                 environment: Mapping[str, str] | None = None) -> list[TaskJob]:
    """Submit ``fn(*args)`` for each of ``arguments`` as one job array (submitit's sbatch options in
    ``parameters``), the variables of ``environment`` exported to the tasks; returns the tasks in order.
    ``ResourceError`` with sbatch's own line when it refuses the array."""
    submitit = _submitit()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        executor = submitit.SlurmExecutor(folder=str(folder),
                                          python=None if python is None else shlex.quote(python))
        executor.update_parameters(**parameters)
    except OSError as exc:
        raise InvalidInputError(f"cannot write the Slurm folder {folder}: {exc.strerror or exc}") from exc
    except (RuntimeError, ValueError) as exc:  # srun not found; an option submitit does not know
        raise ResourceError(f"submitit refused the job array: {one_line(str(exc), 300)}") from exc
    columns = list(zip(*arguments, strict=True))
    quiet = io.StringIO()  # submitit prints sbatch's stderr itself before raising it: once is enough
    try:
        with _environment(environment or {}), contextlib.redirect_stderr(quiet):
            jobs = executor.map_array(fn, *columns)
    except submitit.core.utils.FailedJobError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = one_line(redact_text(lines[0]), 300) if lines else "no message"
        raise ResourceError(f"`sbatch` refused the job array: {why}",
                            hint=f"its script is in {folder}; docs/matrix.md, 'Slurm'") from exc
    except submitit.core.utils.FailedSubmissionError as exc:
        raise ResourceError(f"`sbatch` answered what submitit cannot read: "
                            f"{one_line(str(exc), 300)}") from exc
    except OSError as exc:
        raise ResourceError(f"cannot run `sbatch`: {exc.strerror or exc}") from exc
    out = []
    for job in jobs:
        array_id, _, _ = str(job.job_id).partition("_")
        out.append(TaskJob(str(job.job_id), array_id, job))
    return out


def queue_states(run: Runner, array_ids: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """Each array task (``ARRAY_INDEX``) still known to squeue (running, pending, or ended a few minutes
    ago: Slurm's MinJobAge) and its state; a line of an array's bare id is the state of its tasks not
    listed on their own (the pending rest of an array, cancelled: ``state_of``), or a lone job's (submitit
    submits an array of one as one job). With, when squeue did not answer, why (the states are then
    empty)."""
    ids = [a for a in array_ids if _JOB_ID.match(a)]
    if not ids:
        return {}, None
    result = run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T"],
                 timeout_s=COMMAND_TIMEOUT_S)
    if not result.ok:
        if result.rc is not None and "Invalid job id" in result.stderr:
            return {}, None  # every one of them has left the queue
        return {}, _failed(result)
    states: dict[str, str] = {}
    for line in result.stdout.splitlines():
        m = _QUEUE_LINE.match(line.strip())
        if m:
            states[m.group(1)] = m.group(2)
    return states, None


def state_of(states: Mapping[str, str], job_id: str) -> str | None:
    """A task's state in what ``queue_states`` returned."""
    return states.get(job_id) or states.get(job_id.partition("_")[0])


def cancel(run: Runner, array_ids: Sequence[str], *, pending_only: bool = False) -> str | None:
    """``scancel`` the arrays (only their pending tasks with ``pending_only``); returns why it failed."""
    ids = [a for a in array_ids if _JOB_ID.match(a)]
    if not ids:
        return None
    argv = ["scancel", *(["--state=PENDING"] if pending_only else []), *ids]
    result = run(argv, timeout_s=COMMAND_TIMEOUT_S)
    return None if result.ok else _failed(result)
