"""``gpuledger lock``: write a snapshot of the GPU software stack, check the live stack against one
(exit 1 on drift: a CI gate or cron job), or diff two snapshots (before/after an upgrade)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from gpuledger.cli.common import JsonOpt, console, err_console, print_json
from gpuledger.cli.files import check_target, write_output
from gpuledger.errors import UsageError


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "—"
    return str(value)


def _drift_table(title: str, drifts: list[Any], left: str, right: str) -> None:
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


def _stack_table(stack: dict[str, Any], path: Path | None, digest: str) -> None:
    table = Table(title=f"Stack snapshot{f' -> {path}' if path else ''}", title_justify="left")
    table.add_column("what")
    table.add_column("value")
    for key, value in stack.items():
        if key == "gpus":
            value = [f"{g.get('vendor')}: {g.get('name')} (VBIOS {g.get('vbios') or '?'})" for g in value]
        table.add_row(key, _show(value))
    table.add_row("hash", digest)
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
    from gpuledger.lock import DEFAULT_LOCK_FILE, check, diff_stacks, lock_text, read_lock, snapshot

    if check_file is not None and diff is not None:
        raise UsageError("--check and --diff cannot be combined")
    if output is not None and (check_file is not None or diff is not None):
        raise UsageError("-o/--output only applies when writing a snapshot (not with --check or --diff)")
    if diff is not None:
        a, b = read_lock(diff[0]), read_lock(diff[1])
        drifts = diff_stacks(a.stack, b.stack)
        if json_out:
            print_json(
                {
                    "a": a.path,
                    "b": b.path,
                    "same": not drifts,
                    "hash_a": a.doc.get("hash"),
                    "hash_b": b.doc.get("hash"),
                    "drift": [d.to_dict() for d in drifts],
                }
            )
        else:
            _drift_table(f"{a.path} -> {b.path}", drifts, "A", "B")
        raise typer.Exit(1 if drifts else 0)

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
        drifts = check(locked, doc["stack"])
        if json_out:
            print_json(
                {
                    "lock": locked.path,
                    "same": not drifts,
                    "locked_hash": locked.doc.get("hash"),
                    "live_hash": doc["hash"],
                    "drift": [d.to_dict() for d in drifts],
                }
            )
        else:
            _drift_table(f"{locked.path} vs this machine", drifts, "locked", "live")
        raise typer.Exit(1 if drifts else 0)

    write_output(path, lock_text(doc), overwrite=force)
    if json_out:
        print_json(doc)
    else:
        _stack_table(doc["stack"], path, doc["hash"])
        console.print(f"wrote {path}; check later with: gpuledger lock --check {path}")


def register(app: typer.Typer) -> None:
    """Add ``lock`` to ``app``."""
    app.command("lock")(lock)
