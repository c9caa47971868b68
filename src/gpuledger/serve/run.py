"""Running the dashboard: ``start_server`` binds it (in the running event loop: tests start it in-process on
port 0 and stop it), ``run_server`` serves until SIGINT or SIGTERM and then stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gpuledger.errors import ResourceError
from gpuledger.serve.app import AccessLog, make_app
from gpuledger.serve.dashboard import Dashboard
from gpuledger.serve.security import MAX_FIELD_BYTES, MAX_LINE_BYTES
from gpuledger.serve.settings import ServeSettings

log = logging.getLogger("gpuledger.serve")
access_log = logging.getLogger("gpuledger.serve.access")
# How long a stop waits for the requests in flight.
SHUTDOWN_S = 5.0


@dataclass(frozen=True, slots=True)
class Started:
    """A server that listens: its runner (``await started.runner.cleanup()`` stops it) and its address."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


async def start_server(settings: ServeSettings, dashboard: Dashboard | None = None) -> Started:
    """Bind ``settings.host:settings.port`` (port 0: a free one) and serve in the running loop."""
    app = make_app(settings, dashboard)
    runner = web.AppRunner(app, access_log_class=AccessLog, access_log=access_log,
                           shutdown_timeout=SHUTDOWN_S, max_line_size=MAX_LINE_BYTES,
                           max_field_size=MAX_FIELD_BYTES, max_headers=64)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, backlog=512)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ResourceError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}",
                            hint="is another server on that port? pick another with --port") from exc
    bound = [a for a in runner.addresses if isinstance(a, tuple)]
    port = int(bound[0][1]) if bound else settings.port
    return Started(runner, settings.host, port)


def run_server(settings: ServeSettings, on_start: Callable[[Started], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM (then finish the requests in flight, at most ``SHUTDOWN_S``)."""
    asyncio.run(_serve(settings, on_start))


async def _serve(settings: ServeSettings, on_start: Callable[[Started], None] | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    if threading.current_thread() is threading.main_thread() and sys.platform != "win32":
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
    started = await start_server(settings)
    try:
        if on_start is not None:
            on_start(started)
        await stop.wait()
        log.info("stopping")
    finally:
        await started.runner.cleanup()
        for sig in installed:
            loop.remove_signal_handler(sig)
