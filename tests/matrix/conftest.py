"""Fixtures for the matrix tests: stores on both backends, the programmable loopback server."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.servers import started_servers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bench"))  # stream_server: the programmable loopback server

from stream_server import StreamServer  # noqa: E402


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store on the backend under test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    """``serve(Scenario(...))`` → a started loopback server, stopped after the test."""
    yield from started_servers(StreamServer)
