"""Running a benchmark matrix: its cells × repeats as Ray tasks (or, without Ray, one after another in this
process), each writing its run into the one store the matrix shares.

``run_matrix`` creates the matrix in the store (or, ``resume=ID``, takes up the one started with the same
plan: its digest must match), runs every cell × repeat that is not ``complete`` yet and records each
outcome. Ray (``bench.cluster``) places each cell by its target's resources and labels and retries a cell
whose worker died (``CELL_RETRIES``); a cell that still did not return is recorded ``failed`` with why, and
the matrix goes on. ``max_parallel`` bounds the cells in flight (Ray's resources bound them too).

Ctrl-C (or SIGTERM): no new cell is scheduled; the matrix is marked ``stopping`` in the store, which the
running cells see within a second (``bench.matrix_cell``) and end as ``incomplete`` with what they finished;
the matrix is then ``interrupted`` and ``Interrupted`` says how to resume. A second Ctrl-C cancels the
running cells at once (Ray), or ends this process (in-process cells).

Where: ``none`` runs the cells in this process; ``local`` on a local Ray instance when Ray is installed
(in this process otherwise); ``auto`` or an address joins a cluster, whose cells write from other
machines: the store must then be PostgreSQL.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from gpuledger.bench import cluster
from gpuledger.bench.matrix import Cell, LoadedPlan, group_id
from gpuledger.bench.matrix_cell import CellTask, execute_cell, outcome
from gpuledger.bench.runner import Fingerprint
from gpuledger.errors import Interrupted, MissingDependencyError, UsageError
from gpuledger.records.spec import dump_spec
from gpuledger.store import Store
from gpuledger.store.matrix import new_matrix_id

WAIT_S = 0.5
IN_PROCESS = "none"


@dataclass
class Events:
    """Who hears how the matrix goes: once at the start (matrix id, runs planned, to run, where), after
    every cell, and when it is being stopped."""

    on_start: Callable[[dict[str, Any]], None] | None = None
    on_cell: Callable[[dict[str, Any]], None] | None = None
    on_stopping: Callable[[], None] | None = None


@dataclass
class MatrixRun:
    """What one invocation did: the matrix, where the cells ran, each cell's outcome (in the order they
    ended), the runs already complete before it started, and whether it was stopped."""

    matrix_id: str
    where: str
    resumed: bool
    planned: int
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    already_complete: int = 0
    not_run: int = 0
    stopped: bool = False

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o["status"] == status)

    def to_dict(self) -> dict[str, Any]:
        return {"matrix_id": self.matrix_id, "where": self.where, "resumed": self.resumed,
                "planned_runs": self.planned, "already_complete": self.already_complete,
                "not_run": self.not_run, "stopped": self.stopped, "outcomes": self.outcomes,
                "counts": {s: self.count(s) for s in ("complete", "failed", "incomplete", "skipped")}}


@dataclass
class _State:
    stopping: bool = False
    announced: bool = False


def _prepare(store: Store, loaded: LoadedPlan, resume: str | None) -> tuple[str, bool]:
    if resume is None:
        matrix_id = new_matrix_id()
        cells = [(c.key, r, c.params()) for c in loaded.cells for r in range(1, loaded.repeat + 1)]
        store.create_matrix(matrix_id, loaded.document, loaded.digest, cells)
        return matrix_id, False
    rec = store.get_matrix(resume)
    if rec.plan_digest != loaded.digest:
        raise UsageError(
            f"{loaded.where} is not the plan matrix {rec.id} was started with (the plans differ)",
            hint=f"resume with the same plan file, or start a new matrix without --resume {rec.id}")
    store.set_matrix_status(rec.id, "running")
    return rec.id, True


def _tasks(
    store: Store, loaded: LoadedPlan, matrix_id: str, db: str
) -> tuple[list[tuple[CellTask, Cell]], int]:
    """The cell × repeat tasks still to run, and how many are already complete."""
    done = {(c.key, c.repeat) for c in store.matrix_cells(matrix_id) if c.status == "complete"}
    out: list[tuple[CellTask, Cell]] = []
    for cell in loaded.cells:
        spec = dump_spec(cell.spec(label=f"{matrix_id} {cell.key}"))
        for r in range(1, loaded.repeat + 1):
            if (cell.key, r) in done:
                continue
            task = CellTask(db, matrix_id, cell.key, r, loaded.repeat, group_id(matrix_id, cell.key), spec,
                            tuple(cell.target.telemetry_from), cell.workers)
            out.append((task, cell))
    return out, len(done)


def resume_hint(where: str, matrix_id: str) -> str:
    return f"gpuledger matrix {where} --resume {matrix_id}"


def check_where(ray: str, backend: str) -> bool:
    """Whether the cells run on Ray (``--ray`` and the store's backend checked first): ``UsageError`` for a
    cluster with a SQLite store, ``MissingDependencyError`` for a cluster without Ray installed."""
    if ray not in (IN_PROCESS, "local") and backend == "sqlite":
        raise UsageError(f"--ray {ray}: a cluster's cells write from other machines, which a SQLite file "
                         "cannot be shared with", hint="give --db postgresql+psycopg://… (docs/matrix.md)")
    if ray not in (IN_PROCESS, "local") and not cluster.available():
        raise MissingDependencyError(f"--ray {ray} runs the cells on a Ray cluster, and Ray is not installed",
                                     hint=cluster.INSTALL_HINT)
    return ray != IN_PROCESS and (ray != "local" or cluster.available())


def run_matrix(
    store: Store, db: str, loaded: LoadedPlan, *, ray: str = "local", resume: str | None = None,
    max_parallel: int | None = None, environment: Fingerprint | None = None, events: Events | None = None,
) -> MatrixRun:
    """Run the plan's cells (the module docstring says how). ``db``: the store's URL as the cells open it."""
    events = events or Events()
    if max_parallel is not None and max_parallel < 1:
        raise UsageError(f"--max-parallel must be at least 1, got {max_parallel}")
    on_ray = check_where(ray, store.backend)
    where = "in this process, one after another" if not on_ray else ""
    if on_ray:
        where = cluster.connect(ray)
    try:
        matrix_id, resumed = _prepare(store, loaded, resume)
        tasks, complete = _tasks(store, loaded, matrix_id, db)
        result = MatrixRun(matrix_id, where, resumed, len(loaded.cells) * loaded.repeat,
                           already_complete=complete)
        if events.on_start is not None:
            events.on_start({"matrix_id": matrix_id, "planned": result.planned, "to_run": len(tasks),
                             "already_complete": complete, "where": where, "resumed": resumed})
        state = _State()

        def record(out: dict[str, Any]) -> None:
            result.outcomes.append(out)
            if events.on_cell is not None:
                events.on_cell(out)

        def stopping() -> None:
            if not state.announced:
                state.announced = True
                store.set_matrix_status(matrix_id, "stopping")
                if events.on_stopping is not None:
                    events.on_stopping()

        if on_ray:
            _on_ray(store, tasks, environment, state, record, stopping, max_parallel)
        else:
            _in_process(tasks, environment, state, record, stopping)
        result.not_run = len(tasks) - len(result.outcomes) + result.count("not run")
        result.stopped = state.stopping
        store.set_matrix_status(matrix_id, "interrupted" if state.stopping else "finished")
    finally:
        if on_ray:
            cluster.disconnect()
    if result.stopped:
        raise Interrupted(
            f"matrix {matrix_id} stopped: {result.count('complete')} runs complete here, "
            f"{result.count('incomplete')} ended incomplete, {result.not_run} not run; resume with: "
            f"{resume_hint(loaded.where, matrix_id)}")
    return result


def _in_process(tasks: list[tuple[CellTask, Cell]], environment: Fingerprint | None, state: _State,
                record: Callable[[dict[str, Any]], None], stopping: Callable[[], None]) -> None:
    for task, _cell in tasks:
        if state.stopping:
            return
        try:
            out = execute_cell(task, environment)
        except KeyboardInterrupt:  # between runs (the run's own window turns Ctrl-C into an incomplete run)
            state.stopping = True
            stopping()
            record(outcome(task, "incomplete", reason="interrupted (Ctrl-C)"))
            return
        record(out)
        if out.get("interrupted"):
            state.stopping = True
            stopping()


@contextlib.contextmanager
def _first_signal_stops(state: _State) -> Iterator[None]:
    """While cells run on Ray: the first Ctrl-C / SIGTERM sets ``state.stopping``; the next raises."""
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


def _on_ray(store: Store, tasks: list[tuple[CellTask, Cell]], environment: Fingerprint | None, state: _State,
            record: Callable[[dict[str, Any]], None], stopping: Callable[[], None],
            max_parallel: int | None) -> None:
    pool = cluster.CellTasks(execute_cell)
    queue = list(tasks)
    by_key = {(t.key, t.repeat): t for t, _ in tasks}
    with _first_signal_stops(state):
        try:
            while queue or pool.running():
                if state.stopping:
                    stopping()
                while queue and not state.stopping and (
                        max_parallel is None or len(pool.running()) < max_parallel):
                    task, cell = queue.pop(0)
                    placement = cluster.Placement(cell.target.resources, cell.target.labels)
                    pool.submit((task.key, task.repeat), placement, task, environment)
                if not pool.running():
                    break
                for key in pool.wait(WAIT_S):
                    task = by_key[key]
                    try:
                        out = pool.result(key)
                    except cluster.CellLost as exc:  # recorded here: the cell itself could not
                        store.finish_cell(task.matrix_id, task.key, task.repeat, "failed", str(exc))
                        out = outcome(task, "failed", reason=str(exc))
                    record(out)
        except KeyboardInterrupt:
            pool.cancel_all()
            raise
