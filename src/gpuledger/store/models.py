"""The store's tables (SQLAlchemy 2 Core), the same on SQLite and PostgreSQL.

The migrations under ``migrations/versions`` create exactly these tables; a test checks that the
schema reached by migrating to head matches this metadata. When you change a table here, add a
migration (never edit an applied one).

Layout decisions:

* ``requests.chunk_times`` is the float64 arrival time of every content chunk, packed little-endian
  into one binary value (8 bytes per chunk, exact round trip); ``chunk_tokens`` likewise as int32, or
  NULL when every chunk carries one token. A 100k-request run is read back in one query.
* ``runs.writer_*`` and ``runs.updated_at`` (the heartbeat) identify the process writing a
  ``running`` run, so a reader can tell a live run from one whose writer was killed.
* ``runs.num_requests`` is a counter the store increments in the same transaction as the rows.
* ``sa.Integer`` is 32-bit on PostgreSQL and 64-bit on SQLite: the store holds every count and index to
  0 … 2³¹−1 on both (``exchange.INT_MAX``, checked before each write), and the VARCHAR lengths too, so a
  run stored in one backend can be imported into the other. Widening a column changes ``INT_MAX``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# Auto-incrementing 64-bit keys (SQLite only auto-increments a column declared INTEGER).
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends.

    Bound values: aware datetimes are converted to UTC; naive ones are taken as local time (Python's
    own meaning of a naive datetime). SQLite keeps naive UTC text, PostgreSQL ``timestamptz``.
    Results are always aware, in UTC.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _json() -> sa.JSON:
    return sa.JSON(none_as_null=True)


runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("label", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("engine", sa.Text, nullable=False, server_default=""),
    sa.Column("model", sa.Text, nullable=False, server_default=""),
    sa.Column("base_url", sa.Text, nullable=True),
    sa.Column("unit", sa.String(32), nullable=False, server_default="token"),
    sa.Column("workload", _json(), nullable=False),
    sa.Column("config", _json(), nullable=False),
    sa.Column("environment", _json(), nullable=False),
    sa.Column("server", _json(), nullable=False),
    sa.Column("summary", _json(), nullable=False),
    sa.Column("telemetry_summary", _json(), nullable=False),
    sa.Column("client", _json(), nullable=False),
    sa.Column("duration_s", sa.Double, nullable=True),
    sa.Column("num_requests", sa.Integer, nullable=False, server_default="0"),
    sa.Column("writer_host", sa.Text, nullable=True),
    sa.Column("writer_pid", sa.Integer, nullable=True),
    sa.Column("writer_pidns", sa.String(64), nullable=True),
    sa.Column("writer_started", sa.Double, nullable=True),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # Revision 0002: the environment fingerprint's hash, to find runs made on the same stack.
    sa.Column("env_hash", sa.String(128), nullable=True),
    # Revision 0004: what a list of runs filters and sorts by, derived from the run's documents when it is
    # written (store/listing.py), so a page of 100,000 runs reads no summary.
    sa.Column("kind", sa.String(32), nullable=True),
    sa.Column("gpu", sa.String(128), nullable=True),
    sa.Column("rate", sa.Double, nullable=True),
    sa.Column("rate_unit", sa.String(64), nullable=True),
    sa.Index(None, "created_at"),
    sa.Index(None, "label"),
    sa.Index(None, "env_hash"),
    # Revision 0005: a page of the list is found in an index alone (Store.query_runs): the newest first, under
    # any one filter, or by rate; only the page's own rows are read from the table.
    sa.Index(None, "created_at", "id"),
    *(sa.Index(None, column, "created_at", "id") for column in ("label", "model", "engine", "kind", "gpu")),
    sa.Index(None, "rate", "id"),
)

requests = sa.Table(
    "requests",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("idx", sa.Integer, nullable=False),
    sa.Column("stage", sa.Text, nullable=False, server_default=""),
    sa.Column("t_send", sa.Double, nullable=False),
    sa.Column("t_first", sa.Double, nullable=True),
    sa.Column("t_end", sa.Double, nullable=True),
    sa.Column("chunk_times", sa.LargeBinary, nullable=False),
    sa.Column("chunk_tokens", sa.LargeBinary, nullable=True),
    sa.Column("input_tokens", sa.Integer, nullable=True),
    sa.Column("output_tokens", sa.Integer, nullable=True),
    sa.Column("requested_output_tokens", sa.Integer, nullable=True),
    sa.Column("token_source", sa.String(32), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("server_timings", _json(), nullable=True),
    sa.Column("output_chars", sa.Integer, nullable=False, server_default="0"),
    sa.Index(None, "run_id", "idx"),
)

telemetry = sa.Table(
    "telemetry",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("t", sa.Double, nullable=False),
    sa.Column("device", sa.String(128), nullable=False),
    sa.Column("metric", sa.String(128), nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("source", sa.String(128), nullable=False),
    sa.Index(None, "run_id", "t"),
)

doctor_runs = sa.Table(
    "doctor_runs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("machine", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("errors", sa.Integer, nullable=False),
    sa.Column("warnings", sa.Integer, nullable=False),
    sa.Column("findings", _json(), nullable=False),
    sa.Column("facts", _json(), nullable=False),
    sa.Index(None, "machine", "created_at"),
)

cost_evaluations = sa.Table(
    "cost_evaluations",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("profile_name", sa.Text, nullable=False),
    sa.Column("profile", _json(), nullable=False),
    sa.Column("result", _json(), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index(None, "run_id"),
)

# Revision 0003: benchmark matrices (``gpuledger matrix``, bench/matrix.py) and their cells. A cell's natural
# key (matrix, cell key, repeat) is unique, and so is the run it points at: a retried or resumed cell
# replaces its unfinished run, it never adds a second one (store/matrix.py).
matrices = sa.Table(
    "matrices",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("plan_digest", sa.String(128), nullable=False),
    sa.Column("plan", _json(), nullable=False),
)

matrix_cells = sa.Table(
    "matrix_cells",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("matrix_id", sa.String(64), sa.ForeignKey("matrices.id", ondelete="CASCADE"), nullable=False),
    sa.Column("cell_key", sa.String(200), nullable=False),
    sa.Column("repeat_index", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("params", _json(), nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("matrix_id", "cell_key", "repeat_index"),
    sa.UniqueConstraint("run_id"),
)

# Every RunInfo field the table stores as a JSON document, with its empty value.
RUN_JSON_FIELDS: dict[str, Any] = {
    "workload": dict,
    "config": dict,
    "environment": dict,
    "server": dict,
    "summary": dict,
    "telemetry_summary": list,
    "client": dict,
}
