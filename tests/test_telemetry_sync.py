"""Fleet mode's telemetry: ``samples``, ``progress`` and ``progress_buckets`` sent to the central
ledger by cursor (:mod:`costctl.ledger.telemetry_sync`), and two sync fixes.

* telemetry reaches the central ledger exactly once (a batch sent twice inserts nothing), across
  an outage (a TCP proxy that drops the central ledger), and from a restarted sender (the
  cursor is on disk; a kill between the central commit and the cursor's move sends the batch
  again, to no effect);
* rows of a run the central ledger does not have are skipped (and the first send does not walk
  them), and sent once the run is taken over in fleet mode;
* compaction in fleet mode keeps the raw samples not sent yet;
* ``costctl serve``'s data on the central ledger shows a fleet watch's utilization;
* a pooled central connection the server dropped is no outage (nothing said, rows arrive);
* ``costctl db sync`` with an empty outbox still connects, and says an unreachable ledger.
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from conftest import reset_postgres_schema
from costctl.cli.main import main
from costctl.ledger import Ledger, live, tables, telemetry_sync
from costctl.ledger.progress_store import ProgressStore
from costctl.ledger.sync import CentralSync
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample
from outbox_support import local_ledger
from pg_proxy import DroppingProxy
from serve_support import request, serving

T0 = datetime(2026, 6, 1, 8, 0, 0, tzinfo=UTC)
RATE = Decimal("1.37")
TELEMETRY = ("samples", "progress", "progress_buckets")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def one_run(ledger: Ledger, instance: str = "sim-1", *, start: float = 0) -> str:
    pk = ledger.ensure_instance("sim", instance, gpu="RTX 4090", gpu_count=2, billing="on-demand",
                                price_per_hour=RATE, currency="USD")
    return ledger.start_run(pk, started_at=at(start), command=["python", "train.py"], log_path=None, host="a",
                            pid=4242)


def ticks(first: float, count: int, util: float = 91.0, every: float = 5.0) -> list[TelemetrySample]:
    """``count`` ticks of a 2-GPU instance (3 sample rows each: 2 GPUs and the CPU)."""
    return [TelemetrySample(time=at(first + every * k),
                            gpus=(GpuReading(index=0, utilization=util), GpuReading(index=1, utilization=util - 1)),
                            gpu_status=SignalStatus.OK, cpu_percent=120.0, cpu_status=SignalStatus.OK, source="nvml")
            for k in range(count)]


def write_progress(ledger: Ledger, run: str, first: float, count: int) -> None:
    """``count`` loss points a second, 2 kept per minute: progress rows and bucket rows."""
    store = ProgressStore(interval_s=60, points_per_interval=2)
    points = [ProgressPoint(time=at(first + k), value=2.0 - k / 1000, step=k) for k in range(count)]
    ledger.record_progress(run, store.add(points, at(first + count)))
    ledger.record_progress(run, store.flush())


def telemetry(engine: sa.Engine, table: str) -> list[tuple[Any, ...]]:
    """``table``'s rows keyed as the central ledger keys them (run, origin: the writing ledger's
    id), every other column as it is, sorted."""
    t = tables.metadata.tables[table]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(t)).mappings().all()
    out = []
    for r in rows:
        origin = r["origin_id"] if r["origin_id"] is not None else r["id"]
        out.append((r["run_id"], origin, *(r[c.name] for c in t.c if c.name not in ("id", "run_id", "origin_id"))))
    return sorted(out, key=lambda row: (row[0], row[1]))


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(tables.metadata.tables[table])))


def cursor(ledger: Ledger, table: str = "samples") -> int | None:
    with ledger.engine.connect() as conn:
        return telemetry_sync.cursor(conn, table)


@pytest.fixture
def proxied(postgres_schema):
    """``(proxy, URL of the central ledger through the proxy)`` on an empty schema."""
    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    proxy = DroppingProxy((url.host or "127.0.0.1", url.port or 5432))
    try:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.close()


def test_telemetry_reaches_the_central_ledger_exactly_once(tmp_path, db_url):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.record_samples(run, ticks(0, 40))
        write_progress(ledger, run, 0, 300)
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=50)
        try:
            sync.drain()
            central = sync._engine()
            assert count(central, "samples") == 120 and count(central, "progress_buckets") > 0
            for table in TELEMETRY:
                assert telemetry(central, table) == telemetry(ledger.engine, table), table
            # the cursors' moves were lost (a kill after the central commit): everything again
            with ledger.engine.begin() as conn:
                for table in TELEMETRY:
                    telemetry_sync.set_cursor(conn, table, 0)
            sync.drain()
            for table in TELEMETRY:
                assert telemetry(central, table) == telemetry(ledger.engine, table), table
            # more later: only the new rows go
            before = sync.telemetry_sent
            ledger.record_samples(run, ticks(200, 10))
            sync.drain()
            assert sync.telemetry_sent - before == 30
            assert telemetry(central, "samples") == telemetry(ledger.engine, "samples")
        finally:
            sync.dispose()


def test_the_cursor_survives_a_restart_and_a_kill_between_commit_and_cursor(tmp_path, db_url, monkeypatch):
    path = tmp_path / "a.db"
    with local_ledger(path) as ledger:
        run = one_run(ledger)
        ledger.record_samples(run, ticks(0, 100))  # 300 rows
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=120)
        real = telemetry_sync.set_cursor
        moves = []

        def killed_at_the_second_move(conn, table, last_id):
            moves.append(last_id)
            if len(moves) == 2:
                raise KeyboardInterrupt  # the process dies after the central commit
            real(conn, table, last_id)

        monkeypatch.setattr(telemetry_sync, "set_cursor", killed_at_the_second_move)
        with pytest.raises(KeyboardInterrupt):
            sync.drain()
        sync.dispose()
        monkeypatch.setattr(telemetry_sync, "set_cursor", real)
        assert cursor(ledger) == moves[0]  # the first batch's move is on disk
    with local_ledger(path) as ledger:  # the next watch on this machine
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=120)
        try:
            sync.drain()
            assert sync.telemetry_sent == 300 - 120  # from the cursor on, not from the start
            central = sync._engine()
            assert telemetry(central, "samples") == telemetry(ledger.engine, "samples")
            assert count(central, "samples") == 300  # the batch sent twice: once there
        finally:
            sync.dispose()


def test_runs_the_central_ledger_lacks_are_skipped_until_taken_over(tmp_path, db_url):
    path = tmp_path / "a.db"
    with Ledger.open(f"sqlite:///{path}") as plain:  # before central_url was set
        old = one_run(plain, "old")
        plain.record_samples(old, ticks(0, 50))
        write_progress(plain, old, 0, 200)
    with local_ledger(path) as ledger:
        new = one_run(ledger, "new", start=1000)
        ledger.record_samples(new, ticks(1000, 10))
        with ledger.engine.connect() as conn:
            first_new = conn.scalar(sa.select(sa.func.min(tables.samples.c.id))
                                    .where(tables.samples.c.run_id == new))
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=7)
        try:
            sync.drain()
            central = sync._engine()
            assert {r[0] for r in telemetry(central, "samples")} == {new}
            assert sync.telemetry_sent == 30 + 0  # no progress for the new run
            assert count(central, "progress") == 0
            # the first send started at the new run's first row: the old run's 150 rows were not walked
            assert cursor(ledger) == first_new - 1 + 30
            ledger.resume_run(old, pid=99)  # taken over (--attach): its telemetry goes too
            sync.drain()
            for table in TELEMETRY:
                assert telemetry(central, table) == telemetry(ledger.engine, table), table
        finally:
            sync.dispose()


def test_compaction_in_fleet_mode_keeps_the_samples_not_sent_yet(tmp_path, db_url):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.record_samples(run, ticks(0, 24, every=10))  # four minutes, 72 rows
        now = at(0) + timedelta(days=30)
        assert ledger.compact(now, timedelta(days=7)).samples == 0  # nothing sent: nothing rolled up
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=36)
        try:
            sync.drain()
            assert count(sync._engine(), "samples") == 72
            ledger.record_samples(run, ticks(240, 6, every=10))  # a fifth minute, not sent
            done = 0
            while True:
                result = ledger.compact(now, timedelta(days=7))
                done += result.samples
                if result.done:
                    break
            assert done == 72 and count(ledger.engine, "samples") == 18
            sync.drain()
            assert count(sync._engine(), "samples") == 90  # none lost
        finally:
            sync.dispose()
    with Ledger.open(f"sqlite:///{tmp_path / 'a.db'}") as plain:  # not fleet mode: no bound
        assert plain.compact(now, timedelta(days=7)).samples == 18


def test_serve_on_the_central_ledger_shows_a_fleet_watchs_utilization(tmp_path, db_url):
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.record_samples(run, ticks(0, 10, util=73.0))
        write_progress(ledger, run, 0, 30)
        sync = CentralSync(ledger, db_url, say=[].append)
        try:
            sync.drain()
            with sync._engine().connect() as conn:
                readings = live.newest_readings(conn, [r.run_id for r in live.open_runs(conn)])
                losses = live.newest_losses(conn, [run])
        finally:
            sync.dispose()
    assert [(r.gpu_index, r.utilization, r.time) for r in readings[run]] == [
        (0, 73.0, at(45)), (1, 72.0, at(45)), (None, 120.0, at(45))]
    assert run in losses
    with serving(db_url, now=at(50)) as base:  # `costctl serve --db <central_url>`
        metrics = request(base, "/metrics").body.decode()
    util = [line for line in metrics.splitlines() if line.startswith("costctl_gpu_utilization_ratio{")]
    assert any('instance="sim-1"' in line and 'gpu="0"' in line and line.endswith(" 0.73") for line in util), util


@pytest.mark.postgres
def test_telemetry_arrives_once_across_an_outage_and_the_rate_is_printed(tmp_path, proxied):
    proxy, url = proxied
    said: list[str] = []
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.record_samples(run, ticks(0, 20))
        sync = CentralSync(ledger, url, say=said.append, interval_s=3600, retry_initial_s=0.05,
                           retry_max_s=0.05).start()
        try:
            assert sync.sync_now(30)
            proxy.block()
            ledger.record_samples(run, ticks(100, 20))
            assert not sync.sync_now(10)
            proxy.unblock()
            deadline = time.monotonic() + 30
            while sync.outage and time.monotonic() < deadline:
                sync.sync_now(5)
            assert not sync.outage
            assert sum("unreachable" in line for line in said) == 1, said
            central = sync._engine()
            assert telemetry(central, "samples") == telemetry(ledger.engine, "samples")
            # a figure, not an assertion: rows a second on this machine
            ledger.record_samples(run, ticks(1000, 10_000, every=1))
            started = time.perf_counter()
            sent = sync.send_telemetry()
            took = time.perf_counter() - started
            print(f"\ntelemetry sync: {sent} sample rows in {took:.2f}s = {sent / took:,.0f} rows/s")
            assert count(central, "samples") == 30_120
        finally:
            sync.close(5)


@pytest.mark.postgres
def test_a_stale_pooled_connection_is_no_outage(tmp_path, proxied):
    """The central server dropped the pooled connection between two sends (it restarted; here
    the proxy cuts every open connection and lets new ones through): nothing is said, the rows
    arrive at the first attempt."""
    proxy, url = proxied
    said: list[str] = []
    with local_ledger(tmp_path / "a.db") as ledger:
        run = one_run(ledger)
        ledger.accrue(run, at(60), RATE, "USD")
        sync = CentralSync(ledger, url, say=said.append, interval_s=3600).start()
        try:
            assert sync.sync_now(30)
            proxy.block()
            proxy.unblock()  # the open connections are cut; new ones go through
            ledger.accrue(run, at(120), RATE, "USD")
            ledger.record_samples(run, ticks(60, 4))
            assert sync.sync_now(30)
            assert said == []
            assert sync.pending() == 0 and count(sync._engine(), "samples") == 12
        finally:
            sync.close(5)


def test_db_sync_with_nothing_pending_still_reaches_the_central_ledger(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    local = f"sqlite:///{tmp_path / 'a.db'}"
    with local_ledger(tmp_path / "a.db"):
        pass  # an empty outbox
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = f"postgresql+psycopg://costctl@127.0.0.1:{port}/costctl?connect_timeout=2"
    code = main(["db", "sync", "--db", local, "--central", closed])
    captured = capsys.readouterr()
    assert code != 0, captured
    err = captured.err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and str(port) in err, err
    assert "sent 0 changes" not in captured.out


def test_db_sync_without_a_local_ledger_still_reaches_the_central_ledger(tmp_path, capsys, monkeypatch, db_url):
    """No ledger on this machine yet: nothing to send, but an unreachable central ledger is
    still said (one line, non-zero), and a reachable one answers "nothing to send", exit 0."""
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = f"postgresql+psycopg://costctl@127.0.0.1:{port}/costctl?connect_timeout=2"
    code = main(["db", "sync", "--central", closed])
    captured = capsys.readouterr()
    assert code != 0 and "nothing to send" not in captured.out, captured
    assert len(captured.err.strip().splitlines()) == 1 and str(port) in captured.err
    assert main(["db", "sync", "--central", db_url]) == 0
    assert "nothing to send" in capsys.readouterr().out
    assert not (tmp_path / "data" / "costctl.db").exists()


def test_a_run_still_in_the_outbox_holds_its_telemetry_back_never_skips_it(tmp_path, db_url):
    """A run that began after a pass read the outbox (or whose row waits out an outage) is not
    in the central ledger yet when its samples are read: they wait for it, never skipped."""
    with local_ledger(tmp_path / "a.db") as ledger:
        first = one_run(ledger, "sim-1")
        ledger.record_samples(first, ticks(0, 4))
        sync = CentralSync(ledger, db_url, say=[].append, telemetry_batch_rows=50)
        try:
            sync.drain()
            late = one_run(ledger, "sim-2", start=30)
            ledger.record_samples(late, ticks(30, 5))
            ledger.record_samples(first, ticks(60, 2))
            # the race: the telemetry pass runs after the outbox was read, before `late` was sent
            sync.send_telemetry()
            central = sync._engine()
            assert count(central, "samples") == 12  # the first run's 4 ticks; the rest waits behind `late`
            sync.drain()  # the run, then its telemetry and what came after it
            assert telemetry(central, "samples") == telemetry(ledger.engine, "samples")
            assert count(central, "samples") == 33
        finally:
            sync.dispose()
