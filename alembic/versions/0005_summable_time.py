"""Summable time: charges.duration_us, the 15-minute charge rollups, run summaries.

Existing ledgers are carried forward exactly: every charge's length is computed in Python from
its stored timestamps (``end_at - start_at`` in integer microseconds; never ``julianday``),
split at UTC 15-minute boundaries into ``charge_rollups``, each run's ``charged_until`` set to
its newest charge end, and every closed run summarized (the card and billing of its instance
as recorded now, the rate of its newest charge, its GPU use from its samples, its progress
points). In offline mode (``--sql``) only the schema is emitted.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 04:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Time = sa.DateTime(timezone=True)
BUCKET_S = 900
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
BATCH = 5000

RUN_COLUMNS = [
    ("charged_until", Time),
    ("gpu", sa.String(length=64)),
    ("gpu_count", sa.Integer()),
    ("billing", sa.String(length=16)),
    ("price_per_hour", sa.String(length=64)),
    ("price_currency", sa.String(length=3)),
    ("peak_memory_bytes", sa.BigInteger()),
    ("memory_total_bytes", sa.BigInteger()),
    ("mean_utilization", sa.Float()),
    ("gpu_samples", sa.Integer()),
    ("points", sa.BigInteger()),
]


def _us(value: datetime) -> int:
    """POSIX microseconds of a stored time (SQLite hands back naive UTC wall time)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - EPOCH) // timedelta(microseconds=1)


def upgrade() -> None:
    """Add the columns and the rollup table, then backfill them from the stored rows."""
    # A plain ADD COLUMN (NOT NULL with a default) on both backends: no table copy.
    op.add_column("charges", sa.Column("duration_us", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.create_index("ix_charges_end_at", "charges", ["end_at"], unique=False)
    with op.batch_alter_table("runs") as batch:
        for name, type_ in RUN_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.create_table(
        "charge_rollups",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("bucket_s", sa.BigInteger(), nullable=False),
        sa.Column("rate_per_hour", sa.String(length=64), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("duration_us", sa.BigInteger(), nullable=False),
        sa.Column("first_us", sa.BigInteger(), nullable=False),
        sa.Column("last_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["instance_pk"], ["instances.id"], name=op.f("fk_charge_rollups_instance_pk_instances")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_charge_rollups_run_id_runs")),
        sa.PrimaryKeyConstraint("run_id", "bucket_s", "rate_per_hour", "currency", name=op.f("pk_charge_rollups")),
    )
    op.create_index("ix_charge_rollups_bucket_s", "charge_rollups", ["bucket_s"], unique=False)
    op.create_index("ix_charge_rollups_instance_pk_bucket_s", "charge_rollups", ["instance_pk", "bucket_s"],
                    unique=False)
    if not context.is_offline_mode():
        _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    charges = sa.table("charges", sa.column("id"), sa.column("run_id"), sa.column("instance_pk"),
                       sa.column("start_at", Time), sa.column("end_at", Time), sa.column("rate_per_hour"),
                       sa.column("currency"), sa.column("duration_us"))
    rollups = sa.table("charge_rollups", *(sa.column(c) for c in (
        "run_id", "bucket_s", "rate_per_hour", "currency", "instance_pk", "duration_us", "first_us", "last_us")))
    runs = sa.table("runs", sa.column("id"), sa.column("instance_pk"), sa.column("ended_at", Time),
                    *(sa.column(name, type_) for name, type_ in RUN_COLUMNS))
    instances = sa.table("instances", sa.column("id"), sa.column("gpu"), sa.column("gpu_count"),
                         sa.column("billing"), sa.column("price_per_hour"), sa.column("currency"))

    buckets: dict[tuple[str, int, str, str], list[Any]] = {}
    newest: dict[str, tuple[int, str, str]] = {}  # run -> (end µs, rate, currency) of its newest charge
    pending: list[dict[str, Any]] = []
    upd = sa.update(charges).where(charges.c.id == sa.bindparam("cid")).values(duration_us=sa.bindparam("us"))
    # Read everything first (a cursor cannot stay open under updates on every driver), in id pages.
    last_id = None
    while True:
        stmt = sa.select(charges.c.id, charges.c.run_id, charges.c.instance_pk, charges.c.start_at,
                         charges.c.end_at, charges.c.rate_per_hour, charges.c.currency).order_by(charges.c.id).limit(BATCH)
        if last_id is not None:
            stmt = stmt.where(charges.c.id > last_id)
        page = conn.execute(stmt).fetchall()
        if not page:
            break
        for cid, run_id, pk, start_at, end_at, rate, currency in page:
            lo, hi = _us(start_at), _us(end_at)
            pending.append({"cid": cid, "us": hi - lo})
            if run_id not in newest or hi > newest[run_id][0]:
                newest[run_id] = (hi, rate, currency)
            cursor = lo
            while cursor < hi:
                bucket = cursor // (BUCKET_S * 1_000_000) * BUCKET_S
                stop = min(hi, (bucket + BUCKET_S) * 1_000_000)
                key = (run_id, bucket, rate, currency)
                cell = buckets.get(key)
                if cell is None:
                    buckets[key] = [pk, stop - cursor, cursor, stop]
                else:
                    cell[1] += stop - cursor
                    cell[2] = min(cell[2], cursor)
                    cell[3] = max(cell[3], stop)
                cursor = stop
        last_id = page[-1][0]
        conn.execute(upd, pending)
        pending = []
    rows = [{"run_id": k[0], "bucket_s": k[1], "rate_per_hour": k[2], "currency": k[3], "instance_pk": v[0],
             "duration_us": v[1], "first_us": v[2], "last_us": v[3]} for k, v in buckets.items()]
    for i in range(0, len(rows), BATCH):
        conn.execute(sa.insert(rollups), rows[i:i + BATCH])

    # Run summaries: one aggregate per source table, then one update per run.
    samples = sa.table("samples", sa.column("run_id"), sa.column("gpu_index"), sa.column("status"),
                       sa.column("memory_used_bytes"), sa.column("memory_total_bytes"), sa.column("utilization"))
    use = {r[0]: r[1:] for r in conn.execute(
        sa.select(samples.c.run_id, sa.func.max(samples.c.memory_used_bytes), sa.func.max(samples.c.memory_total_bytes),
                  sa.func.avg(samples.c.utilization), sa.func.count())
        .where(samples.c.gpu_index.is_not(None), samples.c.status == "ok").group_by(samples.c.run_id))}
    progress = sa.table("progress", sa.column("run_id"))
    points = dict(conn.execute(sa.select(progress.c.run_id, sa.func.count()).group_by(progress.c.run_id)).fetchall())
    inst = {r.id: r for r in conn.execute(sa.select(instances))}
    updates = []
    for run_id, pk, ended_at in conn.execute(sa.select(runs.c.id, runs.c.instance_pk, runs.c.ended_at)).fetchall():
        values: dict[str, Any] = {"rid": run_id}
        top = newest.get(run_id)
        values["charged_until"] = (EPOCH + timedelta(microseconds=top[0])) if top else None
        closed = ended_at is not None
        i = inst[pk]
        peak, total, mean, count = use.get(run_id, (None, None, None, None))
        values.update(
            gpu=i.gpu if closed else None, gpu_count=i.gpu_count if closed else None,
            billing=i.billing if closed else None,
            price_per_hour=(top[1] if top else i.price_per_hour) if closed else None,
            price_currency=(top[2] if top else i.currency) if closed else None,
            peak_memory_bytes=int(peak) if closed and peak is not None else None,
            memory_total_bytes=int(total) if closed and total is not None else None,
            mean_utilization=float(mean) if closed and mean is not None else None,
            gpu_samples=int(count) if closed and count is not None else None,
            points=int(points.get(run_id, 0)) if closed else None,
        )
        updates.append(values)
    if updates:
        conn.execute(sa.update(runs).where(runs.c.id == sa.bindparam("rid")).values(
            **{name: sa.bindparam("b_" + name) for name, _ in RUN_COLUMNS}),
            [{("b_" + k if k != "rid" else k): v for k, v in u.items()} for u in updates])


def downgrade() -> None:
    """Drop the rollups, the run summaries and ``charges.duration_us``."""
    op.drop_index("ix_charge_rollups_instance_pk_bucket_s", table_name="charge_rollups")
    op.drop_index("ix_charge_rollups_bucket_s", table_name="charge_rollups")
    op.drop_table("charge_rollups")
    with op.batch_alter_table("runs") as batch:
        for name, _ in reversed(RUN_COLUMNS):
            batch.drop_column(name)
    op.drop_index("ix_charges_end_at", table_name="charges")
    with op.batch_alter_table("charges") as batch:
        batch.drop_column("duration_us")
