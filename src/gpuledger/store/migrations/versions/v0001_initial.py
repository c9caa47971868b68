"""Initial schema: runs, requests, telemetry, doctor runs, cost evaluations.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _json(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.JSON(none_as_null=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        _ts("created_at", False),
        _ts("started_at", True),
        _ts("finished_at", True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("engine", sa.Text, nullable=False, server_default=""),
        sa.Column("model", sa.Text, nullable=False, server_default=""),
        sa.Column("base_url", sa.Text, nullable=True),
        sa.Column("unit", sa.String(32), nullable=False, server_default="token"),
        _json("workload"),
        _json("config"),
        _json("environment"),
        _json("server"),
        _json("summary"),
        _json("telemetry_summary"),
        _json("client"),
        sa.Column("duration_s", sa.Double, nullable=True),
        sa.Column("num_requests", sa.Integer, nullable=False, server_default="0"),
        sa.Column("writer_host", sa.Text, nullable=True),
        sa.Column("writer_pid", sa.Integer, nullable=True),
        sa.Column("writer_pidns", sa.String(64), nullable=True),
        sa.Column("writer_started", sa.Double, nullable=True),
        _ts("updated_at", False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"])
    op.create_index("ix_runs_label", "runs", ["label"])

    op.create_table(
        "requests",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
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
        _json("server_timings", nullable=True),
        sa.Column("output_chars", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_requests"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_requests_run_id_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_requests_run_id_idx", "requests", ["run_id", "idx"])

    op.create_table(
        "telemetry",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("t", sa.Double, nullable=False),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("metric", sa.String(128), nullable=False),
        sa.Column("value", sa.Double, nullable=False),
        sa.Column("source", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_telemetry"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_telemetry_run_id_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_telemetry_run_id_t", "telemetry", ["run_id", "t"])

    op.create_table(
        "doctor_runs",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("machine", sa.Text, nullable=False),
        _ts("created_at", False),
        sa.Column("errors", sa.Integer, nullable=False),
        sa.Column("warnings", sa.Integer, nullable=False),
        _json("findings"),
        _json("facts"),
        sa.PrimaryKeyConstraint("id", name="pk_doctor_runs"),
    )
    op.create_index("ix_doctor_runs_machine_created_at", "doctor_runs", ["machine", "created_at"])

    op.create_table(
        "cost_evaluations",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("profile_name", sa.Text, nullable=False),
        _json("profile"),
        _json("result"),
        _ts("created_at", False),
        sa.PrimaryKeyConstraint("id", name="pk_cost_evaluations"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_cost_evaluations_run_id_runs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_cost_evaluations_run_id", "cost_evaluations", ["run_id"])


def downgrade() -> None:
    for table in ("cost_evaluations", "doctor_runs", "telemetry", "requests", "runs"):
        op.drop_table(table)
