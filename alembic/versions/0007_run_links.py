"""Runs linked: a resumed run records the run it continues and the checkpoint it resumed from.

``runs.continues_run_id`` (indexed; NULL for a fresh start and for every run recorded before
this revision) and ``runs.resumed_from`` (the checkpoint path). Nothing is rewritten: existing
runs stay unlinked, so every total is unchanged.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``runs.continues_run_id`` (with its index) and ``runs.resumed_from``."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("continues_run_id", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("resumed_from", sa.Text(), nullable=True))
        batch.create_index("ix_runs_continues_run_id", ["continues_run_id"], unique=False)


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_continues_run_id")
        batch.drop_column("resumed_from")
        batch.drop_column("continues_run_id")
