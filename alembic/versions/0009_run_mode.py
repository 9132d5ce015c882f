"""Runs remember how they were watched: ``runs.mode``.

``dry-run`` (``costctl watch --dry-run``: stops were recorded, nothing was stopped),
``advise-only`` (a watch that stops nothing: every stop recorded as advice), or NULL for a
watch that guards (stops the instance when a policy says so). ``costctl bill`` marks the first
two, so a dry run no longer looks like a real one, and counts no money saved for them.

Existing runs are backfilled from their decisions: a run with a decision recorded in a dry run
is ``dry-run``, one with advice recorded by an advise-only watch (evidence ``"advise_only":
true``) is ``advise-only``; every other run stays NULL. Charges are not touched, so every
total is unchanged.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``runs.mode`` and fill it for runs whose decisions show a dry run or an advise-only watch."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("mode", sa.String(length=16), nullable=True))
    op.execute("UPDATE runs SET mode = 'advise-only' WHERE id IN "
               "(SELECT run_id FROM decisions WHERE evidence LIKE '%\"advise_only\": true%')")
    op.execute("UPDATE runs SET mode = 'dry-run' WHERE id IN (SELECT run_id FROM decisions WHERE dry_run)")


def downgrade() -> None:
    """Drop ``runs.mode``."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("mode")
