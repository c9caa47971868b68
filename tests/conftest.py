"""Suite-wide fixtures. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The shared fixtures (real captured outputs) sit beside the checkout: ../shared/fixtures.
SHARED = Path(os.environ.get("GPULEDGER_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {FIXTURES} (set GPULEDGER_SHARED)")
    return FIXTURES


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever writes to the user's real results store."""
    d = tmp_path_factory.mktemp("store")
    monkeypatch.setenv("GPULEDGER_DB", f"sqlite:///{d / 'gpuledger.sqlite'}")
    monkeypatch.setenv("GPULEDGER_DATA_DIR", str(d))
