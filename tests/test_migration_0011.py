"""Migration 0011 (patrol) on a populated ledger: every decision and stop event of a watch keeps
its run and gets no instance; a patrol decision (no run, an instance) and its stop events can be
stored after it, a decision with neither is refused; the observations table exists; a downgrade
drops the patrol's rows and the column and leaves the watch's rows as they were. SQLite file and
PostgreSQL."""

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


def _dump(engine: sa.Engine, sql: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql))]


def test_0011_keeps_the_watch_rows_and_stores_patrol_decisions(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0010")
        old = Ledger(engine)
        pk = old.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="on-demand", price_per_hour=RATE,
                                 currency="USD")
        run = old.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
        old.accrue(run, T0 + timedelta(minutes=30), RATE, "USD")
        with engine.begin() as conn:  # the 0010 schema's columns (today's ORM rows name instance_pk)
            conn.execute(sa.text("INSERT INTO decisions (run_id, time, policy, action, reason, evidence, outcome, "
                                 "dry_run) VALUES (:r, :t, 'idle', 'stop', 'idle', '{}', 'stop requested', false)"),
                         {"r": run, "t": T0})
            did = conn.execute(sa.text("SELECT id FROM decisions")).scalar()
            conn.execute(sa.text("INSERT INTO stop_events (run_id, decision_id, time, state, attempt, detail) "
                                 "VALUES (:r, :d, :t, 'confirmed', 1, 'ok')"), {"r": run, "d": did, "t": T0})
        before = {t: _dump(engine, f"SELECT * FROM {t} ORDER BY id") for t in ("decisions", "stop_events", "charges")}

        migrate.upgrade(engine, "head")
        assert _dump(engine, "SELECT id, run_id, instance_pk FROM decisions") == [(did, run, None)]
        assert _dump(engine, "SELECT COUNT(*) FROM patrol_observations") == [(0,)]
        new = Ledger(engine)
        mark = Decision(time=T0, policy="patrol:x", action=Action.MARK, reason="matched")
        pid = new.record_decision(None, mark, outcome="marked", instance_pk=pk)
        new.record_stop_event(None, decision_id=pid, time=T0, state="requested", attempt=0)
        assert _dump(engine, f"SELECT run_id, instance_pk, action FROM decisions WHERE id = {pid}") == [
            (None, pk, "mark")]
        with pytest.raises(ValueError, match="run_id or instance_pk"):
            new.record_decision(None, mark)
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # the check holds in the database too
            conn.execute(sa.text("INSERT INTO decisions (time, policy, action, reason, evidence, dry_run) "
                                 "VALUES (:t, 'x', 'mark', 'r', '{}', false)"), {"t": T0})

        migrate.downgrade(engine, "0010")
        after = {t: _dump(engine, f"SELECT * FROM {t} ORDER BY id") for t in ("decisions", "stop_events", "charges")}
        assert after == before
        assert "patrol_observations" not in sa.inspect(engine).get_table_names()
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
