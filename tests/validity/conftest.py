"""Fixtures for the validity and repeat tests: the bench area's programmable loopback server
(tests/bench/stream_server.py, 127.0.0.1 only), loaded by path, and a server whose pace changes between
the repeats of a group."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.servers import started_servers

SERVER_FILE = Path(__file__).resolve().parents[1] / "bench" / "stream_server.py"


def _server_module() -> ModuleType:
    name = "validity_stream_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SERVER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


# Runs measured with --no-telemetry record no devices: a whole-instance rental price needs none.
PROFILE_YAML = "name: test-instance\ncurrency: USD\nrental_per_hour: 2.0\n"


@pytest.fixture
def prof(tmp_path: Path) -> tuple[str, str]:
    """``--profile FILE`` of a rental instance at 2 USD/h (``cost``, ``compare`` and ``report`` of runs
    without telemetry)."""
    path = tmp_path / "instance.yaml"
    path.write_text(PROFILE_YAML)
    return ("--profile", str(path))


@pytest.fixture(scope="session")
def stream_server() -> ModuleType:
    if not SERVER_FILE.exists():
        pytest.fail(f"{SERVER_FILE} is missing (the bench area's loopback server)")
    return _server_module()


@pytest.fixture
def serve(stream_server: ModuleType) -> Iterator[Callable[..., Any]]:
    """``serve(ttft_s=..., itl_s=..., ...)`` → a started loopback server (keyword arguments of its
    ``Scenario``), stopped after the test."""
    yield from started_servers(lambda **sc: stream_server.StreamServer(stream_server.Scenario(**sc)))


@pytest.fixture
def paced(stream_server: ModuleType) -> Iterator[Callable[..., Any]]:
    """``paced([itl_1, itl_2, ...], per_repeat=N, ...)`` → a server whose inter-token gap is ``itl_k`` for
    the k-th block of ``per_repeat`` generation requests (a repeat's warm-up and measured requests): the
    pace changes between the repeats of one ``bench --repeat``, and only there (a repeat starts when the
    previous one has finished)."""
    base = stream_server.Scenario
    started: list[Any] = []

    class PacedScenario(base):  # type: ignore[misc, valid-type]
        def __init__(self, paces: Sequence[float], per_repeat: int, **kw: Any) -> None:
            self._paces = list(paces)
            self._per = per_repeat
            self.server: Any = None
            super().__init__(**kw)

        @property
        def itl_s(self) -> float:
            n = self.server.generation_requests if self.server is not None else 0
            return float(self._paces[min(len(self._paces) - 1, max(0, n - 1) // self._per)])

        @itl_s.setter
        def itl_s(self, value: float) -> None:  # the dataclass __init__ sets the field; the paces rule
            pass

    def start(paces: Sequence[float], per_repeat: int, **scenario: Any) -> Any:
        sc = PacedScenario(paces, per_repeat, **scenario)
        srv = stream_server.StreamServer(sc)
        sc.server = srv
        srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
