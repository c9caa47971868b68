"""Fixtures for the bench tests: the programmable loopback server and a real SQLite store."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile_server import HostileServer
from stream_server import StreamServer

from gpuledger.store import Store, open_store
from support.servers import started_servers


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    """``serve(Scenario(...), model=...)`` → a started loopback server, stopped after the test."""
    yield from started_servers(StreamServer)


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    """``hostile({(method, path): handler}, ...)`` → a started hostile loopback server, stopped after."""
    yield from started_servers(lambda handlers=None, **kw: HostileServer(handlers or {}, **kw))


@pytest.fixture
def store() -> Iterator[Store]:
    """The test's own SQLite store (GPULEDGER_DB points at a fresh file per test)."""
    st = open_store(None)
    yield st
    st.close()


@pytest.fixture(scope="session")
def server_fixtures(fixtures_dir: Path) -> Path:
    return fixtures_dir / "servers"
