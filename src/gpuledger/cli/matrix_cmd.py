"""``gpuledger matrix PLAN.yaml`` runs a benchmark matrix (docs/matrix.md) on Ray, in this process, or as
Slurm job arrays (``--backend slurm``); ``--emit k8s DIR`` writes it as Kubernetes manifests; ``gpuledger
matrix show ID`` and ``gpuledger report --matrix ID`` read one back.

Exit codes: 0 every cell complete; 2 bad flags; 3 plan or matrix not found; 4 bad plan; 5 store error;
6 some cells failed (each recorded with its reason; the others ran); 7 Ray missing (``--ray auto|ADDRESS``),
or Slurm's commands or submitit missing (``--backend slurm``); 8 the Ray cluster cannot be joined, or Slurm
does not answer or refuses the job array; 130 interrupted (the running cells end ``incomplete``; the line
says how to resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json, warn
from gpuledger.errors import EngineError, UsageError

if TYPE_CHECKING:
    from gpuledger.bench.matrix import Cell, LoadedPlan
    from gpuledger.bench.matrix_run import MatrixRun
    from gpuledger.bench.matrix_state import CellOutcome, MatrixStart

SHOW = "show"
EMIT_KINDS = ("k8s", "kubernetes")
_STATES = ("pending", "running", "done", "failed")


def _dry_run(loaded: LoadedPlan, json_out: bool) -> None:
    from gpuledger.bench.matrix_run import dry_run

    if json_out:
        print_json(dry_run(loaded).model_dump(mode="json"))
        return
    from gpuledger.report.layout import print_table

    def place(cell: Cell) -> str:
        t = cell.target
        parts = [f"{k}={v:g}" for k, v in t.resources.items()] + [f"{k}:{v}" for k, v in t.labels.items()]
        return ", ".join(parts) or "anywhere"

    runs = len(loaded.cells) * loaded.repeat
    print_table(console, f"{len(loaded.cells)} cells × {loaded.repeat} repeats = {runs} runs "
                f"(dry run: nothing started)", ("cell", "target", "load level", "placed"),
                [(c.key, c.target.key_name, c.load_level, place(c)) for c in loaded.cells])
    if loaded.excluded:
        console.print(f"{loaded.excluded} combinations excluded by the plan's exclude rules", markup=False)


def _dry_run_slurm(loaded: LoadedPlan, max_parallel: int | None, json_out: bool) -> None:
    from gpuledger.bench.matrix_slurm import describe
    from gpuledger.report.layout import print_table

    doc = describe(loaded, max_parallel)
    if json_out:
        print_json(doc.model_dump(mode="json"))
        return
    arrays = f"{len(doc.arrays)} Slurm job array{'s' if len(doc.arrays) != 1 else ''}"
    console.print(f"{doc.runs} runs as {arrays} "
                  f"(dry run: nothing submitted); the tasks' pickles and logs go to {doc.folder}/MATRIX_ID",
                  markup=False, highlight=False)
    for i, array in enumerate(doc.arrays, 1):
        print_table(console, f"Array {i}: {', '.join(array.targets)} — {array.runs} tasks; sbatch "
                    + " ".join(array.sbatch), ("cell", "repeats"),
                    [(key, str(loaded.repeat)) for key in array.cells])
    if doc.setup:
        console.print("before each cell: " + "; ".join(doc.setup), markup=False, highlight=False)
    if loaded.excluded:
        console.print(f"{loaded.excluded} combinations excluded by the plan's exclude rules", markup=False)


def _store_url(db: str | None) -> tuple[str, str]:
    """The store's URL as every cell opens it (the same store: a SQLite file by its absolute path), and its
    backend."""
    from gpuledger.store.engine import resolve_url

    url, _ = resolve_url(db)
    return url.render_as_string(hide_password=False), url.get_backend_name()


def _progress_text(states: dict[tuple[str, int], str]) -> str:
    counts = {s: 0 for s in _STATES}
    for state in states.values():
        if state in counts:
            counts[state] += 1
    return " · ".join(f"{n} {s}" for s, n in counts.items())


def _run(plan: Path, *, ray: str, backend: str, db: str | None, resume: str | None, max_parallel: int | None,
         progress: bool, json_out: bool, index: int | None = None, target: str | None = None) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuledger.bench.matrix import load_plan
    from gpuledger.bench.matrix_run import Events, check_where, run_index, run_matrix
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.store import open_store

    loaded = load_plan(plan)
    url, store_backend = _store_url(db)
    if backend == "ray" and index is None:
        check_where(ray, store_backend)  # before the store is opened: a cluster needs Ray and a shared store
    if backend == "slurm" and store_backend == "sqlite":
        warn("--backend slurm with a SQLite store: every Slurm task must run on this node (one file on a "
             "local disk); give --db postgresql+psycopg://… for cells on other nodes (docs/matrix.md)")
    show = progress and err_console.is_terminal and not json_out
    bar = Progress(TextColumn("cells"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=err_console, disable=not show, transient=True)
    task = bar.add_task("", total=None)
    failed: list[CellOutcome] = []

    def started(info: MatrixStart) -> None:
        err_console.print(
            f"matrix {info.matrix_id}{' (resumed)' if info.resumed else ''}: {info.to_run} of "
            f"{info.planned} runs to do ({info.already_complete} already complete); cells run {info.where}",
            markup=False, highlight=False)
        bar.update(task, total=info.to_run)

    def ended(out: CellOutcome) -> None:
        where = out.slurm
        if out.status == "failed":
            failed.append(out)
            job = f" (Slurm job {where.job_id}, log {where.log})" if where is not None else ""
            err_console.print(Text("failed: ", style="red") + Text(f"{out.key} #{out.repeat}: "
                                                                   f"{out.reason}{job}"))
            for line in where.log_tail if where is not None else []:
                err_console.print(Text(f"  | {line}", style="dim"))
        bar.update(task, advance=1, description=f"{len(failed)} failed" if failed else "")

    def moving(states: dict[tuple[str, int], str]) -> None:
        bar.update(task, description=_progress_text(states))

    def stopping() -> None:
        err_console.print("stopping: no new cell starts; the running cells end as incomplete (Ctrl-C again: "
                          "stop them at once)", markup=False)

    events = Events(on_start=started, on_cell=ended, on_stopping=stopping, on_progress=moving)
    store = open_store(db)
    try:
        with bar:
            if index is not None:
                assert resume is not None
                result = run_index(store, url, loaded, resume, index, target=target,
                                   environment=environment_fingerprint, events=events)
            else:
                result = run_matrix(store, url, loaded, ray=ray, resume=resume, max_parallel=max_parallel,
                                    environment=environment_fingerprint, events=events,
                                    backend="slurm" if backend == "slurm" else "ray")
    finally:
        store.close()
    _finish(result, failed, json_out)


def _finish(result: MatrixRun, failed: list[CellOutcome], json_out: bool) -> None:
    doc = result.document()
    if json_out:
        print_json(doc.model_dump(mode="json"))
    else:
        c = doc.counts
        console.print(f"matrix {doc.matrix_id}: {c.complete} runs complete, {c.failed} failed, "
                      f"{c.incomplete} incomplete ({doc.already_complete} were complete before)",
                      markup=False, highlight=False)
        console.print(f"  see: gpuledger matrix show {doc.matrix_id}   gpuledger report --matrix "
                      f"{doc.matrix_id}", markup=False, highlight=False)
    if failed:
        first = failed[0]
        raise EngineError(f"matrix {doc.matrix_id}: {len(failed)} of {len(doc.outcomes)} runs failed; "
                          f"the first: {first.key} #{first.repeat}: {first.reason}",
                          hint=f"gpuledger matrix show {doc.matrix_id} lists every cell with its reason")


def _emit_k8s(plan: Path, directory: Path, resume: str | None, json_out: bool) -> None:
    """Write the plan's manifests into ``directory`` (created when its parent exists)."""
    from gpuledger.bench.matrix import load_plan
    from gpuledger.bench.matrix_k8s import build
    from gpuledger.cli.files import check_target, write_output
    from gpuledger.errors import InvalidInputError
    from gpuledger.store.matrix import new_matrix_id

    loaded = load_plan(plan)
    matrix_id = _matrix_id(resume) if resume is not None else new_matrix_id()
    manifests = build(loaded, matrix_id)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise InvalidInputError(f"--emit k8s {directory}: not a directory (a directory to write the "
                                "manifests into)")
    if not directory.exists():
        if not directory.parent.is_dir():
            raise InvalidInputError(f"--emit k8s {directory}: its directory {directory.parent} does not "
                                    "exist")
        try:
            directory.mkdir()
        except OSError as exc:
            raise InvalidInputError(f"cannot create {directory}: {exc.strerror or exc}") from exc
    for name, _ in manifests.files:
        check_target(directory / name)
    for name, text in manifests.files:
        write_output(directory / name, text)
    doc = manifests.doc.model_copy(update={"directory": str(directory),
                                           "apply": f"kubectl apply -f {directory}"})
    if json_out:
        print_json(doc.model_dump(mode="json"))
        return
    console.print(f"matrix {matrix_id}: {len(doc.jobs)} Indexed Job{'s' if len(doc.jobs) != 1 else ''} and "
                  f"a ConfigMap written to {directory}:", markup=False, highlight=False)
    for job in doc.jobs:
        gpus = ", ".join(f"{k}: {v}" for k, v in job.gpus.items()) or "no GPU"
        nodes = ", ".join(f"{k}={v}" for k, v in job.node_selector.items()) or "any node"
        console.print(f"  {job.file}: {job.target}, {job.completions} runs ({job.parallelism} at once), "
                      f"{gpus}, {nodes}", markup=False, highlight=False)
    console.print(f"  the pods read {', '.join(doc.secret_keys)} from the Secret {doc.secret}; then: "
                  f"{doc.apply}; follow it with: gpuledger matrix show {matrix_id}", markup=False,
                  highlight=False)
    for note in doc.notes:
        console.print(f"  note: {note}", markup=False, highlight=False)


def _matrix_id(text: str) -> str:
    import re

    if not re.fullmatch(r"m-[a-z0-9_-]{1,64}", text):
        raise UsageError(f"{text[:80]!r} is not a matrix id (m-abcd2345)")
    return text


def matrix(
    plan: Annotated[str, typer.Argument(metavar="PLAN.yaml | show", help="The plan file (docs/matrix.md), or "
                                        "`show` and a matrix id.")],
    matrix_id: Annotated[str | None, typer.Argument(metavar="[MATRIX_ID]",
                                                    help="With show: the matrix.")] = None,
    backend: Annotated[str, typer.Option(
        "--backend", help="What runs the cells: ray (Ray, or this process: --ray), or slurm (Slurm job "
        "arrays, submitted with submitit: the plan's slurm: section).")] = "ray",
    ray: Annotated[str | None, typer.Option(
        "--ray", help="Where the cells run: local (a Ray instance on this machine; without Ray installed, "
        "this process), auto (the Ray cluster this machine is in), ADDRESS (a cluster's head, HOST:6379 or "
        "ray://HOST:10001), or none (this process, one cell after another). [default: local]")] = None,
    emit: Annotated[tuple[str, Path] | None, typer.Option(
        "--emit", metavar="k8s DIR", help="Write the matrix as Kubernetes manifests into DIR (an Indexed Job "
        "per target, a ConfigMap with the plan; the plan's kubernetes: section) and start nothing: kubectl "
        "apply -f DIR.")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Take up matrix MATRIX_ID (same plan): its "
                                               "complete cells are skipped.")] = None,
    index: Annotated[int | None, typer.Option(
        "--index", min=0, max=100_000, help="With --resume: run only the plan's run N (from 0; of "
        "--target's runs), here, creating the matrix if it is not in the store yet: what a Kubernetes pod "
        "runs.")] = None,
    target: Annotated[str | None, typer.Option("--target", help="With --index: count the runs of this "
                                               "target only.")] = None,
    max_parallel: Annotated[int | None, typer.Option("--max-parallel", min=1, max=10_000,
                                                     help="At most N cells at once (Ray; Slurm: each "
                                                     "array's throttle).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the cells (and, with --backend slurm, "
                                          "the sbatch options) and stop.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress over cells on "
                                           "stderr.")] = True,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a benchmark matrix (targets × loads × repeats) on Ray or Slurm into one store, or write it as
    Kubernetes manifests; `show ID` reads one."""
    if plan == SHOW:
        if matrix_id is None:
            raise UsageError("gpuledger matrix show needs a matrix id (m-…)")
        if dry_run or resume is not None or emit is not None or index is not None:
            raise UsageError("--dry-run, --resume, --emit and --index are for a plan, not for show")
        from gpuledger.cli.report_cmd import show_matrix

        show_matrix(db, matrix_id, json_out=json_out)
        return
    if matrix_id is not None:
        raise UsageError(f"one plan file at a time (got {plan!r} and {matrix_id!r}); `gpuledger matrix show "
                         "ID` reads a matrix")
    if backend not in ("ray", "slurm"):
        raise UsageError(f"--backend must be ray or slurm, got {backend[:40]!r} (Kubernetes: --emit k8s DIR)")
    if backend == "slurm" and ray is not None:
        raise UsageError("--ray is where Ray runs the cells: not with --backend slurm")
    if target is not None and index is None:
        raise UsageError("--target goes with --index (one run of the plan)")
    if index is not None and (resume is None or backend != "ray" or ray is not None or dry_run or emit):
        raise UsageError("--index runs one run of matrix --resume ID here: give it --resume, and neither "
                         "--backend, --ray, --dry-run nor --emit")
    if emit is not None:
        kind, directory = emit
        if kind not in EMIT_KINDS:
            raise UsageError(f"--emit {kind[:40]!r}: the one kind of manifests is k8s (--emit k8s DIR)")
        if dry_run or backend != "ray" or ray is not None:
            raise UsageError("--emit k8s DIR writes manifests and starts nothing: not with --dry-run, "
                             "--backend or --ray")
        _emit_k8s(Path(plan), directory, resume, json_out)
        return
    if dry_run:
        from gpuledger.bench.matrix import load_plan

        loaded = load_plan(Path(plan))
        if backend == "slurm":
            _dry_run_slurm(loaded, max_parallel, json_out)
        else:
            _dry_run(loaded, json_out)
        return
    _run(Path(plan), ray=ray or "local", backend=backend, db=db, resume=resume, max_parallel=max_parallel,
         progress=progress, json_out=json_out, index=index,
         target=target)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger matrix``."""
    app.command("matrix")(matrix)
