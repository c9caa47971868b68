"""A hostile HTTP server for tests: raw asyncio on 127.0.0.1, in a thread, every byte up to the test.

``stream_server.StreamServer`` imitates well-behaved servers; this one misbehaves on purpose: lines of
100 MB, streams that never end, chunks after ``[DONE]``, connections held open after the answer, absurd
token counts, redirects to elsewhere. A test gives a handler per ``(method, path)``; the handler gets the
parsed request and a :class:`Reply` to write the status, chunked body pieces, then end, hold the
connection open, or abort it. ``GET /v1/models`` (and ``/version``, which makes the engine treat it as
vLLM and ask for continuous usage) answer by default, as ``GET /api/version`` / ``/api/tags`` do for
Ollama's engine. Every request is recorded with its headers; connections, and replies the client hung up
on while they were being written (``hangups``), are counted.

    with HostileServer({("POST", "/v1/completions"): handler}) as srv:
        engine = OpenAIEngine(srv.url, None)
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    target: str  # path and query as sent
    headers: dict[str, str]  # lower-case names
    body: bytes
    connection: int  # the number of the TCP connection it came on

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Reply:
    """What a handler writes: :meth:`start` (status line and headers, chunked body unless
    ``length`` is given), :meth:`write` (one chunk), then :meth:`end`, :meth:`hold` or :meth:`abort`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: HostileServer
    ) -> None:
        self._r = reader
        self._w = writer
        self._server = server
        self._chunked = False
        self.closed = False  # the client went away while we wrote
        self.keep_alive = True

    async def start(
        self, status: int = 200, headers: dict[str, str] | None = None, length: int | None = None
    ) -> None:
        reason = {200: "OK", 301: "Moved", 302: "Found", 307: "Temporary Redirect", 308: "Permanent Redirect",
                  404: "Not Found"}.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}"]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        if length is None:
            self._chunked = True
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {length}")
        await self._send(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def write(self, data: bytes) -> bool:
        """One body piece; False once the client has gone (the handler should stop)."""
        if not data:
            return not self.closed
        return await self._send(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)

    async def end(self) -> None:
        if self._chunked:
            await self._send(b"0\r\n\r\n")

    async def hold(self) -> None:
        """Keep the connection open, sending nothing, until the client closes it or the server stops."""
        self.keep_alive = False
        await self._server.wait_closed_or_stopped(self._r)

    def abort(self) -> None:
        self.keep_alive = False
        transport = self._w.transport
        transport.abort()  # type: ignore[attr-defined]

    async def _send(self, data: bytes) -> bool:
        if self.closed:
            return False
        try:
            self._w.write(data)
            await self._w.drain()
        except (ConnectionError, RuntimeError):
            self.closed = True
            self.keep_alive = False
            self._server.hangups += 1
            return False
        return True


Handler = Callable[[Request, Reply], Awaitable[None]]


async def json_reply(reply: Reply, obj: Any, status: int = 200) -> None:
    body = json.dumps(obj).encode()
    await reply.start(status, {"Content-Type": "application/json"}, length=len(body))
    await reply.write(body)


def redirect(location: str, status: int = 307) -> Handler:
    async def handler(req: Request, reply: Reply) -> None:
        await reply.start(status, {"Location": location}, length=0)

    return handler


@dataclass
class HostileServer:
    handlers: dict[tuple[str, str], Handler] = field(default_factory=dict)
    model: str = "hostile-model"
    identity: str = "vllm"  # "vllm" (answers /version), "ollama" (answers /api/version, /api/tags), "plain"
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    disconnects: int = 0  # connections the client closed between requests (or while one was held)
    hangups: int = 0  # replies the client stopped reading: it closed the connection while we wrote
    port: int = 0

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def of(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path == path]

    # -- defaults ----------------------------------------------------------------------------------
    async def _default(self, req: Request, reply: Reply) -> None:
        if req.method == "GET" and req.path == "/v1/models":
            models = [{"id": self.model, "owned_by": self.identity}]
            await json_reply(reply, {"object": "list", "data": models})
        elif req.method == "GET" and req.path == "/version" and self.identity == "vllm":
            await json_reply(reply, {"version": "0.0.0-hostile"})
        elif req.method == "GET" and req.path == "/api/version" and self.identity == "ollama":
            await json_reply(reply, {"version": "0.11.6"})
        elif req.method == "GET" and req.path == "/api/tags" and self.identity == "ollama":
            await json_reply(reply, {"models": [{"name": self.model, "model": self.model}]})
        elif req.method == "GET" and req.path == "/api/ps" and self.identity == "ollama":
            await json_reply(reply, {"models": []})
        else:
            await json_reply(reply, {"detail": "Not Found"}, status=404)

    # -- connection handling -------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *rest = head.decode("latin-1").split("\r\n")
                method, target, _version = line.split(" ", 2)
                headers = {}
                for h in rest:
                    if ":" in h:
                        k, v = h.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                req = Request(method, target, headers, body, number)
                self.requests.append(req)
                reply = Reply(reader, writer, self)
                handler = self.handlers.get((method, req.path), self._default)
                await handler(req, reply)
                if not reply.keep_alive or reply.closed:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.disconnects += 1
        finally:
            writer.close()

    async def wait_closed_or_stopped(self, reader: asyncio.StreamReader) -> None:
        assert self._stopping is not None
        while not reader.at_eof() and not self._stopping.is_set():
            await asyncio.sleep(0.01)
        if reader.at_eof():
            self.disconnects += 1

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> HostileServer:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def up() -> None:
                self._stopping = asyncio.Event()
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
                self.port = self._server.sockets[0].getsockname()[1]

            loop.run_until_complete(up())
            self._ready.set()
            loop.run_forever()
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0.05))
            loop.close()

        self._thread = threading.Thread(target=run, name="hostile-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("hostile server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            loop = self._loop

            def halt() -> None:
                assert self._stopping is not None
                self._stopping.set()
                loop.stop()

            loop.call_soon_threadsafe(halt)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- stream pieces -----------------------------------------------------------------------------------


def completion_event(
    text: str | None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> bytes:
    obj: dict[str, Any] = {
        "id": "cmpl-hostile",
        "object": "text_completion",
        "model": "hostile-model",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}] if text is not None else [],
    }
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def usage(completion: Any, prompt: Any = 3) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0}


def completion_stream(
    n: int, *, continuous: Callable[[int], Any] | None = None, final: Any = "n", prompt: Any = 3
) -> list[bytes]:
    """``n`` one-token chunks (the last with ``finish_reason``), a usage chunk (``final``; "n" = n,
    None = no usage chunk) and ``[DONE]``. ``continuous(i)`` is the cumulative count on chunk i."""
    out = []
    for i in range(1, n + 1):
        cu = usage(continuous(i), prompt) if continuous is not None else None
        out.append(completion_event(" tok", "length" if i == n else None, cu))
    if final is not None:
        out.append(completion_event(None, usage=usage(n if final == "n" else final, prompt)))
    out.append(b"data: [DONE]\n\n")
    return out


def stream_handler(events: list[bytes], *, then: str = "end", after: list[bytes] | None = None) -> Handler:
    """Send ``events`` (one write each) as an SSE 200, then ``after``, then ``end`` / ``hold`` / ``abort``."""

    async def handler(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "text/event-stream"})
        for e in [*events, *(after or [])]:
            if not await reply.write(e):
                return
        if then == "hold":
            await reply.hold()
        elif then == "abort":
            reply.abort()
        else:
            await reply.end()

    return handler


def ndjson(text: str | None = "tok", done: bool = False, **extra: Any) -> bytes:
    """One Ollama NDJSON line (a token line, or with done=True the final one)."""
    obj: dict[str, Any] = {"model": "hostile-model", "done": done, **extra}
    if text is not None:
        obj["response"] = text
    return json.dumps(obj).encode() + b"\n"


def ollama_stream(n: int, eval_count: Any = "n", prompt_eval_count: Any = 2) -> list[bytes]:
    """``n`` token lines and the done line with those counts ("n" = n; None = no prompt count)."""
    final: dict[str, Any] = {"eval_count": n if eval_count == "n" else eval_count, "eval_duration": 1000}
    if prompt_eval_count is not None:
        final["prompt_eval_count"] = prompt_eval_count
    return [ndjson() for _ in range(n)] + [ndjson("", done=True, done_reason="length", **final)]


def ndjson_handler(lines: list[bytes], *, then: str = "end", after: list[bytes] | None = None) -> Handler:
    async def handler(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "application/x-ndjson"})
        for line in [*lines, *(after or [])]:
            if not await reply.write(line):
                return
        if then == "hold":
            await reply.hold()
        else:
            await reply.end()

    return handler
