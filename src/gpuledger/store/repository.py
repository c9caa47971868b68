"""The ``Store``: the one way gpuledger reads and writes results (docs/contracts.md "Store")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from gpuledger.errors import InvalidInputError, NotFoundError, StoreError
from gpuledger.records import (
    DeviceWindow,
    DoctorRunRecord,
    RequestRecord,
    RunInfo,
    RunStatus,
    TelemetrySample,
)
from gpuledger.store import document, exchange, listing
from gpuledger.store.engine import (
    LOCK_WAIT,
    WRITE,
    make_engine,
    prepare_location,
    resolve_url,
    safe_url,
    set_pg_lock_wait,
    translate_errors,
)
from gpuledger.store.ids import MIN_PREFIX, check_run_id, new_run_id
from gpuledger.store.listing import RunPage, RunQuery, RunRow
from gpuledger.store.liveness import RunBeingWritten, Writer, current_writer, who_writes, writer_alive
from gpuledger.store.matrix import MatrixCells
from gpuledger.store.migrate import HEAD, current_revision, ensure_schema
from gpuledger.store.models import cost_evaluations, doctor_runs, matrices, requests, runs, telemetry

_ID_ATTEMPTS = 8
_AMBIGUOUS_SHOWN = 10


def _now() -> datetime:
    return datetime.now(UTC)


# ---- query_runs: the columns a row is read from, the sorts, the filters (store/listing.py) -----------------
_ROW_COLUMNS = (
    runs.c.id, runs.c.created_at, runs.c.label, runs.c.engine, runs.c.model, runs.c.status, runs.c.unit,
    runs.c.kind, runs.c.gpu, runs.c.num_requests, runs.c.duration_s, runs.c.rate, runs.c.rate_unit,
    runs.c.writer_host, runs.c.writer_pid, runs.c.writer_pidns, runs.c.writer_started, runs.c.updated_at,
)
_SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "created": runs.c.created_at, "label": runs.c.label, "model": runs.c.model, "engine": runs.c.engine,
    "gpu": runs.c.gpu, "kind": runs.c.kind, "requests": runs.c.num_requests, "duration": runs.c.duration_s,
    "rate": runs.c.rate,
}
_NULLABLE_SORTS = frozenset({"gpu", "kind", "duration", "rate"})
_FACETS = ("label", "model", "engine", "kind", "gpu")


def _query_filters(query: RunQuery) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    for name in ("label", "model", "engine", "kind", "gpu"):
        value = getattr(query, name)
        if value is not None:
            where.append(runs.c[name] == value)
    if query.since is not None:
        where.append(runs.c.created_at >= datetime.combine(query.since, time.min, UTC))
    if query.until is not None:
        where.append(runs.c.created_at < datetime.combine(query.until + timedelta(days=1), time.min, UTC))
    return where


def _writer_values(writer: Writer) -> dict[str, Any]:
    return {
        "writer_host": writer.host,
        "writer_pid": writer.pid,
        "writer_pidns": writer.pidns,
        "writer_started": writer.started,
    }


_TELEMETRY_BATCH = 2_000  # samples per INSERT of attach_telemetry
_NO_WRITER: dict[str, Any] = dict.fromkeys(("writer_host", "writer_pid", "writer_pidns", "writer_started"))


@dataclass(frozen=True, slots=True)
class UnreadableRun:
    """A run whose row cannot be read back (a corrupt or hand-edited SQLite file): its id and why."""

    id: str
    reason: str


class RunList(list[RunInfo]):
    """``Store.list_runs``: the runs that could be read, and ``unreadable``, the rows that could not."""

    def __init__(self, found: Iterable[RunInfo] = (), unreadable: Iterable[UnreadableRun] = ()) -> None:
        super().__init__(found)
        self.unreadable: list[UnreadableRun] = list(unreadable)


def _why_unreadable(exc: BaseException) -> str:
    if isinstance(exc, sa_exc.SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        text = str(orig if orig is not None else exc)
    else:
        text = str(exc)
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:197] + "..."


@contextmanager
def _decoding(problem: str, url: str, what: str) -> Iterator[None]:
    """A stored value that cannot be decoded (invalid JSON, a date that is not one) is a StoreError."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise StoreError(
            f"{problem} {url} while {what}: a stored value is unreadable ({_why_unreadable(exc)})",
            hint="the store may be corrupt: restore a backup, or delete the run that holds the value",
        ) from exc


def open_store(url: str | None = None, *, read_only: bool = False) -> Store:
    """Open (creating and migrating as needed) the store at ``url``, ``$GPULEDGER_DB`` or the default.

    ``read_only``: open it so that nothing can be written (``store.engine.make_engine``) and migrate
    nothing: a store whose schema is not this gpuledger's is a StoreError saying how to upgrade it.
    Raises StoreError with one line when the store cannot be used; the store is not modified then.
    """
    parsed, is_default = resolve_url(url)
    if not read_only:
        prepare_location(parsed, is_default)
    with translate_errors("cannot open store", parsed):
        engine = make_engine(parsed, read_only=read_only)
    try:
        if read_only:
            _check_schema(engine, parsed)
        else:
            ensure_schema(engine, parsed)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, parsed)


def _check_schema(engine: Engine, url: URL) -> None:
    """A store opened read-only must be at this gpuledger's schema already (nothing is migrated)."""
    with translate_errors("cannot open store", url), engine.connect() as conn:
        revision = current_revision(conn)
    if revision == HEAD:
        return
    if revision is None:
        raise StoreError(f"{safe_url(url)} is not a gpuledger store (it has no schema)",
                         hint="point --db at a store that gpuledger has written")
    ensure_schema_hint = (f"run any gpuledger command with write access on it first (e.g. `gpuledger runs "
                          f"--db {safe_url(url)}`): that upgrades it")
    raise StoreError(
        f"store {safe_url(url)} has schema revision {revision!r} and this gpuledger reads {HEAD!r}; "
        "a read-only open does not migrate it",
        hint=ensure_schema_hint,
    )


class Store(MatrixCells):
    """Runs, their requests and telemetry, doctor runs and cost evaluations, in SQLite or PostgreSQL; the
    cells of benchmark matrices (``store.matrix``).

    Every method is one transaction: it commits before returning, or changes nothing and raises.
    Run ids given by a user may be unambiguous prefixes (``get_run``, ``get_requests``,
    ``get_telemetry``, ``export_run``, ``delete_run``); write methods take the exact id.
    """

    def __init__(self, engine: Engine, url: URL) -> None:
        self._engine: Engine | None = engine
        self._url = url

    # ---- plumbing --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL, password masked."""
        return safe_url(self._url)

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._url.get_backend_name()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _tx(
        self, what: str, *, write: bool = False, lock_wait_s: float | None = None
    ) -> Iterator[Connection]:
        """One transaction. ``lock_wait_s`` bounds how long it waits for another writer's lock
        (StoreLockedError after that); by default SQLite waits BUSY_TIMEOUT_S, PostgreSQL as long as
        it takes. A value that cannot be decoded while reading is a StoreError, not a crash."""
        if self._engine is None:
            raise StoreError(f"store {self.url} is closed")
        problem = "cannot write to store" if write else "cannot read from store"
        with (
            translate_errors(problem, self._url, what, lock_wait_s=lock_wait_s),
            nullcontext() if write else _decoding(problem, self.url, what),
            self._engine.connect() as conn,
        ):
            if write:
                conn.execution_options(**{WRITE: True})
            if lock_wait_s is not None:
                conn.execution_options(**{LOCK_WAIT: lock_wait_s})
            with conn.begin():
                if lock_wait_s is not None and self.backend == "postgresql":
                    set_pg_lock_wait(conn, lock_wait_s)
                yield conn

    def _resolve(self, conn: Connection, id_or_prefix: str) -> str:
        key = id_or_prefix.strip().lower()
        if not key:
            raise NotFoundError("no run id given")
        exact = conn.execute(sa.select(runs.c.id).where(runs.c.id == key)).scalar_one_or_none()
        if exact is not None:
            return str(exact)
        hint = "`gpuledger runs` lists the runs in this store"
        if len(key) < MIN_PREFIX:
            raise NotFoundError(
                f"no run {key!r} in {self.url} (a prefix needs at least {MIN_PREFIX} characters)", hint=hint
            )
        found = conn.execute(
            sa.select(runs.c.id)
            .where(runs.c.id.startswith(key, autoescape=True))
            .order_by(runs.c.id)
            .limit(_AMBIGUOUS_SHOWN + 1)
        ).scalars().all()
        if not found:
            raise NotFoundError(f"no run {key!r} in {self.url}", hint=hint)
        if len(found) > 1:
            shown = ", ".join(found[:_AMBIGUOUS_SHOWN]) + (", …" if len(found) > _AMBIGUOUS_SHOWN else "")
            raise NotFoundError(
                f"run id prefix {key!r} is ambiguous: {shown}", hint="type more characters of the id"
            )
        return str(found[0])

    def _touch(self, conn: Connection, run_id: str, **values: Any) -> None:
        """Refresh the run's heartbeat (and set ``values``); NotFoundError for an unknown id."""
        result = conn.execute(
            sa.update(runs).where(runs.c.id == run_id).values(updated_at=_now(), **values)
        )
        if result.rowcount == 0:
            raise NotFoundError(f"no run {run_id!r} in {self.url}")

    def _status_of(self, row: sa.Row[Any], now: datetime) -> RunStatus:
        status: RunStatus = row.status
        if status != "running":
            return status
        writer = None
        if row.writer_host is not None and row.writer_pid is not None:
            writer = Writer(row.writer_host, row.writer_pid, row.writer_pidns, row.writer_started)
        return "running" if writer_alive(writer, row.updated_at, now) else "incomplete"

    def _run_from_row(self, row: sa.Row[Any], now: datetime) -> RunInfo:
        return exchange.run_from_row(row, self._status_of(row, now))

    # ---- runs ------------------------------------------------------------------------------------

    def create_run(self, info: RunInfo) -> str:
        """Store a new run; returns its id (a new short id when ``info.id`` is empty).

        The calling process is recorded as the run's writer: while ``status`` is ``running``, the run
        reads as ``incomplete`` once that process is gone.
        """
        given = check_run_id(info.id.strip().lower()) if info.id.strip() else None
        exchange.check_run_fields({k: getattr(info, k) for k in exchange.RUN_FIELDS if k != "id"}
                                  | {"created_at": info.created_at or _now()})
        values = exchange.run_values(info) | listing.index_values(info)
        now = _now()
        values.update(created_at=info.created_at or now, updated_at=now, **_writer_values(current_writer()))
        for _ in range(_ID_ATTEMPTS):
            run_id = given or new_run_id()
            try:
                with self._tx("creating a run", write=True) as conn:
                    conn.execute(sa.insert(runs).values(**(values | {"id": run_id})))
                return run_id
            except StoreError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or not self._exists(run_id):
                    raise
                if given is not None:
                    raise InvalidInputError(f"a run with id {given!r} already exists in {self.url}") from None
        raise StoreError(f"could not find an unused run id in {self.url} after {_ID_ATTEMPTS} tries")

    def create_runs(self, infos: Sequence[RunInfo]) -> list[str]:
        """Store finished runs (``import-results``) under fresh ids in one transaction: every run is
        written, or — on any error — none. Their ``status`` is kept; no process is their writer."""
        now = _now()
        rows = []
        for info in infos:
            fields = {k: getattr(info, k) for k in exchange.RUN_FIELDS if k != "id"}
            exchange.check_run_fields(fields | {"created_at": info.created_at or now})
            rows.append(exchange.run_values(info) | listing.index_values(info) | _NO_WRITER
                        | {"created_at": info.created_at or now, "updated_at": now})
        for _ in range(_ID_ATTEMPTS):
            ids = [new_run_id() for _ in rows]
            if len(set(ids)) != len(ids):
                continue
            try:
                with self._tx("creating runs", write=True) as conn:
                    if rows:
                        conn.execute(sa.insert(runs), [v | {"id": i} for v, i in zip(rows, ids, strict=True)])
                return ids
            except StoreError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError):
                    raise
        raise StoreError(
            f"could not find {len(rows)} unused run ids in {self.url} after {_ID_ATTEMPTS} tries"
        )

    def update_run(self, run_id: str, *, lock_wait_s: float | None = None, **fields: Any) -> None:
        """Set any RunInfo fields but ``id``. Setting ``status="running"`` makes this process the writer.

        ``lock_wait_s`` (here and on every write): wait at most this long for another writer's lock,
        then raise StoreLockedError with nothing changed."""
        exchange.check_run_fields(fields)
        values = exchange.column_values(dict(fields))
        if "environment" in fields:
            values["env_hash"] = exchange.env_hash(fields["environment"])
        if fields.get("status") == "running":
            values.update(_writer_values(current_writer()))
        with self._tx("updating a run", write=True, lock_wait_s=lock_wait_s) as conn:
            self._touch(conn, run_id, **values)
            if listing.INDEXED_FROM.intersection(fields):
                self._reindex(conn, run_id)

    def _reindex(self, conn: Connection, run_id: str) -> None:
        """Derive the run's listing columns (``store.listing``) again from its row as it is now."""
        try:
            info = self._run_from_row(conn.execute(sa.select(runs).where(runs.c.id == run_id)).one(), _now())
        except (ValueError, TypeError):
            return  # an unreadable row keeps what it had: listing it says why
        conn.execute(sa.update(runs).where(runs.c.id == run_id).values(**listing.index_values(info)))

    def heartbeat(self, run_id: str, *, lock_wait_s: float | None = None) -> None:
        """Tell readers on other hosts this run's writer is alive (every write does this too)."""
        with self._tx("updating a run", write=True, lock_wait_s=lock_wait_s) as conn:
            self._touch(conn, run_id)

    def mark_incomplete(self, run_id: str, *, lock_wait_s: float | None = None) -> None:
        """Interrupted (Ctrl-C, SIGTERM): a ``running`` run becomes ``incomplete``; others keep status."""
        with self._tx("marking a run incomplete", write=True, lock_wait_s=lock_wait_s) as conn:
            self._touch(conn, run_id)
            conn.execute(
                sa.update(runs)
                .where(runs.c.id == run_id, runs.c.status == "running")
                .values(status="incomplete", finished_at=sa.func.coalesce(runs.c.finished_at, _now()))
            )

    def get_run(self, id_or_prefix: str) -> RunInfo:
        """The run; StoreError (naming the run and the column) when its row cannot be read."""
        with self._tx("reading a run") as conn:
            run = self._read_run(conn, self._resolve(conn, id_or_prefix))
        return self._readable(run)

    def _readable(self, run: RunInfo | UnreadableRun) -> RunInfo:
        if isinstance(run, UnreadableRun):
            raise StoreError(
                f"run {run.id!r} in {self.url} is unreadable: {run.reason}",
                hint=f"the row is corrupt: `gpuledger delete {run.id}` removes it, or restore a backup",
            )
        return run

    def _read_run(self, conn: Connection, run_id: str) -> RunInfo | UnreadableRun:
        """One run's row, decoded on its own: a corrupt row is an UnreadableRun, not an exception."""
        try:
            row = conn.execute(sa.select(runs).where(runs.c.id == run_id)).one()
        except (ValueError, TypeError, sa_exc.StatementError) as exc:
            # A value could not be decoded: find the column, reading them one at a time.
            for column in runs.c:
                try:
                    conn.execute(sa.select(column).where(runs.c.id == run_id)).one()
                except (ValueError, TypeError, sa_exc.StatementError) as col_exc:
                    return UnreadableRun(run_id, f"column {column.name}: {_why_unreadable(col_exc)}")
            return UnreadableRun(run_id, _why_unreadable(exc))
        try:
            return self._run_from_row(row, _now())
        except (ValueError, TypeError) as exc:
            return UnreadableRun(run_id, _why_unreadable(exc))

    def list_runs(
        self, label: str | None = None, since: datetime | None = None, limit: int | None = None
    ) -> RunList:
        """Runs, newest first; ``since`` compares with ``created_at`` (a naive datetime is local time).

        A row that cannot be read (a corrupt SQLite file) is left out of the list and named in its
        ``unreadable`` (id and why); the others are listed as usual."""
        def filtered(query: sa.Select[Any]) -> sa.Select[Any]:
            query = query.order_by(runs.c.created_at.desc(), runs.c.id)
            if label is not None:
                query = query.where(runs.c.label == label)
            if since is not None:
                query = query.where(runs.c.created_at >= since)
            return query if limit is None else query.limit(limit)

        with self._tx("listing runs") as conn:
            try:
                rows = conn.execute(filtered(sa.select(runs))).all()
                now = _now()
                return RunList([self._run_from_row(row, now) for row in rows])
            except (ValueError, TypeError, sa_exc.StatementError) as exc:
                # Some row is corrupt: read them one by one (below) to find which. (A database error on
                # PostgreSQL has ended the transaction: that is not a row to skip.)
                if isinstance(exc, sa_exc.DBAPIError) and self.backend != "sqlite":
                    raise
            ids = conn.execute(filtered(sa.select(runs.c.id))).scalars().all()
            found = [self._read_run(conn, str(run_id)) for run_id in ids]
        return RunList(
            [r for r in found if isinstance(r, RunInfo)], [r for r in found if isinstance(r, UnreadableRun)]
        )

    def query_runs(self, query: RunQuery) -> RunPage:
        """One page of the runs ``query`` selects, in its order, with how many match in all: light rows
        from the indexed columns (``store.listing``), no summary read. Filters are exact matches on indexed
        columns; the page is SQL ``LIMIT``/``OFFSET`` (ties broken by id, so pages never overlap)."""
        where = _query_filters(query)
        column = _SORT_COLUMNS[query.sort]
        ordered = column.asc() if query.order == "asc" else column.desc()
        # Runs without the figure last, both ways: said only where it is not the database's own order (NULL
        # is the smallest value in SQLite, the largest in PostgreSQL), so the usual order keeps its index.
        natural = (self.backend == "sqlite") == (query.order == "desc")
        if query.sort in _NULLABLE_SORTS and not natural:
            ordered = ordered.nulls_last()
        # Ties in id order: ascending by date as ``list_runs`` breaks them (the first page of the newest is
        # ``runs --limit N``), else in the sort's direction (an index scan needs no sort of a large tie).
        tie = runs.c.id.asc() if query.sort == "created" or query.order == "asc" else runs.c.id.desc()
        # The page's ids first, from an index alone (models.py: revision 0005), then those rows only: a run's
        # row is long (its documents) and the listing columns come last in it.
        page = (sa.select(runs.c.id).where(*where).order_by(ordered, tie)
                .limit(query.per_page).offset(query.offset))
        with self._tx("listing runs") as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(runs).where(*where)).scalar_one()
            ids = [str(i) for i in conn.execute(page).scalars()]
            found = {r.id: r for r in conn.execute(sa.select(*_ROW_COLUMNS).where(runs.c.id.in_(ids)))} \
                if ids else {}
        now = _now()
        return RunPage(tuple(self._row_of(found[i], now) for i in ids if i in found), int(total), query)

    def _row_of(self, row: Any, now: datetime) -> RunRow:
        return RunRow(
            id=row.id, created_at=row.created_at, label=row.label, engine=row.engine, model=row.model,
            status=self._status_of(row, now), unit=row.unit, kind=row.kind, gpu=row.gpu,
            num_requests=row.num_requests, duration_s=row.duration_s, rate=row.rate, rate_unit=row.rate_unit,
        )

    def run_facets(self, limit: int = 500) -> dict[str, list[str]]:
        """The values each filter of ``query_runs`` can take (``label``, ``model``, ``engine``, ``kind``,
        ``gpu``), distinct and sorted, at most ``limit`` of each: one index scan per column."""
        out: dict[str, list[str]] = {}
        with self._tx("listing runs") as conn:
            for name in _FACETS:
                col = runs.c[name]
                values = conn.execute(
                    sa.select(col).where(col.is_not(None), col != "").distinct().order_by(col).limit(limit)
                ).scalars().all()
                out[name] = [str(v) for v in values]
        return out

    def run_version(self, id_or_prefix: str) -> tuple[str, datetime, RunStatus]:
        """``(id, updated_at, status)`` of the run: ``updated_at`` moves with every write to the run (its
        requests, telemetry, summary), so a view made from it holds while it has not moved."""
        with self._tx("reading a run") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            row: Any = conn.execute(
                sa.select(runs.c.updated_at, runs.c.status, runs.c.writer_host, runs.c.writer_pid,
                          runs.c.writer_pidns, runs.c.writer_started).where(runs.c.id == run_id)
            ).one()
        return run_id, row.updated_at, self._status_of(row, _now())

    def doctor_version(self) -> tuple[int, int | None]:
        """How many doctor runs the store holds and the newest one's id: the setup-labour ledger a price may
        read has not changed while these have not."""
        with self._tx("listing doctor runs") as conn:
            count, newest = conn.execute(sa.select(sa.func.count(), sa.func.max(doctor_runs.c.id))).one()
        return int(count), None if newest is None else int(newest)

    def list_matrices(self, limit: int = 500) -> list[tuple[str, datetime, str]]:
        """The benchmark matrices in the store, newest first: ``(id, created_at, status)``."""
        with self._tx("listing matrices") as conn:
            rows = conn.execute(
                sa.select(matrices.c.id, matrices.c.created_at, matrices.c.status)
                .order_by(matrices.c.created_at.desc(), matrices.c.id).limit(limit)
            ).all()
        return [(str(i), created, str(status)) for i, created, status in rows]

    def get_runs(self, ids: Sequence[str]) -> RunList:
        """The runs of these exact ids, in the order given (an id not in the store is left out); a row
        that cannot be read is named in ``unreadable``, as ``list_runs`` does."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return RunList()
        with self._tx("reading runs") as conn:
            try:
                rows = conn.execute(sa.select(runs).where(runs.c.id.in_(wanted))).all()
                now = _now()
                by_id = {row.id: self._run_from_row(row, now) for row in rows}
                return RunList([by_id[i] for i in wanted if i in by_id])
            except (ValueError, TypeError, sa_exc.StatementError) as exc:
                if isinstance(exc, sa_exc.DBAPIError) and self.backend != "sqlite":
                    raise
            present = set(conn.execute(sa.select(runs.c.id).where(runs.c.id.in_(wanted))).scalars())
            found = [self._read_run(conn, i) for i in wanted if i in present]
        return RunList(
            [r for r in found if isinstance(r, RunInfo)], [r for r in found if isinstance(r, UnreadableRun)]
        )

    def env_hash(self, id_or_prefix: str) -> str | None:
        """The run's environment fingerprint hash (indexed, to find runs on the same stack)."""
        with self._tx("reading a run") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            value = conn.execute(sa.select(runs.c.env_hash).where(runs.c.id == run_id)).scalar_one()
        return None if value is None else str(value)

    def delete_run(self, id_or_prefix: str, *, force: bool = False) -> str:
        """Delete a run and everything stored with it; returns its id. A run being written (``running``,
        its writer alive: ``store.liveness``) is refused with ``RunBeingWritten`` (exit 4), in the same
        transaction as the delete; ``force`` deletes it all the same (its bench then stores it again:
        ``bench.writer``)."""
        with self._tx("deleting a run", write=True) as conn:
            run_id = self._resolve(conn, id_or_prefix)
            row: Any = conn.execute(
                sa.select(runs.c.status, runs.c.updated_at, runs.c.writer_host, runs.c.writer_pid,
                          runs.c.writer_pidns, runs.c.writer_started).where(runs.c.id == run_id)
            ).one()
            now = _now()
            if not force and self._status_of(row, now) == "running":
                writer = (Writer(row.writer_host, row.writer_pid, row.writer_pidns, row.writer_started)
                          if row.writer_host is not None and row.writer_pid is not None else None)
                raise RunBeingWritten(
                    f"run {run_id} is being written ({who_writes(writer, row.updated_at, now)}): not deleted",
                    hint=f"let it finish or stop it (Ctrl-C where it runs); `gpuledger delete {run_id} "
                    "--force` deletes it anyway (its bench stores it again with what it measures after)",
                )
            for table in (requests, telemetry, cost_evaluations):
                conn.execute(sa.delete(table).where(table.c.run_id == run_id))
            conn.execute(sa.delete(runs).where(runs.c.id == run_id))
        return run_id

    # ---- requests and telemetry -------------------------------------------------------------------

    def add_requests(
        self, run_id: str, records: Iterable[RequestRecord], *, lock_wait_s: float | None = None
    ) -> None:
        """Append requests to a run in one transaction, committed before returning.

        Every record is checked first (``exchange.request_problems``): one the store cannot keep as it
        is (a count outside 0 … 2³¹−1, a non-finite time, ...) is an InvalidInputError naming it, and
        nothing of the batch is written."""
        rows = [exchange.request_values(run_id, r) for r in records]
        with self._tx("saving requests", write=True, lock_wait_s=lock_wait_s) as conn:
            self._touch(conn, run_id, num_requests=runs.c.num_requests + len(rows))
            if rows:
                conn.execute(sa.insert(requests), rows)

    def get_requests(
        self, id_or_prefix: str, *, chunks: bool = True, chunks_every: int = 1
    ) -> list[RequestRecord]:
        """A run's requests in index order (then insertion order).

        ``chunks=False`` leaves the per-chunk arrival times out (``chunk_times`` empty, ``chunk_tokens``
        None): what TTFT/E2E views of a 100k-request run need, at a fraction of the cost.
        ``chunks_every=k`` keeps them only for requests whose index is a multiple of ``k`` (a
        systematic sample for per-token views of huge runs)."""
        if chunks_every < 1:
            raise InvalidInputError(f"chunks_every must be >= 1, got {chunks_every}")

        def column(name: str) -> Any:
            if name not in ("chunk_times", "chunk_tokens"):
                return requests.c[name]
            if not chunks:
                return sa.null()
            if chunks_every == 1:
                return requests.c[name]
            return sa.case((requests.c.idx % chunks_every == 0, requests.c[name]), else_=sa.null())

        columns = [column(name) for name in exchange.REQUEST_COLUMNS]
        with self._tx("reading requests") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            rows = conn.execute(
                sa.select(*columns).where(requests.c.run_id == run_id).order_by(requests.c.idx, requests.c.id)
            ).all()
        return self._requests_from_rows(run_id, rows)

    def _requests_from_rows(self, run_id: str, rows: Iterable[Sequence[Any]]) -> list[RequestRecord]:
        out: list[RequestRecord] = []
        for row in rows:
            try:
                out.append(exchange.request_from_row(row))
            except (ValueError, TypeError) as exc:
                raise StoreError(
                    f"request {row[0]!r} of run {run_id!r} in {self.url} is unreadable: {exc}",
                    hint="the row is corrupt: restore a backup of the store",
                ) from exc
        return out

    def add_telemetry(
        self, run_id: str, samples: Iterable[TelemetrySample], *, lock_wait_s: float | None = None
    ) -> None:
        rows = [exchange.telemetry_values(run_id, s) for s in samples]
        with self._tx("saving telemetry", write=True, lock_wait_s=lock_wait_s) as conn:
            self._touch(conn, run_id)
            if rows:
                conn.execute(sa.insert(telemetry), rows)

    def get_telemetry(self, id_or_prefix: str) -> list[TelemetrySample]:
        """A run's samples in time order (then insertion order)."""
        cols = (telemetry.c.t, telemetry.c.device, telemetry.c.metric, telemetry.c.value, telemetry.c.source)
        with self._tx("reading telemetry") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            rows = conn.execute(
                sa.select(*cols).where(telemetry.c.run_id == run_id).order_by(telemetry.c.t, telemetry.c.id)
            ).all()
        return [TelemetrySample(*row) for row in rows]

    def attach_telemetry(
        self,
        run_id: str,
        devices: Sequence[str],
        series: Iterable[tuple[str, str, str, Sequence[float], Sequence[float]]],
        summarize: Callable[[RunInfo, dict[str, set[str]]], list[DeviceWindow]],
        *,
        lock_wait_s: float | None = None,
    ) -> int:
        """Telemetry of ``devices`` attached to a stored run in one transaction that holds the run's row
        (a second attach into the same run waits for it, then sees what this one wrote): ``summarize(the
        run as it is now, {device: sources of the samples the run already holds of it}) -> the run's new
        telemetry_summary`` (raising changes nothing); of ``series`` — ``(device, metric, source, times,
        values)`` — the samples the run does not hold yet (same device, metric and t) are added, a series
        at a time. Returns how many were added."""
        added = 0
        with self._tx("attaching telemetry", write=True, lock_wait_s=lock_wait_s) as conn:
            row = conn.execute(sa.select(runs).where(runs.c.id == run_id).with_for_update()).one_or_none()
            if row is None:
                raise NotFoundError(f"no run {run_id!r} in {self.url}")
            held: dict[str, set[str]] = {}
            if devices:
                found = conn.execute(sa.select(telemetry.c.device, telemetry.c.source).distinct().where(
                    telemetry.c.run_id == run_id, telemetry.c.device.in_(list(devices))))
                for device, source in found:
                    held.setdefault(str(device), set()).add(str(source))
            summary = summarize(self._run_from_row(row, _now()), held)
            exchange.check_run_fields({"telemetry_summary": summary})
            for device, metric, source, times, values in series:
                known = set(conn.execute(sa.select(telemetry.c.t).where(
                    telemetry.c.run_id == run_id, telemetry.c.device == device, telemetry.c.metric == metric
                )).scalars()) if device in held else set()
                batch: list[dict[str, Any]] = []
                for t, value in zip(times, values, strict=True):
                    if t in known:
                        continue
                    batch.append(exchange.telemetry_values(run_id, TelemetrySample(t, device, metric, value,
                                                                                   source)))
                    if len(batch) >= _TELEMETRY_BATCH:
                        conn.execute(sa.insert(telemetry), batch)
                        added += len(batch)
                        batch = []
                if batch:
                    conn.execute(sa.insert(telemetry), batch)
                    added += len(batch)
            self._touch(conn, run_id, **exchange.column_values({"telemetry_summary": summary}))
            self._reindex(conn, run_id)
        return added

    # ---- export / import --------------------------------------------------------------------------

    def export_run(self, id_or_prefix: str) -> dict[str, Any]:
        """The run, its requests and telemetry as one JSON-ready document (see ``exchange``)."""
        with self._tx("exporting a run") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            run = self._read_run(conn, run_id)
            req_rows = conn.execute(
                sa.select(*[requests.c[n] for n in exchange.REQUEST_COLUMNS])
                .where(requests.c.run_id == run_id)
                .order_by(requests.c.idx, requests.c.id)
            ).all()
            tel_rows = conn.execute(
                sa.select(telemetry.c.t, telemetry.c.device, telemetry.c.metric, telemetry.c.value,
                          telemetry.c.source)
                .where(telemetry.c.run_id == run_id)
                .order_by(telemetry.c.t, telemetry.c.id)
            ).all()
        info = self._readable(run)
        return document.export_document(
            info, self._requests_from_rows(run_id, req_rows), (TelemetrySample(*r) for r in tel_rows)
        )

    def import_run(self, doc: Any, *, new_id: bool = False) -> str:
        """Add an exported run to this store, keeping its id (or a fresh one with ``new_id``).

        The document is validated in full first; the run is written in one transaction, so a bad
        file or a clash leaves the store unchanged. A run exported while ``running`` arrives as
        ``incomplete`` (its writer is not here to finish it).
        """
        info, reqs, samples = document.parse_document(doc)
        if not new_id:
            check_run_id(info.id)
        if info.status == "running":
            info.status = "incomplete"
        now = _now()
        fields = {k: getattr(info, k) for k in exchange.RUN_FIELDS if k != "id"}
        exchange.check_run_fields(fields | {"created_at": info.created_at or now})
        base = exchange.run_values(info) | listing.index_values(info) | _NO_WRITER | {
            "created_at": info.created_at or now,
            "updated_at": now,
            "num_requests": len(reqs),
        }
        for _ in range(_ID_ATTEMPTS):
            run_id = new_run_id() if new_id else info.id
            request_rows = [exchange.request_values(run_id, r) for r in reqs]
            telemetry_rows = [exchange.telemetry_values(run_id, s) for s in samples]
            try:
                with self._tx("importing a run", write=True) as conn:
                    conn.execute(sa.insert(runs).values(**(base | {"id": run_id})))
                    if request_rows:
                        conn.execute(sa.insert(requests), request_rows)
                    if telemetry_rows:
                        conn.execute(sa.insert(telemetry), telemetry_rows)
                return run_id
            except StoreError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or not self._exists(run_id):
                    raise
                if not new_id:
                    raise InvalidInputError(
                        f"run {run_id!r} is already in {self.url}; nothing was imported",
                        hint="use --new-id to import it under a fresh id",
                    ) from None
        raise StoreError(f"could not find an unused run id in {self.url} after {_ID_ATTEMPTS} tries")

    def _exists(self, run_id: str) -> bool:
        with self._tx("reading a run") as conn:
            return conn.execute(sa.select(runs.c.id).where(runs.c.id == run_id)).first() is not None

    # ---- doctor runs and cost evaluations ----------------------------------------------------------

    def add_doctor_run(self, rec: DoctorRunRecord) -> int:
        """Store a doctor run; returns its id."""
        with self._tx("saving a doctor run", write=True) as conn:
            result = conn.execute(
                sa.insert(doctor_runs).values(
                    machine=rec.machine, created_at=rec.created_at, errors=rec.errors,
                    warnings=rec.warnings, findings=rec.findings, facts=rec.facts,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
        return int(key[0])

    def list_doctor_runs(self, machine: str | None = None) -> list[DoctorRunRecord]:
        """Doctor runs, oldest first (optionally of one machine)."""
        query = sa.select(doctor_runs).order_by(doctor_runs.c.created_at, doctor_runs.c.id)
        if machine is not None:
            query = query.where(doctor_runs.c.machine == machine)
        with self._tx("listing doctor runs") as conn:
            rows = conn.execute(query).all()
        return [
            DoctorRunRecord(
                machine=r.machine, created_at=r.created_at, errors=r.errors, warnings=r.warnings,
                findings=r.findings, facts=r.facts, id=r.id,
            )
            for r in rows
        ]

    def save_cost_evaluation(
        self, run_id: str, profile_name: str, profile: dict[str, Any], result: dict[str, Any]
    ) -> None:
        """Keep the cost profile used for a run and what it gave (several per run are fine)."""
        with self._tx("saving a cost evaluation", write=True) as conn:
            if conn.execute(sa.select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                raise NotFoundError(f"no run {run_id!r} in {self.url}")
            conn.execute(
                sa.insert(cost_evaluations).values(
                    run_id=run_id, profile_name=profile_name, profile=profile, result=result,
                    created_at=_now(),
                )
            )

    def list_cost_evaluations(self, id_or_prefix: str) -> list[dict[str, Any]]:
        """A run's saved cost evaluations, oldest first: ``{profile_name, profile, result, created_at}``."""
        with self._tx("reading cost evaluations") as conn:
            run_id = self._resolve(conn, id_or_prefix)
            rows = conn.execute(
                sa.select(cost_evaluations)
                .where(cost_evaluations.c.run_id == run_id)
                .order_by(cost_evaluations.c.created_at, cost_evaluations.c.id)
            ).all()
        return [
            {"profile_name": r.profile_name, "profile": r.profile, "result": r.result,
             "created_at": r.created_at.isoformat()}
            for r in rows
        ]
