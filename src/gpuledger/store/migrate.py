"""Schema migrations (Alembic), applied automatically when a store is opened.

Opening a store that is already at head costs one small query; only an older store loads Alembic.
The upgrade runs in one transaction that holds the database's write lock (SQLite ``BEGIN
IMMEDIATE``, PostgreSQL advisory lock), so two processes opening a new store at once migrate it
once, and a failed upgrade leaves the store as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from gpuledger.errors import StoreError
from gpuledger.store.engine import WRITE, safe_url, translate_errors

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Every revision this gpuledger knows, oldest first (a test checks this against the scripts).
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005")
HEAD = REVISIONS[-1]
_PG_LOCK_KEY = 0x67707564_6C676572 & 0x7FFFFFFFFFFFFFFF  # "gpudlger": any fixed 63-bit number


def current_revision(conn: Connection) -> str | None:
    """The store's schema revision, or None for an empty database."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    versions = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    return str(versions[0]) if versions else None


def alembic_config(conn: Connection) -> Config:
    """An Alembic configuration built in code, migrating through ``conn``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(engine: Engine, url: URL, revision: str = "head") -> None:
    """Migrate the store to ``revision`` (default head) in one locked transaction."""
    from alembic import command
    from alembic.util import CommandError

    with translate_errors("cannot upgrade the schema of store", url), engine.connect() as conn:
        conn.execution_options(**{WRITE: True})
        with conn.begin():
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            _refuse_unknown(current_revision(conn), url)
            try:
                command.upgrade(alembic_config(conn), revision)
            except CommandError as exc:
                raise StoreError(f"cannot migrate store {safe_url(url)} to {revision}: {exc}") from exc


def ensure_schema(engine: Engine, url: URL) -> None:
    """Bring the store to head if it is not there; StoreError for a store from a newer gpuledger."""
    with translate_errors("cannot open store", url), engine.connect() as conn:
        revision = current_revision(conn)
    if revision == HEAD:
        return
    _refuse_unknown(revision, url)
    upgrade(engine, url)


def _refuse_unknown(revision: str | None, url: URL) -> None:
    if revision is not None and revision not in REVISIONS:
        raise StoreError(
            f"store {safe_url(url)} has schema revision {revision!r}, which this gpuledger does not know "
            f"(it knows up to {HEAD}); it was written by a newer gpuledger",
            hint="upgrade gpuledger to use this store",
        )
