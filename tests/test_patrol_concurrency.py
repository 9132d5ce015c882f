"""Two patrols against one ledger never act twice on one instance.

Two real ``costctl patrol --execute`` child processes are started together against one fake
Vast.ai account (real HTTP on 127.0.0.1) and one ledger: a SQLite file, and PostgreSQL. Both
find the same two instances marked two hours ago (grace one hour). The fake holds each child's
listing until both have asked (a rendezvous), so they reach their claims at the same moment.
Each instance is stopped once: one stop request each at the provider, one stop decision each in
the ledger, and every mark acted on once; the other patrol says why it did not act.

What holds it: on PostgreSQL the claim takes ``pg_try_advisory_xact_lock`` on the instance's key
in the transaction that re-reads the instance's decisions and records the action (the other
patrol either fails to take the lock, or takes it after the first committed and re-reads the
action); on SQLite that transaction begins with ``BEGIN IMMEDIATE``, so the file's write lock
orders the two claims and the second re-reads what the first recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select

from costctl.cli import patrol as patrol_cli
from costctl.cli.main import main
from costctl.clock import SimClock
from costctl.ledger import Ledger
from costctl.ledger import patrol_store as store
from costctl.records import Action, Decision
from tests.fakes.http import RecordedRequest
from tests.fakes.vastai import API_KEY as VAST_KEY, FakeVast

REPO = Path(__file__).resolve().parents[1]
ROUTE = "/api/v0/instances/{id}/"
POLICY = '''
[[patrol.policies]]
name = "old-running"
action = "stop"
grace = "1h"
filters = {provider = "vastai", status = "running", min_age = "1h"}
'''


def _config(path: Path, vast: FakeVast, db_url: str) -> None:
    path.write_text(f'database_url = "{db_url}"\n\n[instance]\nprovider = "vastai"\n\n'
                    f'[patrol]\nlabels = ["ML Training*"]\n\n'
                    f'[providers.vastai]\nbase_url = "{vast.url}"\nretries = 0\ntimeout = 20\n\n'
                    '[stop]\npoll_interval = "1s"\nresend_interval = "5s"\ndeadline = "60s"\n' + POLICY)


def _rendezvous(vast: FakeVast, parties: int) -> None:
    """The listing answers once ``parties`` listings are in (each child's), all at once."""
    barrier = threading.Barrier(parties, timeout=60)
    listed = vast._list

    def held(req: RecordedRequest):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        return listed(req)

    vast.server.route("GET", "/api/v0/instances/", held)


def test_two_patrol_processes_started_together_act_once(db_url, tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    config = tmp_path / "costctl.toml"
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(data))
    monkeypatch.setenv("VAST_API_KEY", VAST_KEY)
    real_now = datetime.now(UTC)
    with FakeVast() as vast:
        vast.add(312)
        vast.add(313)
        _config(config, vast, db_url)
        # marked two hours ago by an earlier sweep (its own clock), grace one hour: both are due
        monkeypatch.setattr(patrol_cli, "clock", lambda: SimClock(real_now - timedelta(hours=2)))
        assert main(["patrol", "--execute", "--config", str(config)]) == 0
        capsys.readouterr()
        _rendezvous(vast, 2)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "costctl", "patrol", "--execute", "--format", "json", "--config", str(config)]
        children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=tmp_path) for _ in range(2)]
        answers = []
        for child in children:
            out, err = child.communicate(timeout=180)
            assert child.returncode == 0, err
            answers.append(json.loads(out))
        stops = [t for t in vast.transitions if t[1] == "intended_status"]
        puts = vast.server.count("PUT", ROUTE)
    # the provider was asked once per instance
    assert sorted(stops) == [("312", "intended_status", "running", "stopped"),
                             ("313", "intended_status", "running", "stopped")]
    assert puts == 2
    # one stop decision per instance, confirmed; every mark acted on once
    with Ledger.open(db_url) as ledger, ledger.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT i.provider_instance_id, d.action, d.outcome FROM decisions d JOIN "
                                    "instances i ON i.id = d.instance_pk ORDER BY i.provider_instance_id, d.id")).all()
        confirmed = conn.execute(sa.text("SELECT COUNT(*) FROM stop_events WHERE state = 'confirmed'")).scalar()
    assert [(r[0], r[1]) for r in rows] == [("312", "mark"), ("312", "stop"), ("313", "mark"), ("313", "stop")]
    assert [r[2] for r in rows if r[1] == "mark"] == ["acted", "acted"]
    assert confirmed == 2
    # each instance: one child stopped it, the other said why it did not
    seen = {}
    for answer in answers:
        for m in answer["policies"][0]["matches"]:
            seen.setdefault(m["id"], []).append((m["state"], m["done"]))
    for iid in ("312", "313"):
        states = sorted((s or "-") for s, _d in seen[iid])
        assert states == ["-", "confirmed"], seen
        [not_done] = [d for s, d in seen[iid] if s is None]
        # the loser either lost the claim, or (started later, under load) read the winner's stop in flight
        assert (not_done.startswith("not acted on:") and any(
            why in not_done for why in ("another patrol is deciding", "settled meanwhile (acted)",
                                        "acted on the instance since this mark"))) or (
            not_done.startswith("a patrol stop decided at") and not_done.endswith("is still under way")), not_done


@pytest.mark.postgres
def test_on_postgresql_a_claim_another_transaction_holds_is_refused(postgres_schema, tmp_path):
    """The advisory lock is what the claim takes: while another transaction holds the
    instance's key, the claim records nothing and says so."""
    from tests.conftest import reset_postgres_schema

    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    facts = store.InstanceFacts(gpu="RTX 4090", gpu_count=1, billing="on-demand", price_per_hour=None,
                                currency="USD")
    now = datetime(2026, 5, 1, tzinfo=UTC)
    decision = Decision(time=now, policy="patrol:x", action=Action.MARK, reason="r")
    with Ledger.open(url.render_as_string(hide_password=False)) as ledger:
        with ledger.engine.connect() as other, other.begin():
            assert other.execute(select(func.pg_try_advisory_xact_lock(store.lock_key("vastai", "312")))).scalar()
            held = store.claim(ledger, ("vastai", "312"), facts, decision, outcome="marked", check=lambda past: None)
        free = store.claim(ledger, ("vastai", "312"), facts, decision, outcome="marked", check=lambda past: None)
    assert (held.decision_id, held.busy) == (None, True) and "another patrol" in (held.refused or "")
    assert free.decision_id is not None and not free.busy


def test_a_claim_rereads_inside_its_transaction(db_url):
    """The check sees what was recorded before it, in the same transaction as the insert."""
    facts = store.InstanceFacts(gpu=None, gpu_count=1, billing="on-demand", price_per_hour=None, currency="USD")
    now = datetime(2026, 5, 1, tzinfo=UTC)
    mark = Decision(time=now, policy="patrol:x", action=Action.MARK, reason="r")
    with Ledger.open(db_url) as ledger:
        first = store.claim(ledger, ("sim", "a"), facts, mark, outcome="marked", check=lambda past: None)
        seen: list[list[store.PatrolDecision]] = []

        def check(past):
            seen.append(past)
            return "marked already" if past else None

        second = store.claim(ledger, ("sim", "a"), facts, mark, outcome="marked", check=check)
        act = Decision(time=now, policy="patrol:x", action=Action.STOP, reason="r")
        acted = store.claim(ledger, ("sim", "a"), facts, act, outcome="stop requested", check=lambda past: None,
                            settle=(first.decision_id, store.ACTED, {"acted_at": "t"}))
        again = store.claim(ledger, ("sim", "a"), facts, act, outcome="stop requested", check=lambda past: None,
                            settle=(first.decision_id, store.ACTED, {"acted_at": "t"}))
    assert first.decision_id and second.decision_id is None and second.refused == "marked already"
    assert [d.id for d in seen[0]] == [first.decision_id]
    assert acted.decision_id and again.decision_id is None and "settled meanwhile (acted)" in again.refused
