"""Time from the start of ``gpuledger bench`` to its first request, for 400 and 2,000 requests (issue 15).

Against the real vLLM (CPU build, the tests' tiny Llama) when ``~/.cache/gpuledger-test/vllm`` exists
(``scripts/prepare-test-servers.sh``), started as ``tests/bench/real/realservers.py`` starts it; else against
the loopback stream server of the tests (``tests/bench/stream_server.py``) with a tokenizer that answers
each call ``--tokenize-delay-ms`` late (default 3 ms, about what vLLM's takes on this machine). It says which.

A recording proxy on 127.0.0.1 stands between the bench and the server; the figure is the time from
starting the ``gpuledger bench`` process (interpreter start-up and imports included) to the proxy seeing
its first ``POST /v1/completions`` (the warm-up request), after which the bench is stopped with SIGTERM (the
rest of the run does not matter here). Each count is measured ``--rounds`` times, interleaved; the medians
are printed. Target: at most 2 s for 2,000 requests. Exit 0 when it is met, 1 when not.

    .venv/bin/python benchmarks/first_request.py
    .venv/bin/python benchmarks/first_request.py --loopback --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "bench"))
sys.path.insert(0, str(REPO / "tests" / "bench" / "real"))
sys.path.insert(0, str(REPO / "tests"))

TARGET_S = 2.0
COUNTS = (400, 2000)
GENERATION = ("/v1/completions", "/v1/chat/completions")


class Proxy:
    """Forwards every request to ``upstream`` (streams passed through) and notes when the first generation
    request arrived (``time.perf_counter()``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.first: float | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._session: aiohttp.ClientSession | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.path in GENERATION and self.first is None:
            self.first = time.perf_counter()
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                         headers=headers, allow_redirects=False) as up:
            resp = web.StreamResponse(status=up.status, headers={
                k: v for k, v in up.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")
            })
            try:
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except (aiohttp.ClientError, ConnectionError):
                pass  # the bench was stopped (SIGTERM) mid-stream: nothing left to pass on
            return resp

    def start(self) -> Proxy:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def serve() -> None:
                self._session = aiohttp.ClientSession(auto_decompress=False)
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", self._handle)
                runner = web.AppRunner(app, access_log=None, handle_signals=False)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                self._ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        if not self._ready.wait(10):
            raise SystemExit("the proxy did not start")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def first_request_s(proxy: Proxy, model: str | None, n: int, db: str) -> float:
    proxy.first = None
    cmd = [sys.executable, "-m", "gpuledger.cli.main", "bench", "--base-url", proxy.url, "--input-len", "128",
           "--output-len", "16", "--num-requests", str(n), "--concurrency", "8", "--no-telemetry",
           "--no-progress", "--json", "--db", db]
    if model:
        cmd += ["--model", model]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 300
        while proxy.first is None:
            if proc.poll() is not None:
                raise SystemExit(f"gpuledger bench exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("no request within 300 s")
            time.sleep(0.005)
        took = proxy.first - t0
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return took


def start_server(loopback: bool, delay_ms: float) -> tuple[str, str | None, str, Any]:
    """(base URL, model, what it is, a stop function)."""
    import realservers

    if not loopback:
        try:
            realservers.vllm_python()
        except realservers.ServerUnavailable:
            loopback = True
    if loopback:
        from stream_server import Scenario, StreamServer

        srv = StreamServer(Scenario(identity="vllm", tokenize_delay_s=delay_ms / 1e3, tokens=16)).start()
        what = f"the loopback stream server (vLLM's API shape), /tokenize {delay_ms:g} ms late"
        return srv.url, None, what, srv.stop
    tmp = Path(tempfile.mkdtemp(prefix="gpuledger-first-request-"))
    print("starting the real vLLM (CPU, tiny Llama): about two minutes …", flush=True)
    model_dir = realservers.make_tiny_model(tmp / "model")
    server = realservers.start_vllm(model_dir, tmp / "vllm.log")
    import json

    status, text = realservers.get_text(server.base_url + "/version")
    version = json.loads(text).get("version", "?") if status == 200 else "?"
    return server.base_url, server.model, f"the real vLLM {version} (CPU, tiny Llama)", server.stop


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loopback", action="store_true",
                    help="use the loopback stream server even if vLLM is there")
    ap.add_argument("--tokenize-delay-ms", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    url, model, what, stop = start_server(args.loopback, args.tokenize_delay_ms)
    try:
        proxy = Proxy(url).start()
        with tempfile.TemporaryDirectory() as tmp:
            db = f"sqlite:///{tmp}/first-request.sqlite"
            first_request_s(proxy, model, 10, db)  # one run first: the page cache holds the imports
            times: dict[int, list[float]] = {n: [] for n in COUNTS}
            for _ in range(args.rounds):
                for n in COUNTS:
                    times[n].append(first_request_s(proxy, model, n, db))
    finally:
        stop()
    print(f"server: {what}")
    print("time from starting `gpuledger bench` to its first request (the warm-up), median of "
          f"{args.rounds} rounds:")
    for n in COUNTS:
        runs = ", ".join(f"{t:.2f}" for t in times[n])
        print(f"  --num-requests {n:>5}: {statistics.median(times[n]):.2f} s   (rounds: {runs})")
    worst = statistics.median(times[COUNTS[-1]])
    ok = worst <= TARGET_S
    print(f"target: <= {TARGET_S:g} s for {COUNTS[-1]} requests: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
