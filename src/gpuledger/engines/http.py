"""What every engine that talks to a server over HTTP shares: the base URL and endpoint, auth headers,
one ``aiohttp.ClientSession`` per run (connector limit = the run's concurrency), the streamed POST with
its timing and fault handling, small GET probes, redirects, and the one-line HTTP error text.

The base URL may carry credentials and a query (``http://user:pw@host/v1?api_key=...``, ``gpuledger.urls``):
the credentials become a ``Basic`` ``Authorization`` header (refused, ``UsageError``, next to an API key:
both would be that header), the query is appended to every request, and ``display_url`` (redacted) is
what is shown and stored. Redirects are never followed by aiohttp: one to another server (scheme, host or
port) is refused (at open: ``EngineError``; for a request: that request's error), one within the same
server is followed (at most ``MAX_REDIRECTS``; a POST only on 307/308) and noted. What the server says in
an error (a request's error text, a refusal at open) has the run's secret values taken out
(``HttpEngine.secrets``: the API key, the URL's password and Basic header; ``gpuledger.urls.Secrets``): a
server that echoes the bearer token does not get it stored, exported or printed.

Reading a stream ends at the stream's own end (``[DONE]``, Ollama's ``done: true``), at a bound of the
parser (``gpuledger.engines.sse``: line length, bytes, content chunks), or at the body's end; after a
``finish_reason`` the trailing events (usage, ``[DONE]``) are read for at most ``TAIL_GRACE_S``, so a server
that keeps the connection open after its answer does not turn a complete answer into a timeout.

``OpenAIEngine`` (SSE) and ``OllamaEngine`` (NDJSON) are subclasses of :class:`HttpEngine`; they add the
server identification, the request body and how a finished stream becomes a ``GenResult``.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import Callable
from time import perf_counter
from typing import Any, ClassVar, Protocol, TypeVar

import aiohttp
import orjson

from gpuledger.engines.base import CANNOT_CONNECT, GenRequest, GenResult
from gpuledger.errors import EngineError, UsageError
from gpuledger.urls import (
    Secrets,
    ServerUrl,
    origin,
    parse_server_url,
    redact_text,
    redact_url,
    resolve_location,
)

PROBE_TIMEOUT_S = 10.0
# Each failed write discards one stale pooled connection; a few resends cover a pool that went stale
# at once (the write fails at once, so a resend costs no measurable time and t_send is taken again).
STALE_RETRIES = 4
REDIRECTS = frozenset((301, 302, 303, 307, 308))
MAX_REDIRECTS = 3
# After a finish_reason: how long the trailing events (usage, [DONE]) and the body's end are waited for.
TAIL_GRACE_S = 1.0


def server_url(url: str) -> ServerUrl:
    """``--base-url`` taken apart (``gpuledger.urls.parse_server_url``); ``EngineError`` when unusable."""
    try:
        return parse_server_url(url)
    except ValueError as exc:
        raise EngineError(f"--base-url {exc}") from exc


def normalize_base_url(url: str) -> str:
    """``http://h:8000/v1/`` → ``http://h:8000``: endpoints are appended with their full path. The
    credentials are not part of it (they travel as a header)."""
    return server_url(url).base


def exc_text(exc: BaseException) -> str:
    """An exception's message for an error line, URLs in it redacted; a failed connection in plain words
    (``connect_failure``)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return connect_failure(exc)
    return redact_text(str(exc) or type(exc).__name__)


_ERRNO = re.compile(r"\[Errno (-?\d+)\]")


def _os_reason(error: OSError) -> str:
    """``connection refused``, ``no route to host``: the OS's words for the error number (asyncio's own
    message is ``Connect call failed ('127.0.0.1', 1)``; several addresses tried give several errors)."""
    code = error.errno
    if code is None and (found := _ERRNO.search(str(error))):
        code = int(found.group(1))
    if code is not None and code > 0:
        return os.strerror(code).lower()
    return redact_text(error.strerror or str(error) or type(error).__name__)


def connect_failure(exc: aiohttp.ClientConnectorError) -> str:
    """What failed when aiohttp could not connect, in plain words — ``connecting to 127.0.0.1:8000 failed:
    connection refused`` — not its ``Cannot connect to host 127.0.0.1:8000 ssl:default [...]``
    (``ssl:default`` is its connector's key for a plain-HTTP connection, not a TLS problem)."""
    host = f"[{exc.host}]" if ":" in exc.host else exc.host
    where = f"{host}:{exc.port}" if exc.port is not None else host
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert = exc.certificate_error
        why = f"its TLS certificate was not accepted ({type(cert).__name__}: {redact_text(str(cert))})"
    elif isinstance(exc, aiohttp.ClientSSLError):
        why = f"the TLS handshake failed ({redact_text(str(exc.os_error) or type(exc.os_error).__name__)})"
    elif isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(exc.os_error, socket.gaierror):
        said = exc.os_error.strerror or str(exc.os_error)
        why = f"the host name could not be resolved ({redact_text(said)})" if said else (
            "the host name could not be resolved")
    else:
        why = _os_reason(exc.os_error)
    through = "the proxy at " if isinstance(exc, aiohttp.ClientProxyConnectionError) else ""
    return f"connecting to {through}{where} failed: {why}"


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
    return f"HTTP {status}: {redact_text(msg)}"


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def get_json(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[int, Any]:
    """GET ``url`` → (status, parsed JSON or None); a redirect is not followed (its status is returned).
    Connection problems raise ``aiohttp.ClientError`` / ``TimeoutError`` to the caller, who knows
    whether they are fatal."""
    status, obj, _location = await get_json_or_redirect(session, url, headers=headers, timeout_s=timeout_s)
    return status, obj


async def get_json_or_redirect(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[int, Any, str | None]:
    """:func:`get_json` plus the ``Location`` of a redirect (``""`` when it has none; None otherwise)."""
    async with session.get(
        url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False
    ) as resp:
        if resp.status in REDIRECTS:
            return resp.status, None, resp.headers.get("Location", "")
        body = await resp.read()
        if resp.status != 200:
            return resp.status, None, None
        try:
            return resp.status, orjson.loads(body), None
        except orjson.JSONDecodeError:
            return resp.status, None, None


def unreachable(base_url: str, exc: BaseException) -> EngineError:
    what = "timed out" if isinstance(exc, TimeoutError) else exc_text(exc)
    return EngineError(
        f"cannot reach the inference server at {redact_url(base_url)}: {what}",
        hint="is the server running and listening there? check --base-url",
    )


def redirect_target(url: str, status: int, location: str | None, *, post: bool) -> tuple[str | None, str]:
    """Where a redirect from ``url`` may be followed: (target, note) within the same server, (None,
    reason) when it is refused — another server (scheme, host or port), no ``Location``, or a POST
    redirected with 301/302/303 (which would turn it into a GET)."""
    if not location:
        return None, f"HTTP {status} redirect without a Location: not followed"
    target = resolve_location(url, location)
    shown = redact_url(target)
    try:
        other = origin(target) != origin(url)
    except ValueError:
        return None, f"HTTP {status} redirect to {shown!r}, which is not a URL: not followed"
    if other:
        return None, (
            f"the server redirected to another server (HTTP {status} → {shown}): not followed; "
            "give that server's URL as --base-url if it is the one to measure"
        )
    if post and status not in (307, 308):
        return None, f"HTTP {status} redirect of the POST to {shown}: not followed (only 307/308 keep a POST)"
    return target, f"redirect within the server followed: HTTP {status} {redact_url(url)} → {shown}"


class StreamParser(Protocol):
    """What :meth:`HttpEngine.post_stream` feeds: an SSE or NDJSON parser (``gpuledger.engines.sse``)."""

    error: str | None
    chunk_times: list[float]
    tail: bool  # the answer is over (finish_reason, [DONE], done:true, an error, a bound): no more content
    stopped: bool  # nothing more is wanted from the body ([DONE], done:true, an error, a bound)

    @property
    def output_chars(self) -> int: ...

    def feed(self, data: bytes, now: float) -> int: ...

    def finish(self) -> None: ...


P = TypeVar("P", bound=StreamParser)


class HttpEngine:
    """Base of the HTTP engines. A subclass names itself (``name``, ``label``), maps its endpoints to
    paths (``paths``, the first is the default), says what it accepts back (``accept``), and implements
    ``open`` (calling :meth:`open_session` first), ``generate`` and ``after_run``.

    ``base_url`` is the server's URL without credentials or query (what paths are appended to);
    ``display_url`` is the URL as given, redacted (``user:***@``): the one to show and store.
    What the engine noticed on requests (counts it did not believe, redirects it followed) is tallied
    per kind, and :meth:`note_warnings` turns the tally into the run's warnings (warmup excluded)."""

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
        server = server_url(base_url)
        if server.authorization and api_key:
            raise UsageError(
                f"--base-url {server.display} carries credentials and an API key is set too (--api-key-env): "
                "both would be the Authorization header; keep one",
                hint="unset the API key's variable (or name another with --api-key-env), "
                "or take user:password@ out of --base-url",
            )
        self.server_url = server
        # The secret values this engine sends: taken out of every error text its server's answers give.
        self.secrets = server.secrets + Secrets.of(api_key=api_key)
        self.base_url = server.base
        self.display_url = server.display
        self.model = model
        self.endpoint = endpoint
        self._chat = endpoint == "chat"
        self._url = server.url(self.paths[endpoint])
        basic = server.authorization
        self._auth = {"Authorization": basic} if basic else auth_headers(api_key)
        accept = {"Accept": self.accept} if self.accept else {}
        self._headers = {"Content-Type": "application/json", **accept, **self._auth}
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self.chunks_seen = 0
        self.probe_notes: list[str] = []  # same-server redirects followed by the probes at open
        self._tally: dict[str, list[Any]] = {}  # kind -> [count, first note]
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
        """GET ``path`` on the server with the run's auth. A redirect within the server is followed (and
        noted in ``probe_notes``); one to another server, connection problems and too many redirects
        raise ``EngineError`` (the server cannot be used) after closing the session."""
        url = self.server_url.url(path)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                status, obj, location = await get_json_or_redirect(self.session, url, headers=self._auth)
                if location is None:
                    return status, obj
                target, why = redirect_target(url, status, location, post=False)
                if target is None:
                    raise await self.refuse(f"GET {path} at {self.display_url}: {why}")
                self.probe_notes.append(why)
                url = target
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise await self.refuse_with(unreachable(self.display_url, exc)) from exc
        raise await self.refuse(f"GET {path} at {self.display_url}: more than {MAX_REDIRECTS} redirects")

    async def refuse(self, message: str, hint: str | None = None) -> EngineError:
        """Close the session and return the error that says why this server cannot be used (the run's
        secrets taken out of what the server said in it)."""
        await self.close()
        return EngineError(self.secrets.redact(message), hint=hint)

    async def refuse_with(self, error: EngineError) -> EngineError:
        """:meth:`refuse` with ``error``'s message and hint."""
        return await self.refuse(error.message, error.hint)

    def note(self, req: GenRequest, res: GenResult, kind: str, text: str) -> None:
        """Record on the request what the engine noticed, and count it for the run's warnings."""
        res.notes.append(text)
        if req.stage == "warmup":
            return
        entry = self._tally.setdefault(kind, [0, text])
        entry[0] += 1

    def note_warnings(self) -> list[str]:
        """One warning per kind of note: how many requests, and the first one's note."""
        return [
            f"{n} request{'s' if n != 1 else ''}: {first}" if n > 1 else first
            for n, first in self._tally.values()
        ]

    async def post_stream(
        self, data: bytes, new_parser: Callable[[], P], *, require_stream: bool
    ) -> tuple[P, float, str | None, list[str]]:
        """POST ``data`` to the endpoint and feed the streamed body to a fresh parser, one
        ``perf_counter()`` per network read (chunks that arrive in one read did arrive together). Returns
        the parser, the send time, the request's error text (None when it succeeded) and notes (the
        redirects followed); ``chunks_seen`` counts content chunks live.

        A pooled keep-alive connection that the server had already closed (llama.cpp's server announces
        keep-alive but closes after each stream) fails before any response arrives; such a request is
        sent again (up to ``STALE_RETRIES`` times) with ``t_send`` taken again, so the failed write is
        neither an error nor part of its TTFT. A redirect within the server (307/308) is sent again to
        its target, ``t_send`` kept (the client did wait for it); any other redirect is the error."""
        session, url, headers, timeout = self.session, self._url, self._headers, self._timeout
        notes: list[str] = []
        stale = hops = 0
        t_first: float | None = None
        while True:
            parser = new_parser()
            error: str | None = None
            responded = False
            redirect: tuple[int, str] | None = None
            t_send = perf_counter() if t_first is None else t_first
            try:
                async with session.post(
                    url, data=data, headers=headers, timeout=timeout, allow_redirects=False
                ) as resp:
                    responded = True
                    if resp.status != 200:
                        if resp.status in REDIRECTS:
                            redirect = (resp.status, resp.headers.get("Location", ""))
                        else:
                            error = http_error_text(resp.status, await resp.content.read(4096))
                    elif require_stream and resp.content_type == "application/json":
                        error = (
                            "the server answered without streaming (application/json): stream=true ignored"
                        )
                    else:
                        content = resp.content
                        feed = parser.feed
                        while not parser.tail:
                            chunk = await content.readany()
                            if not chunk:
                                break
                            self.chunks_seen += feed(chunk, perf_counter())
                        else:
                            await self._read_tail(content, parser)
                        parser.finish()
                        error = parser.error
            except TimeoutError:
                error = f"timeout: no complete response within {self._timeout_s:g} s"
            except aiohttp.ClientPayloadError as exc:
                error = f"stream cut: {exc_text(exc)}"
            except aiohttp.ClientConnectorError as exc:
                error = f"{CANNOT_CONNECT}: {exc_text(exc)}"
            except aiohttp.ClientConnectionError as exc:
                if stale < STALE_RETRIES and not responded:
                    stale += 1
                    continue  # a stale pooled connection (dropped from the pool now): send again
                error = f"connection error: {exc_text(exc)}"
            except aiohttp.ClientError as exc:
                error = f"connection error: {exc_text(exc)}"
            if redirect is not None:
                target, why = redirect_target(url, *redirect, post=True)
                hops += 1
                if target is not None and hops <= MAX_REDIRECTS:
                    notes.append(why)
                    url, t_first = target, t_send
                    continue
                error = why if target is None else f"more than {MAX_REDIRECTS} redirects: not followed"
            return parser, t_send, None if error is None else self.secrets.redact(error), notes

    async def _read_tail(self, content: aiohttp.StreamReader, parser: StreamParser) -> None:
        """The answer is over. After a failure: nothing more is read (the connection is dropped). After a
        ``finish_reason``: what follows at once (usage, ``[DONE]``) is fed, for at most ``TAIL_GRACE_S``.
        After the stream's own end: the body's end is awaited as long, so that the connection can be
        reused; anything sent after that end is not read (the connection is dropped)."""
        if parser.error is not None:
            return
        try:
            async with asyncio.timeout(TAIL_GRACE_S):
                while not content.at_eof():
                    chunk = await content.readany()
                    if not chunk or parser.stopped:
                        return
                    self.chunks_seen += parser.feed(chunk, perf_counter())
                    if parser.error is not None:
                        return
        except TimeoutError:
            return  # the server kept the connection open after its answer: the answer stands

    async def stream(
        self, req: GenRequest, body: bytes, new_parser: Callable[[], P], *, require_stream: bool
    ) -> tuple[P, GenResult]:
        """Send ``req`` (as ``body``) and return the finished parser and the result so far: timings,
        chunk times, error, notes; the subclass adds the token counts from what its parser read."""
        parser, t_send, error, notes = await self.post_stream(body, new_parser, require_stream=require_stream)
        res = GenResult(
            index=req.index,
            t_send=t_send,
            t_end=perf_counter(),
            chunk_times=parser.chunk_times,
            requested_output_tokens=req.max_tokens if req.fixed_output else None,
            error=error,
            stage=req.stage,
            output_chars=parser.output_chars,
        )
        for text in notes:
            self.note(req, res, "redirect", text)
        return parser, res

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            # Let the connector's transports close before the loop goes away (aiohttp's advice).
            await asyncio.sleep(0)
