"""Migration 0009 (``runs.mode``) on a populated ledger: runs whose decisions were recorded in a
dry run become ``dry-run``, those advised by an advise-only watch ``advise-only``, the others
stay NULL; charges are untouched; a downgrade drops only the column. SQLite file and PostgreSQL."""

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


def test_0009_backfills_the_mode_from_decisions_and_downgrades_cleanly(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0008")
        old = Ledger(engine)
        pk = old.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="on-demand", price_per_hour=RATE,
                                 currency="USD")
        runs = {}
        for k, name in enumerate(("dry", "advise", "real", "quiet")):
            runs[name] = old.start_run(pk, started_at=T0 + timedelta(hours=k), command=None, log_path=None, host="h")
            old.accrue(runs[name], T0 + timedelta(hours=k, minutes=30), RATE, "USD")
        stop = Decision(time=T0, policy="idle", action=Action.STOP, reason="idle", evidence={"idle_since": "x"})
        old.record_decision(runs["dry"], stop, outcome="dry-run: would stop", dry_run=True)
        advised = Decision(time=T0, policy="idle", action=Action.ADVISE, reason="idle",
                           evidence={"advise_only": True, "would": "stop"})
        old.record_decision(runs["advise"], advised, outcome="advise-only: nothing stopped")
        old.record_decision(runs["real"], stop, outcome="stop requested")
        charges = _dump(engine, "SELECT * FROM charges ORDER BY id")

        migrate.upgrade(engine, "head")
        modes = dict(_dump(engine, "SELECT id, mode FROM runs"))
        assert modes == {runs["dry"]: "dry-run", runs["advise"]: "advise-only", runs["real"]: None,
                         runs["quiet"]: None}
        assert _dump(engine, "SELECT * FROM charges ORDER BY id") == charges
        new = Ledger(engine)  # the new column is written by start_run and by an --attach
        fresh = new.start_run(pk, started_at=T0 + timedelta(hours=9), command=None, log_path=None, host="h",
                              mode="dry-run")
        new.resume_run(runs["quiet"], pid=1, mode="advise-only")
        modes = dict(_dump(engine, "SELECT id, mode FROM runs"))
        assert modes[fresh] == "dry-run" and modes[runs["quiet"]] == "advise-only"
        with pytest.raises(ValueError, match="run mode 'pretend'"):
            new.start_run(pk, started_at=T0, command=None, log_path=None, host="h", mode="pretend")

        migrate.downgrade(engine, "0008")
        assert "mode" not in {c["name"] for c in sa.inspect(engine).get_columns("runs")}
        assert _dump(engine, "SELECT * FROM charges ORDER BY id") == charges
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
