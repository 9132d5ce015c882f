"""Migration 0010 (fleet mode: ``outbox``, ``origin_id``) on a populated ledger, SQLite file and
PostgreSQL: the upgrade adds an empty outbox and NULL origin ids (every total unchanged), the
unique ``(run_id, origin_id)`` index holds, and a downgrade drops only what it added."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from costctl.ledger import Ledger, migrate
from costctl.ledger.engine import make_engine
from costctl.records import Action, Decision

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
RATE = Decimal("1.5")
ORIGIN_TABLES = ("decisions", "checkpoints", "waste", "stop_events")


def _dump(engine: sa.Engine, sql: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql))]


def test_0010_adds_the_outbox_and_origin_ids_and_downgrades_cleanly(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0009")
        old = Ledger(engine)
        pk = old.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="on-demand", price_per_hour=RATE,
                                 currency="USD")
        run = old.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
        old.accrue(run, T0 + timedelta(minutes=30), RATE, "USD")
        decision = old.record_decision(run, Decision(time=T0, policy="idle", action=Action.STOP, reason="idle",
                                                     evidence={}), outcome="stopped")
        old.record_stop_event(run, decision_id=decision, time=T0, state="confirmed", attempt=1)
        ck = old.record_checkpoint_request(run, reason="periodic", requested_at=T0, deadline=T0 + timedelta(minutes=1))
        old.complete_checkpoint(ck, outcome="saved", completed_at=T0)
        old.record_waste(run, start_at=T0, end_at=T0 + timedelta(minutes=5), rate_per_hour=RATE, currency="USD",
                         reason="preemption")
        before = {t: _dump(engine, f"SELECT * FROM {t} ORDER BY id") for t in (*ORIGIN_TABLES, "charges")}

        migrate.upgrade(engine, "0010")  # this revision's own change (later ones add their own columns)
        inspector = sa.inspect(engine)
        assert "outbox" in inspector.get_table_names()
        assert _dump(engine, "SELECT * FROM outbox") == []
        for table in ORIGIN_TABLES:
            assert _dump(engine, f"SELECT origin_id FROM {table}") == [(None,)]
            # the old columns are untouched: the rows less their new (last) column
            assert [r[:-1] for r in _dump(engine, f"SELECT * FROM {table} ORDER BY id")] == before[table]
            unique = {i["name"]: i for i in inspector.get_indexes(table)}[f"uq_{table}_run_id_origin_id"]
            assert unique["unique"] and unique["column_names"] == ["run_id", "origin_id"]
        assert _dump(engine, "SELECT * FROM charges ORDER BY id") == before["charges"]
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # (run, origin) names one row
            conn.execute(sa.text("UPDATE decisions SET origin_id = 7"))
            conn.execute(sa.text("INSERT INTO decisions (run_id, time, policy, action, reason, evidence, dry_run, "
                                 "origin_id) SELECT run_id, time, policy, action, reason, evidence, dry_run, 7 "
                                 "FROM decisions"))

        migrate.downgrade(engine, "0009")
        inspector = sa.inspect(engine)
        assert "outbox" not in inspector.get_table_names()
        for table in ORIGIN_TABLES:
            assert "origin_id" not in {c["name"] for c in inspector.get_columns(table)}
            assert _dump(engine, f"SELECT * FROM {table} ORDER BY id") == before[table]
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
