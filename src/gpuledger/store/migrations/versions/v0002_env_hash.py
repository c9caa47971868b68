"""runs.env_hash: the environment fingerprint's hash as an indexed column, filled for existing runs.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_BATCH = 500


def upgrade() -> None:
    op.add_column("runs", sa.Column("env_hash", sa.String(128), nullable=True))
    op.create_index("ix_runs_env_hash", "runs", ["env_hash"])

    # Fill it from each run's stored environment document (same rule as the store: a string "hash").
    runs = sa.table(
        "runs",
        sa.column("id", sa.String),
        sa.column("environment", sa.JSON),
        sa.column("env_hash", sa.String),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(runs.c.id, runs.c.environment)).all()
    updates = [
        {"rid": rid, "h": env["hash"][:128]}
        for rid, env in rows
        if isinstance(env, dict) and isinstance(env.get("hash"), str)
    ]
    stmt = sa.update(runs).where(runs.c.id == sa.bindparam("rid")).values(env_hash=sa.bindparam("h"))
    for start in range(0, len(updates), _BATCH):
        conn.execute(stmt, updates[start : start + _BATCH])


def downgrade() -> None:
    op.drop_index("ix_runs_env_hash", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("env_hash")
