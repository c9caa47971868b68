"""Shared CLI plumbing: consoles, JSON output, the options every results command takes."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

# Tables and human text go to stdout; progress, warnings and errors go to stderr so that
# ``--json`` output on stdout is never mixed with anything else.
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Results store URL (sqlite:///path or postgresql+psycopg://...). "
        "Default: $GPULEDGER_DB, else a SQLite file in the user data dir.",
        envvar="GPULEDGER_DB",
        show_envvar=True,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout, nothing else.")]


def _default(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps_json(obj: Any) -> str:
    """Indented JSON text (dataclasses, datetimes, numpy scalars and ``to_dict()`` objects handled)."""
    opts = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z
    return orjson.dumps(obj, default=_default, option=opts).decode()


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (and only that)."""
    sys.stdout.write(dumps_json(obj) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {message}")
