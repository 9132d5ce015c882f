"""What one tick of a watch costs the ledger: at most one short write transaction, on the
writer thread, and no read at all (spend and budget figures come from memory). Counted with
SQLAlchemy engine events on a real SQLite ledger over many simulated ticks."""

from __future__ import annotations

import threading

from sqlalchemy import event

from lifecycle_support import T0, FixedGpu, SimClock, settings, watcher

TICKS = 120


def _count_transactions(engine):
    counts = {"begin": 0, "commit": 0, "rollback": 0, "threads": set()}

    def on_begin(conn):
        counts["begin"] += 1
        counts["threads"].add(threading.current_thread().name)

    def on_commit(conn):
        counts["commit"] += 1

    def on_rollback(conn):
        counts["rollback"] += 1

    event.listen(engine, "begin", on_begin)
    event.listen(engine, "commit", on_commit)
    event.listen(engine, "rollback", on_rollback)
    return counts


def test_each_tick_costs_at_most_one_write_transaction_and_no_read(tmp_path):
    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "1s"
[policies.idle]
time_window = "6h"
[policies.budget]
daily = "1000"
""")
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0))
    w.start()
    try:
        w.tick(clock.now())
        w.writer.flush(10)
        counts = _count_transactions(w.ledger.engine)
        for i in range(TICKS):
            clock.advance(1)
            # progress arrives between ticks, as the job prints it
            w._on_text("stdout", "".join(f"step {i * 10 + j} loss: {1.0 / (1 + i + j):.5f}\n" for j in range(10)))
            w.tick(clock.now())
            assert w.writer.flush(10).complete
        assert counts["rollback"] == 0, "a tick opened a read session"
        assert counts["begin"] == counts["commit"] <= TICKS
        assert counts["commit"] >= TICKS // 2  # the writes did happen, batched
        assert counts["threads"] == {"costctl-ledger-writer"}, "only the writer thread touches the ledger"
    finally:
        w.finish(0, "completed")


def test_a_failing_write_in_a_batch_loses_only_itself(tmp_path):
    """A non-transient failure inside the batch: the batch is rolled back and its writes run
    one by one, so the good ones are written."""
    from datetime import timedelta

    from costctl.ledger.db import Ledger
    from costctl.ledger.writer import LedgerWriter
    from costctl.records import ProgressPoint

    url = f"sqlite:///{tmp_path / 'l.db'}"
    ledger = Ledger.open(url)
    pk = ledger.ensure_instance("sim", "i-1", gpu=None, gpu_count=0, billing="on-demand",
                                price_per_hour=None, currency="USD")
    run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
    lines: list[str] = []
    writer = LedgerWriter(ledger, say=lines.append)
    with writer.hold():
        good1 = writer.record_progress(run, [ProgressPoint(time=T0, value=1.0)])
        bad = writer.finish_run("no-such-run", ended_at=T0, exit_code=0, status="completed")
        good2 = writer.record_progress(run, [ProgressPoint(time=T0 + timedelta(seconds=1), value=0.5)])
    assert writer.flush(10).complete
    assert good1.done and good2.done
    good1.result(0), good2.result(0)
    import pytest

    from costctl.errors import LedgerError
    with pytest.raises(LedgerError):
        bad.result(0)
    writer.close()
    from sqlalchemy import select

    from costctl.ledger.schema import Progress
    with ledger.session() as session:
        assert len(session.scalars(select(Progress)).all()) == 2
    assert any("no-such-run" in line for line in lines)
    ledger.close()


def test_telemetry_and_charges_linger_but_a_decision_or_a_flush_writes_at_once(tmp_path):
    import time
    from decimal import Decimal

    from costctl.ledger.db import Ledger
    from costctl.ledger.writer import LedgerWriter
    from costctl.records import Action, Decision, TelemetrySample

    ledger = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}")
    pk = ledger.ensure_instance("sim", "i-1", gpu=None, gpu_count=0, billing="on-demand",
                                price_per_hour=Decimal("1"), currency="USD")
    run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
    counts = _count_transactions(ledger.engine)
    writer = LedgerWriter(ledger, say=lambda line: None, linger_s=30)
    from datetime import timedelta
    writer.accrue(run, T0, Decimal("1"), "USD")  # a run's first charge is written at once
    deadline = time.monotonic() + 10
    while writer.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.pending == 0 and counts["commit"] == 1
    for i in range(5):  # five ticks' worth
        writer.record_samples(run, [TelemetrySample(time=T0 + timedelta(seconds=i + 1), cpu_percent=1.0)])
        writer.accrue(run, T0 + timedelta(seconds=i + 1), Decimal("1"), "USD")
    time.sleep(0.3)
    assert counts["commit"] == 1 and writer.pending == 6  # the five charges coalesced into one
    writer.record_decision(run, Decision(time=T0, policy="idle", action=Action.ADVISE, reason="r", key="k"))
    deadline = time.monotonic() + 10
    while writer.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.pending == 0 and counts["commit"] == 2  # all of it, in one transaction
    writer.record_samples(run, [TelemetrySample(time=T0 + timedelta(seconds=10), cpu_percent=1.0)])
    assert writer.flush(5).complete and counts["commit"] == 3
    writer.close()
    ledger.close()


def test_a_batch_writes_its_telemetry_in_one_insert_per_table(tmp_path):
    """Five ticks' samples and progress, with their coalesced charge, lingered into one batch:
    one executemany for the samples, one for the progress rows, every row written."""
    from datetime import timedelta
    from decimal import Decimal

    from sqlalchemy import func, select

    from costctl.ledger.db import Ledger
    from costctl.ledger.schema import Progress, Sample
    from costctl.ledger.writer import LedgerWriter
    from costctl.records import ProgressPoint, TelemetrySample

    ledger = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}")
    pk = ledger.ensure_instance("sim", "i-1", gpu=None, gpu_count=0, billing="on-demand",
                                price_per_hour=Decimal("1"), currency="USD")
    run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host="h")
    inserts: dict[str, int] = {}

    def on_execute(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("INSERT INTO"):
            table = statement.split()[2]
            inserts[table] = inserts.get(table, 0) + 1

    event.listen(ledger.engine, "before_cursor_execute", on_execute)
    writer = LedgerWriter(ledger, say=lambda line: None)
    with writer.hold():
        for i in range(5):
            at = T0 + timedelta(seconds=i + 1)
            writer.record_samples(run, [TelemetrySample(time=at, cpu_percent=1.0)])
            writer.record_progress(run, [ProgressPoint(time=at, value=1.0 / (i + 1))])
            writer.accrue(run, at, Decimal("1"), "USD")
    assert writer.flush(10).complete
    writer.close()
    assert inserts.get("samples") == 1 and inserts.get("progress") == 1
    with ledger.session() as s:
        assert s.scalar(select(func.count()).select_from(Sample)) == 5
        assert s.scalar(select(func.count()).select_from(Progress)) == 5
    ledger.close()
