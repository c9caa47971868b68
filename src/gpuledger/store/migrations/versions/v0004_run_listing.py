"""runs.kind, gpu, rate, rate_unit: what a list of runs filters and sorts by, as indexed columns (and indexes
on model and engine), filled for existing runs from their documents (``gpuledger.store.listing``).

A run whose documents cannot be read (a corrupt row) keeps them empty; it is listed, and reading it says why.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_BATCH = 500
_INDEXED = ("model", "engine", "kind", "gpu", "rate")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(32), nullable=True))
        batch.add_column(sa.Column("gpu", sa.String(128), nullable=True))
        batch.add_column(sa.Column("rate", sa.Double, nullable=True))
        batch.add_column(sa.Column("rate_unit", sa.String(64), nullable=True))
    for column in _INDEXED:
        op.create_index(f"ix_runs_{column}", "runs", [column])
    _fill(op.get_bind())


def _fill(conn: sa.Connection) -> None:
    from gpuledger.store.exchange import read_config, read_summary, read_telemetry
    from gpuledger.store.listing import run_gpu, run_kind, run_rate

    runs = sa.table(
        "runs",
        *(sa.column(name, sa.JSON) for name in ("summary", "config", "telemetry_summary", "environment",
                                                 "workload")),
        *(sa.column(name, sa.String) for name in ("id", "engine", "kind", "gpu", "rate_unit")),
        sa.column("rate", sa.Float),
    )
    stmt = sa.update(runs).where(runs.c.id == sa.bindparam("rid")).values(
        kind=sa.bindparam("k"), gpu=sa.bindparam("g"), rate=sa.bindparam("r"), rate_unit=sa.bindparam("u"))
    after = ""
    while True:
        rows = conn.execute(
            sa.select(runs.c.id, runs.c.engine, runs.c.summary, runs.c.config, runs.c.workload,
                      runs.c.telemetry_summary, runs.c.environment)
            .where(runs.c.id > after).order_by(runs.c.id).limit(_BATCH)
        ).all()
        if not rows:
            return
        updates: list[dict[str, Any]] = []
        for rid, engine, summary_doc, config_doc, workload, telemetry, environment in rows:
            try:
                summary = read_summary(summary_doc)
                spec = read_config(config_doc, engine, workload, summary)
                devices = read_telemetry(telemetry)
            except (ValueError, TypeError):
                continue  # a corrupt row: listed with empty columns, reading it says why
            gpus = environment.get("gpus") if isinstance(environment, dict) else None
            rate, unit = run_rate(summary)
            updates.append({
                "rid": rid, "k": run_kind(summary, spec.kind or None),
                "g": run_gpu(summary, devices, gpus if isinstance(gpus, list) else []),
                "r": rate, "u": unit,
            })
        if updates:
            conn.execute(stmt, updates)
        after = rows[-1][0]


def downgrade() -> None:
    for column in _INDEXED:
        op.drop_index(f"ix_runs_{column}", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        for column in ("rate_unit", "rate", "gpu", "kind"):
            batch.drop_column(column)
