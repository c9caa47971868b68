"""``gpuledger serve [--db URL] [--host 127.0.0.1] [--port 8765] [--token T] [--profile P] [--json]``: the
team's read-only web dashboard over one store (docs/serve.md).

Exit codes: 0 stopped by Ctrl-C or SIGTERM; 2 a listener beyond loopback without a token, a bad option; 3/4
an unknown or malformed --profile; 8 the port cannot be listened on.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuledger.cli.common import DbOpt, JsonOpt, err_console, print_json

if TYPE_CHECKING:
    from gpuledger.serve.run import Started


class _ConsoleLog(logging.Handler):
    """The server's log lines (requests, store errors) on stderr, one a line with the time."""

    def emit(self, record: logging.LogRecord) -> None:
        line = escape(record.getMessage())
        if record.levelno >= logging.WARNING:
            line = f"[yellow]{line}[/yellow]"
        err_console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {line}")


def serve(
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on. Anything but loopback (127.0.0.1, ::1) needs --token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free port).")] = 8765,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="GPULEDGER_SERVE_TOKEN", show_envvar=True, show_default=False,
        help="Every request must carry it: 'Authorization: Bearer TOKEN', or the login form's cookie. "
        "16 characters at least; prefer the environment variable (a flag shows in ps).")
    ] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", "-p", help="Cost profile (preset name or YAML file) for every price the pages show. "
        "Default: each run's catalog preset.")
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Serve a read-only web dashboard of the store: runs, reports, comparisons, matrices, trends and
    published points, with a JSON API of the same documents as --json."""
    from gpuledger.serve.settings import settings_from

    # A bind refused before anything starts (nor aiohttp is imported).
    settings = settings_from(db=db, host=host, port=port, token=token, profile=profile)
    from gpuledger.serve.run import run_server

    logger = logging.getLogger("gpuledger.serve")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = _ConsoleLog()
    logger.addHandler(handler)

    def started(server: Started) -> None:
        guard = "every request needs the token" if settings.token is not None else "no token: loopback only"
        err_console.print(f"serving {server.url} — store opened read-only; {guard}; Ctrl-C or SIGTERM stops "
                          "it", markup=False, highlight=False)
        if json_out:
            print_json({"url": server.url, "host": server.host, "port": server.port, "read_only": True,
                        "token": settings.token is not None})

    try:
        run_server(settings, on_start=started)
    finally:
        logger.removeHandler(handler)
    err_console.print("stopped", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger serve``."""
    app.command("serve")(serve)
