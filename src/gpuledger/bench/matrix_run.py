"""Running a benchmark matrix: its cells × repeats as Ray tasks (or, without Ray, one after another in this
process; or as Slurm job arrays: ``bench.matrix_slurm``), each writing its run into the one store the
matrix shares.

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
machines: the store must then be PostgreSQL. ``backend="slurm"`` submits the cells as job arrays and
follows them (``bench.matrix_slurm``). ``run_index`` runs one run of a plan in this process: what a
Kubernetes Indexed Job's pod runs (``bench.matrix_k8s``).

``MatrixRun.document()`` is the typed document ``--json`` prints (``MatrixRunDoc``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuledger.bench import cluster
from gpuledger.bench.matrix import Cell, LoadedPlan, group_id
from gpuledger.bench.matrix_cell import (
    DB_ENV,
    CellTask,
    checked_outcome,
    execute_cell,
    has_secret,
    outcome,
    telemetry_env_name,
    url_env_name,
)
from gpuledger.bench.matrix_state import (
    CellOutcome,
    MatrixStart,
    OutcomeStatus,
    State,
    first_signal_stops,
    resume_hint,
)
from gpuledger.bench.runner import Fingerprint
from gpuledger.errors import Interrupted, MissingDependencyError, UsageError
from gpuledger.records.spec import dump_spec
from gpuledger.store import Store
from gpuledger.store.matrix import new_matrix_id
from gpuledger.urls import redact_url

WAIT_S = 0.5
IN_PROCESS = "none"
BACKENDS = ("ray", "slurm")
Backend = Literal["ray", "slurm"]
_DOC = ConfigDict(extra="forbid")


class RunCounts(BaseModel):
    model_config = _DOC

    complete: int
    failed: int
    incomplete: int
    skipped: int


class MatrixRunDoc(BaseModel):
    """``gpuledger matrix PLAN --json``: the matrix, where its cells ran, every outcome and the counts."""

    model_config = _DOC

    matrix_id: str
    where: str
    resumed: bool
    planned_runs: int
    already_complete: int
    not_run: int
    stopped: bool
    outcomes: list[CellOutcome]
    counts: RunCounts


@dataclass
class Events:
    """Who hears how the matrix goes: once at the start (``MatrixStart``: matrix id, runs planned, to run,
    where), after every cell (its ``CellOutcome``), and when it is being stopped."""

    on_start: Callable[[MatrixStart], None] | None = None
    on_cell: Callable[[CellOutcome], None] | None = None
    on_stopping: Callable[[], None] | None = None
    # Slurm: every poll, each cell × repeat still followed and its state (pending, running, done, failed).
    on_progress: Callable[[dict[tuple[str, int], str]], None] | None = None


@dataclass
class MatrixRun:
    """What one invocation did: the matrix, where the cells ran, each cell's outcome (in the order they
    ended), the runs already complete before it started, and whether it was stopped."""

    matrix_id: str
    where: str
    resumed: bool
    planned: int
    outcomes: list[CellOutcome] = field(default_factory=list)
    already_complete: int = 0
    not_run: int = 0
    stopped: bool = False

    def count(self, status: OutcomeStatus) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def document(self) -> MatrixRunDoc:
        return MatrixRunDoc(
            matrix_id=self.matrix_id, where=self.where, resumed=self.resumed, planned_runs=self.planned,
            already_complete=self.already_complete, not_run=self.not_run, stopped=self.stopped,
            outcomes=list(self.outcomes),
            counts=RunCounts(complete=self.count("complete"), failed=self.count("failed"),
                             incomplete=self.count("incomplete"), skipped=self.count("skipped")))

    def to_dict(self) -> dict[str, Any]:
        return self.document().model_dump(mode="json")


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


def cell_task(loaded: LoadedPlan, matrix_id: str, db: str, cell: Cell, repeat: int, *,
              secrets_from_env: bool = False) -> CellTask:
    """The task of a cell at one repeat. ``secrets_from_env``: it crosses to another process through a
    file (Slurm, Kubernetes), so it carries the store URL redacted and names the variables that hold the
    store's and the server's secrets where it runs (``matrix_cell.from_environment``)."""
    # In memory (Ray, this process) the spec keeps its URLs' credentials, like the store's URL; through a
    # file they are redacted and the cell takes them from url_env / telemetry_env where it runs.
    spec = dump_spec(cell.spec(label=f"{matrix_id} {cell.key}"), keep_secrets=not secrets_from_env)
    task = CellTask(db, matrix_id, cell.key, repeat, loaded.repeat, group_id(matrix_id, cell.key), spec,
                    tuple(cell.target.telemetry_from), cell.workers)
    if secrets_from_env:
        name = cell.target.key_name
        task = CellTask(redact_url(db), matrix_id, cell.key, repeat, loaded.repeat, task.group, spec,
                        tuple(redact_url(u) for u in task.telemetry_from), task.workers, db_env=DB_ENV,
                        url_env=url_env_name(name), telemetry_env=telemetry_env_name(name))
    return task


def secret_environment(loaded: LoadedPlan, db: str) -> dict[str, str]:
    """The variables that carry the secrets ``cell_task(secrets_from_env=True)`` leaves out: the store's
    URL, each target's base URL and its telemetry URLs (one per line), where they have any."""
    out = {DB_ENV: db} if has_secret(db) else {}
    for target in loaded.plan.targets:
        if has_secret(target.base_url):
            out[url_env_name(target.key_name)] = target.base_url
        if any(has_secret(u) for u in target.telemetry_from):
            out[telemetry_env_name(target.key_name)] = "\n".join(target.telemetry_from)
    return out


def _tasks(
    store: Store, loaded: LoadedPlan, matrix_id: str, db: str, *, secrets_from_env: bool = False
) -> tuple[list[tuple[CellTask, Cell]], int]:
    """The cell × repeat tasks still to run, and how many are already complete."""
    done = {(c.key, c.repeat) for c in store.matrix_cells(matrix_id) if c.status == "complete"}
    out: list[tuple[CellTask, Cell]] = []
    for cell in loaded.cells:
        for r in range(1, loaded.repeat + 1):
            if (cell.key, r) not in done:
                out.append((cell_task(loaded, matrix_id, db, cell, r, secrets_from_env=secrets_from_env),
                            cell))
    return out, len(done)


def plan_runs(loaded: LoadedPlan, target: str | None = None) -> list[tuple[Cell, int]]:
    """The plan's runs (each cell at each repeat) in order, or those of one target: a Kubernetes Job's
    completion index is a position in this list."""
    if target is not None and target not in {t.key_name for t in loaded.plan.targets}:
        names = ", ".join(t.key_name for t in loaded.plan.targets)
        raise UsageError(f"--target {target[:64]!r} is not a target of {loaded.where} ({names})")
    return [(c, r) for c in loaded.cells if target is None or c.target.key_name == target
            for r in range(1, loaded.repeat + 1)]





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
    backend: Backend = "ray",
) -> MatrixRun:
    """Run the plan's cells (the module docstring says how). ``db``: the store's URL as the cells open it."""
    events = events or Events()
    if max_parallel is not None and max_parallel < 1:
        raise UsageError(f"--max-parallel must be at least 1, got {max_parallel}")
    slurm = None
    if backend == "slurm":
        from gpuledger.bench.matrix_slurm import SlurmCells

        slurm = SlurmCells(loaded, max_parallel)  # Slurm checked before the matrix is created
    on_ray = slurm is None and check_where(ray, store.backend)
    where = "in this process, one after another" if not on_ray else ""
    if on_ray:
        where = cluster.connect(ray)
    try:
        matrix_id, resumed = _prepare(store, loaded, resume)
        if slurm is not None:
            if resumed:
                slurm.check_none_queued(store, matrix_id)
            where = slurm.where(matrix_id)
        tasks, complete = _tasks(store, loaded, matrix_id, db, secrets_from_env=slurm is not None)
        result = MatrixRun(matrix_id, where, resumed, len(loaded.cells) * loaded.repeat,
                           already_complete=complete)
        if events.on_start is not None:
            events.on_start(MatrixStart(matrix_id=matrix_id, planned=result.planned, to_run=len(tasks),
                                        already_complete=complete, where=where, resumed=resumed))
        state = State()

        def record(out: CellOutcome) -> None:
            result.outcomes.append(out)
            if events.on_cell is not None:
                events.on_cell(out)

        def stopping() -> None:
            if not state.announced:
                state.announced = True
                store.set_matrix_status(matrix_id, "stopping")
                if events.on_stopping is not None:
                    events.on_stopping()

        if slurm is not None:
            slurm.run(store, matrix_id, tasks, environment, state, record, stopping, events.on_progress,
                      secret_environment(loaded, db))
        elif on_ray:
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


def _in_process(tasks: list[tuple[CellTask, Cell]], environment: Fingerprint | None, state: State,
                record: Callable[[CellOutcome], None], stopping: Callable[[], None]) -> None:
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
        if out.interrupted:
            state.stopping = True
            stopping()


def _on_ray(store: Store, tasks: list[tuple[CellTask, Cell]], environment: Fingerprint | None, state: State,
            record: Callable[[CellOutcome], None], stopping: Callable[[], None],
            max_parallel: int | None) -> None:
    pool = cluster.CellTasks(execute_cell)
    queue = list(tasks)
    by_key = {(t.key, t.repeat): t for t, _ in tasks}
    with first_signal_stops(state):
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
                        # From a worker: checked, as a Slurm task's pickle is (bench.matrix_slurm).
                        got = checked_outcome(task, pool.result(key), "the cell's Ray task")
                    except cluster.CellLost as exc:  # recorded here: the cell itself could not
                        got = str(exc)
                    if isinstance(got, str):
                        store.finish_cell(task.matrix_id, task.key, task.repeat, "failed", got)
                        got = outcome(task, "failed", reason=got)
                    record(got)
        except KeyboardInterrupt:
            pool.cancel_all()
            raise


def run_index(
    store: Store, db: str, loaded: LoadedPlan, matrix_id: str, index: int, *, target: str | None = None,
    environment: Fingerprint | None = None, events: Events | None = None,
) -> MatrixRun:
    """Run the ``index``-th of the plan's runs (of ``target``'s, given one) into matrix ``matrix_id``, here,
    creating the matrix when it is not in the store yet (the first of a Job's pods to start does it). The
    cell is the ordinary one (``execute_cell``): a complete cell is skipped. The matrix is marked
    ``finished`` once no cell of it is pending or running."""
    events = events or Events()
    runs = plan_runs(loaded, target)
    if not 0 <= index < len(runs):
        raise UsageError(f"--index {index}: {loaded.where} has {len(runs)} runs"
                         f"{f' of target {target}' if target else ''} (indexes 0 to {len(runs) - 1})")
    cells = [(c.key, r, c.params()) for c in loaded.cells for r in range(1, loaded.repeat + 1)]
    created = store.ensure_matrix(matrix_id, loaded.document, loaded.digest, cells)
    cell, repeat = runs[index]
    # The plan a pod reads has its target URLs redacted: their credentials come from the environment.
    task = dataclasses.replace(cell_task(loaded, matrix_id, db, cell, repeat),
                               url_env=url_env_name(cell.target.key_name),
                               telemetry_env=telemetry_env_name(cell.target.key_name))
    done = sum(1 for c in store.matrix_cells(matrix_id) if c.status == "complete")
    result = MatrixRun(matrix_id, "in this process (one run of the matrix)", not created,
                       len(loaded.cells) * loaded.repeat, already_complete=done)
    if events.on_start is not None:
        events.on_start(MatrixStart(matrix_id=matrix_id, planned=result.planned, to_run=1,
                                    already_complete=done, where=result.where, resumed=not created))
    try:
        out = execute_cell(task, environment)
    except KeyboardInterrupt:  # before or after the run's window (the window ends its run incomplete)
        result.stopped = True
        raise Interrupted(f"matrix {matrix_id}: run {index} ({cell.key} #{repeat}) interrupted; run it "
                          "again to take it up") from None
    result.outcomes.append(out)
    if events.on_cell is not None:
        events.on_cell(out)
    if all(c.status not in ("pending", "running") for c in store.matrix_cells(matrix_id)):
        store.set_matrix_status(matrix_id, "finished")
    if out.interrupted:
        result.stopped = True
        raise Interrupted(f"matrix {matrix_id}: run {index} ({cell.key} #{repeat}) stopped, its finished "
                          "requests kept; run it again to take it up")
    return result


class DryRunCell(BaseModel):
    model_config = _DOC

    key: str
    target: str
    load_level: str
    repeats: int
    resources: dict[str, float]
    labels: dict[str, str]
    workers: int
    profile: str | None


class DryRunDoc(BaseModel):
    """``gpuledger matrix PLAN --dry-run --json``: the cells, and how many runs they make."""

    model_config = _DOC

    plan: str
    digest: str
    cells: list[DryRunCell]
    excluded: int
    runs: int


def dry_run(loaded: LoadedPlan) -> DryRunDoc:
    cells = [DryRunCell(key=c.key, target=c.target.key_name, load_level=c.load_level, repeats=loaded.repeat,
                        resources=dict(c.target.resources), labels=dict(c.target.labels), workers=c.workers,
                        profile=c.profile) for c in loaded.cells]
    return DryRunDoc(plan=loaded.where, digest=loaded.digest, cells=cells, excluded=loaded.excluded,
                     runs=len(cells) * loaded.repeat)
