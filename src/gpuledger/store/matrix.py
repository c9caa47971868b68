"""Benchmark matrices in the store (``gpuledger matrix``): the plan each was started with, and one row per
cell and repeat — its natural key (matrix id, cell key, repeat) unique — saying how far it got.

A cell's life: ``pending`` → ``claim_cell`` (``running``; the attempt counted; a fresh run id reserved for
the attempt, and the unfinished run of an earlier attempt deleted: one run per cell, never two) → the bench
creates its run under that id → ``finish_cell`` (``complete``, ``failed`` or ``incomplete``, with the
reason). A ``complete`` cell is never claimed again (``--resume`` skips it). The matrix's own status
(``running``, ``stopping``, ``finished``, ``interrupted``) is how a driver asks its running cells to stop.

``MatrixCells`` holds the methods; ``Store`` (``store.repository``) has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gpuledger.errors import InvalidInputError, NotFoundError, StoreError
from gpuledger.store.ids import new_run_id
from gpuledger.store.models import cost_evaluations, matrices, matrix_cells, requests, runs, telemetry

CellStatus = Literal["pending", "running", "complete", "incomplete", "failed"]
CELL_STATUSES: tuple[CellStatus, ...] = ("pending", "running", "complete", "incomplete", "failed")
MatrixStatus = Literal["running", "stopping", "finished", "interrupted"]
MATRIX_STATUSES: tuple[MatrixStatus, ...] = ("running", "stopping", "finished", "interrupted")
MATRIX_PREFIX = "m-"
MAX_KEY_CHARS = 200
MAX_REASON_CHARS = 2000
_MIN_PREFIX = len(MATRIX_PREFIX) + 4


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class CellRecord:
    """One cell of a matrix at one repeat, as stored."""

    matrix_id: str
    key: str
    repeat: int
    status: CellStatus
    attempts: int = 0
    run_id: str | None = None
    reason: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "repeat": self.repeat, "status": self.status, "attempts": self.attempts,
            "run_id": self.run_id, "reason": self.reason, "params": self.params,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True, slots=True)
class MatrixRecord:
    """A matrix as stored: its id, status, the plan it was started with (and that plan's digest)."""

    id: str
    status: MatrixStatus
    plan: dict[str, Any]
    plan_digest: str
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "plan_digest": self.plan_digest,
                "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
                "plan": self.plan}


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``claim_cell`` found: ``claimed`` (this attempt runs, under ``run_id``), ``complete`` (done
    before: nothing to run) or ``stopped`` (the matrix is being stopped: do not start)."""

    outcome: Literal["claimed", "complete", "stopped"]
    attempt: int = 0
    run_id: str | None = None


def new_matrix_id() -> str:
    return MATRIX_PREFIX + new_run_id()


def _check_key(key: str, repeat: int) -> None:
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidInputError(f"a matrix cell key must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}")
    if not 1 <= repeat <= 2**31 - 1:
        raise InvalidInputError(f"a matrix cell's repeat must be at least 1, got {repeat}")


def _cell(row: sa.Row[Any]) -> CellRecord:
    return CellRecord(row.matrix_id, row.cell_key, row.repeat_index, row.status, row.attempts, row.run_id,
                      row.reason, dict(row.params or {}), row.updated_at)


def _key_where(matrix_id: str, key: str, repeat: int) -> sa.ColumnElement[bool]:
    return sa.and_(matrix_cells.c.matrix_id == matrix_id, matrix_cells.c.cell_key == key,
                   matrix_cells.c.repeat_index == repeat)


class MatrixCells:
    """The store's matrix methods (each one transaction, like every ``Store`` method)."""

    if TYPE_CHECKING:

        @property
        def url(self) -> str: ...

        def _tx(
            self, what: str, *, write: bool = False, lock_wait_s: float | None = None
        ) -> AbstractContextManager[Connection]: ...

    # ---- matrices ----------------------------------------------------------------------------------

    def create_matrix(
        self, matrix_id: str, plan: Mapping[str, Any], digest: str,
        cells: Sequence[tuple[str, int, Mapping[str, Any]]],
    ) -> None:
        """Store a new matrix (``running``) and its cells (``pending``), all in one transaction."""
        for key, repeat, _ in cells:
            _check_key(key, repeat)
        now = _now()
        with self._tx("creating a matrix", write=True) as conn:
            if conn.execute(sa.select(matrices.c.id).where(matrices.c.id == matrix_id)).first() is not None:
                raise InvalidInputError(f"matrix {matrix_id!r} already exists in {self.url}")
            conn.execute(sa.insert(matrices).values(id=matrix_id, created_at=now, updated_at=now,
                                                    status="running", plan_digest=digest, plan=dict(plan)))
            if cells:
                conn.execute(sa.insert(matrix_cells), [
                    {"matrix_id": matrix_id, "cell_key": key, "repeat_index": repeat, "status": "pending",
                     "attempts": 0, "params": dict(params), "updated_at": now}
                    for key, repeat, params in cells
                ])

    def ensure_matrix(
        self, matrix_id: str, plan: Mapping[str, Any], digest: str,
        cells: Sequence[tuple[str, int, Mapping[str, Any]]],
    ) -> bool:
        """``create_matrix`` unless matrix ``matrix_id`` is there already (another process — a pod of the
        same Job — created it, maybe at this very moment); returns whether this call created it. A matrix
        of that id started with another plan is ``InvalidInputError``."""
        for attempt in range(2):
            with self._tx("reading a matrix") as conn:
                digest_now = conn.execute(sa.select(matrices.c.plan_digest)
                                          .where(matrices.c.id == matrix_id)).scalar()
            if digest_now is not None:
                if digest_now != digest:
                    raise InvalidInputError(f"matrix {matrix_id} in {self.url} was started with another plan "
                                            f"({digest_now[:19]}…, this plan is {digest[:19]}…)")
                return False
            try:
                self.create_matrix(matrix_id, plan, digest, cells)
            except (InvalidInputError, StoreError):
                if attempt:  # not the race with another creator: the store's own answer
                    raise
                continue  # created by another process between the read and the write: read it again
            return True
        return False

    def _matrix_id(self, conn: Connection, id_or_prefix: str) -> str:
        key = id_or_prefix.strip().lower()
        exact = conn.execute(sa.select(matrices.c.id).where(matrices.c.id == key)).scalar_one_or_none()
        if exact is not None:
            return str(exact)
        hint = "`gpuledger matrix PLAN.yaml` prints the id of the matrix it starts"
        if not key.startswith(MATRIX_PREFIX) or len(key) < _MIN_PREFIX:
            raise NotFoundError(f"no matrix {key!r} in {self.url} (ids look like m-abcd2345)", hint=hint)
        found = conn.execute(
            sa.select(matrices.c.id).where(matrices.c.id.startswith(key, autoescape=True))
            .order_by(matrices.c.id).limit(11)
        ).scalars().all()
        if not found:
            raise NotFoundError(f"no matrix {key!r} in {self.url}", hint=hint)
        if len(found) > 1:
            raise NotFoundError(f"matrix id prefix {key!r} is ambiguous: {', '.join(found[:10])}")
        return str(found[0])

    def get_matrix(self, id_or_prefix: str) -> MatrixRecord:
        with self._tx("reading a matrix") as conn:
            matrix_id = self._matrix_id(conn, id_or_prefix)
            row = conn.execute(sa.select(matrices).where(matrices.c.id == matrix_id)).one()
        return MatrixRecord(row.id, row.status, dict(row.plan or {}), row.plan_digest, row.created_at,
                            row.updated_at)

    def set_matrix_status(self, matrix_id: str, status: MatrixStatus) -> None:
        with self._tx("updating a matrix", write=True) as conn:
            done = conn.execute(sa.update(matrices).where(matrices.c.id == matrix_id)
                                .values(status=status, updated_at=_now()))
            if done.rowcount == 0:
                raise NotFoundError(f"no matrix {matrix_id!r} in {self.url}")

    def matrix_status(self, matrix_id: str) -> MatrixStatus:
        with self._tx("reading a matrix") as conn:
            status = conn.execute(sa.select(matrices.c.status).where(matrices.c.id == matrix_id)).scalar()
        if status is None:
            raise NotFoundError(f"no matrix {matrix_id!r} in {self.url}")
        return status  # type: ignore[no-any-return]

    # ---- cells -------------------------------------------------------------------------------------

    def matrix_cells(self, matrix_id: str) -> list[CellRecord]:
        """Every cell of the matrix at every repeat, in the order they were planned."""
        with self._tx("reading matrix cells") as conn:
            rows = conn.execute(sa.select(matrix_cells).where(matrix_cells.c.matrix_id == matrix_id)
                                .order_by(matrix_cells.c.id)).all()
        return [_cell(r) for r in rows]

    def claim_cell(self, matrix_id: str, key: str, repeat: int) -> Claim:
        """Start an attempt at a cell: count it, reserve a fresh run id for it, and delete the run an
        earlier, unfinished attempt left (so the cell never has two). Nothing changes for a ``complete``
        cell, or while the matrix is being stopped."""
        with self._tx("claiming a matrix cell", write=True) as conn:
            status = conn.execute(sa.select(matrices.c.status).where(matrices.c.id == matrix_id)
                                  .with_for_update()).scalar()
            if status is None:
                raise NotFoundError(f"no matrix {matrix_id!r} in {self.url}")
            row = conn.execute(sa.select(matrix_cells).where(_key_where(matrix_id, key, repeat))
                               .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"matrix {matrix_id} has no cell {key!r} at repeat {repeat}")
            if row.status == "complete":
                return Claim("complete", row.attempts, row.run_id)
            if status == "stopping":
                return Claim("stopped", row.attempts, row.run_id)
            if row.run_id is not None:
                self._delete_run_rows(conn, row.run_id)
            run_id = self._unused_run_id(conn)
            conn.execute(sa.update(matrix_cells).where(matrix_cells.c.id == row.id).values(
                status="running", attempts=row.attempts + 1, run_id=run_id, reason=None, updated_at=_now()))
        return Claim("claimed", row.attempts + 1, run_id)

    def finish_cell(
        self, matrix_id: str, key: str, repeat: int, status: CellStatus, reason: str | None = None, *,
        attempt: int | None = None,
    ) -> bool:
        """Record how a cell ended (``attempt``: only if that attempt is still the cell's last one). A
        ``complete`` cell keeps its status. Returns whether the row changed."""
        if status not in CELL_STATUSES:
            raise InvalidInputError(f"{status!r} is not a cell status ({', '.join(CELL_STATUSES)})")
        text = None if reason is None else reason[:MAX_REASON_CHARS]
        where = sa.and_(_key_where(matrix_id, key, repeat), matrix_cells.c.status != "complete")
        if attempt is not None:
            where = sa.and_(where, matrix_cells.c.attempts == attempt)
        with self._tx("recording a matrix cell", write=True) as conn:
            run_id = conn.execute(sa.select(matrix_cells.c.run_id).where(where)).scalar()
            values: dict[str, Any] = {"status": status, "reason": text, "updated_at": _now()}
            exists = sa.select(runs.c.id).where(runs.c.id == run_id)
            if run_id is not None and conn.execute(exists).first() is None:
                values["run_id"] = None  # the attempt ended before its run was created
            done = conn.execute(sa.update(matrix_cells).where(where).values(**values))
        return bool(done.rowcount)

    def _unused_run_id(self, conn: Connection) -> str:
        for _ in range(8):
            run_id = new_run_id()
            taken = conn.execute(sa.select(runs.c.id).where(runs.c.id == run_id)).first() or conn.execute(
                sa.select(matrix_cells.c.id).where(matrix_cells.c.run_id == run_id)).first()
            if taken is None:
                return run_id
        raise InvalidInputError(f"could not find an unused run id in {self.url}")

    @staticmethod
    def _delete_run_rows(conn: Connection, run_id: str) -> None:
        for table in (requests, telemetry, cost_evaluations):
            conn.execute(sa.delete(table).where(table.c.run_id == run_id))
        conn.execute(sa.delete(runs).where(runs.c.id == run_id))

