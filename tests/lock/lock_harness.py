"""The doctor tests' fake-machine harness and fake pynvml, loaded by path (tests/doctor is not on
sys.path when only these tests run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_DOCTOR_TESTS = Path(__file__).resolve().parents[1] / "doctor"


def _load(name: str, filename: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _DOCTOR_TESTS / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_harness = _load("gpuledger_tests_doctor_harness", "doctor_harness.py")
FakeMachine = _harness.FakeMachine
KERNEL: str = _harness.KERNEL
fake_pynvml = _load("gpuledger_tests_doctor_fake_pynvml", "doctor_fake_pynvml.py").make
