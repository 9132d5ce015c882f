"""Fleet mode's outbox and merge, driven directly (no watch): local SQLite ledgers with their
outbox on, sent to a central ledger on a real PostgreSQL server (and on a SQLite file).

* the outbox names every changed row once, its version growing with each change;
* one writer: after a send the central ledger holds exactly the local rows (charges with their
  intervals, rates and Decimal amounts, rollups, runs, decisions, stop events, checkpoints,
  waste), a charge that grew in place grows in place there, and a batch sent twice (its
  acknowledgement lost) changes nothing;
* two writers that charged one instance while apart: whichever syncs first, each
  instance-second is charged once, and `costctl bill` on the central ledger bills the union.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from costctl.cli.main import main
from costctl.errors import UsageError
from costctl.ledger import Ledger, outbox
from costctl.ledger import tables
from costctl.ledger.central import uncovered
from costctl.config import FleetConfig, Settings
from costctl.fleet.model import GuardState, guard_of
from costctl.ledger.instance_view import instance_records
from costctl.ledger.sync import CentralSync, central_target
from costctl.records import Action, Decision
from outbox_support import (assert_no_second_twice, charges, dump, local_ledger, outbox_size, runs,
                           spend_seconds)

T0 = datetime(2026, 6, 1, 8, 0, 0, tzinfo=UTC)
RATE = Decimal("1.37")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sender(ledger: Ledger, central_url: str, said: list[str] | None = None) -> CentralSync:
    return CentralSync(ledger, central_url, say=(said if said is not None else []).append)


def one_run(ledger: Ledger, instance: str = "sim-1", *, start: float = 0, host: str = "a") -> str:
    pk = ledger.ensure_instance("sim", instance, gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                price_per_hour=RATE, currency="USD")
    return ledger.start_run(pk, started_at=at(start), command=["python", "train.py"], log_path=None, host=host,
                            pid=4242)


def everything_a_watch_writes(ledger: Ledger, run: str, *, finish: bool = True) -> None:
    """Charges (one that grows in place, then one at another rate), a decision with its stop
    events and its outcome set later, a checkpoint request and its outcome, waste."""
    for s in (5, 60, 600):
        ledger.accrue(run, at(s), RATE, "USD")
    ledger.accrue(run, at(900), Decimal("2.5"), "USD")  # the price changed: a second row
    decision = ledger.record_decision(run, Decision(time=at(900), policy="idle", action=Action.STOP,
                                                    reason="idle for 5m", evidence={"idle_s": 300}))
    ledger.record_stop_event(run, decision_id=decision, time=at(900), state="requested", attempt=0)
    ledger.record_stop_event(run, decision_id=decision, time=at(901), state="sent", attempt=1)
    ledger.set_decision_outcome(decision, "stopped", evidence={"confirmed_at": at(905).isoformat()})
    ck = ledger.record_checkpoint_request(run, reason="preemption", requested_at=at(100), deadline=at(160))
    ledger.complete_checkpoint(ck, outcome="saved", completed_at=at(130), saved_at=at(129), save_s=29.0,
                               path="/ckpt/step-100.pt", size_bytes=1234)
    ledger.record_waste(run, start_at=at(130), end_at=at(600), rate_per_hour=RATE, currency="USD",
                        reason="preemption")
    if finish:
        ledger.finish_run(run, ended_at=at(905), exit_code=0, status="stopped")


# ----------------------------------------------------------------------------- the outbox


def test_the_outbox_names_each_changed_row_once_and_counts_its_changes(tmp_path):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        everything_a_watch_writes(ledger, run)
        with ledger.engine.connect() as conn:
            entries = {(e.table, e.key): e.version for e in outbox.pending(conn, limit=100)}
        charge_ids = [str(i) for i in sorted(ledger.engine.connect().execute(
            sa.select(tables.charges.c.id)).scalars())]
        assert len(charge_ids) == 2
        # the run: its start, 4 accruals (the heartbeat), its end
        assert entries[("runs", run)] == 6
        assert entries[("charges", charge_ids[0])] == 3 and entries[("charges", charge_ids[1])] == 1
        assert sorted(t for t, _ in entries) == sorted(
            ["runs", "charges", "charges", "decisions", "stop_events", "stop_events", "checkpoints", "waste"])
        assert entries[("decisions", "1")] == 2 and entries[("checkpoints", "1")] == 2
        # sending order: runs first, then charges, ..., stop events last (their decision first)
        with ledger.engine.connect() as conn:
            order = [e.table for e in outbox.pending(conn, limit=100)]
        assert order == ["runs", "charges", "charges", "decisions", "checkpoints", "waste", "stop_events",
                         "stop_events"]


def test_a_ledger_without_the_outbox_writes_none(tmp_path):
    with Ledger.open(f"sqlite:///{tmp_path / 'plain.db'}") as ledger:
        everything_a_watch_writes(ledger, one_run(ledger))
        assert outbox_size(ledger) == 0


def test_an_entry_that_changed_after_it_was_read_stays_for_the_next_send(tmp_path):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.accrue(run, at(10), RATE, "USD")
        with ledger.engine.connect() as conn:
            read = outbox.pending(conn, limit=100)
        ledger.accrue(run, at(20), RATE, "USD")  # the charge and the run change again
        with ledger.engine.begin() as conn:
            outbox.acknowledge(conn, read)
        with ledger.engine.connect() as conn:
            assert {e.table for e in outbox.pending(conn, limit=100)} == {"runs", "charges"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 30)), max_size=6),
       st.integers(0, 100), st.integers(1, 60))
def test_uncovered_is_the_piece_minus_the_covered_intervals(covered, start, length):
    spans = [(at(a), at(a + n)) for a, n in covered]
    gaps = uncovered(at(start), at(start + length), spans)
    seconds = range(start, start + length)
    in_gaps = {s for s in seconds if any(a <= at(s) < b for a, b in gaps)}
    in_covered = {s for s in seconds if any(a <= at(s) < b for a, b in spans)}
    assert in_gaps == set(seconds) - in_covered
    assert all(a < b for a, b in gaps) and all(g[1] < h[0] for g, h in zip(gaps, gaps[1:]))


# ----------------------------------------------------------------------------- one writer


def test_one_writer_the_central_ledger_holds_exactly_the_local_rows(tmp_path, db_url):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        everything_a_watch_writes(ledger, run)
        sync = sender(ledger, db_url)
        try:
            assert sync.drain() == 8
            assert outbox_size(ledger) == 0
            central = sync._engine()
            assert dump(central) == dump(ledger.engine)
            assert charges(central)[0][7] == RATE * 600 / 3600  # Decimal, exact
            # a new run on the same instance, a charge that grows in place: sent again, still equal
            later = one_run(ledger, start=1000)
            ledger.accrue(later, at(1010), RATE, "USD")
            assert sync.drain() == 2
            ledger.accrue(later, at(1100), RATE, "USD")
            ledger.accrue(later, at(1200), RATE, "USD")
            assert sync.drain() == 2
            assert dump(central) == dump(ledger.engine)
            assert len(charges(central)) == 3  # the later run's charge grew in place there too
            assert sync.drain() == 0  # nothing left: nothing sent
            assert dump(central) == dump(ledger.engine)
        finally:
            sync.dispose()


def test_a_batch_sent_twice_changes_nothing(tmp_path, db_url, monkeypatch):
    """The central ledger committed but the watch never took the batch out of its outbox (killed
    in between, or the commit's answer was lost): the next send writes it again, to no effect."""
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        everything_a_watch_writes(ledger, run)
        sync = sender(ledger, db_url)
        try:
            real = outbox.acknowledge
            with ledger.engine.connect() as conn:
                batch = outbox.pending(conn, limit=100)
            monkeypatch.setattr(outbox, "acknowledge", lambda conn, entries: None)
            sync._send(batch)
            assert outbox_size(ledger) == 8  # nothing acknowledged
            once = dump(sync._engine())
            monkeypatch.setattr(outbox, "acknowledge", real)
            assert sync.drain() == 8
            assert dump(sync._engine()) == once == dump(ledger.engine)
        finally:
            sync.dispose()


def test_a_run_taken_over_sends_its_earlier_rows_too(tmp_path, db_url):
    """A run first watched without a central ledger, then taken over (``--attach``) by a watch
    in fleet mode: its earlier charges and decisions reach the central ledger too."""
    path = tmp_path / "a.db"
    with Ledger.open(f"sqlite:///{path}") as plain:
        run = one_run(plain)
        everything_a_watch_writes(plain, run, finish=False)
    with local_ledger(path) as ledger:
        assert outbox_size(ledger) == 0
        ledger.resume_run(run, pid=99)
        sync = sender(ledger, db_url)
        try:
            sync.drain()
            assert dump(sync._engine()) == dump(ledger.engine)
        finally:
            sync.dispose()


def test_the_central_ledger_refusing_one_row_holds_up_nothing_else(tmp_path, db_url):
    """A row the central ledger refuses for good (here: a constraint the central ledger has and
    the local one lacks) is said once and stays in the outbox; the rest is sent."""
    said: list[str] = []
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.accrue(run, at(60), RATE, "USD")
        ledger.record_decision(run, Decision(time=at(60), policy="idle", action=Action.ADVISE,
                                                   reason="idle", evidence={}))
        ledger.record_decision(run, Decision(time=at(61), policy="stall", action=Action.ADVISE,
                                             reason="stalled", evidence={}))
        sync = sender(ledger, db_url, said)
        try:
            central = sync._engine()
            with central.begin() as conn:  # the central ledger refuses decisions with reason 'idle'
                if central.dialect.name == "postgresql":
                    conn.exec_driver_sql("ALTER TABLE decisions ADD CONSTRAINT no_idle CHECK (reason <> 'idle')")
                else:
                    conn.exec_driver_sql("CREATE TRIGGER no_idle BEFORE INSERT ON decisions WHEN NEW.reason = 'idle' "
                                         "BEGIN SELECT RAISE(ABORT, 'no idle'); END")
            assert sync.drain() == 3
            assert outbox_size(ledger) == 1
            assert sum("refused a row (decisions 1)" in line for line in said) == 1, said
            assert sync.drain() == 0 and len(said) == 1  # not sent again, not said again
            with central.connect() as conn:
                assert conn.scalar(sa.select(sa.func.count()).select_from(tables.decisions)) == 1
        finally:
            sync.dispose()


# ----------------------------------------------------------------------------- two writers


@pytest.mark.parametrize("first", ["a", "b"])
def test_two_writers_apart_on_one_instance_charge_each_second_once(tmp_path, db_url, first, capsys, monkeypatch):
    """Machine a charged instance `shared` for [0, 3600), machine b (a watch restarted elsewhere,
    knowing nothing of a) for [1800, 5400): after both sync, in either order, the central
    ledger charges [0, 5400) once; a's charge then grows to 7200 and only [5400, 7200) is added."""
    a, b = local_ledger(tmp_path / "a.db"), local_ledger(tmp_path / "b.db")
    run_a, run_b = one_run(a, "shared", host="a"), one_run(b, "shared", start=1800, host="b")
    a.accrue(run_a, at(3600), RATE, "USD")
    b.accrue(run_b, at(5400), RATE, "USD")
    send = {"a": sender(a, db_url), "b": sender(b, db_url)}
    try:
        for name in (first, "b" if first == "a" else "a"):
            send[name].drain()
        central = send["a"]._engine()
        assert_no_second_twice(central)
        assert spend_seconds(central, "shared") == 5400
        if first == "a":  # the first to sync a second keeps it
            assert [(c[0], c[2], c[3]) for c in charges(central)] == [(run_a, at(0), at(3600)),
                                                                   (run_b, at(3600), at(5400))]
        else:
            assert [(c[0], c[2], c[3]) for c in charges(central)] == [(run_a, at(0), at(1800)),
                                                                   (run_b, at(1800), at(5400))]
        a.accrue(run_a, at(7200), RATE, "USD")
        send["a"].drain()
        send["b"].drain()  # nothing new: nothing changes
        assert_no_second_twice(central)
        assert spend_seconds(central, "shared") == 7200
        assert set(runs(central)) == {run_a, run_b}
        # the bill on the central ledger: the union, once
        monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
        assert main(["bill", "--format", "json", "--db", db_url]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert Decimal(doc["totals"]["USD"]) == (RATE * 2).quantize(Decimal("0.000001"))
    finally:
        for s in send.values():
            s.dispose()
        a.close()
        b.close()


# ----------------------------------------------------------------------------- heartbeat, configuration


def test_a_synced_heartbeat_guards_its_instance_in_the_central_ledger(tmp_path, db_url):
    """The heartbeat (``runs.last_seen_at``) reaches the central ledger with each send, and
    ``costctl fleet``'s guard rule reads it there: guarded within the guard lag, whose default
    allows for the send (``[ledger] sync_interval`` + 20 s), stale past it; an ended run guards
    nothing."""
    settings_ = Settings()
    lag = settings_.fleet.lag(settings_.watch.sample_interval, settings_.ledger.sync_interval)
    assert lag == timedelta(seconds=30)  # the defaults: 10 s sends, 5 s samples
    assert FleetConfig().lag(timedelta(seconds=5), timedelta(minutes=1)) == timedelta(seconds=80)
    assert FleetConfig(guard_lag="45s").lag(timedelta(seconds=5), timedelta(minutes=1)) == timedelta(seconds=45)
    with local_ledger(tmp_path / "a.db") as ledger:
        alive, ended = one_run(ledger, "i-1"), one_run(ledger, "i-2")
        ledger.accrue(alive, at(600), RATE, "USD")
        ledger.accrue(ended, at(600), RATE, "USD")
        ledger.finish_run(ended, ended_at=at(600), exit_code=0, status="completed")
        sync = sender(ledger, db_url)
        try:
            sync.drain()
            with sync._engine().connect() as conn:
                records = instance_records(conn, [("sim", "i-1"), ("sim", "i-2")])
            assert guard_of(records[("sim", "i-1")], now=at(600) + lag, lag=lag).state is GuardState.GUARDED
            assert guard_of(records[("sim", "i-1")], now=at(601) + lag, lag=lag).state is GuardState.STALE
            assert guard_of(records[("sim", "i-2")], now=at(600), lag=lag).state is GuardState.UNWATCHED
        finally:
            sync.dispose()


def test_a_central_url_that_is_the_local_ledger_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(UsageError, match="own ledger"):
        central_target(url, url)
    assert central_target(None, url) is None


@pytest.mark.parametrize("toml, expected", [
    ('[ledger]\ncentral_url = "mysql://db/costctl"\n', "ledger.central_url"),
    ('[ledger]\nsync_interval = "2h"\n', "ledger.sync_interval"),
    ('[ledger]\ncentral_url = "postgresql+nodriver://db/costctl"\n', "unknown database kind 'postgresql+nodriver'"),
])
def test_a_bad_fleet_setting_is_one_line_and_exit_2(tmp_path, capsys, toml, expected):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(toml)
    assert main(["db", "sync", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_db_sync_sends_the_outbox_and_says_so(tmp_path, db_url, capsys, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    local = f"sqlite:///{tmp_path / 'a.db'}"
    with local_ledger(tmp_path / "a.db") as ledger:
        everything_a_watch_writes(ledger, one_run(ledger))
    assert main(["db", "sync", "--db", local, "--central", db_url]) == 0
    assert "sent 8 changes to the central ledger" in capsys.readouterr().out
    assert main(["db", "sync", "--db", local, "--central", db_url]) == 0
    assert "sent 0 changes" in capsys.readouterr().out
    with Ledger.open(local) as ledger:
        central = sa.create_engine(db_url)
        try:
            assert dump(central) == dump(ledger.engine)
        finally:
            central.dispose()
    assert main(["db", "sync", "--db", local]) == 2
    assert "no central ledger" in capsys.readouterr().err


ops = st.lists(st.one_of(st.tuples(st.just("accrue"), st.sampled_from("ab"), st.integers(1, 600)),
                         st.tuples(st.just("sync"), st.sampled_from("ab"), st.just(0))), max_size=12)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), ops)
def test_any_interleaving_of_two_writers_charges_the_union_once(tmp_path_factory, start_a, start_b, steps):
    """Two machines charge one instance from their own starts, accruing and syncing in any
    order: the central ledger never charges a second twice, and once both synced it charges
    exactly the union of what they charged; a further send changes nothing."""
    where = tmp_path_factory.mktemp("fleet")
    central_url = f"sqlite:///{where / 'central.db'}"
    ledgers = {"a": local_ledger(where / "a.db"), "b": local_ledger(where / "b.db")}
    run = {"a": one_run(ledgers["a"], "shared", start=start_a), "b": one_run(ledgers["b"], "shared", start=start_b)}
    until = {"a": start_a, "b": start_b}
    send = {name: sender(ledger, central_url) for name, ledger in ledgers.items()}
    try:
        for op, name, seconds in steps:
            if op == "accrue":
                until[name] += seconds
                ledgers[name].accrue(run[name], at(until[name]), RATE, "USD")
            else:
                send[name].drain()
                assert_no_second_twice(send[name]._engine())
        for s in send.values():
            s.drain()
        central = send["a"]._engine()
        assert_no_second_twice(central)
        charged = {name: (start, until[name]) for name, start in (("a", start_a), ("b", start_b))
                   if until[name] > start}
        union = set().union(*(range(lo, hi) for lo, hi in charged.values())) if charged else set()
        assert spend_seconds(central, "shared") == len(union)
        before = dump(central)
        for s in send.values():
            s.drain()
        assert dump(central) == before
    finally:
        for name in ledgers:
            send[name].dispose()
            ledgers[name].close()


def test_a_watch_whose_central_url_is_its_own_ledger_is_refused_before_anything_starts(tmp_path, capsys):
    local = f"sqlite:///{tmp_path / 'own.db'}"
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\ndatabase_url = "{local}"\n[ledger]\ncentral_url = "{local}"\n')
    assert main(["watch", "--config", str(cfg), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "central_url is this machine's own ledger" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "own.db").exists() and not (tmp_path / "data" / "sim").exists()
