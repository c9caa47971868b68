"""Benchmark matrices and their cells: one row per (matrix, cell key, repeat), unique, linked to its run.

The natural key of a matrix cell is unique in the store, so a cell that is retried (its worker died) or
resumed (``gpuledger matrix PLAN --resume ID``) updates its row and replaces its unfinished run instead of
adding another; ``run_id`` is unique too (a run belongs to at most one cell).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "matrices",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("plan_digest", sa.String(128), nullable=False),
        sa.Column("plan", sa.JSON(none_as_null=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_matrices"),
    )
    op.create_table(
        "matrix_cells",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("matrix_id", sa.String(64), nullable=False),
        sa.Column("cell_key", sa.String(200), nullable=False),
        sa.Column("repeat_index", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("params", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_matrix_cells"),
        sa.ForeignKeyConstraint(["matrix_id"], ["matrices.id"], name="fk_matrix_cells_matrix_id_matrices",
                                ondelete="CASCADE"),
        sa.UniqueConstraint("matrix_id", "cell_key", "repeat_index",
                            name="uq_matrix_cells_matrix_id_cell_key_repeat_index"),
        sa.UniqueConstraint("run_id", name="uq_matrix_cells_run_id"),
    )


def downgrade() -> None:
    op.drop_table("matrix_cells")
    op.drop_table("matrices")
