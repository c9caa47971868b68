"""``gpuledger doctor``: layer-by-layer diagnosis of the GPU stack with exact fixes; ``--explain ID``
prints one knowledge-base rule; ``--history`` shows the setup-labour ledger per machine.

The library (doctor, store, cost) is imported inside the command functions, not here: every ``gpuledger``
command loads this module at start-up, and importing the store and the collectors would add a few hundred
milliseconds to each of them (``gpuledger --help`` included)."""

from __future__ import annotations

import contextlib
import difflib
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json, warn
from gpuledger.errors import GpuledgerError, NotFoundError, UsageError


def _explain(rule_id: str, json_out: bool) -> None:
    from gpuledger.doctor.knowledge import knowledge_base
    from gpuledger.doctor.report import render_rule

    kb = knowledge_base()
    if not kb.has(rule_id):
        near = difflib.get_close_matches(rule_id, [r.id for r in kb.rules], n=5, cutoff=0.4)
        hint = ("did you mean: " + ", ".join(near) + "? " if near else "") + "docs/doctor.md lists every rule"
        raise NotFoundError(f"no doctor rule with id {rule_id!r}", hint=hint)
    rule = kb.rule(rule_id)
    if json_out:
        print_json(rule.model_dump(mode="json"))
    else:
        render_rule(rule, console)


def _history(db: str | None, json_out: bool) -> None:
    from gpuledger.cost.pricing.labour import setup_labour_hours
    from gpuledger.store import open_store

    store = open_store(db)
    try:
        records = store.list_doctor_runs()
    finally:
        store.close()
    ledger = setup_labour_hours(records)
    if json_out:
        print_json({name: m.document().model_dump(mode="json") for name, m in ledger.items()})
        return
    if not ledger:
        console.print("No doctor runs stored yet: run `gpuledger doctor` (each run is filed in the ledger).")
        return
    table = Table(
        title="Setup-labour ledger (first run with an error -> first all-clear run)", title_justify="left"
    )
    for col in ("machine", "runs", "first error", "all clear", "hours", "problems met"):
        table.add_column(col, justify="right" if col in ("runs", "hours") else "left")
    for m in ledger.values():
        first = m.episodes[0].start.strftime("%Y-%m-%d %H:%M") if m.episodes else "never"
        last_end = next((e.end for e in reversed(m.episodes) if e.end is not None), None)
        clear = "still open" if not m.resolved else (last_end.strftime("%Y-%m-%d %H:%M") if last_end else "—")
        hours = f"{m.hours:.2f}" + (f" (+{m.open_hours:.2f} open)" if not m.resolved else "")
        table.add_row(m.machine, str(m.runs), first, clear, hours, ", ".join(m.problems) or "none")
    console.print(table)
    console.print(
        "hours = sum of closed episodes (wall-clock time between doctor runs); "
        "an episode closes at the first run with no error."
    )


def doctor(
    json_out: JsonOpt = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Also run a matmul and a copy on each GPU: achieved TFLOPS and GB/s vs the catalog.",
        ),
    ] = False,
    ollama: Annotated[
        str | None, typer.Option("--ollama", help="Ollama URL to check (default http://127.0.0.1:11434).")
    ] = None,
    root: Annotated[
        Path,
        typer.Option(
            "--root", help="Read sys, proc, dev, etc, opt/rocm, usr/lib/wsl under DIR instead of /."
        ),
    ] = Path("/"),
    explain: Annotated[
        str | None, typer.Option("--explain", metavar="ID", help="Explain one finding id.")
    ] = None,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="Per machine: hours from the first run with an error to the first all-clear run.",
        ),
    ] = False,
    python: Annotated[
        str | None,
        typer.Option("--python", help="Examine the PyTorch of this interpreter (e.g. the workload's venv)."),
    ] = None,
    db: DbOpt = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Do not file this run in the ledger.")] = False,
) -> None:
    """Diagnose the GPU stack bottom up (hardware, kernel, management, runtime, containers, WSL2,
    applications). Exit 0: no warnings or errors; 1: warnings; 2: errors."""
    if explain is not None and history:
        raise UsageError("--explain and --history cannot be combined")
    if explain is not None:
        _explain(explain, json_out)
        return
    if history:
        _history(db, json_out)
        return
    if not root.is_dir():
        raise UsageError(f"--root {root} is not a directory")
    from gpuledger.doctor import run_doctor, store_report
    from gpuledger.doctor.report import render

    if deep:
        err_console.print("running the --deep probe (matmul + copy on each device; up to a few minutes)...")
    status = err_console.status("collecting facts...", spinner="dots")
    with status if not json_out else contextlib.nullcontext():
        report = run_doctor(root, deep=deep, ollama_url=ollama, python=python)
    if not no_store:
        try:
            store_report(report, db)
        except GpuledgerError as exc:  # StoreError, or a --db URL the store refuses: never fatal here
            warn(f"this doctor run was not stored in the setup-labour ledger: {exc.message}")
    if json_out:
        print_json(report.to_json())
    else:
        render(report, console)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command("doctor")(doctor)
