"""A programmable Prometheus exposition endpoint on 127.0.0.1 (``/metrics``), for hostile exporters: the
body of each answer is ``answer(n)`` for the n-th request (0 first), and an answer may be held back
(``hang(n)``: the request waits until the server stops, as a slow or wedged exporter's does). ``requests``
counts the requests, ``hung`` the ones being held (set as each arrives), ``gone`` the held ones whose
client went away.

    with ExpositionServer(lambda n: dcgm_line(0, 300.0)) as srv:
        srv.url   # http://127.0.0.1:PORT/metrics
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def dcgm_power(power_w: float, *, gpu: int | None = None, uuid: str | None = None,
               model: str = "NVIDIA H100 80GB HBM3", host: str = "gpu-node-1") -> str:
    """One GPU's ``DCGM_FI_DEV_POWER_USAGE`` sample as dcgm-exporter writes it (index and/or UUID labels)."""
    labels = [f'gpu="{gpu}"'] if gpu is not None else []
    labels += [f'UUID="{uuid}"'] if uuid is not None else []
    labels += [f'modelName="{model}"', f'Hostname="{host}"']
    return f"DCGM_FI_DEV_POWER_USAGE{{{','.join(labels)}}} {power_w}\n"


HEAD = "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"


class ExpositionServer:
    """See the module docstring."""

    def __init__(self, answer: Callable[[int], str], *, hang: Callable[[int], bool] | None = None) -> None:
        self.answer = answer
        self.hang = hang or (lambda n: False)
        self.requests = 0
        self.hung = threading.Event()
        self.gone = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ExpositionServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    n = owner.requests
                    owner.requests += 1
                if owner.hang(n):
                    owner.hung.set()
                    while not owner._release.wait(0.05):
                        if self._client_gone():
                            owner.gone.set()
                            return
                data = owner.answer(n).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _client_gone(self) -> bool:
                readable, _, _ = select.select([self.connection], [], [], 0)
                try:
                    return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)  # EOF: closed
                except OSError:
                    return True

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ExpositionServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
