"""Bounded progress and telemetry retention: ``progress_buckets``, ``sample_minutes``, and an
index on ``samples.time`` (compaction finds old samples by time).

Nothing is moved or rewritten: existing ``progress`` rows stay as they are (a run with no
bucket rows has every point as a row) and existing samples stay raw until ``costctl db
compact`` or a watch rolls up those older than ``[ledger] sample_retention``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``progress_buckets`` and ``sample_minutes``; index ``samples.time``."""
    op.create_table(
        "progress_buckets",
        sa.Column("id", BigId, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("start_at", Time, nullable=False),
        sa.Column("end_at", Time, nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("kept", sa.Integer(), nullable=False),
        sa.Column("nan_count", sa.BigInteger(), nullable=False),
        sa.Column("posinf_count", sa.BigInteger(), nullable=False),
        sa.Column("neginf_count", sa.BigInteger(), nullable=False),
        sa.Column("min", sa.Float(), nullable=True),
        sa.Column("max", sa.Float(), nullable=True),
        sa.Column("first_value", sa.Float(), nullable=True),
        sa.Column("first_special", sa.String(length=8), nullable=True),
        sa.Column("first_step", sa.BigInteger(), nullable=True),
        sa.Column("first_time", Time, nullable=True),
        sa.Column("last_value", sa.Float(), nullable=True),
        sa.Column("last_special", sa.String(length=8), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("last_time", Time, nullable=True),
        sa.Column("last_epoch", sa.Float(), nullable=True),
        sa.Column("last_total", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("(first_value IS NULL) <> (first_special IS NULL)",
                           name=op.f("ck_progress_buckets_one_first")),
        sa.CheckConstraint("(last_value IS NULL) <> (last_special IS NULL)",
                           name=op.f("ck_progress_buckets_one_last")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_progress_buckets_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_progress_buckets")),
    )
    op.create_index("ix_progress_buckets_run_id_start_at", "progress_buckets", ["run_id", "start_at"],
                    unique=False)
    op.create_table(
        "sample_minutes",
        sa.Column("id", BigId, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("minute", Time, nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("ok_samples", sa.Integer(), nullable=False),
        sa.Column("utilization_sum", sa.Float(), nullable=True),
        sa.Column("utilization_count", sa.Integer(), nullable=False),
        sa.Column("utilization_max", sa.Float(), nullable=True),
        sa.Column("memory_used_max", sa.BigInteger(), nullable=True),
        sa.Column("memory_total_max", sa.BigInteger(), nullable=True),
        sa.Column("power_sum", sa.Float(), nullable=True),
        sa.Column("power_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_sample_minutes_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sample_minutes")),
    )
    op.create_index("ix_sample_minutes_run_id_minute", "sample_minutes", ["run_id", "minute"], unique=False)
    op.create_index("ix_samples_time", "samples", ["time"], unique=False)


def downgrade() -> None:
    """Drop them again. Samples already rolled up are gone from ``samples`` (their per-minute
    figures go with ``sample_minutes``); bucketed progress keeps only its stored rows."""
    op.drop_index("ix_samples_time", table_name="samples")
    op.drop_index("ix_sample_minutes_run_id_minute", table_name="sample_minutes")
    op.drop_table("sample_minutes")
    op.drop_index("ix_progress_buckets_run_id_start_at", table_name="progress_buckets")
    op.drop_table("progress_buckets")
