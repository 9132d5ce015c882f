"""Lifecycle: checkpoint requests and their outcomes; waste (paid time whose work was lost).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Money = sa.String(length=64)
Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``checkpoints`` and ``waste``."""
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("requested_at", Time, nullable=False),
        sa.Column("deadline", Time, nullable=False),
        sa.Column("signal", sa.String(length=16), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("completed_at", Time, nullable=True),
        sa.Column("saved_at", Time, nullable=True),
        sa.Column("save_s", sa.Float(), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_checkpoints_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
    )
    op.create_index("ix_checkpoints_run_id_requested_at", "checkpoints", ["run_id", "requested_at"], unique=False)
    op.create_table(
        "waste",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("start_at", Time, nullable=False),
        sa.Column("end_at", Time, nullable=False),
        sa.Column("rate_per_hour", Money, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.CheckConstraint("end_at >= start_at", name=op.f("ck_waste_ordered_interval")),
        sa.ForeignKeyConstraint(["instance_pk"], ["instances.id"], name=op.f("fk_waste_instance_pk_instances")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_waste_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_waste")),
    )
    op.create_index("ix_waste_run_id", "waste", ["run_id"], unique=False)


def downgrade() -> None:
    """Drop ``waste`` and ``checkpoints`` (their rows are lost)."""
    op.drop_index("ix_waste_run_id", table_name="waste")
    op.drop_table("waste")
    op.drop_index("ix_checkpoints_run_id_requested_at", table_name="checkpoints")
    op.drop_table("checkpoints")
