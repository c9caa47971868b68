"""Ollama facts over HTTP (aiohttp, short timeouts, loopback by default): ``/api/version`` and
``/api/ps`` (which models are loaded and how much of each is in GPU memory)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from gpuledger.facts.model import OllamaFacts, OllamaModel

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
TIMEOUT_S = 2.0


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


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


async def _fetch(url: str, timeout_s: float) -> tuple[Any, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{url}/api/version") as resp:
            resp.raise_for_status()
            version = json.loads(await resp.text())
        async with session.get(f"{url}/api/ps") as resp:
            resp.raise_for_status()
            ps = json.loads(await resp.text())
    return version, ps


def collect_ollama(url: str | None, *, timeout_s: float = TIMEOUT_S) -> OllamaFacts:
    explicit = url is not None
    base = normalise_url(url or DEFAULT_OLLAMA_URL)
    facts = OllamaFacts(url=base, checked=True, explicit=explicit)
    refused = _listening(base, timeout_s)
    if refused is not None:
        facts.error = refused
        return facts
    import aiohttp

    try:
        version, ps = asyncio.run(_fetch(base, timeout_s))
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        facts.error = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
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
