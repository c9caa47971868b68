"""``gpuledger matrix PLAN --backend slurm``: the plan's cells as Slurm job arrays, submitted with submitit
(``bench.slurm``), each task the ordinary cell — ``matrix_cell.execute_cell``, what a Ray task runs —
writing its run into the store the matrix shares.

- **Arrays.** Slurm gives every task of an array the same options, so the cells are grouped by the options
  their target asks for (the plan's ``slurm:`` section and its ``targets:``: partition, constraint, node
  list, GPUs): one array per group, in the plan's order. A plan whose targets share their options is one
  array. ``--max-parallel N`` is each array's throttle (``--array=0-K%N``).
- **Secrets.** A task's pickle holds the store URL redacted; the password (and a target URL's
  credentials) reach the task in its environment, which sbatch exports from the submitting one
  (``matrix_cell.from_environment``). The sbatch script, the pickles and the logs never hold them.
- **Following.** Every ``POLL_S`` the tasks' results (pickles in the folder) are read and their states
  asked of ``squeue``: pending, running, done, failed per cell (``Events.on_progress``). A task that left
  the queue without a result (its node died, the time limit, Python missing on the node) is recorded
  ``failed`` after ``slurm.result_wait_s`` (a shared file system may show the result late), with its job
  id and its log's last lines; so is one whose function raised.
- **Ctrl-C** (or SIGTERM): the matrix is marked ``stopping`` (the running cells end ``incomplete`` within a
  second, with what they finished), the array's pending tasks are cancelled (``scancel
  --state=PENDING``) and stay ``pending`` in the store; the command waits for the running ones, then
  exits 130 with the line to resume. A second Ctrl-C cancels every task (``scancel``) at once.
- **Resume.** ``--resume ID`` submits the cells that are not complete; it is refused while tasks of the
  matrix are still queued (the arrays are listed in ``FOLDER/ID/jobs.json``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from gpuledger.bench import slurm
from gpuledger.bench.matrix import Cell, LoadedPlan
from gpuledger.bench.matrix_cell import CellTask, checked_outcome, execute_cell, outcome
from gpuledger.bench.matrix_sections import SlurmSection
from gpuledger.bench.matrix_state import CellOutcome, SlurmTaskInfo, State, first_signal_stops, resume_hint
from gpuledger.bench.runner import Fingerprint
from gpuledger.errors import InvalidInputError, ResourceError, UsageError
from gpuledger.facts.runner import Runner
from gpuledger.store import Store

POLL_S = 1.0
QUEUE_LOST_S = 300.0
JOBS_FILE = "jobs.json"
_DOC = ConfigDict(extra="forbid")
T = TypeVar("T")


@dataclass(frozen=True)
class SlurmOptions:
    """What sbatch is asked for each cell of one array."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = 60
    gpus: int = 0
    gpu_type: str | None = None
    cpus_per_cell: int | None = None
    mem_gb: int | None = None
    constraint: str | None = None
    nodelist: str | None = None
    extra: tuple[tuple[str, str | int | bool], ...] = ()

    @property
    def signal_delay_s(self) -> int:
        """How long before the time limit submitit's USR2 arrives (it ends the cell ``failed``, "timed-out
        and not checkpointable"): its 90 s, but at most a quarter of a short limit."""
        return max(10, min(90, self.time_limit_min * 60 // 4))

    @property
    def gres(self) -> str | None:
        if not self.gpus:
            return None
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"

    def parameters(self, *, job_name: str, tasks: int, parallelism: int | None,
                   setup: Sequence[str] = ()) -> dict[str, Any]:
        """submitit's ``SlurmExecutor.update_parameters`` for an array of ``tasks`` cells."""
        named = {"partition": self.partition, "account": self.account, "qos": self.qos,
                 "constraint": self.constraint, "nodelist": self.nodelist, "gres": self.gres,
                 "cpus_per_task": self.cpus_per_cell,
                 "mem": None if self.mem_gb is None else f"{self.mem_gb}G"}
        out: dict[str, Any] = {"job_name": job_name, "time": self.time_limit_min,
                               "array_parallelism": min(parallelism or tasks, tasks),
                               "signal_delay_s": self.signal_delay_s}
        out.update({k: v for k, v in named.items() if v is not None})
        if setup:
            out["setup"] = list(setup)
        if self.extra:
            out["additional_parameters"] = dict(self.extra)
        return out

    def sbatch(self, *, job_name: str, tasks: int, parallelism: int | None) -> list[str]:
        """The sbatch options of the array, as sbatch spells them (``--dry-run`` shows them)."""
        params = self.parameters(job_name=job_name, tasks=tasks, parallelism=parallelism)
        out = [f"--array=0-{tasks - 1}%{params.pop('array_parallelism')}",
               f"--signal=USR2@{params.pop('signal_delay_s')}"]
        extra = params.pop("additional_parameters", {})
        for key, value in [*params.items(), *extra.items()]:
            flag = "--" + key.replace("_", "-")
            out.append(flag if value is True else f"{flag}={value}")
        return out


def options_for(section: SlurmSection | None, target: str) -> SlurmOptions:
    """The options of ``target``'s cells: the section's, each overridden by the target's own."""
    if section is None:
        return SlurmOptions()
    own = section.targets.get(target)

    def pick(name: str) -> Any:
        value = getattr(own, name) if own is not None else None
        return getattr(section, name) if value is None else value

    return SlurmOptions(
        partition=pick("partition"), account=section.account, qos=section.qos,
        time_limit_min=section.time_limit_min, gpus=pick("gpus"), gpu_type=pick("gpu_type"),
        cpus_per_cell=section.cpus_per_cell, mem_gb=section.mem_gb, constraint=pick("constraint"),
        nodelist=pick("nodelist"), extra=tuple(section.sbatch.items()))


def _grouped(section: SlurmSection | None, items: Sequence[T],
                target_of: Callable[[T], str]) -> list[tuple[SlurmOptions, list[T]]]:
    """``items`` (cells, tasks) grouped by the options of their target, in the plan's order: one array
    per group."""
    out: dict[SlurmOptions, list[T]] = {}
    for item in items:
        out.setdefault(options_for(section, target_of(item)), []).append(item)
    return list(out.items())


def _groups(loaded: LoadedPlan) -> list[tuple[SlurmOptions, list[Cell]]]:
    return _grouped(loaded.plan.slurm, loaded.cells, lambda c: c.target.key_name)


def _folder(loaded: LoadedPlan) -> Path:
    section = loaded.plan.slurm or SlurmSection()
    path = Path(section.folder).expanduser()
    return path if path.is_absolute() else (Path(loaded.where).resolve().parent / path)


def job_name(matrix_id: str) -> str:
    return f"gpuledger-{matrix_id}"


# -- the dry run -----------------------------------------------------------------------------------------


class SlurmArrayPlan(BaseModel):
    """One job array of the plan: its targets, its runs and the sbatch options each task gets."""

    model_config = _DOC

    targets: list[str]
    cells: list[str]
    runs: int
    sbatch: list[str]


class SlurmPlanDoc(BaseModel):
    """``gpuledger matrix PLAN --backend slurm --dry-run --json``."""

    model_config = _DOC

    plan: str
    digest: str
    runs: int
    excluded: int
    folder: str
    python: str | None
    setup: list[str]
    arrays: list[SlurmArrayPlan]


def describe(loaded: LoadedPlan, max_parallel: int | None) -> SlurmPlanDoc:
    """What ``--backend slurm`` would submit (nothing is)."""
    section = loaded.plan.slurm or SlurmSection()
    arrays = []
    for options, cells in _groups(loaded):
        runs = len(cells) * loaded.repeat
        arrays.append(SlurmArrayPlan(
            targets=list(dict.fromkeys(c.target.key_name for c in cells)), cells=[c.key for c in cells],
            runs=runs, sbatch=options.sbatch(job_name=job_name("MATRIX_ID"), tasks=runs,
                                             parallelism=max_parallel)))
    return SlurmPlanDoc(plan=loaded.where, digest=loaded.digest, runs=len(loaded.cells) * loaded.repeat,
                        excluded=loaded.excluded, folder=str(_folder(loaded)), python=section.python,
                        setup=list(section.setup), arrays=arrays)


# -- running ---------------------------------------------------------------------------------------------


@dataclass
class _Followed:
    job: slurm.TaskJob
    task: CellTask
    gone_since: float | None = None


@dataclass
class _Queue:
    states: dict[str, str] = field(default_factory=dict)
    lost_since: float | None = None


class SlurmCells:
    """The plan's cells on the Slurm cluster this machine's client commands reach; created before the
    matrix is (a Slurm that does not answer is one line, and no matrix)."""

    def __init__(self, loaded: LoadedPlan, max_parallel: int | None, run: Runner | None = None) -> None:
        self._loaded = loaded
        self._section = loaded.plan.slurm or SlurmSection()
        self._max_parallel = max_parallel
        self._run = run or slurm.runner()
        partitions = slurm.check_client(self._run)
        groups = _groups(loaded)
        for options, cells in groups:
            if options.partition is not None and partitions and options.partition not in partitions:
                raise InvalidInputError(
                    f"{loaded.where}: slurm: partition {options.partition!r} (target "
                    f"{cells[0].target.key_name}) is not a partition of this cluster "
                    f"({', '.join(partitions)})",
                    hint="sinfo lists them")
        self.folder = _folder(loaded)
        self._arrays_planned = len(groups)
        self._partitions = sorted({o.partition or "the default partition" for o, _ in groups})

    def where(self, matrix_id: str) -> str:
        n = self._arrays_planned
        return (f"on Slurm, {n} job array{'s' if n != 1 else ''} ({', '.join(self._partitions)}); the tasks' "
                f"logs in {self.folder / matrix_id}")

    def check_none_queued(self, store: Store, matrix_id: str) -> None:
        """Refuse to resume a matrix while tasks of its earlier arrays are still queued for cells that are
        not complete (they would run the same cells twice). A task whose cell is complete, or which has
        left its result, is only ending."""
        folder = self.folder / matrix_id
        arrays, cells = self._submitted(folder)
        states, why = slurm.queue_states(self._run, arrays)
        if why is not None:
            raise ResourceError(f"cannot tell whether matrix {matrix_id}'s earlier tasks are still queued: "
                                f"{why}")
        complete = {(c.key, c.repeat) for c in store.matrix_cells(matrix_id) if c.status == "complete"}
        # A bare array id is the array's pending rest: its cells are not known, so not complete.
        queued = sorted({job.partition("_")[0] for job, st in states.items()
                         if st in slurm.QUEUED and cells.get(job) not in complete
                         and not slurm.has_result(folder, job)})
        if queued:
            raise UsageError(f"matrix {matrix_id} still has Slurm tasks in the queue (job arrays "
                             f"{', '.join(queued)}): let them end or scancel {' '.join(queued)}, then resume")

    @staticmethod
    def _submitted(folder: Path) -> tuple[list[str], dict[str, tuple[str, int]]]:
        """The arrays submitted for the matrix before, and the cell × repeat of each task."""
        try:
            doc = json.loads((folder / JOBS_FILE).read_text())
        except (OSError, ValueError):
            return [], {}
        if not isinstance(doc, dict):
            return [], {}
        arrays = doc.get("arrays")
        tasks = doc.get("tasks")
        pairs = tasks.items() if isinstance(tasks, dict) else ()
        cells = {str(job): (cell[0], cell[1]) for job, cell in pairs
                 if isinstance(cell, list) and len(cell) == 2 and isinstance(cell[0], str)
                 and isinstance(cell[1], int)}
        return ([a for a in arrays if isinstance(a, str)] if isinstance(arrays, list) else []), cells

    def _remember(self, folder: Path, arrays: Sequence[str], cells: Mapping[str, tuple[str, int]]) -> None:
        doc = {"arrays": list(arrays), "tasks": {job: list(cell) for job, cell in cells.items()}}
        try:
            (folder / JOBS_FILE).write_text(json.dumps(doc) + "\n")
        except OSError as exc:
            raise InvalidInputError(f"cannot write {folder / JOBS_FILE}: {exc.strerror or exc}") from exc

    def run(self, store: Store, matrix_id: str, tasks: Sequence[tuple[CellTask, Cell]],
            environment: Fingerprint | None, state: State, record: Callable[[CellOutcome], None],
            stopping: Callable[[], None],
            on_progress: Callable[[dict[tuple[str, int], str]], None] | None,
            secrets: Mapping[str, str]) -> None:
        """Submit ``tasks`` and follow them to their ends (the module docstring says how)."""
        folder = self.folder / matrix_id
        followed: dict[str, _Followed] = {}
        arrays, cells = self._submitted(folder)  # the earlier invocations' too: jobs.json lists them all
        mine: list[str] = []  # this invocation's arrays: the ones followed, and cancelled on Ctrl-C
        with first_signal_stops(state):
            try:
                for options, members in _grouped(self._section, tasks, lambda tc: tc[1].target.key_name):
                    if state.stopping:
                        break
                    params = options.parameters(job_name=job_name(matrix_id), tasks=len(members),
                                                parallelism=self._max_parallel, setup=self._section.setup)
                    jobs = slurm.submit_array(folder, params, execute_cell,
                                              [(t, environment) for t, _ in members],
                                              python=self._section.python, environment=secrets)
                    for job, (task, _cell) in zip(jobs, members, strict=True):
                        followed[job.job_id] = _Followed(job, task)
                        cells[job.job_id] = (task.key, task.repeat)
                    mine.extend(dict.fromkeys(j.array_id for j in jobs))
                    self._remember(folder, [*arrays, *mine], cells)
                self._follow(store, matrix_id, followed, mine, state, record, stopping, on_progress)
            except KeyboardInterrupt:
                slurm.cancel(self._run, mine)
                raise

    def _follow(self, store: Store, matrix_id: str, followed: dict[str, _Followed], arrays: Sequence[str],
                state: State, record: Callable[[CellOutcome], None], stopping: Callable[[], None],
                on_progress: Callable[[dict[tuple[str, int], str]], None] | None) -> None:
        queue = _Queue()
        cancelled = False
        progress = {(f.task.key, f.task.repeat): "pending" for f in followed.values()}
        while followed:
            if state.stopping and not cancelled:
                stopping()
                # The running ones see 'stopping'; a pending one scancel missed sees it when it starts.
                slurm.cancel(self._run, arrays, pending_only=True)
                cancelled = True
            self._ask_queue(queue, arrays, matrix_id)
            now = time.monotonic()
            for job_id, f in list(followed.items()):
                cell = (f.task.key, f.task.repeat)
                if f.job.result_ready():
                    out = self._outcome(store, f)
                elif (last := slurm.state_of(queue.states, job_id)) in slurm.QUEUED:
                    f.gone_since = None
                    progress[cell] = "pending" if last == "PENDING" else "running"
                    continue
                else:
                    f.gone_since = f.gone_since or now
                    # A task cancelled while pending has no result to wait for.
                    no_result_coming = cancelled and last == "CANCELLED"
                    if not no_result_coming and now - f.gone_since < self._section.result_wait_s:
                        continue
                    out = self._ended(store, f, last, cancelled)
                del followed[job_id]
                progress[cell] = "failed" if out.status == "failed" else (
                    "not run" if out.status == "not run" else "done")
                record(out)
            if on_progress is not None:
                on_progress(dict(progress))
            if followed:
                time.sleep(POLL_S)

    def _ask_queue(self, queue: _Queue, arrays: Sequence[str], matrix_id: str) -> None:
        states, why = slurm.queue_states(self._run, arrays)
        if why is None:
            queue.states, queue.lost_since = states, None
            return
        now = time.monotonic()
        queue.lost_since = queue.lost_since or now
        if now - queue.lost_since > QUEUE_LOST_S:
            raise ResourceError(f"Slurm has not answered for {QUEUE_LOST_S:g} s: {why}; the tasks may still "
                                f"run, and write into the store",
                                hint=f"once Slurm answers: {resume_hint(self._loaded.where, matrix_id)}")

    @staticmethod
    def _with_info(out: CellOutcome, f: _Followed, *, tail: bool) -> CellOutcome:
        """``out`` with where its task ran: the job id, the log and (``tail``) the log's last lines."""
        info = SlurmTaskInfo(job_id=f.job.job_id, log=str(f.job.log),
                             log_tail=f.job.log_tail() if tail else [])
        return out.model_copy(update={"slurm": info})

    def _outcome(self, store: Store, f: _Followed) -> CellOutcome:
        """What a task that left a result reported (checked: a pickle is from outside too)."""
        ok, value = f.job.result()
        who = f"the cell's Slurm task {f.job.job_id}"
        got = checked_outcome(f.task, value, who) if ok else f"{who} raised {value}"
        if isinstance(got, str):
            store.finish_cell(f.task.matrix_id, f.task.key, f.task.repeat, "failed", got)
            got = outcome(f.task, "failed", reason=got)
        return self._with_info(got, f, tail=got.status == "failed")

    def _ended(self, store: Store, f: _Followed, last_state: str | None, cancelled: bool) -> CellOutcome:
        """A task that left the queue without a result: cancelled before it started (Ctrl-C), or failed."""
        t = f.task
        cells = {(c.key, c.repeat): c for c in store.matrix_cells(t.matrix_id)}
        row = cells.get((t.key, t.repeat))
        if cancelled and row is not None and row.status == "pending":
            out = outcome(t, "not run", reason="cancelled before it started (the matrix was stopped)")
            return self._with_info(out, f, tail=False)
        ended = f"ended {last_state}" if last_state else "left the queue"
        reason = f"Slurm task {f.job.job_id} {ended} without a result (its log: {f.job.log})"
        store.finish_cell(t.matrix_id, t.key, t.repeat, "failed", reason)
        return self._with_info(outcome(t, "failed", reason=reason), f, tail=True)
