"""Fixtures for the monitor tests: the telemetry tests' fake vendor modules (import boundary), a real
loopback HTTP server playing a serving engine's /metrics, exposition parsing, an aiohttp GET."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "telemetry"))  # telemetry_fakes: the fake pynvml / amdsmi modules

from monitor_helpers import FakeEngine  # noqa: E402
from telemetry_fakes import AMDSMI_SCENARIOS, NVML_SCENARIOS, ManualClock  # noqa: E402


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Callable[[str], types.ModuleType]:
    """Install the fake ``pynvml`` of a named scenario (telemetry_fakes.NVML_SCENARIOS); amdsmi absent."""

    def install(scenario: str) -> types.ModuleType:
        module = NVML_SCENARIOS[scenario](clock)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        monkeypatch.setitem(sys.modules, "amdsmi", None)
        return module

    return install


@pytest.fixture
def use_amdsmi(monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Callable[[str], types.ModuleType]:
    """Install the fake ``amdsmi`` of a named scenario; NVML reports its library missing."""

    def install(scenario: str) -> types.ModuleType:
        module = AMDSMI_SCENARIOS[scenario](clock)
        monkeypatch.setitem(sys.modules, "amdsmi", module)
        monkeypatch.setitem(sys.modules, "pynvml", NVML_SCENARIOS["library not found"](clock))
        return module

    return install


@pytest.fixture(autouse=True)
def no_vendor_clis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No nvidia-smi / amd-smi / rocm-smi on PATH: the CLI fallbacks report "not found"."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}")


@pytest.fixture
def no_gpu_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without GPU libraries: NVML library missing, amdsmi not installed."""
    monkeypatch.setitem(sys.modules, "pynvml", NVML_SCENARIOS["library not found"](ManualClock()))
    monkeypatch.setitem(sys.modules, "amdsmi", None)


@pytest.fixture
def fake_engine() -> Iterator[FakeEngine]:
    engine = FakeEngine()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            engine.requests += 1
            if engine.delay_s:
                time.sleep(engine.delay_s)
            data = engine.body.encode()
            try:
                self.send_response(engine.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    engine.port = server.server_address[1]
    engine._server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield engine
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
