"""The ledger's view of the fleet's instances (costctl.ledger.instance_view) on a real SQLite
file and, where one is configured, a real PostgreSQL: spend per currency as the ledger sums it,
open runs with their heartbeats, and the heartbeat a watch's accruals move."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.ledger import instance_view
from costctl.ledger.instance_view import instance_records
from costctl.ledger.reader import LedgerReader

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def _instance(ledger, provider: str, iid: str, currency: str = "USD") -> int:
    return ledger.ensure_instance(provider, iid, gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                  price_per_hour=Decimal("0.40"), currency=currency)


def _records(db_url: str, keys):
    with LedgerReader.open(db_url) as reader, reader.connection() as conn:
        return instance_records(conn, keys)


def test_spend_and_open_runs_of_the_asked_instances(ledger, db_url):
    vast = _instance(ledger, "vastai", "312")
    pod = _instance(ledger, "runpod", "312")            # the same id at another provider: apart
    other = _instance(ledger, "vastai", "999")          # not asked: not read
    done = ledger.start_run(vast, started_at=T0, command=["train"], log_path=None, host="a", pid=1)
    ledger.accrue(done, T0 + timedelta(hours=1), Decimal("0.40"), "USD")
    ledger.finish_run(done, ended_at=T0 + timedelta(hours=1), exit_code=0, status="finished")
    live = ledger.start_run(vast, started_at=T0 + timedelta(hours=2), command=["train"], log_path=None, host="b",
                            pid=2)
    ledger.accrue(live, T0 + timedelta(hours=2, minutes=30), Decimal("0.80"), "USD")
    advise = ledger.start_run(pod, started_at=T0, command=None, log_path=None, host="c", pid=3, mode="advise-only")
    ledger.accrue(advise, T0 + timedelta(minutes=10), Decimal("3"), "CNY")
    ledger.accrue(ledger.start_run(other, started_at=T0, command=None, log_path=None, host="d"),
                  T0 + timedelta(hours=5), Decimal("1"), "USD")

    got = _records(db_url, {("vastai", "312"), ("runpod", "312"), ("autodl", "pro-never-seen")})
    assert set(got) == {("vastai", "312"), ("runpod", "312")}
    v, p = got[("vastai", "312")], got[("runpod", "312")]
    assert v.spend == {"USD": Decimal("0.40") + Decimal("0.40")} == ledger.spend(instance_pk=vast)
    assert [(b.run_id, b.host, b.pid, b.mode) for b in v.open_runs] == [(live, "b", 2, None)]
    assert v.open_runs[0].last_seen_at == T0 + timedelta(hours=2, minutes=30)  # the accrual moved it
    assert p.spend == {"CNY": Decimal("0.5")} and p.open_runs[0].mode == "advise-only"


def test_an_accrual_that_charges_nothing_still_moves_the_heartbeat(ledger, db_url):
    pk = _instance(ledger, "sim", "sim-local")
    run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
    ledger.accrue(run, T0 + timedelta(seconds=5), Decimal("0"), "USD")
    ledger.accrue(run, T0 + timedelta(seconds=10), Decimal("0"), "USD")
    beat = _records(db_url, {("sim", "sim-local")})[("sim", "sim-local")].open_runs[0]
    assert beat.last_seen_at == T0 + timedelta(seconds=10)


def test_many_instances_are_read_in_chunks(ledger, db_url, monkeypatch):
    monkeypatch.setattr(instance_view, "CHUNK", 2)
    keys = set()
    for i in range(5):
        pk = _instance(ledger, "vastai", str(i))
        run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
        ledger.accrue(run, T0 + timedelta(hours=i + 1), Decimal("1"), "USD")
        keys.add(("vastai", str(i)))
    got = _records(db_url, keys)
    assert {k: r.spend["USD"] for k, r in got.items()} == {("vastai", str(i)): Decimal(i + 1) for i in range(5)}
    assert all(len(r.open_runs) == 1 for r in got.values())


@pytest.mark.parametrize("keys", [set(), {("vastai", "1")}])
def test_an_empty_ledger_knows_nothing(ledger, db_url, keys):
    assert _records(db_url, keys) == {}
