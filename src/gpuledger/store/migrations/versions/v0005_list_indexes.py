"""Indexes that hold a page of the list of runs: (created_at, id), each filter's column before them, and
(rate, id), in place of 0004's one-column indexes on model, engine, kind, gpu and rate. ``Store.query_runs``
finds the page's ids in one of these alone and then reads those rows only (a run's row is long — its
documents — and its listing columns come last in it).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_FILTERS = ("label", "model", "engine", "kind", "gpu")
_SINGLE = ("model", "engine", "kind", "gpu", "rate")


def upgrade() -> None:
    for column in _SINGLE:
        op.drop_index(f"ix_runs_{column}", table_name="runs")
    op.create_index("ix_runs_created_at_id", "runs", ["created_at", "id"])
    for column in _FILTERS:
        op.create_index(f"ix_runs_{column}_created_at_id", "runs", [column, "created_at", "id"])
    op.create_index("ix_runs_rate_id", "runs", ["rate", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_rate_id", table_name="runs")
    for column in _FILTERS:
        op.drop_index(f"ix_runs_{column}_created_at_id", table_name="runs")
    op.drop_index("ix_runs_created_at_id", table_name="runs")
    for column in _SINGLE:
        op.create_index(f"ix_runs_{column}", "runs", [column])
