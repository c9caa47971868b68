"""Inference engine versions for the lock and the fingerprint, from the programs' own --version text."""

from __future__ import annotations

import pytest
from doctor_harness import FakeMachine


@pytest.mark.parametrize(
    ("capture", "version"),
    [("llama-server-version-5394.stderr", "b5394"), ("llama-server-version-b10822.stderr", "b10822")],
)
def test_llama_cpp_build_number(machine: FakeMachine, capture: str, version: str) -> None:
    machine.command("llama-server", stderr=machine.data(capture))
    engine = machine.facts().frameworks.engines["llama.cpp"]
    assert (engine.version, engine.source) == (version, "llama-server --version")


@pytest.mark.parametrize(
    ("capture", "version"),
    [("ollama-version-0.32.2.txt", "0.32.2"), ("ollama-version-not-running-0.9.2.txt", "0.9.2")],
)
def test_ollama_client_version(machine: FakeMachine, capture: str, version: str) -> None:
    machine.command("ollama", stdout=machine.data(capture))
    assert machine.facts().frameworks.engines["ollama"].version == version


def test_absent_engines_are_left_out(machine: FakeMachine) -> None:
    engines = machine.facts().frameworks.engines
    assert "llama.cpp" not in engines and "ollama" not in engines
