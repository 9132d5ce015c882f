"""Checkpoint saves timed by the job: ``checkpoints.save_duration_s``.

The save's own duration in seconds (the acknowledgement record's ``save_started_at`` to
``save_ended_at``), NULL for a save without a record and for every row recorded before this
revision. A resumed run's Young/Daly interval starts from the saves its chain measured before
(``checkpoints.save_s`` is request to checkpoint: it includes the wait for the job's safe point).
Nothing is rewritten.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``checkpoints.save_duration_s``."""
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("save_duration_s", sa.Float(), nullable=True))


def downgrade() -> None:
    """Drop it."""
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("save_duration_s")
