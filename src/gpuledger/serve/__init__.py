"""``gpuledger serve``: the team's read-only web dashboard over one results store (docs/serve.md).

``make_app(settings)`` is the aiohttp.web application (``serve.app``): pages rendered on the server from the
same library functions and typed documents the CLI prints (``serve.dashboard``), a JSON API returning the
CLI's ``--json`` documents, static files from the package (plotly.js from the plotly package: no CDN).
``run_server(settings)`` serves it until interrupted, ``start_server`` binds it in a running event loop. The
store is opened read-only; the guards (token, methods, bounds, headers) are ``serve.security``. Names are
imported when first used (``gpuledger.lazy``): ``serve.settings`` reads no web framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.lazy import exports

if TYPE_CHECKING:
    from gpuledger.serve.app import make_app
    from gpuledger.serve.run import run_server, start_server
    from gpuledger.serve.settings import ServeSettings, settings_from

__getattr__, __dir__ = exports(__name__, {
    "make_app": "gpuledger.serve.app",
    "run_server": "gpuledger.serve.run",
    "start_server": "gpuledger.serve.run",
    "ServeSettings": "gpuledger.serve.settings",
    "settings_from": "gpuledger.serve.settings",
})

__all__ = ["ServeSettings", "make_app", "run_server", "settings_from", "start_server"]
