"""Fleet mode: the local outbox, and ids that name a row across machines.

* ``outbox`` (``table_name``, ``row_key``, ``version``): the rows a watch with ``[ledger]
  central_url`` changed since they were last sent to the central ledger
  (:mod:`costctl.ledger.outbox`). Created empty.
* ``origin_id`` on ``decisions``, ``checkpoints``, ``waste`` and ``stop_events``, with a
  unique index on ``(run_id, origin_id)``: in a central ledger, the row's id in the ledger of
  the watch that wrote it (run ids are uuids, so the pair is unique across machines and the
  central upserts are idempotent). NULL for every existing row and every row written
  directly, and NULLs never conflict, so nothing is rewritten and every total is unchanged.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The tables whose rows get an ``origin_id``.
ORIGIN_TABLES = ("decisions", "checkpoints", "waste", "stop_events")


def upgrade() -> None:
    """Create ``outbox``; add ``origin_id`` and its unique ``(run_id, origin_id)`` index."""
    op.create_table(
        "outbox",
        sa.Column("table_name", sa.String(length=32), nullable=False),
        sa.Column("row_key", sa.String(length=64), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.PrimaryKeyConstraint("table_name", "row_key", name=op.f("pk_outbox")),
    )
    for table in ORIGIN_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("origin_id", sa.BigInteger(), nullable=True))
            batch.create_index(f"uq_{table}_run_id_origin_id", ["run_id", "origin_id"], unique=True)


def downgrade() -> None:
    """Drop them."""
    for table in reversed(ORIGIN_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"uq_{table}_run_id_origin_id")
            batch.drop_column("origin_id")
    op.drop_table("outbox")
