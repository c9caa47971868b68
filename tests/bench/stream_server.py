"""A programmable loopback inference server for tests and measurements (aiohttp, 127.0.0.1 only).

It speaks the OpenAI-compatible streaming API (``/v1/completions``, ``/v1/chat/completions``,
``/v1/models``) in the shapes real servers use (see tests/fixtures/captures/servers), imitates the
identity endpoints of vLLM / SGLang / llama.cpp / TGI (``identity=``), has a word-level
``/tokenize`` + ``/detokenize`` where the imitated server has one, and speaks Ollama's native
NDJSON API, either synthetic or replaying a recorded real stream.

A chat's prompt counts ``chat_template_tokens`` beside its content's words (its /tokenize with ``messages``
— vLLM's shape — and llama.cpp's /apply-template agree), ``tokenize_delay_s`` slows every /tokenize and
/detokenize (a server busy tokenising), and ``max_model_len`` is reported in /v1/models (vLLM's field).

Programmable per scenario: first-token delay, inter-token gap, tokens per chunk, empty-text chunks
(partial UTF-8 tokens), usage (final / on every chunk), events per socket write, and faults keyed
by the arrival number of the request: ``http_400``, ``http_429``, ``http_500``, ``sse_error``
(``data: {"error": ...}`` inside a 200 stream, as vLLM sends), ``malformed`` (a broken JSON chunk),
``cut`` (connection dropped mid-stream), ``no_done`` (clean end without finish_reason or [DONE]),
``no_stream`` (a plain JSON answer: stream=true ignored), ``hang`` (headers, then nothing).

Use it in a thread (``with StreamServer(Scenario(...)) as srv: srv.url``) or as a process
(``python tests/bench/stream_server.py --port 0 --tokens 1024``; prints ``READY <url>``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

IDENTITIES = ("vllm", "sglang", "llamacpp", "tgi", "ollama", "plain")


@dataclass
class Scenario:
    ttft_s: float = 0.0  # delay before the first content chunk
    itl_s: float = 0.0  # gap between content chunks
    tokens: int | None = None  # output tokens; None = the request's max_tokens
    tokens_per_chunk: int = 1
    text: str = "tok "  # text of each token
    empty_every: int = 0  # every n-th token streams "" (a partial UTF-8 token), 0 = never
    usage: bool = True  # a final usage chunk when the client asks include_usage
    continuous_usage: bool = True  # usage on every chunk when the client asks continuous_usage_stats
    done: bool = True  # send data: [DONE]
    batch: int = 16  # events per socket write when itl_s == 0
    identity: str = "vllm"  # the server family imitated; "ollama" also enables the native /api routes
    faults: dict[int, str] = field(default_factory=dict)  # arrival number -> fault
    fault_after_tokens: int = 3  # mid-stream faults happen after this many tokens
    ollama_fixture: Path | None = None  # replay this recorded NDJSON for /api/generate|chat
    ollama_size_vram: int | None = None  # /api/ps size_vram (None = fully on GPU)
    ollama_load_ms: float = 5.0
    # /metrics in the identity's own series names (vLLM, SGLang, llama.cpp): requests running and waiting,
    # KV cache in use, preemptions. capacity > 0 serves at most that many at once; the rest wait (queued
    # before the first byte), each wait counted as a preemption (vLLM only).
    metrics: bool = False
    capacity: int = 0
    chat_template_tokens: int = 1  # a chat prompt's tokens beside its content's words (1: a BOS-like token)
    tokenize_delay_s: float = 0.0  # every /tokenize and /detokenize answers this late
    max_model_len: int | None = None  # reported per model in /v1/models, as vLLM does
    # A word that makes one token with another word after it (a tokenizer whose counts do not add up word
    # by word, as BPE merges across a space would; the word twice stays two tokens).
    merge_after: str | None = None


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    number: int
    t: float = 0.0  # time.perf_counter() when it arrived


class StreamServer:
    def __init__(self, scenario: Scenario | None = None, *, model: str = "test-model", port: int = 0) -> None:
        self.scenario = scenario or Scenario()
        self.model = model
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.generation_requests = 0
        self.active = 0  # generation requests being served now
        self.max_active = 0  # the most ever served at once
        self.waiting = 0  # generation requests queued behind the capacity
        self.waits = 0  # requests that ever waited
        self.queue_seconds = 0.0  # time requests spent waiting for a slot (vLLM's queue-time histogram)
        self.queued = 0
        self.metrics_scrapes = 0
        self._slots: asyncio.Semaphore | None = None
        self._counter = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._vocab: dict[str, int] = {}
        self._words: list[str] = []
        self._hangs: list[asyncio.Future[None]] = []
        self._bodies: dict[tuple[Any, ...], list[bytes]] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/version", self._version)
        app.router.add_get("/get_server_info", self._sglang_info)
        app.router.add_get("/info", self._tgi_info)
        app.router.add_get("/props", self._props)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_post("/apply-template", self._apply_template)
        app.router.add_get("/api/version", self._ollama_version)
        app.router.add_get("/api/tags", self._ollama_tags)
        app.router.add_get("/api/ps", self._ollama_ps)
        app.router.add_post("/api/generate", self._ollama_generate)
        app.router.add_post("/api/chat", self._ollama_chat)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start_async(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]

    async def stop_async(self) -> None:
        for f in self._hangs:
            if not f.done():
                f.set_result(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> StreamServer:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.start_async())
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=run, name="stream-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stream server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> StreamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------------
    async def _record(self, request: web.Request, generation: bool) -> tuple[dict[str, Any], int]:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        number = -1
        if generation:
            number = next(self._counter)
            self.generation_requests += 1
        recorded = RecordedRequest(request.path, dict(request.headers), body, number, time.perf_counter())
        self.requests.append(recorded)
        return body, number

    def _ident(self) -> str:
        return self.scenario.identity

    async def _http_fault(self, fault: str) -> web.Response | None:
        if fault.startswith("http_"):
            status = int(fault[5:])
            err = {
                "object": "error",
                "message": f"programmed failure {status}",
                "type": "TestError",
                "code": status,
            }
            return web.json_response({"error": err} if status != 400 else err, status=status)
        return None

    # -- identity ----------------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        owner = {
            "vllm": "vllm",
            "sglang": "sglang",
            "llamacpp": "llamacpp",
            "tgi": "tgi",
            "ollama": "library",
        }.get(self._ident(), "someone")
        card: dict[str, Any] = {"id": self.model, "object": "model", "owned_by": owner}
        if self.scenario.max_model_len is not None:
            card["max_model_len"] = self.scenario.max_model_len
        return web.json_response({"object": "list", "data": [card]})

    async def _version(self, request: web.Request) -> web.Response:
        if self._ident() != "vllm":
            raise web.HTTPNotFound()
        return web.json_response({"version": "0.0.0-streamserver"})

    async def _sglang_info(self, request: web.Request) -> web.Response:
        if self._ident() != "sglang":
            raise web.HTTPNotFound()
        return web.json_response({"model_path": self.model, "version": "0.0.0-streamserver"})

    async def _tgi_info(self, request: web.Request) -> web.Response:
        if self._ident() != "tgi":
            raise web.HTTPNotFound()
        return web.json_response({"model_id": self.model, "version": "0.0.0-streamserver", "sha": "0"})

    async def _props(self, request: web.Request) -> web.Response:
        if self._ident() != "llamacpp":
            raise web.HTTPNotFound()
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": 2048},
                "total_slots": 4,
                "build_info": "b0000-streamserver",
            }
        )

    # -- word-level tokenizer (vLLM and llama.cpp request shapes) -------------------------------------
    def _pieces(self, text: str) -> list[str]:
        """The tokens of ``text``: its words, but ``merge_after`` and another word after it are one."""
        words, out, i = text.split(), [], 0
        merge = self.scenario.merge_after
        while i < len(words):
            if merge is not None and words[i] == merge and i + 1 < len(words) and words[i + 1] != merge:
                out.append(f"{words[i]} {words[i + 1]}")
                i += 2
            else:
                out.append(words[i])
                i += 1
        return out

    def _ids(self, text: str) -> list[int]:
        ids = []
        for w in self._pieces(text):
            if w not in self._vocab:
                self._vocab[w] = len(self._words)
                self._words.append(w)
            ids.append(self._vocab[w])
        return ids

    def _template(self) -> list[int]:
        return [1_000_000 + k for k in range(self.scenario.chat_template_tokens)]

    async def _tokenize(self, request: web.Request) -> web.Response:
        if self._ident() not in ("vllm", "llamacpp"):
            raise web.HTTPNotFound()
        body, _ = await self._record(request, False)
        if self.scenario.tokenize_delay_s:
            await asyncio.sleep(self.scenario.tokenize_delay_s)
        if "messages" in body and self._ident() == "vllm":  # vLLM's chat tokenization
            content = " ".join(m.get("content", "") for m in body["messages"])
            ids = self._template() + self._ids(content)
            return web.json_response({"count": len(ids), "tokens": ids})
        text = body.get("prompt", body.get("content", ""))
        special = body.get("add_special_tokens", body.get("add_special", True))
        ids = ([1_000_000] if special else []) + self._ids(text)
        return web.json_response({"count": len(ids), "tokens": ids})

    async def _apply_template(self, request: web.Request) -> web.Response:
        if self._ident() != "llamacpp":
            raise web.HTTPNotFound()
        body, _ = await self._record(request, False)
        content = " ".join(m.get("content", "") for m in body.get("messages", []))
        # /tokenize with add_special adds one token: the template's others are words of their own.
        words = " ".join(["<|t|>"] * max(0, self.scenario.chat_template_tokens - 1))
        return web.json_response({"prompt": f"{words} {content}".strip()})

    async def _detokenize(self, request: web.Request) -> web.Response:
        if self._ident() not in ("vllm", "llamacpp"):
            raise web.HTTPNotFound()
        body, _ = await self._record(request, False)
        if self.scenario.tokenize_delay_s:
            await asyncio.sleep(self.scenario.tokenize_delay_s)
        words = [self._words[i] for i in body.get("tokens", []) if 0 <= i < len(self._words)]
        key = "prompt" if self._ident() == "vllm" else "content"
        return web.json_response({key: " ".join(words)})

    def prompt_tokens(self, text: str) -> int:
        return 1 + len(self._pieces(text))

    # -- OpenAI streaming --------------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._counted(self._openai(request, chat=False))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._counted(self._openai(request, chat=True))

    async def _counted(self, handler: Any) -> web.StreamResponse:
        cap = self.scenario.capacity
        if cap and self._slots is None:
            self._slots = asyncio.Semaphore(cap)
        if self._slots is not None:
            if self._slots.locked():
                self.waits += 1
            self.waiting += 1
            t = time.perf_counter()
            await self._slots.acquire()
            self.queue_seconds += time.perf_counter() - t
            self.queued += 1
            self.waiting -= 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            resp: web.StreamResponse = await handler
            return resp
        finally:
            self.active -= 1
            if self._slots is not None:
                self._slots.release()

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self.scenario.metrics:
            raise web.HTTPNotFound()
        self.metrics_scrapes += 1
        kv = self.active / (self.scenario.capacity or 64)
        names = {
            "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
            "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"),
            "llamacpp": (
                "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:kv_cache_usage_ratio"
            ),
        }[self._ident()]
        labels = f'{{model_name="{self.model}"}}' if self._ident() != "llamacpp" else ""
        lines = []
        for name, value in zip(names, (self.active, self.waiting, kv), strict=True):
            lines += [f"# HELP {name} test", f"# TYPE {name} gauge", f"{name}{labels} {float(value)}"]
        if self._ident() == "vllm":
            lines += ["# HELP vllm:num_preemptions_total test", "# TYPE vllm:num_preemptions_total counter",
                      f"vllm:num_preemptions_total{labels} {float(self.waits)}",
                      "# HELP vllm:request_queue_time_seconds test",
                      "# TYPE vllm:request_queue_time_seconds histogram",
                      f'vllm:request_queue_time_seconds_bucket{{le="+Inf",model_name="{self.model}"}} '
                      f"{self.queued}",
                      f"vllm:request_queue_time_seconds_count{labels} {float(self.queued)}",
                      f"vllm:request_queue_time_seconds_sum{labels} {self.queue_seconds}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        sc = self.scenario
        body, number = await self._record(request, True)
        fault = sc.faults.get(number, "")
        failed = await self._http_fault(fault)
        if failed is not None:
            return failed
        if fault == "no_stream":  # a server that ignores stream=true
            return web.json_response(
                {
                    "id": "cmpl-test",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": "whole answer", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
                }
            )
        if chat:
            content = " ".join(m.get("content", "") for m in body.get("messages", []))
            n_prompt = sc.chat_template_tokens + len(self._pieces(content))
        else:
            n_prompt = self.prompt_tokens(body.get("prompt", ""))
        n_out = sc.tokens if sc.tokens is not None else int(body.get("max_tokens", 16))
        opts = body.get("stream_options") or {}
        want_usage = bool(opts.get("include_usage")) and sc.usage
        cont = bool(opts.get("continuous_usage_stats")) and sc.continuous_usage and want_usage
        obj = "chat.completion.chunk" if chat else "text_completion"
        fp = "b0000-streamserver" if sc.identity == "llamacpp" else None

        templates: dict[tuple[str | None, str | None, bool], bytes] = {}

        def event(text: str | None, finish: str | None, done_tokens: int, role: bool = False) -> bytes:
            # Pre-encoded per (text, finish, role); only the usage numbers are formatted per event.
            key = (text, finish, role)
            tpl = templates.get(key)
            if tpl is None:
                if chat:
                    delta: dict[str, Any] = {}
                    if role:
                        delta["role"] = "assistant"
                    if text is not None or role:
                        delta["content"] = text if text is not None else ""
                    choice: dict[str, Any] = {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                else:
                    choice = {
                        "index": 0,
                        "text": text if text is not None else "",
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                d: dict[str, Any] = {
                    "id": "cmpl-test",
                    "object": obj,
                    "created": 0,
                    "model": self.model,
                    "choices": [choice],
                }
                if fp:
                    d["system_fingerprint"] = fp
                if cont:
                    d["usage"] = {
                        "prompt_tokens": n_prompt,
                        "total_tokens": -222222222,
                        "completion_tokens": -111111111,
                    }
                raw = json.dumps(d, separators=(",", ":"))
                if cont:
                    raw = raw.replace("%", "%%").replace("-222222222", "%(total)d")
                    raw = raw.replace("-111111111", "%(done)d")
                tpl = b"data: " + raw.encode() + b"\n\n"
                templates[key] = tpl
            if cont:
                return tpl % {b"total": n_prompt + done_tokens, b"done": done_tokens}
            return tpl

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if fault == "hang":
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._hangs.append(fut)
            await fut
            return resp
        # Without delays or faults the whole stream is the same every time: replay it pre-encoded,
        # as fast as the socket takes it.
        cache_key: tuple[Any, ...] | None = None
        if not fault and not sc.ttft_s and not sc.itl_s and sc.identity != "llamacpp":
            cache_key = (
                chat,
                n_out,
                n_prompt,
                cont,
                want_usage,
                sc.done,
                sc.text,
                sc.empty_every,
                sc.tokens_per_chunk,
                sc.batch,
            )
            cached = self._bodies.get(cache_key)
            if cached is not None:
                for piece in cached:
                    await resp.write(piece)
                await resp.write_eof()
                return resp
        collected: list[bytes] = []

        async def write(data: bytes) -> None:
            if cache_key is not None:
                collected.append(data)
            await resp.write(data)

        t_start = time.perf_counter()
        pending: list[bytes] = []
        if chat:
            pending.append(event("", None, 0, role=True))
        if sc.ttft_s:
            if pending:
                await write(b"".join(pending))
                pending = []
            await asyncio.sleep(sc.ttft_s)
        t_first = time.perf_counter()
        k = max(1, sc.tokens_per_chunk)
        sent = 0
        i = 0
        while sent < n_out:
            if fault in ("sse_error", "malformed", "cut", "no_done") and sent >= sc.fault_after_tokens:
                break
            step = min(k, n_out - sent)
            sent += step
            i += 1
            text = "" if sc.empty_every and i % sc.empty_every == 0 else sc.text * step
            finish = "length" if sent >= n_out else None
            pending.append(event(text, finish, sent))
            if sc.itl_s and sent < n_out:
                await write(b"".join(pending))
                pending = []
                await asyncio.sleep(sc.itl_s)
            elif len(pending) >= sc.batch:
                await write(b"".join(pending))
                pending = []
        t_last = time.perf_counter()
        if fault == "sse_error":
            err = {
                "error": {
                    "object": "error",
                    "message": "programmed engine failure",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
            pending.append(b"data: " + json.dumps(err).encode() + b"\n\n")
        elif fault == "malformed":
            pending.append(b'data: {"id":"cmpl-test","choices":[{"text":"x"\n\n')
        elif fault == "cut":
            await write(b"".join(pending))
            assert request.transport is not None
            request.transport.abort()
            return resp
        elif fault == "no_done":
            pass
        else:
            if want_usage:
                u = {
                    "id": "cmpl-test",
                    "object": obj,
                    "created": 0,
                    "model": self.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": n_prompt,
                        "total_tokens": n_prompt + n_out,
                        "completion_tokens": n_out,
                    },
                }
                if sc.identity == "llamacpp":
                    u["timings"] = {
                        "prompt_n": n_prompt,
                        "prompt_ms": (t_first - t_start) * 1e3,
                        "predicted_n": n_out,
                        "predicted_ms": (t_last - t_first) * 1e3,
                    }
                pending.append(b"data: " + json.dumps(u, separators=(",", ":")).encode() + b"\n\n")
            if sc.done:
                pending.append(b"data: [DONE]\n\n")
        if pending:
            await write(b"".join(pending))
        if cache_key is not None:
            self._bodies[cache_key] = collected
        await resp.write_eof()
        return resp

    # -- Ollama native -----------------------------------------------------------------------------
    async def _ollama_version(self, request: web.Request) -> web.Response:
        self._need_ollama()
        return web.json_response({"version": "0.11.6"})

    async def _ollama_tags(self, request: web.Request) -> web.Response:
        self._need_ollama()
        return web.json_response({"models": [{"name": self.model, "model": self.model, "size": 1000}]})

    async def _ollama_ps(self, request: web.Request) -> web.Response:
        self._need_ollama()
        size = 815_319_791
        vram = size if self.scenario.ollama_size_vram is None else self.scenario.ollama_size_vram
        return web.json_response(
            {
                "models": [
                    {
                        "name": self.model,
                        "model": self.model,
                        "size": size,
                        "size_vram": vram,
                        "context_length": 4096,
                    }
                ]
            }
        )

    async def _ollama_generate(self, request: web.Request) -> web.StreamResponse:
        return await self._ollama(request, chat=False)

    async def _ollama_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._ollama(request, chat=True)

    def _need_ollama(self) -> None:
        if self._ident() != "ollama":
            raise web.HTTPNotFound()

    async def _ollama(self, request: web.Request, chat: bool) -> web.StreamResponse:
        self._need_ollama()
        sc = self.scenario
        body, number = await self._record(request, True)
        fault = sc.faults.get(number, "")
        if fault.startswith("http_"):
            return web.json_response({"error": f"programmed failure {fault[5:]}"}, status=int(fault[5:]))
        if body.get("model") != self.model:
            return web.json_response({"error": f"model '{body.get('model')}' not found"}, status=404)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        t_start = time.perf_counter()
        if sc.ttft_s:
            await asyncio.sleep(sc.ttft_s)
        if sc.ollama_fixture is not None:
            lines = [ln for ln in sc.ollama_fixture.read_bytes().splitlines() if ln.strip()]
            for j, line in enumerate(lines):
                if fault and j >= sc.fault_after_tokens and fault != "none":
                    break
                await resp.write(line + b"\n")
                if sc.itl_s and j < len(lines) - 1:
                    await asyncio.sleep(sc.itl_s)
        else:
            num_predict = int((body.get("options") or {}).get("num_predict", 16))
            n_out = sc.tokens if sc.tokens is not None else num_predict
            n_out = min(n_out, num_predict) if num_predict > 0 else n_out
            t_first = time.perf_counter()
            for j in range(n_out):
                if fault and j >= sc.fault_after_tokens:
                    break
                piece = (
                    {"message": {"role": "assistant", "content": sc.text}} if chat else {"response": sc.text}
                )
                await resp.write(
                    json.dumps(
                        {"model": self.model, "created_at": "2025-01-01T00:00:00Z", **piece, "done": False}
                    ).encode()
                    + b"\n"
                )
                if sc.itl_s and j < n_out - 1:
                    await asyncio.sleep(sc.itl_s)
            t_last = time.perf_counter()
            if not fault:
                prompt = body.get("prompt") or " ".join(
                    m.get("content", "") for m in body.get("messages", [])
                )
                load_ns = int(sc.ollama_load_ms * 1e6)
                final = {
                    "model": self.model,
                    "created_at": "2025-01-01T00:00:01Z",
                    "done": True,
                    "done_reason": "length",
                    "total_duration": int((t_last - t_start) * 1e9) + load_ns,
                    "load_duration": load_ns,
                    "prompt_eval_count": self.prompt_tokens(prompt),
                    "prompt_eval_duration": max(1, int((t_first - t_start) * 1e9)),
                    "eval_count": n_out,
                    "eval_duration": max(1, int((t_last - t_first) * 1e9)),
                }
                if chat:
                    final["message"] = {"role": "assistant", "content": ""}
                else:
                    final["response"] = ""
                await resp.write(json.dumps(final).encode() + b"\n")
        if fault == "cut":
            assert request.transport is not None
            request.transport.abort()
            return resp
        if fault == "malformed":
            await resp.write(b'{"model": "x", "response": \n')
        elif fault == "sse_error":
            await resp.write(b'{"error": "programmed engine failure"}\n')
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="test-model")
    ap.add_argument("--identity", default="vllm", choices=IDENTITIES)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--no-continuous-usage", action="store_true")
    ap.add_argument("--tokenize-delay-ms", type=float, default=0.0)
    ap.add_argument("--chat-template-tokens", type=int, default=1)
    args = ap.parse_args(argv)
    sc = Scenario(
        ttft_s=args.ttft_ms / 1e3,
        itl_s=args.itl_ms / 1e3,
        tokens=args.tokens,
        batch=args.batch,
        identity=args.identity,
        continuous_usage=not args.no_continuous_usage,
        tokenize_delay_s=args.tokenize_delay_ms / 1e3,
        chat_template_tokens=args.chat_template_tokens,
    )
    srv = StreamServer(sc, model=args.model, port=args.port)

    async def serve() -> None:
        await srv.start_async()
        print(f"READY {srv.url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await srv.stop_async()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
