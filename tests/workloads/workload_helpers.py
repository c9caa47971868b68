"""Helpers of the workload tests: ``bench`` run in this process, a server that replays a recorded stream."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gpuledger.cli.main import main
from gpuledger.store import open_store


@dataclass
class Bench:
    """One ``gpuledger bench --json`` in this process: exit code, the run's document, stdout/stderr, and its
    stored requests in index order."""

    code: int
    doc: dict[str, Any]
    output: str
    records: list[Any] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = self.doc["summary"]
        return summary


def bench(*args: str) -> Bench:
    """``gpuledger bench ARGS --json`` through the CLI's entry point (its exit codes), and, when it made a
    run, that run's stored requests; ``output`` is stderr then stdout."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", "--no-telemetry", "--no-progress", *args, "--json"])
    try:
        doc = json.loads(out.getvalue())
    except ValueError:
        doc = {}
    records: list[Any] = []
    if doc.get("id"):
        with open_store(None) as store:
            records = sorted(store.get_requests(doc["id"]), key=lambda r: r.index)
    return Bench(code, doc, err.getvalue() + out.getvalue(), records)


def workload_of(record: Any) -> dict[str, Any]:
    """What the load recorded about a request (its session and turn; a trace's schedule)."""
    value = (record.server_timings or {}).get("workload", {})
    assert isinstance(value, dict)
    return value


class ReplayServer:
    """An OpenAI-compatible chat server on loopback that answers every request with a recorded stream:
    ``payloads`` (one ``data:`` payload each, ``[DONE]`` added), the i-th sent after ``delays[i]`` seconds
    (the gap before it). Its /v1/models lists ``model``; nothing else identifies it."""

    def __init__(self, payloads: list[bytes], delays: list[float], model: str = "deepseek-reasoner") -> None:
        self.payloads = payloads
        self.delays = delays
        self.model = model
        self.bodies: list[dict[str, Any]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(json.loads(await request.read()))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for payload, delay in zip(self.payloads, self.delays, strict=True):
            if delay:
                await asyncio.sleep(delay)
            await resp.write(b"data: " + payload + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def start(self) -> ReplayServer:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app_ = web.Application()
            app_.router.add_get("/v1/models", self._models)
            app_.router.add_post("/v1/chat/completions", self._chat)
            self._runner = web.AppRunner(app_)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
