"""Fixtures for telemetry tests: fake vendor libraries at the import boundary, fake sysfs trees."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from telemetry_fakes import AMDSMI_SCENARIOS, NVML_SCENARIOS, ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Callable[[str], types.ModuleType]:
    """Install the fake ``pynvml`` of a named scenario (see telemetry_fakes.NVML_SCENARIOS)."""

    def install(scenario: str) -> types.ModuleType:
        module = NVML_SCENARIOS[scenario](clock)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


@pytest.fixture
def use_amdsmi(monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Callable[[str], types.ModuleType]:
    """Install the fake ``amdsmi`` of a named scenario (see telemetry_fakes.AMDSMI_SCENARIOS)."""

    def install(scenario: str) -> types.ModuleType:
        module = AMDSMI_SCENARIOS[scenario](clock)
        monkeypatch.setitem(sys.modules, "amdsmi", module)
        return module

    return install


@pytest.fixture
def no_gpu_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A machine without GPU libraries or CLIs: NVML library missing, amdsmi not installed, empty PATH."""
    monkeypatch.setitem(sys.modules, "pynvml", NVML_SCENARIOS["library not found"](ManualClock()))
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # `import amdsmi` -> ImportError
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    yield



# The loopback inference server of the bench tests (tests/bench/stream_server.py), for benches whose
# telemetry comes from a replayed exporter.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
