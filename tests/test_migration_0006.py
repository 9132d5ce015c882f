"""Migration 0006 (progress buckets, sample rollups, samples.time index) on a populated ledger:
nothing is moved, existing progress and samples read the same after the upgrade, and a
downgrade drops only what 0006 added. SQLite file and PostgreSQL."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from costctl.ledger import Ledger, migrate
from costctl.ledger.engine import make_engine
from costctl.ledger.lifecycle import gpu_use_by_run
from costctl.ledger.progress_store import series_summaries
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NEW_TABLES = {"progress_buckets", "sample_minutes"}


def _dump(engine: sa.Engine, table: str) -> list[tuple]:
    """Every row of ``table`` but the columns later migrations add (0012's ``origin_id``)."""
    with engine.connect() as conn:
        result = conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY id"))
        keep = [i for i, name in enumerate(result.keys()) if name != "origin_id"]
        return [tuple(r[i] for i in keep) for r in result]


def test_0006_keeps_a_populated_ledger_and_downgrades_cleanly(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0005")
        assert not NEW_TABLES & set(sa.inspect(engine).get_table_names())
        old = Ledger(engine)  # the 0005 schema: progress and samples as before
        pk = old.ensure_instance("sim", "i-1", gpu="A100", gpu_count=1, billing="on-demand", price_per_hour=None,
                                 currency="USD")
        run = old.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
        values = [3.0, 2.0, math.nan, math.inf, 1.5, -math.inf, 1.0]
        old.record_progress(run, [ProgressPoint(time=T0 + timedelta(seconds=i), value=v, step=i)
                                  for i, v in enumerate(values)])
        old.record_samples(run, [TelemetrySample(time=T0 + timedelta(seconds=5 * i),
                                                 gpus=(GpuReading(0, utilization=10.0 * i, memory_used_bytes=i,
                                                                  memory_total_bytes=9),),
                                                 gpu_status=SignalStatus.OK, cpu_percent=1.0,
                                                 cpu_status=SignalStatus.OK) for i in range(4)])
        progress, samples = _dump(engine, "progress"), _dump(engine, "samples")
        migrate.upgrade(engine, "head")
        assert NEW_TABLES <= set(sa.inspect(engine).get_table_names())
        assert "ix_samples_time" in {ix["name"] for ix in sa.inspect(engine).get_indexes("samples")}
        assert _dump(engine, "progress") == progress and _dump(engine, "samples") == samples
        ledger = Ledger(engine)
        with ledger.session() as s:
            summary = series_summaries(s, run)[("train", "loss")]
            gpu = gpu_use_by_run(s)[run]
        assert (summary.count, summary.nan, summary.posinf, summary.neginf) == (7, 1, 1, 1)
        assert (summary.min, summary.max, summary.first.value, summary.last.value) == (1.0, 3.0, 3.0, 1.0)
        assert (gpu.samples, gpu.mean_utilization, gpu.peak_memory_bytes) == (4, 15.0, 3)
        ledger.compact(T0 + timedelta(days=30), timedelta(days=7))
        assert _dump(engine, "samples") == []
        migrate.downgrade(engine, "0005")
        assert not NEW_TABLES & set(sa.inspect(engine).get_table_names())
        assert "ix_samples_time" not in {ix["name"] for ix in sa.inspect(engine).get_indexes("samples")}
        assert _dump(engine, "progress") == progress
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
