"""Where the store lives and how to connect: URL resolution, engine set-up, error translation."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import platformdirs
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from gpuledger.errors import GpuledgerError, StoreError
from gpuledger.store.codec import json_dumps, json_loads

DB_ENV = "GPULEDGER_DB"
DATA_DIR_ENV = "GPULEDGER_DATA_DIR"
DB_FILENAME = "gpuledger.sqlite"
BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10

# Execution option that makes a SQLite transaction start with BEGIN IMMEDIATE (take the write lock
# up front, waiting up to BUSY_TIMEOUT_S, instead of failing when a read turns into a write).
WRITE = "gpuledger_write"
# Execution option: how long this transaction waits for another's lock, in seconds (SQLite's busy
# timeout, PostgreSQL's lock_timeout) instead of the default (BUSY_TIMEOUT_S; PostgreSQL: no limit).
LOCK_WAIT = "gpuledger_lock_wait_s"


class StoreLockedError(StoreError):
    """A write waited its whole lock wait for another process's (or transaction's) lock.

    The store is unchanged and the same write can be tried again later."""

_SCHEMES = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


def data_dir() -> Path:
    """``$GPULEDGER_DATA_DIR``, else the platform's user data directory for gpuledger."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir("gpuledger"))


def default_db_url() -> str:
    """The SQLite file in the user's data directory."""
    return f"sqlite:///{data_dir() / DB_FILENAME}"


def safe_url(url: URL) -> str:
    """The URL with any password masked, for messages."""
    return url.render_as_string(hide_password=True)


def resolve_url(url: str | None) -> tuple[URL, bool]:
    """``url`` > ``$GPULEDGER_DB`` > the default; returns the parsed URL and whether it is the default.

    ``postgresql://`` and ``postgres://`` mean psycopg 3; a plain file path (no ``scheme://``) is a SQLite
    file. Anything else than SQLite or PostgreSQL is a StoreError.
    """
    text = (url or "").strip() or os.environ.get(DB_ENV, "").strip()
    is_default = not text
    if is_default:
        text = default_db_url()
    if "://" not in text:
        # A plain path is a SQLite file (``--db results.sqlite``, ``--db ~/runs.db``).
        if "\x00" in text or len(text) > 4096:
            raise StoreError("not a store URL or file path", hint="use a path or sqlite:///PATH")
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = sa.make_url(text)
    except sa_exc.ArgumentError as exc:
        raise StoreError(f"not a store URL: {text.split('://')[0]}://… ({exc})") from exc
    driver = _SCHEMES.get(parsed.drivername)
    if driver is None:
        raise StoreError(
            f"unsupported store URL scheme {parsed.drivername!r} in {safe_url(parsed)}",
            hint="gpuledger stores results in SQLite (sqlite:///PATH) or PostgreSQL "
            "(postgresql+psycopg://USER@HOST:PORT/DB)",
        )
    return parsed.set(drivername=driver), is_default


def _sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for in-memory and ``file:`` URI databases."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def prepare_location(url: URL, is_default: bool) -> None:
    """Check a SQLite file's directory; create it only for the default location."""
    path = _sqlite_path(url)
    if path is None:
        return
    if path.is_dir():
        raise StoreError(f"store path {path} is a directory, not a SQLite file")
    parent = path.parent
    if not parent.is_dir():
        if not is_default:
            raise StoreError(
                f"cannot open store {safe_url(url)}: directory {parent} does not exist",
                hint="create the directory first, or point --db elsewhere",
            )
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {parent}: {exc.strerror}") from exc


def read_only_url(url: URL) -> URL:
    """The URL that opens the same store read-only where the engine allows it: a SQLite file as the URI
    ``file:PATH?mode=ro`` (SQLite refuses every write on it); any other URL unchanged (PostgreSQL is made
    read-only per session: ``make_engine(read_only=True)``)."""
    if url.get_backend_name() != "sqlite":
        return url
    path = _sqlite_path(url)
    if path is None:  # in-memory, or already a ``file:`` URI (kept as given, its mode too)
        return url
    query = {k: v for k, v in url.query.items() if k not in ("mode", "uri")}
    return url.set(database=f"file:{quote(str(path))}", query={**query, "mode": "ro", "uri": "true"})


def make_engine(url: URL, *, read_only: bool = False) -> Engine:
    """An engine with the project's JSON serialiser; SQLite in WAL mode with explicit transactions.

    ``read_only``: every connection refuses writes — SQLite opened ``mode=ro`` with ``PRAGMA query_only``
    (and the journal mode left as the file has it), PostgreSQL sessions with ``default_transaction_read_only``
    (a write is the server's ``cannot execute … in a read-only transaction``)."""
    common: dict[str, Any] = {"json_serializer": json_dumps, "json_deserializer": json_loads}
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            read_only_url(url) if read_only else url,
            connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False}, **common
        )
        event.listen(engine, "connect", _sqlite_on_connect_read_only if read_only else _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": PG_CONNECT_TIMEOUT_S, "client_encoding": "utf8"}
    if read_only:
        connect_args["options"] = "-c default_transaction_read_only=on"
    return sa.create_engine(
        # client_encoding: the store's texts are UTF-8 whatever the database's encoding (a cluster made
        # without a UTF-8 locale is SQL_ASCII, and psycopg would hand back bytes, not text)
        url, connect_args=connect_args, pool_pre_ping=True, **common
    )


def _sqlite_on_connect_read_only(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA query_only = ON")
    finally:
        cur.close()


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Take transaction control away from the sqlite3 module: _sqlite_on_begin emits BEGIN itself.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        _ensure_wal(cur)
        cur.execute("PRAGMA synchronous = NORMAL")
    finally:
        cur.close()


def _ensure_wal(cur: Any) -> None:
    """The file in WAL mode. Switching needs the file to itself: when another process opened a new store at
    the same moment, it may switch first and then keep the file busy (its writes), so the switch here would
    wait out the whole busy timeout. It is tried without waiting, and the mode read again after a refusal:
    the other process's switch is as good as ours."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    cur.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:  # reading the mode may meet the other process's switch too
                if cur.execute("PRAGMA journal_mode").fetchone()[0] in ("wal", "memory"):
                    return
                cur.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
    finally:
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")


def _sqlite_on_begin(conn: Connection) -> None:
    options = conn.get_execution_options()
    wait_s = options.get(LOCK_WAIT)
    busy_ms = int((BUSY_TIMEOUT_S if wait_s is None else wait_s) * 1000)
    if conn.info.get("busy_ms", int(BUSY_TIMEOUT_S * 1000)) != busy_ms:  # info lives with the connection
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(busy_ms, 1)}")
        conn.info["busy_ms"] = busy_ms
    conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE, False) else "BEGIN")


def set_pg_lock_wait(conn: Connection, wait_s: float) -> None:
    """Bound how long statements of this PostgreSQL transaction wait for another's lock."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {max(int(wait_s * 1000), 1)}")


# SQLite's SQLITE_BUSY and SQLITE_LOCKED (also in extended codes), PostgreSQL's lock_not_available,
# deadlock_detected and serialization_failure: another writer was in the way; trying again can succeed.
_SQLITE_LOCK_CODES = (5, 6)
_PG_LOCK_STATES = ("55P03", "40P01", "40001")


def is_lock_conflict(exc: sa_exc.SQLAlchemyError) -> bool:
    """Whether ``exc`` means another writer held a lock (and the write may succeed when tried again)."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_LOCK_CODES
    return getattr(orig, "sqlstate", None) in _PG_LOCK_STATES


_HINTS: tuple[tuple[str, str, str | None], ...] = (
    # (regex on the driver's message, lower-cased; what we say ("" = the message itself); hint)
    ("file is not a database", "not a SQLite database (file is not a database)",
     "the file is corrupt or is not a gpuledger store; restore a backup or point --db elsewhere"),
    ("readonly database", "the store is read-only (attempt to write a readonly database)",
     "check the file's and its directory's permissions, or point --db at a writable store"),
    ("read-only transaction", "the database is read-only (cannot write in a read-only transaction)",
     "the server or database is set read-only; point --db at a writable store"),
    ("permission denied for", "", "the database user may not write here; use a user with write access"),
    ("unable to open database file", "cannot open the database file",
     "check that the file and its directory exist and are readable and writable"),
    ("database is locked", f"the database stayed locked by another process for {BUSY_TIMEOUT_S:.0f} s",
     None),
    (r"disk i/o error", "disk I/O error", None),
    ("database disk image is malformed", "the SQLite file is corrupt (database disk image is malformed)",
     "restore a backup or point --db elsewhere"),
    ("password authentication failed", "password authentication failed",
     "check the user and password in the URL (or PGPASSWORD / ~/.pgpass)"),
    ("no password supplied", "the server wants a password and none was given",
     "put it in the URL (postgresql+psycopg://USER:PASSWORD@HOST/DB) or in PGPASSWORD / ~/.pgpass"),
    ("connection refused", "connection refused",
     "is the PostgreSQL server running and listening on that host and port?"),
    ("timeout expired", "connection timed out", "is the host reachable and the port right?"),
    ("could not translate host name", "unknown host", "check the host name in the URL"),
    ("name or service not known", "unknown host", "check the host name in the URL"),
    (r'database ".*" does not exist', "", "create it first (createdb NAME), or fix the name in the URL"),
    (r'role ".*" does not exist', "", "check the user name in the URL"),
)


def describe(exc: sa_exc.SQLAlchemyError) -> tuple[str, str | None]:
    """One line saying what went wrong, and a hint."""
    orig = getattr(exc, "orig", None)
    raw = str(orig) if orig is not None else str(exc)
    line = " ".join(part.strip() for part in raw.strip().splitlines() if part.strip()) or type(exc).__name__
    lowered = line.lower()
    for pattern, said, hint in _HINTS:
        if re.search(pattern, lowered):
            return (said or _strip_pg_noise(line)), hint
    return _strip_pg_noise(line), None


def _strip_pg_noise(line: str) -> str:
    # psycopg: 'connection failed: connection to server at "h" (ip), port p failed: FATAL:  msg'
    if "FATAL:" in line:
        line = line.split("FATAL:", 1)[1].strip()
    return line


@contextmanager
def translate_errors(
    what: str, url: URL, doing: str = "", *, lock_wait_s: float | None = None
) -> Iterator[None]:
    """Turn a database error into a StoreError: ``<what> <url>[ while <doing>]: <reason>``; a lock
    held by another writer for longer than the wait is a StoreLockedError."""
    try:
        yield
    except GpuledgerError:
        raise
    except sa_exc.SQLAlchemyError as exc:
        reason, hint = describe(exc)
        during = f" while {doing}" if doing else ""
        if is_lock_conflict(exc):
            raise StoreLockedError(
                f"{what} {safe_url(url)}{during}: {_lock_reason(url, reason, lock_wait_s)}", hint=hint
            ) from exc
        raise StoreError(f"{what} {safe_url(url)}{during}: {reason}", hint=hint) from exc


def _lock_reason(url: URL, reason: str, wait_s: float | None) -> str:
    if url.get_backend_name() == "sqlite":
        return f"the database stayed locked by another process for {wait_s or BUSY_TIMEOUT_S:g} s"
    waited = f" for {wait_s:g} s" if wait_s is not None else ""
    return f"another transaction held a lock{waited} ({reason})"
