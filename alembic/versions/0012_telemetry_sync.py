"""Fleet mode's telemetry: a cursor per telemetry table, and ids that name a reading across machines.

* ``sync_cursors`` (``table_name``, ``last_id``): per append-only telemetry table
  (``samples``, ``progress``, ``progress_buckets``), the highest local id the central ledger
  has (:mod:`costctl.ledger.telemetry_sync`). Created empty.
* ``origin_id`` on ``samples``, ``progress`` and ``progress_buckets``, with a **partial**
  unique index on ``(run_id, origin_id) WHERE origin_id IS NOT NULL``: in a central ledger,
  the row's id in the ledger of the watch that wrote it, so a batch sent twice inserts nothing
  the second time. NULL for every existing row and every row a watch writes itself, which the
  partial index leaves out: a watch's own sample inserts pay nothing for it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The telemetry tables that get an ``origin_id``.
TELEMETRY_TABLES = ("samples", "progress", "progress_buckets")

_WHERE = sa.text("origin_id IS NOT NULL")


def upgrade() -> None:
    """Create ``sync_cursors``; add ``origin_id`` and its partial unique index."""
    op.create_table(
        "sync_cursors",
        sa.Column("table_name", sa.String(length=32), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("table_name", name=op.f("pk_sync_cursors")),
    )
    for table in TELEMETRY_TABLES:
        op.add_column(table, sa.Column("origin_id", sa.BigInteger(), nullable=True))
        op.create_index(f"uq_{table}_run_id_origin_id", table, ["run_id", "origin_id"], unique=True,
                        sqlite_where=_WHERE, postgresql_where=_WHERE)


def downgrade() -> None:
    """Drop them."""
    for table in reversed(TELEMETRY_TABLES):
        op.drop_index(f"uq_{table}_run_id_origin_id", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("origin_id")
    op.drop_table("sync_cursors")
