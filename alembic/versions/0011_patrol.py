"""``costctl patrol``: decisions made from outside the instances, and the patrol's observations.

* ``decisions.instance_pk`` (a foreign key to ``instances``, indexed with ``time``): a decision
  of ``costctl patrol`` (a mark, a stop, a release, a warning, a snooze given for patrol)
  belongs to an instance, not to a run of a watch, so ``decisions.run_id`` may now be NULL; a
  check keeps at least one of the two set. ``stop_events.run_id`` may be NULL too (a patrol's
  stop: its decision names the instance).
* ``patrol_observations``: the patrol's own readings of each instance it lists (time, the
  provider's status, GPU and CPU utilization or NULL), read back by its idle and stopped-for
  filters. Created empty.

Every existing row keeps its ``run_id`` and gets ``instance_pk`` NULL: nothing is rewritten and
every total is unchanged. Downgrading deletes the patrol's decisions and stop events (they have
no run, which the older schema requires) and drops the observations.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Time = sa.DateTime(timezone=True)
#: Surrogate key of a high-volume table: BIGINT on PostgreSQL, INTEGER (rowid) on SQLite.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
#: The ledger's constraint names (costctl.ledger.tables.NAMING_CONVENTION), for the copies below.
NAMING = {"ix": "ix_%(column_0_label)s", "uq": "uq_%(table_name)s_%(column_0_N_name)s",
          "ck": "ck_%(table_name)s_%(constraint_name)s", "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
          "pk": "pk_%(table_name)s"}


def _decisions(*, patrol: bool) -> sa.Table:
    """``decisions`` as revision 0010 left it (``patrol`` False) or as this one makes it: the
    table SQLite's batch mode copies from (so ``--sql`` needs no live database to reflect)."""
    meta = sa.MetaData(naming_convention=NAMING)
    sa.Table("runs", meta, sa.Column("id", sa.String(length=32), primary_key=True))
    sa.Table("instances", meta, sa.Column("id", sa.Integer(), primary_key=True))
    columns: list[sa.SchemaItem] = [
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(length=32), sa.ForeignKey("runs.id"), nullable=patrol),
        sa.Column("time", Time, nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=True),
        sa.Column("origin_id", sa.BigInteger(), nullable=True),
        sa.Index("ix_decisions_run_id_time", "run_id", "time"),
        sa.Index("uq_decisions_run_id_origin_id", "run_id", "origin_id", unique=True),
    ]
    if patrol:
        columns += [sa.Column("instance_pk", sa.Integer(), sa.ForeignKey("instances.id"), nullable=True),
                    sa.Index("ix_decisions_instance_pk_time", "instance_pk", "time"),
                    sa.CheckConstraint("run_id IS NOT NULL OR instance_pk IS NOT NULL", name="run_or_instance")]
    return sa.Table("decisions", meta, *columns)


def _stop_events(*, patrol: bool) -> sa.Table:
    """``stop_events`` before (``patrol`` False) and after this revision (see :func:`_decisions`)."""
    meta = sa.MetaData(naming_convention=NAMING)
    sa.Table("runs", meta, sa.Column("id", sa.String(length=32), primary_key=True))
    sa.Table("decisions", meta, sa.Column("id", sa.Integer(), primary_key=True))
    return sa.Table(
        "stop_events", meta,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(length=32), sa.ForeignKey("runs.id"), nullable=patrol),
        sa.Column("decision_id", sa.Integer(), sa.ForeignKey("decisions.id"), nullable=True),
        sa.Column("time", Time, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("origin_id", sa.BigInteger(), nullable=True),
        sa.Index("ix_stop_events_run_id_time", "run_id", "time"),
        sa.Index("uq_stop_events_run_id_origin_id", "run_id", "origin_id", unique=True),
    )


def upgrade() -> None:
    """Add ``decisions.instance_pk``, let ``run_id`` be NULL where the instance is named, and
    create ``patrol_observations``."""
    with op.batch_alter_table("decisions", copy_from=_decisions(patrol=False)) as batch:
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=True)
        batch.add_column(sa.Column("instance_pk", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_decisions_instance_pk_instances"), "instances", ["instance_pk"], ["id"])
        batch.create_index("ix_decisions_instance_pk_time", ["instance_pk", "time"], unique=False)
        batch.create_check_constraint(op.f("ck_decisions_run_or_instance"),
                                      "run_id IS NOT NULL OR instance_pk IS NOT NULL")
    with op.batch_alter_table("stop_events", copy_from=_stop_events(patrol=False)) as batch:
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=True)
    op.create_table(
        "patrol_observations",
        sa.Column("id", BigId, nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=64), nullable=True),
        sa.Column("time", Time, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("gpu_utilization", sa.Float(), nullable=True),
        sa.Column("cpu_utilization", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_patrol_observations")),
    )
    op.create_index("ix_patrol_observations_provider_instance_id_time", "patrol_observations",
                    ["provider", "instance_id", "time"], unique=False)
    op.create_index("ix_patrol_observations_time", "patrol_observations", ["time"], unique=False)


def downgrade() -> None:
    """Drop the observations and the patrol's decisions (with their stop events), then the column."""
    op.drop_index("ix_patrol_observations_time", table_name="patrol_observations")
    op.drop_index("ix_patrol_observations_provider_instance_id_time", table_name="patrol_observations")
    op.drop_table("patrol_observations")
    op.execute("DELETE FROM stop_events WHERE run_id IS NULL OR decision_id IN "
               "(SELECT id FROM decisions WHERE run_id IS NULL)")
    op.execute("DELETE FROM decisions WHERE run_id IS NULL")
    with op.batch_alter_table("stop_events", copy_from=_stop_events(patrol=True)) as batch:
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=False)
    with op.batch_alter_table("decisions", copy_from=_decisions(patrol=True)) as batch:
        batch.drop_constraint(op.f("ck_decisions_run_or_instance"), type_="check")
        batch.drop_index("ix_decisions_instance_pk_time")
        batch.drop_constraint(op.f("fk_decisions_instance_pk_instances"), type_="foreignkey")
        batch.drop_column("instance_pk")
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=False)
