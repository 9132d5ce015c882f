"""Initial ledger: instances, runs, samples, progress, charges, decisions.

Revision ID: 0001
Revises:
Create Date: 2026-01-01 00:00:00+00:00

Money columns are exact decimal strings (String(64)), times are TIMESTAMP WITH TIME ZONE
(UTC wall time on SQLite), JSON is text: see costctl/ledger/types.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Money = sa.String(length=64)
Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create every ledger table."""
    op.create_table(
        "instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("provider_instance_id", sa.String(length=128), nullable=False),
        sa.Column("gpu", sa.String(length=64), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("billing", sa.String(length=16), nullable=False),
        sa.Column("price_per_hour", Money, nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
        sa.UniqueConstraint(
            "provider", "provider_instance_id", name=op.f("uq_instances_provider_provider_instance_id")
        ),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("started_at", Time, nullable=False),
        sa.Column("ended_at", Time, nullable=True),
        sa.Column("last_seen_at", Time, nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["instance_pk"], ["instances.id"], name=op.f("fk_runs_instance_pk_instances")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_instance_pk"), "runs", ["instance_pk"], unique=False)
    op.create_table(
        "charges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("start_at", Time, nullable=False),
        sa.Column("end_at", Time, nullable=False),
        sa.Column("rate_per_hour", Money, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.CheckConstraint("end_at > start_at", name=op.f("ck_charges_positive_interval")),
        sa.ForeignKeyConstraint(
            ["instance_pk"], ["instances.id"], name=op.f("fk_charges_instance_pk_instances")
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_charges_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_charges")),
    )
    op.create_index("ix_charges_instance_pk_end_at", "charges", ["instance_pk", "end_at"], unique=False)
    op.create_index("ix_charges_run_id_end_at", "charges", ["run_id", "end_at"], unique=False)
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("time", Time, nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_decisions_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index("ix_decisions_run_id_time", "decisions", ["run_id", "time"], unique=False)
    op.create_table(
        "progress",
        sa.Column("id", BigId, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("time", Time, nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("epoch", sa.Float(), nullable=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("value_special", sa.String(length=8), nullable=True),
        sa.CheckConstraint("(value IS NULL) <> (value_special IS NULL)", name=op.f("ck_progress_one_value")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_progress_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_progress")),
    )
    op.create_index("ix_progress_run_id_time", "progress", ["run_id", "time"], unique=False)
    op.create_table(
        "samples",
        sa.Column("id", BigId, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("time", Time, nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("utilization", sa.Float(), nullable=True),
        sa.Column("memory_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_samples_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_run_id_time", "samples", ["run_id", "time"], unique=False)


def downgrade() -> None:
    """Drop every ledger table (all recorded data is lost)."""
    op.drop_index("ix_samples_run_id_time", table_name="samples")
    op.drop_table("samples")
    op.drop_index("ix_progress_run_id_time", table_name="progress")
    op.drop_table("progress")
    op.drop_index("ix_decisions_run_id_time", table_name="decisions")
    op.drop_table("decisions")
    op.drop_index("ix_charges_run_id_end_at", table_name="charges")
    op.drop_index("ix_charges_instance_pk_end_at", table_name="charges")
    op.drop_table("charges")
    op.drop_index(op.f("ix_runs_instance_pk"), table_name="runs")
    op.drop_table("runs")
    op.drop_table("instances")
