"""HTTP for the remote telemetry sources: aiohttp (the project's one client) on an event loop of its own
thread, so that a source can be read from any thread (the sampler's, or the caller's, which may itself be
running an event loop), one request at a time, on a timeout, with a cap on the body (read to its end,
``gpuledger.boundedio.read_body``). ``interrupt(why)`` abandons the requests in flight at once and refuses
later ones (a signal while the telemetry is closed: it must not wait out a slow exporter's timeout).

Every failure is a :class:`~gpuledger.telemetry.base.SourceError` whose message names the URL as it may be
shown (credentials redacted: the caller passes ``display``), never the request URL itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from gpuledger.boundedio import TooLarge, read_body
from gpuledger.telemetry.base import SourceError

MAX_BODY_BYTES = 16 * 1024 * 1024  # an exposition of 8 GPUs with every DCGM field is ~1 MB
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class HttpClient:
    """One aiohttp session on a private event loop thread. ``get()`` blocks the caller until the answer,
    the timeout or the body cap. ``close()`` stops the thread; safe to call twice."""

    def __init__(self, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self._loop = asyncio.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="gpuledger-telemetry-http",
                                        daemon=True)
        self._thread.start()
        self._closed = False
        self._interrupted: str | None = None
        self._pending: set[concurrent.futures.Future[Response]] = set()

    async def _get(self, url: str, headers: Mapping[str, str], params: Mapping[str, str] | None,
                   timeout_s: float, display: str) -> Response:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.get(url, headers=dict(headers), params=dict(params or {}),
                                         timeout=aiohttp.ClientTimeout(total=timeout_s),
                                         allow_redirects=False) as resp:
                try:
                    body = await read_body(resp.content, self.max_body_bytes, what=f"GET {display}")
                except TooLarge:
                    raise SourceError(f"GET {display}: answer larger than "
                                      f"{self.max_body_bytes // 2**20} MiB") from None
                return Response(resp.status, body)
        except TimeoutError as exc:
            raise SourceError(f"GET {display}: no answer within {timeout_s:g} s") from exc
        except aiohttp.ClientError as exc:
            kind = type(exc).__name__
            detail = getattr(exc, "strerror", None) or getattr(exc, "message", None) or ""
            raise SourceError(f"GET {display}: {kind}{': ' + str(detail) if detail else ''}") from exc

    def get(self, url: str, *, display: str, headers: Mapping[str, str] | None = None,
            params: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Response:
        """GET ``url``; SourceError (naming ``display``) for a refused connection, a timeout, an oversized
        body. The status is the caller's to judge."""
        if self._closed:
            raise SourceError(f"GET {display}: the client is closed")
        if self._interrupted is not None:
            raise SourceError(f"GET {display}: not asked: {self._interrupted}")
        future = asyncio.run_coroutine_threadsafe(self._get(url, headers or {}, params, timeout_s, display),
                                                  self._loop)
        self._pending.add(future)
        try:
            return future.result(timeout_s + 5.0)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise SourceError(f"GET {display}: no answer within {timeout_s:g} s") from exc
        except concurrent.futures.CancelledError:
            raise SourceError(f"GET {display}: abandoned: {self._interrupted or 'cancelled'}") from None
        except BaseException:  # a signal raised in this thread (KeyboardInterrupt): the request is given up
            future.cancel()
            raise
        finally:
            self._pending.discard(future)

    def interrupt(self, why: str) -> None:
        """Abandon every request in flight (each raises SourceError at once) and refuse later ones; safe
        from another thread and from a signal handler."""
        self._interrupted = why
        for future in list(self._pending):
            future.cancel()

    @property
    def interrupted(self) -> str | None:
        return self._interrupted

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for future in list(self._pending):  # requests another thread still waits for
            future.cancel()
        if self._session is not None:
            session = self._session
            asyncio.run_coroutine_threadsafe(session.close(), self._loop).result(5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        self._loop.close()
