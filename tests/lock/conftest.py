"""Fixtures for the lock tests: fake machines built from the real captures (see tests/doctor)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lock_harness import FakeMachine


@pytest.fixture
def make_machine(tmp_path: Path, fixtures_dir: Path) -> Callable[[str], FakeMachine]:
    def make(name: str) -> FakeMachine:
        base = tmp_path / name
        base.mkdir()
        return FakeMachine(base, fixtures_dir)

    return make
