"""Helpers of the dashboard tests: the golden store's runs, a dashboard served in a thread, an HTTP client
that follows no redirect."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuledger.serve import ServeSettings, start_server
from gpuledger.serve.run import Started
from gpuledger.store import open_store

TESTS = Path(__file__).resolve().parents[1]
GOLDEN = TESTS / "golden" / "store-v1.sqlite"
IDS = json.loads((TESTS / "golden" / "ids.json").read_text())
H200, MI300X, TORCH = IDS["h200"], IDS["mi300x_sweep"], IDS["torch"]


def golden_copy(path: Path) -> str:
    """A copy of the golden store at ``path``, upgraded to this gpuledger's schema (any command with write
    access does that: here ``open_store``); returns its URL."""
    shutil.copy(GOLDEN, path)
    url = f"sqlite:///{path}"
    open_store(url).close()
    return url


class Running:
    """A dashboard served by its own event loop in a thread (the tests and Playwright stay synchronous)."""

    def __init__(self, settings: ServeSettings) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dashboard", daemon=True)
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(start_server(settings), self.loop)
        self.started: Started = started.result(120)
        self.url = self.started.url

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.started.runner.cleanup(), self.loop).result(120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


def request(url: str, method: str = "GET", *, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> Answer:
    """One request, no redirect followed (a redirect is the answer)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path or "/", body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data,
                      resp.headers.get_all("Set-Cookie") or [])
    finally:
        conn.close()
