"""Suite-wide fixtures. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
# Real captured outputs of GPU tools and inference servers, kept in the repository (see its SOURCES.md).
CAPTURES = REPO / "tests" / "fixtures" / "captures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return CAPTURES


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever writes to the user's real results store."""
    d = tmp_path_factory.mktemp("store")
    monkeypatch.setenv("GPULEDGER_DB", f"sqlite:///{d / 'gpuledger.sqlite'}")
    monkeypatch.setenv("GPULEDGER_DATA_DIR", str(d))


# ---- PostgreSQL (real server) -------------------------------------------------------------------
# `pg_url`: the server .ci/run started ($GPULEDGER_TEST_PG_URL), else a throwaway cluster this session
# starts from Debian's postgresql (password auth, random port, stopped at the end); without either the
# PostgreSQL tests skip, except under CI=true where they fail. `pg_fresh_url`: a new database per test.

PG_BIN = Path(os.environ.get("GPULEDGER_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _pg_unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests cannot run under CI=true: {reason}")
    pytest.skip(f"PostgreSQL tests SKIPPED: {reason} (set GPULEDGER_TEST_PG_URL or install postgresql)")


class PgCluster:
    """A throwaway PostgreSQL cluster on 127.0.0.1 with scram-sha-256 password auth."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.data = base / "data"
        self.password = secrets.token_hex(12)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql+psycopg://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *cmd: str | Path) -> list[str]:
        args = [str(c) for c in cmd]
        return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args

    def start(self) -> None:
        pwfile = self.base / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(
            self._as_postgres(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "scram-sha-256",
                              f"--pwfile={pwfile}", "--no-sync"),
            check=True, capture_output=True, timeout=120,
        )
        subprocess.run(
            self._as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.base / "log", "-w", "-t", "60",
                              "-o", f"-k {self.base} -h 127.0.0.1 -p {self.port} -c fsync=off", "start"),
            check=True, capture_output=True, timeout=90,
        )

    def stop(self) -> None:
        subprocess.run(
            self._as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"),
            capture_output=True, timeout=60,
        )
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A cluster started by this session (also used for password-auth tests when CI gives a server)."""
    if not (PG_BIN / "initdb").exists():
        _pg_unavailable(f"{PG_BIN}/initdb not found")
    base = Path(tempfile.mkdtemp(prefix="gpuledger-pg-"))
    cluster = PgCluster(base)
    try:
        cluster.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(base, ignore_errors=True)
        _pg_unavailable(f"could not start a PostgreSQL cluster: {exc.stderr!r}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def pg_url(request: pytest.FixtureRequest) -> str:
    """SQLAlchemy URL of a reachable PostgreSQL database (the server's admin database)."""
    given = os.environ.get("GPULEDGER_TEST_PG_URL")
    if given:
        return given
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.url


def _libpq(url: str) -> str:
    import sqlalchemy as sa

    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def pg_fresh_url(pg_url: str) -> Iterator[str]:
    """A new, empty database on the test server for this test only (dropped afterwards)."""
    import psycopg
    import sqlalchemy as sa

    name = f"gl_test_{secrets.token_hex(6)}"
    with psycopg.connect(_libpq(pg_url), autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield sa.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(_libpq(pg_url), autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
