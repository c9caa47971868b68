"""The ``gpuledger`` console script.

Each area registers its commands from its own module; errors from the library arrive here as
``GpuledgerError`` and leave as one red line on stderr plus the documented exit code.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from gpuledger import __version__
from gpuledger.cli.common import err_console
from gpuledger.errors import GpuledgerError

app = typer.Typer(
    name="gpuledger",
    help="What a token of YOUR workload costs on YOUR GPU stack (NVIDIA, AMD or CPU), and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuledger {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print version."),
) -> None:
    """gpuledger: doctor → lock → bench → cost → compare/report → monitor."""


def _register() -> None:
    from gpuledger.cli import (
        bench_cmd,
        cost_cmds,
        doctor_cmd,
        lock_cmd,
        monitor_cmd,
        report_cmd,
        run_cmd,
        sample_cmd,
        store_cmds,
    )

    # Order = the user's path through the tool (DESIGN.md): run first, then the steps.
    for module in (run_cmd, doctor_cmd, lock_cmd, bench_cmd, sample_cmd, cost_cmds, report_cmd,
                   monitor_cmd, store_cmds):
        module.register(app)


_register()


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns (and, as a console script, exits with) the documented exit code.

    Usage errors are typer's own (its message, exit 2); library errors arrive as ``GpuledgerError``
    and leave as one red line plus their exit code; anything else is a bug, reported in one line."""
    try:
        app(args=argv, prog_name="gpuledger")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        err_console.print("[red]error:[/red] interrupted")
        code = 130
    except GpuledgerError as exc:
        err_console.print(f"[red]error:[/red] {escape(exc.message)}")
        if exc.hint:
            err_console.print(f"  hint: {escape(exc.hint)}")
        code = exc.exit_code
    except Exception as exc:  # last line of defence: one line, never a traceback
        if os.environ.get("GPULEDGER_DEBUG"):
            raise
        err_console.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} "
            "(a bug in gpuledger; set GPULEDGER_DEBUG=1 for the traceback)"
        )
        code = 70
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
