"""Fixtures of the gate tests: the bench area's programmable loopback server (tests/bench/stream_server.py,
127.0.0.1 only) loaded by path, a server whose pace changes between the repeats of one ``bench --repeat``, the
real ``gpuledger bench`` and ``gpuledger gate`` command lines, and a machine whose fingerprint says another
torch (the upgrade: ``gpuledger.lock.fingerprint`` is where the stack is read from the machine)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from gatecase import LOAD

from gpuledger.cli.main import main
from support.servers import started_servers

SERVER_FILE = Path(__file__).resolve().parents[1] / "bench" / "stream_server.py"

def _server_module() -> ModuleType:
    name = "gate_stream_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SERVER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def stream_server() -> ModuleType:
    if not SERVER_FILE.exists():
        pytest.fail(f"{SERVER_FILE} is missing (the bench area's loopback server)")
    return _server_module()


@pytest.fixture
def serve(stream_server: ModuleType) -> Iterator[Callable[..., Any]]:
    """``serve(ttft_s=..., itl_s=..., ...)`` → a started loopback server (its ``Scenario``), stopped after."""
    yield from started_servers(lambda **sc: stream_server.StreamServer(stream_server.Scenario(**sc)))


@pytest.fixture
def paced(stream_server: ModuleType) -> Iterator[Callable[..., Any]]:
    """``paced([itl_1, itl_2, ...], per_repeat=N, ...)`` → a server whose inter-token gap is ``itl_k`` for the
    k-th block of ``per_repeat`` generation requests (a repeat's warm-up and measured requests): the pace
    changes between the repeats of one ``bench --repeat``, and only there."""
    base = stream_server.Scenario

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

    def make(paces: Sequence[float], per_repeat: int, **scenario: Any) -> Any:
        sc = PacedScenario(paces, per_repeat, **scenario)
        srv = stream_server.StreamServer(sc)
        sc.server = srv
        return srv

    yield from started_servers(make)


def _headline(text: str) -> str:
    """What a verdict that exited otherwise than expected said (its headline and every metric not passed)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text[-2000:]
    lines = [str(doc.get("headline")), *(f"{m['metric']}: {m['status']}: {m['why']}"
                                          for m in doc.get("metrics", []) if m.get("status") != "pass")]
    return "\n".join(lines)


def cli(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    """``gpuledger ARGS --json``: its exit code checked, its JSON document."""
    got = main([*args, "--json"])
    out = capsys.readouterr()
    assert got == code, out.err or _headline(out.out)
    doc: dict[str, Any] = json.loads(out.out)
    return doc


@pytest.fixture
def bench(capsys: pytest.CaptureFixture[str]) -> Callable[..., dict[str, Any]]:
    """``bench(url, *flags)`` → the stored run (or ``--repeat N``'s group document) of the real bench path."""

    def run(url: str, *flags: str) -> dict[str, Any]:
        return cli(capsys, "bench", "--no-telemetry", "--no-progress", "--base-url", url, *LOAD, *flags)

    return run


@pytest.fixture
def gate(capsys: pytest.CaptureFixture[str]) -> Callable[..., dict[str, Any]]:
    """``gate(*args, code=0)`` → ``gpuledger gate ARGS --json``'s verdict, its exit code checked."""

    def run(*args: str, code: int = 0) -> dict[str, Any]:
        return cli(capsys, "gate", *args, code=code)

    return run


@pytest.fixture
def upgraded_torch(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``upgraded_torch("2.99.0+cpu")``: from now on this machine's fingerprint says that torch (everything
    else as the machine is), as after ``pip install torch==…`` on the same host."""
    import gpuledger.lock

    real = gpuledger.lock.fingerprint

    def upgrade(version: str) -> None:
        def fingerprint(*args: Any, **kwargs: Any) -> dict[str, Any]:
            stack = {k: v for k, v in real(*args, **kwargs).items() if k not in ("hash", "machine", "cpu")}
            stack["torch"] = version
            host = {k: v for k, v in real(*args, **kwargs).items() if k in ("machine", "cpu")}
            return {**stack, **host, "hash": gpuledger.lock.stack_hash(stack)}

        monkeypatch.setattr(gpuledger.lock, "fingerprint", fingerprint)

    return upgrade
