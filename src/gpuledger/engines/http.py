"""What every engine that talks to a server over HTTP shares: the base URL and endpoint, auth headers,
one ``aiohttp.ClientSession`` per run (connector limit = the run's concurrency), the streamed POST with
its timing and fault handling, small GET probes, and the one-line HTTP error text.

``OpenAIEngine`` (SSE) and ``OllamaEngine`` (NDJSON) are subclasses of :class:`HttpEngine`; they add the
server identification, the request body and how a finished stream becomes a ``GenResult``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import Any, ClassVar, Protocol, TypeVar

import aiohttp
import orjson

from gpuledger.engines.base import CANNOT_CONNECT, GenRequest, GenResult
from gpuledger.errors import EngineError

PROBE_TIMEOUT_S = 10.0
# Each failed write discards one stale pooled connection; a few resends cover a pool that went stale
# at once (the write fails at once, so a resend costs no measurable time and t_send is taken again).
STALE_RETRIES = 4


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


class StreamParser(Protocol):
    """What :meth:`HttpEngine.post_stream` feeds: an SSE or NDJSON parser (``gpuledger.engines.sse``)."""

    error: str | None
    chunk_times: list[float]

    @property
    def output_chars(self) -> int: ...

    def feed(self, data: bytes, now: float) -> int: ...

    def finish(self) -> None: ...


P = TypeVar("P", bound=StreamParser)


class HttpEngine:
    """Base of the HTTP engines. A subclass names itself (``name``, ``label``), maps its endpoints to
    paths (``paths``, the first is the default), says what it accepts back (``accept``), and implements
    ``open`` (calling :meth:`open_session` first), ``generate`` and ``after_run``."""

    name: str
    label: ClassVar[str]
    paths: ClassVar[dict[str, str]]
    accept: ClassVar[str | None] = None

    def __init__(
        self,
        base_url: str,
        model: str | None,
        *,
        endpoint: str | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 300.0,
    ) -> None:
        endpoint = endpoint or next(iter(self.paths))
        if endpoint not in self.paths:
            raise EngineError(f"unknown {self.label} endpoint {endpoint!r} ({' or '.join(self.paths)})")
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.endpoint = endpoint
        self._chat = endpoint == "chat"
        self._url = self.base_url + self.paths[endpoint]
        self._auth = auth_headers(api_key)
        accept = {"Accept": self.accept} if self.accept else {}
        self._headers = {"Content-Type": "application/json", **accept, **self._auth}
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self.chunks_seen = 0
        self._init_state()

    def _init_state(self) -> None:
        """Per-engine state beyond the shared one (what the server is, its tokenizer, ...): set up by a
        subclass that has any; the constructor's signature stays the base's."""

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise EngineError("engine used before open()")
        return self._session

    def open_session(self, concurrency: int | None) -> aiohttp.ClientSession:
        """The run's session: at most ``concurrency`` connections (unbounded when None), bodies kept as
        sent (no decompression on the hot path)."""
        connector = aiohttp.TCPConnector(limit=concurrency or 0, limit_per_host=0, ttl_dns_cache=None)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def probe(self, path: str) -> tuple[int, Any]:
        """GET ``path`` on the server with the run's auth; connection problems raise ``EngineError``
        (the server cannot be used) after closing the session."""
        try:
            return await get_json(self.session, self.base_url + path, headers=self._auth)
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            raise unreachable(self.base_url, exc) from exc

    async def refuse(self, message: str, hint: str | None = None) -> EngineError:
        """Close the session and return the error that says why this server cannot be used."""
        await self.close()
        return EngineError(message, hint=hint)

    async def post_stream(
        self, data: bytes, new_parser: Callable[[], P], *, require_stream: bool
    ) -> tuple[P, float, str | None]:
        """POST ``data`` to the endpoint and feed the streamed body to a fresh parser, one
        ``perf_counter()`` per network read (chunks that arrive in one read did arrive together). Returns
        the parser, the send time and the request's error text (None when it succeeded);
        ``chunks_seen`` counts content chunks live.

        A pooled keep-alive connection that the server had already closed (llama.cpp's server announces
        keep-alive but closes after each stream) fails before any response arrives; such a request is
        sent again (up to ``STALE_RETRIES`` times) with ``t_send`` taken again, so the failed write is
        neither an error nor part of its TTFT."""
        session, url, headers, timeout = self.session, self._url, self._headers, self._timeout
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
                        error = (
                            "the server answered without streaming (application/json): stream=true ignored"
                        )
                    else:
                        content = resp.content
                        feed = parser.feed
                        while True:
                            chunk = await content.readany()
                            if not chunk:
                                break
                            self.chunks_seen += feed(chunk, perf_counter())
                            if parser.error is not None:
                                break
                        parser.finish()
                        error = parser.error
            except TimeoutError:
                error = f"timeout: no complete response within {self._timeout_s:g} s"
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

    async def stream(
        self, req: GenRequest, body: bytes, new_parser: Callable[[], P], *, require_stream: bool
    ) -> tuple[P, GenResult]:
        """Send ``req`` (as ``body``) and return the finished parser and the result so far: timings,
        chunk times, error; the subclass adds the token counts from what its parser read."""
        parser, t_send, error = await self.post_stream(body, new_parser, require_stream=require_stream)
        return parser, GenResult(
            index=req.index,
            t_send=t_send,
            t_end=perf_counter(),
            chunk_times=parser.chunk_times,
            requested_output_tokens=req.max_tokens if req.fixed_output else None,
            error=error,
            stage=req.stage,
            output_chars=parser.output_chars,
        )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            # Let the connector's transports close before the loop goes away (aiohttp's advice).
            await asyncio.sleep(0)
