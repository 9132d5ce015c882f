"""Stops keep their history: one row per state a stop decision went through.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``stop_events``."""
    op.create_table(
        "stop_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=True),
        sa.Column("time", Time, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_stop_events_run_id_runs")),
        sa.ForeignKeyConstraint(["decision_id"], ["decisions.id"], name=op.f("fk_stop_events_decision_id_decisions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stop_events")),
    )
    op.create_index("ix_stop_events_run_id_time", "stop_events", ["run_id", "time"], unique=False)


def downgrade() -> None:
    """Drop ``stop_events``."""
    op.drop_index("ix_stop_events_run_id_time", table_name="stop_events")
    op.drop_table("stop_events")
