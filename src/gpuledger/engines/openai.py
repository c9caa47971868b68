"""OpenAI-compatible servers: vLLM, SGLang, llama.cpp, TGI, Ollama's /v1 — streaming SSE.

One ``aiohttp.ClientSession`` per run (connector limit = the run's concurrency). The server is
identified first (``/v1/models`` owner, then ``/get_server_info``, ``/info``, ``/props``,
``/version``, ``/api/version``) so that ``ignore_eos`` / ``min_tokens`` / continuous usage are only
sent where the server accepts them. Token counts: the server's usage when reported; else the
server's own tokenizer endpoint (vLLM and llama.cpp ``/tokenize``); else the client's chunk count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol, TypeVar

import aiohttp
import orjson

from gpuledger.engines.base import CANNOT_CONNECT, GenRequest, GenResult, ServerInfo, Tokenizer
from gpuledger.engines.sse import OpenAIStream
from gpuledger.errors import EngineError

PROBE_TIMEOUT_S = 10.0
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}

# Servers that honour the length-control and usage extensions (checked against their APIs).
_IGNORE_EOS = {"vllm", "sglang", "llamacpp"}
_MIN_TOKENS = {"vllm", "sglang"}
_CONTINUOUS_USAGE = {"vllm", "sglang"}


def normalize_base_url(url: str) -> str:
    """``http://h:8000/v1/`` → ``http://h:8000``: endpoints are appended with their full path."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[:-3]
    if not u.startswith(("http://", "https://")):
        raise EngineError(f"--base-url must start with http:// or https://, got {url!r}")
    return u


def http_error_text(status: int, body: bytes) -> str:
    """One line for an HTTP error response: the server's own message when it sent JSON."""
    msg: str | None = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            m = err.get("message") or err.get("detail") or err.get("msg")
            msg = str(m) if m is not None else None
        elif err is not None:
            msg = str(err)
        if msg is None and "detail" in obj:
            msg = str(obj["detail"])
    if msg is None:
        msg = body[:200].decode("utf-8", "replace").strip() or "(empty body)"
    msg = " ".join(msg.split())
    if len(msg) > 300:
        msg = msg[:300] + "…"
    return f"HTTP {status}: {msg}"


class StreamParser(Protocol):
    """What ``post_stream`` feeds: an SSE or NDJSON parser (``gpuledger.engines.sse``)."""

    error: str | None

    def feed(self, data: bytes, now: float) -> int: ...

    def finish(self) -> None: ...


class ChunkCounter(Protocol):
    chunks_seen: int


P = TypeVar("P", bound=StreamParser)
# Each failed write discards one stale pooled connection; a few resends cover a pool that went stale
# at once (the write fails at once, so a resend costs no measurable time and t_send is taken again).
STALE_RETRIES = 4


async def post_stream(
    owner: ChunkCounter,
    session: aiohttp.ClientSession,
    url: str,
    data: bytes,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
    timeout_s: float,
    new_parser: Callable[[], P],
    *,
    require_stream: bool,
) -> tuple[P, float, str | None]:
    """POST ``data`` and feed the streamed body to a fresh parser, one ``perf_counter()`` per network
    read (chunks that arrive in one read did arrive together). Returns the parser, the send time and
    the request's error text (None when it succeeded); ``owner.chunks_seen`` counts content chunks live.

    A pooled keep-alive connection that the server had already closed (llama.cpp's server announces
    keep-alive but closes after each stream) fails before any response arrives; such a request is sent
    again (up to ``STALE_RETRIES`` times) with ``t_send`` taken again, so the failed write is neither an
    error nor part of its TTFT."""
    for attempt in range(1, STALE_RETRIES + 2):
        parser = new_parser()
        error: str | None = None
        responded = False
        t_send = perf_counter()
        try:
            async with session.post(url, data=data, headers=headers, timeout=timeout) as resp:
                responded = True
                if resp.status != 200:
                    error = http_error_text(resp.status, await resp.content.read(4096))
                elif require_stream and resp.content_type == "application/json":
                    error = "the server answered without streaming (application/json): stream=true ignored"
                else:
                    content = resp.content
                    feed = parser.feed
                    while True:
                        chunk = await content.readany()
                        if not chunk:
                            break
                        owner.chunks_seen += feed(chunk, perf_counter())
                        if parser.error is not None:
                            break
                    parser.finish()
                    error = parser.error
        except TimeoutError:
            error = f"timeout: no complete response within {timeout_s:g} s"
        except aiohttp.ClientPayloadError as exc:
            error = f"stream cut: {exc}"
        except aiohttp.ClientConnectorError as exc:
            error = f"{CANNOT_CONNECT}: {exc}"
        except aiohttp.ClientConnectionError as exc:
            if attempt <= STALE_RETRIES and not responded:
                continue  # a stale pooled connection (dropped from the pool now): send again
            error = f"connection error: {exc or type(exc).__name__}"
        except aiohttp.ClientError as exc:
            error = f"connection error: {exc or type(exc).__name__}"
        return parser, t_send, error
    raise AssertionError("unreachable: the last attempt always returns")


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def get_json(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[int, Any]:
    """GET ``url`` → (status, parsed JSON or None). Connection problems raise ``aiohttp.ClientError``
    / ``TimeoutError`` to the caller, who knows whether they are fatal."""
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        body = await resp.read()
        if resp.status != 200:
            return resp.status, None
        try:
            return resp.status, orjson.loads(body)
        except orjson.JSONDecodeError:
            return resp.status, None


def unreachable(base_url: str, exc: BaseException) -> EngineError:
    what = "timed out" if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
    return EngineError(
        f"cannot reach the inference server at {base_url}: {what}",
        hint="is the server running and listening there? check --base-url",
    )


class ServerTokenizer:
    """vLLM (``/tokenize`` + ``/detokenize`` with ``model``) or llama.cpp (``content`` / ``tokens``)."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, kind: str, model: str, headers: dict[str, str]
    ) -> None:
        self._session = session
        self._base = base_url
        self._kind = kind
        self._model = model
        self._headers = {**headers, "Content-Type": "application/json"}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self._session.post(
                self._base + path,
                data=orjson.dumps(body),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S),
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise EngineError(f"tokenizer endpoint {path}: {http_error_text(resp.status, raw)}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EngineError(f"tokenizer endpoint {path}: {exc or type(exc).__name__}") from exc
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"tokenizer endpoint {path}: malformed JSON") from exc
        if not isinstance(obj, dict):
            raise EngineError(f"tokenizer endpoint {path}: unexpected answer")
        return obj

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        if self._kind == "vllm":
            obj = await self._post(
                "/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": add_special}
            )
        else:
            obj = await self._post("/tokenize", {"content": text, "add_special": add_special})
        toks = obj.get("tokens")
        if not isinstance(toks, list):
            raise EngineError("tokenizer endpoint /tokenize: no token list in the answer")
        # llama.cpp answers [{"id":..,"piece":..}] when asked with_pieces; ids otherwise.
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in toks]

    async def detokenize(self, ids: list[int]) -> str:
        if self._kind == "vllm":
            obj = await self._post("/detokenize", {"model": self._model, "tokens": ids})
            text = obj.get("prompt")
        else:
            obj = await self._post("/detokenize", {"tokens": ids})
            text = obj.get("content")
        if not isinstance(text, str):
            raise EngineError("tokenizer endpoint /detokenize: no text in the answer")
        return text


async def identify_server(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str], owner: str | None
) -> ServerInfo:
    """Who is serving? Each engine family exposes a distinctive endpoint."""
    info = ServerInfo()
    owner = (owner or "").lower()
    probes: list[tuple[str, str]] = [
        ("sglang", "/get_server_info"),
        ("tgi", "/info"),
        ("llamacpp", "/props"),
        ("vllm", "/version"),
        ("ollama", "/api/version"),
    ]
    # The /v1/models owner is a strong hint: ask that family first.
    probes.sort(key=lambda p: 0 if p[0] in owner else 1)
    for kind, path in probes:
        try:
            status, obj = await get_json(session, base + path, headers=headers)
        except (aiohttp.ClientError, TimeoutError):
            continue
        if status != 200 or not isinstance(obj, dict):
            continue
        version: Any = None
        if kind == "sglang" and ("version" in obj or "tokenizer_path" in obj or "model_path" in obj):
            version = obj.get("version")
        elif kind == "tgi" and "model_id" in obj:
            version = obj.get("version")
            info.details["model_id"] = obj.get("model_id")
            info.details["sha"] = obj.get("sha")
        elif kind == "llamacpp" and ("default_generation_settings" in obj or "build_info" in obj):
            version = obj.get("build_info")
            if "total_slots" in obj:
                info.details["total_slots"] = obj.get("total_slots")
        elif (
            kind == "vllm"
            and set(obj) == {"version"}
            and "ollama" not in owner
            or kind == "ollama"
            and "version" in obj
        ):
            version = obj.get("version")
        else:
            continue
        info.kind = kind
        info.version = str(version) if version is not None else None
        info.version_source = f"GET {path}"
        break
    if info.kind == "unknown" and owner:
        info.details["owned_by"] = owner
    info.accepts_ignore_eos = info.kind in _IGNORE_EOS
    info.accepts_min_tokens = info.kind in _MIN_TOKENS
    info.accepts_continuous_usage = info.kind in _CONTINUOUS_USAGE
    if info.kind in ("vllm", "llamacpp"):
        info.tokenizer_endpoint = "/tokenize"
    return info


class OpenAIEngine:
    """``/v1/completions`` (``endpoint="completions"``) or ``/v1/chat/completions`` (``"chat"``)."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None,
        *,
        endpoint: str = "completions",
        api_key: str | None = None,
        request_timeout_s: float = 300.0,
    ) -> None:
        if endpoint not in ("completions", "chat"):
            raise EngineError(f"unknown OpenAI endpoint {endpoint!r} (completions or chat)")
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.endpoint = endpoint
        self._chat = endpoint == "chat"
        self._url = self.base_url + ("/v1/chat/completions" if self._chat else "/v1/completions")
        self._headers = {**_JSON_HEADERS, **auth_headers(api_key)}
        self._auth = auth_headers(api_key)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._info = ServerInfo()
        self._tokenizer: ServerTokenizer | None = None
        self._stream_options: dict[str, bool] = {"include_usage": True}
        self.chunks_seen = 0
        self.fingerprint: str | None = None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._tokenizer

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise EngineError("engine used before open()")
        return self._session

    async def open(self, concurrency: int | None) -> ServerInfo:
        connector = aiohttp.TCPConnector(limit=concurrency or 0, limit_per_host=0, ttl_dns_cache=None)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        try:
            status, obj = await get_json(self._session, self.base_url + "/v1/models", headers=self._auth)
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            raise unreachable(self.base_url, exc) from exc
        if status in (401, 403):
            await self.close()
            raise EngineError(
                f"the server at {self.base_url} refused the API key (HTTP {status})",
                hint="put the key in an environment variable and name it with --api-key-env",
            )
        models: list[str] = []
        owner: str | None = None
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list):
            for m in obj["data"]:
                if isinstance(m, dict) and m.get("id"):
                    models.append(str(m["id"]))
                    owner = owner or (str(m["owned_by"]) if m.get("owned_by") else None)
        info = await identify_server(self._session, self.base_url, self._auth, owner)
        info.models = models
        if self.model is None:
            if not models:
                await self.close()
                raise EngineError(
                    f"the server at {self.base_url} lists no model and --model was not given",
                    hint="pass --model NAME",
                )
            self.model = models[0]
        elif models and self.model not in models and info.kind in ("vllm", "sglang"):
            await self.close()
            raise EngineError(
                f"model {self.model!r} is not served at {self.base_url}; it serves: {', '.join(models)}"
            )
        if info.kind == "llamacpp":
            # llama-server closes the connection after each stream while announcing keep-alive: do not
            # pool connections it is about to close (each request opens its own, as it would anyway).
            self._headers = {**self._headers, "Connection": "close"}
        if info.accepts_continuous_usage:
            self._stream_options = {"include_usage": True, "continuous_usage_stats": True}
        if info.tokenizer_endpoint:
            self._tokenizer = ServerTokenizer(self._session, self.base_url, info.kind, self.model, self._auth)
        self._info = info
        return info

    def _body(self, req: GenRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "stream_options": self._stream_options,
        }
        if self._chat:
            body["messages"] = req.as_messages()
        else:
            body["prompt"] = req.as_prompt()
        if req.fixed_output:
            if self._info.accepts_ignore_eos:
                body["ignore_eos"] = True
            elif self._info.accepts_min_tokens:
                # Only without ignore_eos: vLLM lowers max_tokens to what fits the context, and a
                # min_tokens above that turns a length the summary reports as a mismatch into a 400.
                body["min_tokens"] = req.max_tokens
        return orjson.dumps(body)

    async def generate(self, req: GenRequest) -> GenResult:
        st, t_send, error = await post_stream(
            self, self.session, self._url, self._body(req), self._headers, self._timeout, self._timeout_s,
            lambda: OpenAIStream(self._chat), require_stream=True,
        )
        t_end = perf_counter()
        return await self._result(req, st, t_send, t_end, error)

    async def _result(
        self, req: GenRequest, st: OpenAIStream, t_send: float, t_end: float, error: str | None
    ) -> GenResult:
        res = GenResult(
            index=req.index,
            t_send=t_send,
            t_end=t_end,
            chunk_times=st.chunk_times,
            requested_output_tokens=req.max_tokens if req.fixed_output else None,
            error=error,
            stage=req.stage,
            output_chars=st.output_chars,
            system_fingerprint=st.fingerprint,
        )
        if st.continuous and any(k != 1 for k in st.chunk_tokens):
            res.chunk_tokens = st.chunk_tokens  # exact per-chunk counts; None means one token each
        if st.fingerprint and self.fingerprint is None:
            self.fingerprint = st.fingerprint
        if st.timings:
            res.server_timings = llamacpp_timings(st.timings)
        usage = st.usage
        if usage and isinstance(usage.get("completion_tokens"), int):
            res.output_tokens = usage["completion_tokens"]
            pt = usage.get("prompt_tokens")
            res.input_tokens = pt if isinstance(pt, int) else req.input_tokens_hint
            res.token_source = "server_usage"
        elif error is None and self._tokenizer is not None:
            text = "".join(st.texts)
            try:
                res.output_tokens = len(await self._tokenizer.tokenize(text, add_special=False))
                if req.input_tokens_hint is not None:
                    res.input_tokens = req.input_tokens_hint
                else:
                    res.input_tokens = len(await self._tokenizer.tokenize(req.as_prompt(), add_special=True))
                res.token_source = "server_tokenizer"
            except EngineError:
                res.output_tokens = st.tokens_counted
                res.input_tokens = req.input_tokens_hint
        else:
            res.output_tokens = st.tokens_counted
            res.input_tokens = req.input_tokens_hint
        return res

    async def after_run(self) -> dict[str, Any]:
        return {"system_fingerprint": self.fingerprint} if self.fingerprint else {}

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            # Let the connector's transports close before the loop goes away (aiohttp's advice).
            await asyncio.sleep(0)


def llamacpp_timings(tm: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's ``timings`` object, kept whole, plus the normalised keys the summary compares."""
    out: dict[str, Any] = {"server": "llamacpp", **tm}
    if isinstance(tm.get("prompt_ms"), int | float):
        out["prefill_ms"] = float(tm["prompt_ms"])
    if isinstance(tm.get("predicted_ms"), int | float):
        out["decode_ms"] = float(tm["predicted_ms"])
    if isinstance(tm.get("predicted_n"), int):
        out["decode_tokens"] = tm["predicted_n"]
    if isinstance(tm.get("prompt_n"), int):
        out["prefill_tokens"] = tm["prompt_n"]
    return out
