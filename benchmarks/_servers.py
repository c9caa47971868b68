"""Shared helpers for the benchmark scripts: loopback servers, ports, CPU pinning, the test cache.

Two servers speak just enough of the OpenAI API for a load generator (``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` with ``stream: true``) over raw asyncio
transports, so that the server costs as little CPU as possible and the client is what is measured:

``preencoded``  every token is one SSE event (one HTTP chunk), the whole response body for a given
                ``max_tokens`` is encoded once and handed to the socket in one write: the client
                receives it as fast as the socket takes it. A final event carries ``usage``
                (``prompt_tokens`` = whitespace-separated words of the prompt, or the length of a
                token-id list; ``completion_tokens`` = ``max_tokens``), then ``data: [DONE]``.
``delayed``     the first token is sent ``--ttft-ms`` after the request arrived, then one token
                every ``--gap-ms``, on an absolute schedule (no drift), so the true TTFT and TPOT
                are known.

Run one with ``python benchmarks/_servers.py preencoded --port P`` (it prints ``ready <port>`` on
stdout once listening). The scripts start them pinned with ``taskset -c CORE``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

MODEL_NAME = "bench-model"
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# Small utilities used by the scripts
# ---------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where ``scripts/prepare-test-servers.sh`` installs vLLM / llama.cpp / the GGUF model."""
    env = os.environ.get("GPULEDGER_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpuledger-test"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pinned(cmd: Sequence[str], core: int | None) -> list[str]:
    """``cmd`` prefixed with ``taskset -c core`` (unchanged when ``core`` is None)."""
    if core is None:
        return list(cmd)
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("taskset not found (util-linux); it is needed to pin the processes to one core")
    return [taskset, "-c", str(core), *cmd]


def wait_port(port: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {deadline_s:.0f} s")


class ServerProcess:
    """A loopback server from this module, run as a child process (optionally pinned)."""

    def __init__(self, kind: str, args: Sequence[str] = (), core: int | None = None) -> None:
        self.port = free_port()
        cmd = [sys.executable, str(Path(__file__).resolve()), kind, "--port", str(self.port), *args]
        self.proc = subprocess.Popen(pinned(cmd, core), stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready"):
            self.stop()
            raise SystemExit(f"the {kind} server did not start (said {line!r})")
        wait_port(self.port, 10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_json_command(cmd: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> Any:
    """Run ``cmd``; return its stdout parsed as JSON. Exit status != 0 -> SystemExit with stderr's tail."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return orjson.loads(proc.stdout)


def gpuledger_exe() -> str:
    exe = Path(sys.executable).with_name("gpuledger")
    if exe.exists():
        return str(exe)
    found = shutil.which("gpuledger")
    if found is None:
        raise SystemExit("the gpuledger console script is not installed (pip install -e .)")
    return found


# ---------------------------------------------------------------------------------------------
# Reference clients (aiohttp; they measure, they do not interpret)
# ---------------------------------------------------------------------------------------------


async def bare_line_splitter(base_url: str, concurrency: int, num_requests: int, max_tokens: int,
                             prompt: str = "hello " * 32) -> dict[str, float]:
    """The floor any load generator sits on: aiohttp reads (``iter_any``), split into lines, lines
    starting with ``data:`` counted, nothing parsed. Returns ``{"wall_s", "data_lines", "requests"}``;
    every token is one ``data:`` line."""
    import aiohttp

    body = orjson.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                         "ignore_eos": True, "stream_options": {"include_usage": True}})
    headers = {"content-type": "application/json"}
    todo = iter(range(num_requests))
    lines = 0
    done = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal lines, done
        for _ in todo:
            buf = b""
            async with session.post(base_url + "/v1/completions", data=body, headers=headers) as resp:
                resp.raise_for_status()
                async for data in resp.content.iter_any():
                    parts = (buf + data).split(b"\n")
                    buf = parts.pop()
                    for line in parts:
                        if line.startswith(b"data:"):
                            lines += 1
            if buf.startswith(b"data:"):
                lines += 1
            done += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "data_lines": float(lines), "requests": float(done)}


async def timing_reference_client(base_url: str, concurrency: int, max_tokens: int, stop: asyncio.Event,
                                  prompt: str = "hello " * 32) -> list[tuple[float, float, float, int]]:
    """A minimal streaming client, ``concurrency`` requests in flight until ``stop`` is set. Per
    request (wall-clock send time, TTFT s, E2E s, content events): TTFT is the arrival of the first
    line holding ``"text"`` after the request was sent, E2E the arrival of the last one. One
    ``perf_counter()`` per line."""
    import aiohttp

    body = orjson.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                         "ignore_eos": True, "stream_options": {"include_usage": True}})
    headers = {"content-type": "application/json"}
    out: list[tuple[float, float, float, int]] = []

    async def worker(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            wall = time.time()
            t_send = time.perf_counter()
            first = last = 0.0
            n = 0
            async with session.post(base_url + "/v1/completions", data=body, headers=headers) as resp:
                resp.raise_for_status()
                async for line in resp.content:
                    now = time.perf_counter()
                    if line.startswith(b"data: {") and b'"text"' in line:
                        if n == 0:
                            first = now
                        last = now
                        n += 1
            if n:
                out.append((wall, first - t_send, last - t_send, n))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as s:
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
    return out


# ---------------------------------------------------------------------------------------------
# The servers
# ---------------------------------------------------------------------------------------------

_HEAD_SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return _chunk(b"data: " + orjson.dumps(obj) + b"\n\n")


def _plain(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: " + ctype
        + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    )


def _token_event(chat: bool, text: str, finish: str | None) -> bytes:
    if chat:
        return _event({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": MODEL_NAME,
            "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}],
        })
    return _event({
        "id": "cmpl-bench", "object": "text_completion", "created": 0, "model": MODEL_NAME,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    })


def _tail(chat: bool, prompt_tokens: int, completion_tokens: int, include_usage: bool) -> bytes:
    out = b""
    if include_usage:
        out += _event({
            "id": "chatcmpl-bench" if chat else "cmpl-bench",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 0, "model": MODEL_NAME, "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })
    return out + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _prompt_tokens(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return len(prompt)
    if isinstance(prompt, str):
        return len(prompt.split())
    messages = body.get("messages")
    if isinstance(messages, list):
        return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
    return 0


class _HttpProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive request parser; subclasses answer ``stream(...)``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4: end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            method, path = head[0].split(" ")[:2]
            self._answer(method, path.split("?")[0], body)

    def _answer(self, method: str, path: str, raw: bytes) -> None:
        assert self.transport is not None
        if method == "GET" and path == "/v1/models":
            self.transport.write(_plain("200 OK", orjson.dumps(
                {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "bench"}]})))
            return
        if method == "GET" and path in ("/health", "/"):
            self.transport.write(_plain("200 OK", b"{}"))
            return
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            self.transport.write(_plain("404 Not Found", b'{"error": {"message": "not found"}}'))
            return
        try:
            body = orjson.loads(raw)
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            self.transport.write(_plain("400 Bad Request", b'{"error": {"message": "bad request body"}}'))
            return
        if not body.get("stream"):
            self.transport.write(_plain("400 Bad Request", b'{"error": {"message": "stream only"}}'))
            return
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        self.stream(path.endswith("chat/completions"), max_tokens, _prompt_tokens(body), include_usage)

    def stream(self, chat: bool, max_tokens: int, prompt_tokens: int, include_usage: bool) -> None:
        raise RuntimeError("subclass must implement stream()")


class PreencodedProtocol(_HttpProtocol):
    """Answers each request with one write of a body encoded once per (endpoint, max_tokens)."""

    cache: dict[tuple[bool, int], bytes] = {}

    def stream(self, chat: bool, max_tokens: int, prompt_tokens: int, include_usage: bool) -> None:
        assert self.transport is not None
        key = (chat, max_tokens)
        body = self.cache.get(key)
        if body is None:
            body = _HEAD_SSE + b"".join(
                _token_event(chat, " tok", "length" if i == max_tokens - 1 else None)
                for i in range(max_tokens)
            )
            self.cache[key] = body
        self.transport.write(body + _tail(chat, prompt_tokens, max_tokens, include_usage))


class DelayedProtocol(_HttpProtocol):
    """First token ``ttft_s`` after the request, then one every ``gap_s`` (absolute schedule)."""

    ttft_s = 0.05
    gap_s = 0.01

    def stream(self, chat: bool, max_tokens: int, prompt_tokens: int, include_usage: bool) -> None:
        assert self.transport is not None
        self.busy = True
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.transport.write(_HEAD_SSE)
        events = [_token_event(chat, " tok", "length" if i == max_tokens - 1 else None)
                  for i in range(max_tokens)]
        tail = _tail(chat, prompt_tokens, max_tokens, include_usage)

        def send(i: int) -> None:
            if self.transport is None:
                return
            self.transport.write(events[i] + (tail if i == max_tokens - 1 else b""))
            if i + 1 < max_tokens:
                loop.call_at(t0 + self.ttft_s + (i + 1) * self.gap_s, send, i + 1)
            else:
                self.busy = False
                self._next()

        loop.call_at(t0 + self.ttft_s, send, 0)


async def _serve(factory: Callable[[], asyncio.Protocol], port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(f"ready {port}\n")
    sys.stdout.flush()
    async with server:
        await stop.wait()
        server.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="kind", required=True)
    pre = sub.add_parser("preencoded", help="stream pre-encoded tokens as fast as the socket takes them")
    pre.add_argument("--port", type=int, required=True)
    dly = sub.add_parser("delayed", help="programmed first-token delay and inter-token gap")
    dly.add_argument("--port", type=int, required=True)
    dly.add_argument("--ttft-ms", type=float, default=50.0)
    dly.add_argument("--gap-ms", type=float, default=10.0)
    bare = sub.add_parser("bare", help="run the bare aiohttp line splitter; prints JSON on stdout")
    bare.add_argument("--base-url", required=True)
    bare.add_argument("--concurrency", type=int, default=32)
    bare.add_argument("--num-requests", type=int, default=200)
    bare.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args(argv)
    if args.kind == "bare":
        result = asyncio.run(bare_line_splitter(args.base_url, args.concurrency, args.num_requests,
                                                args.max_tokens))
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    factory: Callable[[], asyncio.Protocol]
    if args.kind == "preencoded":
        factory = PreencodedProtocol
    else:
        DelayedProtocol.ttft_s = args.ttft_ms / 1000.0
        DelayedProtocol.gap_s = args.gap_ms / 1000.0
        factory = DelayedProtocol
    asyncio.run(_serve(factory, args.port))


if __name__ == "__main__":
    main()
