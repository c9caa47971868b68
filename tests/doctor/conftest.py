"""Fixtures for the doctor tests (the fake-machine harness lives in doctor_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from doctor_harness import FakeMachine


@pytest.fixture
def machine(tmp_path: Path, fixtures_dir: Path) -> Iterator[FakeMachine]:
    yield FakeMachine(tmp_path, fixtures_dir)
