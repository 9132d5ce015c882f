"""Migration 0005 carries a populated 0004 ledger forward: charges get their exact microseconds,
the rollups and run summaries are backfilled, and every bill total equals the brute-force sum
taken before the upgrade, to the micro-unit (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import sqlalchemy as sa

import bill_oracle as oracle
from costctl.ledger import Ledger, migrate, queries
from costctl.ledger.engine import make_engine
from costctl.ledger.types import DecimalText, UTCDateTime
from costctl.money import cost_of

UTC = timezone.utc
T0 = datetime(2026, 10, 31, 22, 0, 7, 123456, tzinfo=UTC)  # New York falls back on 2026-11-01
NY = ZoneInfo("America/New_York")


def _table(name: str, **cols) -> sa.TableClause:
    return sa.table(name, *(sa.column(k, v) for k, v in cols.items()))


INST = _table("instances", id=sa.Integer(), provider=sa.String(), provider_instance_id=sa.String(), gpu=sa.String(),
              gpu_count=sa.Integer(), billing=sa.String(), price_per_hour=DecimalText(), currency=sa.String(),
              created_at=UTCDateTime())
RUNS = _table("runs", id=sa.String(), instance_pk=sa.Integer(), started_at=UTCDateTime(), ended_at=UTCDateTime(),
              last_seen_at=UTCDateTime(), status=sa.String(), exit_code=sa.Integer())
CHARGES = _table("charges", run_id=sa.String(), instance_pk=sa.Integer(), start_at=UTCDateTime(),
                 end_at=UTCDateTime(), rate_per_hour=DecimalText(), currency=sa.String())
SAMPLES = _table("samples", run_id=sa.String(), time=UTCDateTime(), gpu_index=sa.Integer(),
                 utilization=sa.Float(), memory_used_bytes=sa.BigInteger(), memory_total_bytes=sa.BigInteger(),
                 status=sa.String(), source=sa.String())


def populate_0004(engine: sa.Engine) -> dict:
    """Rows written as a 0004 ledger held them; returns the brute-force sums taken from them."""
    rng = random.Random(5)
    charges = []
    with engine.begin() as conn:
        conn.execute(sa.insert(INST), [
            dict(id=1, provider="sim", provider_instance_id="a", gpu="A100", gpu_count=1, billing="on-demand",
                 price_per_hour=Decimal("1.89"), currency="USD", created_at=T0),
            dict(id=2, provider="sim", provider_instance_id="b", gpu="RTX 4090", gpu_count=2, billing="spot",
                 price_per_hour=Decimal("2.18"), currency="CNY", created_at=T0)])
        for pk, cur, rates in ((1, "USD", ["1.89", "0.7"]), (2, "CNY", ["2.18"])):
            t = T0
            for n in range(3):
                run_id = f"r{pk}{n}".ljust(32, "0")
                start = t
                for _ in range(rng.randint(1, 6)):
                    end = t + timedelta(microseconds=rng.randrange(1, 5 * 3600 * 10**6))
                    charges.append(dict(run_id=run_id, instance_pk=pk, start_at=t, end_at=end,
                                        rate_per_hour=Decimal(rng.choice(rates)), currency=cur))
                    t = end
                closed = n < 2
                conn.execute(sa.insert(RUNS).values(id=run_id, instance_pk=pk, started_at=start,
                                                    ended_at=t if closed else None, last_seen_at=t,
                                                    status="succeeded" if closed else "running",
                                                    exit_code=0 if closed else None))
                conn.execute(sa.insert(SAMPLES), [
                    dict(run_id=run_id, time=start, gpu_index=0, utilization=u, memory_used_bytes=m,
                         memory_total_bytes=80, status="ok", source="t") for u, m in ((20.0, 3), (40.0, 9))])
                t += timedelta(microseconds=rng.randrange(0, 3600 * 10**6))
        conn.execute(sa.insert(CHARGES), charges)
    totals: dict[str, Decimal] = defaultdict(Decimal)
    days: dict[tuple, Decimal] = defaultdict(Decimal)
    for c in charges:
        totals[c["currency"]] += cost_of(c["rate_per_hour"], c["end_at"] - c["start_at"])
        for day, lo, hi in oracle.split_at_midnights(c["start_at"], c["end_at"], NY):
            days[(day, c["currency"])] += cost_of(c["rate_per_hour"], hi - lo)
    return {"totals": dict(totals), "days": dict(days)}


def test_upgrade_from_a_populated_0004_ledger_keeps_every_total(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0004")
        before = populate_0004(engine)
        migrate.upgrade(engine, "head")
    finally:
        engine.dispose()
    six = Decimal("0.000001")
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        for cur, amount in before["totals"].items():
            assert ledger.spend()[cur] == amount or abs(ledger.spend()[cur] - amount) < Decimal("1e-15")
        page = queries.run_page(s, limit=None)
        assert {c: v.quantize(six) for c, v in page.totals.items()} == {
            c: v.quantize(six) for c, v in before["totals"].items()}
        days = {(d.day, d.currency): d.spend.quantize(six) for d in queries.bill_by_day(s, NY)}
        assert days == {k: v.quantize(six) for k, v in before["days"].items()}
        for r in queries.bill_by_instance(s):
            assert r.spend.quantize(six) == before["totals"][r.currency].quantize(six)
        # every charge has its exact length; the rollups hold all of it
        rows = s.execute(sa.text("SELECT start_at, end_at, duration_us FROM charges")).all()
        assert rows and sum(r[2] for r in rows) == s.execute(sa.text("SELECT sum(duration_us) FROM charge_rollups")).scalar()
        # closed runs are summarized from their samples; the open one is not (it shows its instance)
        summaries = {r.run_id: r for r in page.rows}
        closed = summaries["r10".ljust(32, "0")]
        assert closed.gpu == "A100" and closed.billing == "on-demand"
        assert page.use["r10".ljust(32, "0")].peak_memory_bytes == 9
        assert page.use["r10".ljust(32, "0")].mean_utilization == 30.0
        assert "r12".ljust(32, "0") not in page.use
        assert s.execute(sa.text("SELECT billing FROM runs WHERE id = :i"), {"i": "r12".ljust(32, "0")}).scalar() is None
    # ... and it goes down again
    engine = make_engine(db_url)
    try:
        migrate.downgrade(engine, "0004")
        assert "charge_rollups" not in sa.inspect(engine).get_table_names()
        assert "duration_us" not in {c["name"] for c in sa.inspect(engine).get_columns("charges")}
    finally:
        engine.dispose()
