"""One cell of a benchmark matrix at one repeat: the ordinary bench, its run written into the shared store
under the id the cell reserved, tagged with the matrix, the cell's key and the repeat.

``execute_cell(task)`` is what runs on a Ray worker (``bench.cluster.CellTasks``), as a Slurm task, or,
without Ray, in the matrix's own process; it returns the cell's ``CellOutcome`` (``outcome``), which the
matrix checks when it comes from another process (``checked_outcome``). It claims the cell
(``Store.claim_cell``: a ``complete`` cell is not run again; an earlier attempt's unfinished run is
replaced), runs the bench (``bench.runner``) with the run's workload recording ``matrix = {id, cell,
repeat}`` and ``repeat = {group, index, of}`` (the cell's repeats are one group: ``cost GROUP``), and
records how it ended (``finish_cell``):

- ``complete``: the run finished as planned;
- ``failed``: the server could not be used (the bench refused to start: the reason), every request failed,
  or the server went away during the window (the run is kept, ``incomplete``, with the reason);
- ``incomplete``: the cell was stopped (Ctrl-C on the matrix: ``Store.set_matrix_status("stopping")``,
  which a watcher thread here polls every ``STOP_POLL_S``, stops the run as SIGINT would).

Anything else (a bug) is recorded as ``failed`` with its type and message, then raised.

Secrets stay out of what a task carries when it crosses to another process through a file (a Slurm
task's pickle, a Kubernetes ConfigMap): the store URL, a target URL and its telemetry URLs are carried
redacted, and ``db_env`` / ``url_env`` / ``telemetry_env`` name the environment variables that hold them
where the cell runs (sbatch exports the submitting environment; a pod has them from its Secret; the
telemetry URLs one per line). ``from_environment`` puts them back, each checked to be the URL the task
names (the same URL with its secrets).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from gpuledger.bench.cluster import current_node
from gpuledger.bench.matrix_state import CellOutcome, OutcomeStatus
from gpuledger.bench.runner import Fingerprint, Hooks, run_bench_async
from gpuledger.errors import GpuledgerError, Interrupted, InvalidInputError, StoreError
from gpuledger.records import RunInfo, load_spec
from gpuledger.records.workloads import REPEAT_KEY
from gpuledger.store import Store, open_store
from gpuledger.urls import REDACTED, redact_url

STOP_POLL_S = 1.0
STOP_SIGNAL = "matrix stop"
MATRIX_KEY = "matrix"
DB_ENV = "GPULEDGER_MATRIX_DB"
URL_ENV_PREFIX = "GPULEDGER_MATRIX_URL_"
TELEMETRY_ENV_PREFIX = "GPULEDGER_MATRIX_TELEMETRY_"
Ended = Literal["complete", "failed", "incomplete"]  # how a cell that ran ends: in the store and its outcome


def _env_suffix(target: str) -> str:
    return (re.sub(r"[^A-Z0-9]+", "_", target.upper()).strip("_") or "TARGET")[:64]


def url_env_name(target: str) -> str:
    """The variable that holds a target's base URL, secrets included, where its cells run."""
    return URL_ENV_PREFIX + _env_suffix(target)


def telemetry_env_name(target: str) -> str:
    """The variable that holds a target's ``telemetry_from`` URLs, secrets included, one per line."""
    return TELEMETRY_ENV_PREFIX + _env_suffix(target)


def has_secret(url: str) -> bool:
    """Whether ``url`` carries something ``redact_url`` hides (a password, a token parameter)."""
    return redact_url(url) != url


@dataclass(frozen=True, slots=True)
class CellTask:
    """Everything a cell needs, in plain values (it crosses to a Ray worker): the store, the cell's natural
    key, its group, its spec document and how the run is made."""

    db: str
    matrix_id: str
    key: str
    repeat: int
    of: int
    group: str
    spec: dict[str, Any]
    telemetry_from: tuple[str, ...] = ()
    workers: int = 1
    db_env: str | None = None
    url_env: str | None = None
    telemetry_env: str | None = None


def from_environment(task: CellTask, env: Mapping[str, str] | None = None) -> CellTask:
    """``task`` with the store URL, its target's base URL and telemetry URLs taken from ``db_env`` /
    ``url_env`` / ``telemetry_env`` when the environment has them (each must be the URL the task carries,
    secrets aside); a task carrying a redacted URL whose variable is not set cannot run: ``StoreError`` /
    ``InvalidInputError`` saying so."""
    env = os.environ if env is None else env
    db, spec = task.db, task.spec
    if task.db_env is not None:
        given = env.get(task.db_env, "").strip()
        if given and redact_url(given) != redact_url(task.db):
            raise StoreError(f"${task.db_env} is another store than the matrix's ({redact_url(task.db)})")
        if not given and REDACTED in task.db:
            raise StoreError(f"the store's password did not reach this cell: ${task.db_env} is not set "
                             f"here (store {task.db})", hint="sbatch must export the submitting environment "
                             "(no --export=NONE); a pod has it from its Secret")
        db = given or task.db
    base = spec.get("base_url")
    if task.url_env is not None and isinstance(base, str):
        given = env.get(task.url_env, "").strip()
        if given and redact_url(given) != base:
            raise InvalidInputError(f"${task.url_env} is another server than the cell's ({base})")
        if not given and REDACTED in base:
            raise InvalidInputError(f"the server URL's credentials did not reach this cell: ${task.url_env} "
                                    f"is not set here ({base})")
        if given:
            spec = {**spec, "base_url": given}
    telemetry = task.telemetry_from
    if task.telemetry_env is not None and telemetry:
        urls = tuple(u.strip() for u in env.get(task.telemetry_env, "").splitlines() if u.strip())
        if urls and tuple(redact_url(u) for u in urls) != telemetry:
            raise InvalidInputError(f"${task.telemetry_env} names other exporters than the cell's "
                                    f"({', '.join(telemetry)})")
        if not urls and any(REDACTED in u for u in telemetry):
            raise InvalidInputError(f"the telemetry URLs' credentials did not reach this cell: "
                                    f"${task.telemetry_env} is not set here ({', '.join(telemetry)})")
        telemetry = urls or telemetry
    return dataclasses.replace(task, db=db, spec=spec, telemetry_from=telemetry)


def outcome(task: CellTask, status: OutcomeStatus, *, run_id: str | None = None, reason: str | None = None,
            attempt: int = 0, interrupted: bool = False) -> CellOutcome:
    """What a cell reports back to the matrix; ``interrupted``: its run was stopped by a signal or the
    matrix's stop."""
    return CellOutcome(key=task.key, repeat=task.repeat, status=status, run_id=run_id, reason=reason,
                       attempt=attempt, interrupted=interrupted)


def checked_outcome(task: CellTask, value: object, who: str) -> CellOutcome | str:
    """``value``, what ``who`` (a Ray task, a Slurm task: another process) returned for ``task``, as the
    cell's outcome; or, when it is not one or is another cell's, why (one line starting with ``who``). It
    is outside input: anything but a ``CellOutcome`` is validated into one."""
    try:
        out = value if isinstance(value, CellOutcome) else CellOutcome.model_validate(value)
    except ValidationError:
        return f"{who} returned something that is not its outcome"
    if (out.key, out.repeat) != (task.key, task.repeat):
        return f"{who} returned another cell's outcome"
    return out


def cell_status(info: RunInfo) -> tuple[Ended, str | None]:
    """How a cell whose run was stored ended, and why when not as planned."""
    s = info.summary
    if s is not None and s.interrupted is not None:
        return "incomplete", (f"stopped ({s.interrupted.signal}) with {s.interrupted.finished_requests} "
                              "finished requests kept")
    if s is not None and s.aborted:
        return "failed", s.aborted
    if info.status == "failed":
        first = s.error_examples[0].error if s is not None and s.error_examples else None
        return "failed", f"every request failed; the first: {first}"
    if info.status != "complete":
        return "incomplete", f"the run was stored {info.status}"
    return "complete", None


class _StopWatch:
    """Polls the matrix's status and stops the cell's run once the matrix is being stopped."""

    def __init__(self, store: Store, matrix_id: str) -> None:
        self._store, self._matrix_id = store, matrix_id
        self._stop: Callable[[str], None] | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self.stopped = False
        self._thread = threading.Thread(target=self._poll, name="gpuledger-matrix-stop", daemon=True)
        self._thread.start()

    def attach(self, stop: Callable[[str], None]) -> None:
        with self._lock:
            self._stop = stop
            if self.stopped:
                stop(STOP_SIGNAL)

    def _poll(self) -> None:
        while not self._closed.wait(STOP_POLL_S):
            try:
                stopping = self._store.matrix_status(self._matrix_id) == "stopping"
            except GpuledgerError:
                continue  # the store did not answer this time: ask again at the next poll
            if stopping:
                with self._lock:
                    self.stopped = True
                    if self._stop is not None:
                        self._stop(STOP_SIGNAL)
                return

    def close(self) -> None:
        self._closed.set()
        self._thread.join(STOP_POLL_S * 2)


def _workload(task: CellTask) -> Mapping[str, Any]:
    matrix: dict[str, Any] = {"id": task.matrix_id, "cell": task.key, "repeat": task.repeat}
    node = current_node()
    if node is not None:  # the Ray node the cell ran on (next to its server, when the plan placed it)
        matrix["ray_node"] = node
    return {REPEAT_KEY: {"group": task.group, "index": task.repeat, "of": task.of}, MATRIX_KEY: matrix}


def execute_cell(task: CellTask, environment: Fingerprint | None = None,
                 telemetry_root: Path = Path("/")) -> CellOutcome:
    """Run one cell at one repeat into the store (the module docstring says what is recorded)."""
    task = from_environment(task)
    store = open_store(task.db)
    try:
        return _execute(store, task, environment, telemetry_root)
    finally:
        store.close()


def _execute(store: Store, task: CellTask, environment: Fingerprint | None, root: Path) -> CellOutcome:
    claim = store.claim_cell(task.matrix_id, task.key, task.repeat)
    if claim.outcome != "claimed":
        return outcome(task, "skipped" if claim.outcome == "complete" else "not run", run_id=claim.run_id,
                       attempt=claim.attempt)
    watch = _StopWatch(store, task.matrix_id)
    hooks = Hooks(run_id=claim.run_id, workload=_workload(task), stopper=watch.attach,
                  environment=environment, telemetry_from=task.telemetry_from, workers=task.workers)

    def finish(status: Ended, reason: str | None, run_id: str | None,
               interrupted: bool = False) -> CellOutcome:
        store.finish_cell(task.matrix_id, task.key, task.repeat, status, reason, attempt=claim.attempt)
        return outcome(task, status, run_id=run_id, reason=reason, attempt=claim.attempt,
                       interrupted=interrupted)

    try:
        info = asyncio.run(run_bench_async(load_spec(task.spec), store, telemetry_root=root, hooks=hooks))
    except Interrupted as exc:
        return finish("incomplete", exc.message, claim.run_id, interrupted=True)
    except GpuledgerError as exc:
        return finish("failed", exc.message, claim.run_id)
    except KeyboardInterrupt:  # Ctrl-C outside the run's window (the matrix's own process)
        store.finish_cell(task.matrix_id, task.key, task.repeat, "incomplete", "interrupted (Ctrl-C)",
                          attempt=claim.attempt)
        raise
    except BaseException as exc:
        text = " ".join(str(exc).split())[:300]
        store.finish_cell(task.matrix_id, task.key, task.repeat, "failed", f"{type(exc).__name__}: {text}",
                          attempt=claim.attempt)
        raise
    finally:
        watch.close()
    status, reason = cell_status(info)
    stopped = info.summary is not None and info.summary.interrupted is not None
    return finish(status, reason, info.id, interrupted=stopped)
