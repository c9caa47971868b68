"""Fixtures for the workload tests (sessions, shared prefixes, trace replay, reasoning): the programmable
loopback server of tests/bench and a server that replays a recorded stream (workload_helpers.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.servers import started_servers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from stream_server import StreamServer
from workload_helpers import ReplayServer


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    """``serve(Scenario(...))`` → a started loopback server (tests/bench/stream_server.py), stopped after."""
    yield from started_servers(StreamServer)


@pytest.fixture
def replay() -> Iterator[Callable[..., ReplayServer]]:
    started: list[ReplayServer] = []

    def start(payloads: list[bytes], delays: list[float], **kwargs: Any) -> ReplayServer:
        srv = ReplayServer(payloads, delays, **kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
