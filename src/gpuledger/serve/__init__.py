"""``gpuledger serve``: the team's read-only web dashboard over one results store (docs/serve.md).

``make_app(settings)`` is the aiohttp.web application (``serve.app``): pages rendered on the server from the
same library functions and typed documents the CLI prints (``serve.dashboard``), a JSON API returning the
CLI's ``--json`` documents, static files from the package (plotly.js from the plotly package: no CDN).
``run_server(settings)`` serves it until interrupted. The store is opened read-only; the guards (token,
methods, bounds, headers) are ``serve.security``.
"""

from gpuledger.serve.app import make_app
from gpuledger.serve.run import run_server, start_server
from gpuledger.serve.settings import ServeSettings, settings_from

__all__ = ["ServeSettings", "make_app", "run_server", "settings_from", "start_server"]
