"""Helpers for the monitor tests: exposition parsing, an aiohttp GET, polling without fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

TESTS = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RECORDED = TESTS / "bench" / "real" / "recorded"

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_exposition(text: str) -> Series:
    """Every sample of an exposition text, keyed by (sample name, labels). Parsing with
    prometheus_client's own parser is the validity check."""
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def values(series: Series, name: str, **labels: str) -> list[float]:
    """Values of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return [v for (n, lab), v in series.items() if n == name and want <= set(lab)]


def one(series: Series, name: str, **labels: str) -> float:
    found = values(series, name, **labels)
    assert len(found) == 1, f"{name}{labels}: expected one sample, found {found}"
    return found[0]


def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """GET with aiohttp (the project's one HTTP client)."""

    async def go() -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.get(
                url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return resp.status, await resp.text()

    return asyncio.run(go())


def wait_for(check: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> bool:
    """Poll ``check`` until true or ``timeout``; no fixed sleeps in assertions."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


@dataclass
class FakeEngine:
    """A real HTTP server on 127.0.0.1 serving whatever ``body``/``status`` say on every path;
    ``delay_s`` makes it answer late. The test changes them between scrapes."""

    body: str = ""
    status: int = 200
    delay_s: float = 0.0
    requests: int = 0
    port: int = 0
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"
