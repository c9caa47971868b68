"""The ``gpuledger`` typer application: each area registers its commands from its own module.

Imported by ``gpuledger.cli.main.main`` after the signal handlers are installed (importing it takes
most of a command's start-up time)."""

from __future__ import annotations

import typer

from gpuledger import __version__

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
        advise_cmd,
        bench_cmd,
        cost_cmds,
        doctor_cmd,
        estimate_cmd,
        lock_cmd,
        matrix_cmd,
        monitor_cmd,
        published_cmds,
        report_cmd,
        run_cmd,
        sample_cmd,
        store_cmds,
        telemetry_cmd,
    )

    # Order = the user's path through the tool (DESIGN.md): run first, then the steps.
    for module in (run_cmd, doctor_cmd, lock_cmd, bench_cmd, matrix_cmd, sample_cmd, cost_cmds,
                   estimate_cmd, advise_cmd, published_cmds, report_cmd, monitor_cmd, store_cmds,
                   telemetry_cmd):
        module.register(app)


_register()
