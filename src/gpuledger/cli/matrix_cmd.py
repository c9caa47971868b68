"""``gpuledger matrix PLAN.yaml`` runs a benchmark matrix (docs/matrix.md); ``gpuledger matrix show ID`` and
``gpuledger report --matrix ID`` read one back.

Exit codes: 0 every cell complete; 2 bad flags; 3 plan or matrix not found; 4 bad plan; 5 store error;
6 some cells failed (each recorded with its reason; the others ran); 7 Ray missing (``--ray auto|ADDRESS``);
8 the Ray cluster cannot be joined; 130 interrupted (the running cells end ``incomplete``; the line says how
to resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json
from gpuledger.errors import EngineError, UsageError

if TYPE_CHECKING:
    from gpuledger.bench.matrix import Cell, LoadedPlan
    from gpuledger.report.matrix import MatrixView

SHOW = "show"


def _dry_run(loaded: LoadedPlan, json_out: bool) -> None:
    rows = [{"key": c.key, "target": c.target.key_name, "load_level": c.load_level, "repeats": loaded.repeat,
             "resources": c.target.resources, "labels": c.target.labels, "workers": c.workers,
             "profile": c.profile} for c in loaded.cells]
    if json_out:
        print_json({"plan": loaded.where, "digest": loaded.digest, "cells": rows, "excluded": loaded.excluded,
                    "runs": len(rows) * loaded.repeat})
        return
    from gpuledger.report.layout import print_table

    def place(cell: Cell) -> str:
        t = cell.target
        parts = [f"{k}={v:g}" for k, v in t.resources.items()] + [f"{k}:{v}" for k, v in t.labels.items()]
        return ", ".join(parts) or "anywhere"

    print_table(console, f"{len(rows)} cells × {loaded.repeat} repeats = {len(rows) * loaded.repeat} runs "
                f"(dry run: nothing started)", ("cell", "target", "load level", "placed"),
                [(c.key, c.target.key_name, c.load_level, place(c)) for c in loaded.cells])
    if loaded.excluded:
        console.print(f"{loaded.excluded} combinations excluded by the plan's exclude rules", markup=False)


def _store_url(db: str | None) -> tuple[str, str]:
    """The store's URL as every cell opens it (the same store: a SQLite file by its absolute path), and its
    backend."""
    from gpuledger.store.engine import resolve_url

    url, _ = resolve_url(db)
    return url.render_as_string(hide_password=False), url.get_backend_name()


def _run(plan: Path, ray: str, db: str | None, resume: str | None, max_parallel: int | None, progress: bool,
         json_out: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuledger.bench.matrix import load_plan
    from gpuledger.bench.matrix_run import Events, check_where, run_matrix
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.store import open_store

    loaded = load_plan(plan)
    url, backend = _store_url(db)
    check_where(ray, backend)  # before the store is opened: a cluster needs Ray and a shared store
    show = progress and err_console.is_terminal and not json_out
    bar = Progress(TextColumn("cells"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=err_console, disable=not show, transient=True)
    task = bar.add_task("", total=None)
    failed: list[dict[str, Any]] = []

    def started(info: dict[str, Any]) -> None:
        err_console.print(
            f"matrix {info['matrix_id']}{' (resumed)' if info['resumed'] else ''}: {info['to_run']} of "
            f"{info['planned']} runs to do ({info['already_complete']} already complete); cells run "
            f"{info['where']}",
            markup=False, highlight=False)
        bar.update(task, total=info["to_run"])

    def ended(out: dict[str, Any]) -> None:
        if out["status"] == "failed":
            failed.append(out)
            err_console.print(Text("failed: ", style="red") + Text(f"{out['key']} #{out['repeat']}: "
                                                                   f"{out['reason']}"))
        bar.update(task, advance=1, description=f"{len(failed)} failed" if failed else "")

    def stopping() -> None:
        err_console.print("stopping: no new cell starts; the running cells end as incomplete (Ctrl-C again: "
                          "stop them at once)", markup=False)

    store = open_store(db)
    try:
        with bar:
            result = run_matrix(store, url, loaded, ray=ray, resume=resume,
                                max_parallel=max_parallel, environment=environment_fingerprint,
                                events=Events(on_start=started, on_cell=ended, on_stopping=stopping))
    finally:
        store.close()
    if json_out:
        print_json(result.to_dict())
    else:
        counts = result.to_dict()["counts"]
        console.print(f"matrix {result.matrix_id}: {counts['complete']} runs complete, {counts['failed']} "
                      f"failed, {counts['incomplete']} incomplete ({result.already_complete} were complete "
                      "before)", markup=False, highlight=False)
        console.print(f"  see: gpuledger matrix show {result.matrix_id}   gpuledger report --matrix "
                      f"{result.matrix_id}", markup=False, highlight=False)
    if failed:
        raise EngineError(f"matrix {result.matrix_id}: {len(failed)} of {len(result.outcomes)} runs failed; "
                          f"the first: {failed[0]['key']} #{failed[0]['repeat']}: {failed[0]['reason']}",
                          hint=f"gpuledger matrix show {result.matrix_id} lists every cell with its reason")


def render_matrix(view: MatrixView, *, detail: bool) -> None:
    """The matrix on the terminal: the cheapest target per load level first, every cell's figures, each
    target's Pareto front; ``detail``: every cell × repeat with its status and reason."""
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.matrix import figure_text

    m = view.matrix
    notes = Notes()
    counts = view.to_dict()["counts"]
    name = m.plan.get("name")
    paragraph(console, f"matrix {m.id}{f' ({name})' if name else ''}: {m.status}, started "
              f"{m.created_at:%Y-%m-%d %H:%M} UTC; runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    # One currency and unit for every cell goes in the titles; else each cost says its own.
    units = {c.price_text for c in view.cells if c.price_text}
    unit = next(iter(units)) if len(units) == 1 else None
    rows = []
    for entry in view.cheapest:
        if "cheapest" in entry:
            others = "; ".join(f"{o['target']} {o['times']:.2f}×" for o in entry["others"])
            others = others or "the only target priced"
            cost = f"{entry['cost']:.4g}" + ("" if unit else f" {entry['unit']}")
            rows.append((entry["load_level"], entry["cheapest"], cost, others))
        else:
            rows.append((entry["load_level"], "—", "n/a", notes.shorten(entry["note"])))
    print_table(console, f"Cheapest target per load level ({unit or 'each cost in its unit'})",
                ("load level", "cheapest", "cost",
                                                                      "the others cost"), rows)
    cells = []
    for c in view.cells:
        st = c.statuses
        ok = f"{st.get('complete', 0)}/{len(c.repeats)}"
        if c.cost is not None:
            cost = figure_text(c.cost) + ("" if unit else f" {c.price_text}")
        else:
            cost = "n/a" if c.cost_note is None else notes.shorten(f"n/a: {c.cost_note}")
        f = c.figures
        cells.append((c.key, ok, figure_text(f.get("output_tokens_per_s")), figure_text(f.get("ttft_p50_ms")),
                      figure_text(f.get("ttft_p99_ms")), figure_text(f.get("tpot_p50_ms")),
                      figure_text(f.get("e2e_p99_ms")), cost))
    columns = ("cell", "runs ok", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p99",
               f"cost ({unit or 'in its unit'})")
    print_table(console, "Every cell (mean of its complete repeats ± 95 % interval; latencies in ms; --json "
                "has every percentile)", columns, cells)
    for target, front in view.fronts.items():
        paragraph(console, ", ".join(front) if front else "no cell has both throughput and latency",
                  lead=Text(f"Pareto front of {target} (throughput vs TPOT p50): ", style="bold"))
    if detail:
        repeats: list[tuple[str, ...]] = [
            (c.key, str(r.repeat), str(r.status), str(r.attempts), r.run_id or "—",
             notes.shorten(r.reason or "")) for c in view.cells for r in c.repeats]
        print_table(console, "Cells × repeats", ("cell", "repeat", "status", "attempts", "run", "reason"),
                    repeats)
    notes.print(console)


def _view(db: str | None, matrix_id: str) -> MatrixView:
    from gpuledger.report.matrix import build_matrix_view
    from gpuledger.store import open_store

    with open_store(db) as store, err_console.status("reading the matrix…"):
        return build_matrix_view(store, matrix_id)


def report_matrix(db: str | None, matrix_id: str, *, json_out: bool, detail: bool = False) -> None:
    """``gpuledger report --matrix ID`` (and ``matrix show ID`` with ``detail``)."""
    view = _view(db, matrix_id)
    if json_out:
        print_json(view.to_dict())
    else:
        render_matrix(view, detail=detail)


def matrix(
    plan: Annotated[str, typer.Argument(metavar="PLAN.yaml | show", help="The plan file (docs/matrix.md), or "
                                        "`show` and a matrix id.")],
    matrix_id: Annotated[str | None, typer.Argument(metavar="[MATRIX_ID]",
                                                    help="With show: the matrix.")] = None,
    ray: Annotated[str, typer.Option(
        "--ray", help="Where the cells run: local (a Ray instance on this machine; without Ray installed, "
        "this process), auto (the Ray cluster this machine is in), ADDRESS (a cluster's head, HOST:6379 or "
        "ray://HOST:10001), or none (this process, one cell after another).")] = "local",
    resume: Annotated[str | None, typer.Option("--resume", help="Take up matrix MATRIX_ID (same plan): its "
                                               "complete cells are skipped.")] = None,
    max_parallel: Annotated[int | None, typer.Option("--max-parallel", min=1, max=10_000,
                                                     help="At most N cells at once (Ray).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the cells and stop.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress over cells on "
                                           "stderr.")] = True,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a benchmark matrix (targets × loads × repeats) on Ray into one store; `show ID` reads one."""
    if plan == SHOW:
        if matrix_id is None:
            raise UsageError("gpuledger matrix show needs a matrix id (m-…)")
        if dry_run or resume is not None:
            raise UsageError("--dry-run and --resume are for running a plan, not for show")
        report_matrix(db, matrix_id, json_out=json_out, detail=True)
        return
    if matrix_id is not None:
        raise UsageError(f"one plan file at a time (got {plan!r} and {matrix_id!r}); `gpuledger matrix show "
                         "ID` reads a matrix")
    if dry_run:
        from gpuledger.bench.matrix import load_plan

        _dry_run(load_plan(Path(plan)), json_out)
        return
    _run(Path(plan), ray, db, resume, max_parallel, progress, json_out)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger matrix``."""
    app.command("matrix")(matrix)
