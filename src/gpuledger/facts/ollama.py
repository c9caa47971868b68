"""Ollama facts over HTTP (aiohttp, short timeouts, loopback by default): ``/api/version`` and
``/api/ps`` (which models are loaded and how much of each is in GPU memory).

The URL may carry credentials (``http://user:pw@host:11434``): they are sent as a ``Basic`` header, and
the facts keep the URL redacted (``user:***@``, ``gpuledger.urls``), as every error text in them is.
Redirects are not followed (an answer elsewhere is not this server's)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from gpuledger.facts.model import OllamaFacts, OllamaModel
from gpuledger.urls import ServerUrl, parse_server_url, redact_text, redact_url

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
TIMEOUT_S = 2.0


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def ollama_url(url: str) -> ServerUrl:
    """``--ollama`` / the default taken apart (``http://`` in front when there is no scheme);
    ``ValueError`` (the URL redacted) when it is not an http(s) URL."""
    return parse_server_url(url, strip_v1=False, default_scheme="http")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_ps(doc: Any) -> list[OllamaModel]:
    """``GET /api/ps`` body -> loaded models (``size`` and ``size_vram`` in bytes)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        raise ValueError('/api/ps: expected {"models": [...]}')
    models: list[OllamaModel] = []
    for item in doc["models"]:
        if not isinstance(item, dict):
            continue
        name = item.get("name") or item.get("model")
        if not isinstance(name, str):
            continue
        models.append(
            OllamaModel(
                name=name,
                size_bytes=_int(item.get("size")),
                size_vram_bytes=_int(item.get("size_vram")),
                context_length=_int(item.get("context_length")),
            )
        )
    return models


def _listening(url: str, timeout_s: float) -> str | None:
    """None when something accepts TCP connections at the URL's host:port, else why not. Saves
    importing the HTTP client when nothing listens (the common case: Ollama not running)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"


async def _fetch(server: ServerUrl, timeout_s: float) -> tuple[Any, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    headers = {"Authorization": server.authorization} if server.authorization else None
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        async with session.get(server.url("/api/version"), allow_redirects=False) as resp:
            resp.raise_for_status()
            _not_redirected(resp.status, "/api/version")
            version = json.loads(await resp.text())
        async with session.get(server.url("/api/ps"), allow_redirects=False) as resp:
            resp.raise_for_status()
            _not_redirected(resp.status, "/api/ps")
            ps = json.loads(await resp.text())
    return version, ps


class _Redirected(Exception):
    """The server answered a probe with a redirect."""


def _not_redirected(status: int, path: str) -> None:
    if 300 <= status < 400:
        raise _Redirected(f"GET {path} answered with a redirect (HTTP {status}): not followed")


def collect_ollama(url: str | None, *, timeout_s: float = TIMEOUT_S) -> OllamaFacts:
    explicit = url is not None
    given = normalise_url(url or DEFAULT_OLLAMA_URL)
    try:
        server = ollama_url(given)
    except ValueError as exc:
        return OllamaFacts(url=redact_url(given), checked=True, explicit=explicit, error=str(exc))
    facts = OllamaFacts(url=server.display, checked=True, explicit=explicit)
    refused = _listening(server.base, timeout_s)
    if refused is not None:
        facts.error = refused
        return facts
    import aiohttp

    try:
        version, ps = asyncio.run(_fetch(server, timeout_s))
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        facts.error = redact_text(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
        return facts
    except _Redirected as exc:
        facts.reachable = True
        facts.error = str(exc)
        return facts
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        facts.reachable = True
        facts.error = f"unreadable answer: {exc}"
        return facts
    facts.reachable = True
    facts.version = version.get("version") if isinstance(version, dict) else None
    try:
        facts.models = parse_ps(ps)
    except ValueError as exc:
        facts.error = str(exc)
    return facts
