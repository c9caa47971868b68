"""Fixtures for the bench tests: the programmable loopback server and a real SQLite store."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stream_server import Scenario, StreamServer

from gpuledger.store import Store, open_store


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    """``serve(Scenario(...), model=...)`` → a started loopback server, stopped after the test."""
    started: list[StreamServer] = []

    def start(scenario: Scenario | None = None, **kwargs: object) -> StreamServer:
        srv = StreamServer(scenario, **kwargs).start()  # type: ignore[arg-type]
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def store() -> Iterator[Store]:
    """The test's own SQLite store (GPULEDGER_DB points at a fresh file per test)."""
    st = open_store(None)
    yield st
    st.close()


@pytest.fixture(scope="session")
def server_fixtures(fixtures_dir: Path) -> Path:
    return fixtures_dir / "servers"
