"""Runs remember the watch's process id, so a later watch can close runs whose watch died.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``runs.pid`` (nullable: older runs have none)."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    """Drop ``runs.pid``."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("pid")
