"""Store fixtures: every store test runs against SQLite and a real PostgreSQL (see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuledger.store import Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store on the backend under test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """For behaviour that happens before the database is involved (validation): SQLite only."""
    s = open_store(f"sqlite:///{tmp_path / 'results.sqlite'}")
    yield s
    s.close()
