"""``gpuledger lock``: write a snapshot of the GPU software stack, check the live stack against one
(exit 1 on drift: a CI gate or cron job), or diff two snapshots (before/after an upgrade)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from gpuledger.cli.common import JsonOpt, console, err_console, print_json
from gpuledger.cli.files import check_target, write_output
from gpuledger.errors import UsageError

if TYPE_CHECKING:
    from gpuledger.lock import Drift, LockDocument


def _show(value: Any) -> str:
    """A stack's value in a cell: a list or mapping (a stored stack's JSON, a model's fields) joined."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "—"
    return str(value)


def _drift_table(title: str, drifts: Sequence[Drift], left: str, right: str) -> None:
    if not drifts:
        console.print(Text(f"{title}: no drift", style="green"))
        return
    table = Table(title=title, title_justify="left")
    for col in ("what", left, right, "class", "why"):
        table.add_column(col)
    for d in drifts:
        cls = Text("matters", style="bold red") if d.matters else Text("cosmetic", style="dim")
        table.add_row(d.key, _show(d.locked), _show(d.live), cls, d.reason)
    console.print(table)
    n = sum(1 for d in drifts if d.matters)
    console.print(
        f"{len(drifts)} change(s), {n} that matter(s) (driver major, CUDA/ROCm minor, torch, Python minor, "
        "engines, GPUs, kernel without a rebuilt module)."
    )


def _stack_table(doc: LockDocument, path: Path | None) -> None:
    """Every field of the snapshot's stack, in its order (the GPUs by name and VBIOS), then its hash."""
    table = Table(title=f"Stack snapshot{f' -> {path}' if path else ''}", title_justify="left")
    table.add_column("what")
    table.add_column("value")
    stack = doc.stack
    for name in type(stack).model_fields:
        value = getattr(stack, name)
        if name == "gpus":
            value = [f"{g.vendor}: {g.name} (VBIOS {g.vbios or '?'})" for g in stack.gpus]
        table.add_row(name, _show(value))
    table.add_row("hash", doc.hash)
    console.print(table)


def lock(
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Where to write the snapshot (default ./gpuledger.lock.json)."),
    ] = None,
    check_file: Annotated[
        Path | None,
        typer.Option("--check", metavar="FILE", help="Compare the live stack with FILE; exit 1 on drift."),
    ] = None,
    diff: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--diff", metavar="A B", help="Compare two snapshots; exit 1 when they differ."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the snapshot file if it exists (default: refuse).")
    ] = False,
    json_out: JsonOpt = False,
    root: Annotated[
        Path,
        typer.Option(
            "--root", help="Read sys, proc, dev, etc, opt/rocm under DIR instead of / (like doctor)."
        ),
    ] = Path("/"),
) -> None:
    """Pin the driver, CUDA/ROCm, PyTorch and engine versions (seed §8.1) and catch drift."""
    from gpuledger.lock import DEFAULT_LOCK_FILE, check, diff_locks, lock_text, read_lock, snapshot

    if check_file is not None and diff is not None:
        raise UsageError("--check and --diff cannot be combined")
    if output is not None and (check_file is not None or diff is not None):
        raise UsageError("-o/--output only applies when writing a snapshot (not with --check or --diff)")
    if diff is not None:
        compared = diff_locks(read_lock(diff[0]), read_lock(diff[1]))
        if json_out:
            print_json(compared.model_dump(mode="json"))
        else:
            _drift_table(f"{compared.a} -> {compared.b}", compared.drift, "A", "B")
        raise typer.Exit(0 if compared.same else 1)

    if not root.is_dir():
        raise UsageError(f"--root {root} is not a directory")
    path = output or Path(DEFAULT_LOCK_FILE)
    if check_file is None:
        check_target(path, overwrite=force)  # before the machine is read
    from gpuledger.facts import collect_facts

    locked = read_lock(check_file) if check_file is not None else None  # before the machine is read
    facts = collect_facts(root, check_ollama=False, probe_torch=False)
    doc = snapshot(facts)
    if locked is not None:
        if not locked.hash_ok:
            err_console.print(
                f"[yellow]warning:[/yellow] the hash in {locked.path} does not match its stack "
                "(edited by hand?); comparing the stack as written"
            )
        checked = check(locked, doc)
        if json_out:
            print_json(checked.model_dump(mode="json"))
        else:
            _drift_table(f"{checked.lock} vs this machine", checked.drift, "locked", "live")
        raise typer.Exit(0 if checked.same else 1)

    write_output(path, lock_text(doc), overwrite=force)
    if json_out:
        print_json(doc.model_dump(mode="json"))
    else:
        _stack_table(doc, path)
        console.print(f"wrote {path}; check later with: gpuledger lock --check {path}")


def register(app: typer.Typer) -> None:
    """Add ``lock`` to ``app``."""
    app.command("lock")(lock)
