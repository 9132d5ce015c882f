"""The ledger writer (costctl.ledger.writer): order, tickets, the bound, coalescing, outages, flush."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import exc as sa_exc

from costctl.errors import LedgerError
from costctl.ledger.writer import LedgerWriter, Ticket, is_transient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
RATE = Decimal("3.60")


def locked() -> LedgerError:
    err = LedgerError("cannot record spend (sqlite:///x.db): database is locked")
    err.__cause__ = sa_exc.OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))
    return err


class FakeLedger:
    """Records every call; raises a transient LedgerError while ``down`` is set."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.calls: list[tuple[str, tuple, dict]] = []
        self.attempts = 0
        self._next_id = 100

    def _call(self, name: str, *args, **kwargs):
        self.attempts += 1
        if self.down.is_set():
            raise locked()
        self.calls.append((name, args, kwargs))
        self._next_id += 1
        return self._next_id

    def record_samples(self, run_id, samples):
        return self._call("record_samples", run_id, samples)

    def record_progress(self, run_id, points):
        return self._call("record_progress", run_id, points)

    def accrue(self, run_id, until, rate, currency):
        return self._call("accrue", run_id, until, rate, currency)

    def record_decision(self, run_id, decision, *, outcome=None, dry_run=False):
        return self._call("record_decision", run_id, decision, outcome=outcome)

    def record_checkpoint_request(self, run_id, **kw):
        return self._call("record_checkpoint_request", run_id, **kw)

    def complete_checkpoint(self, checkpoint_id, **kw):
        return self._call("complete_checkpoint", checkpoint_id, **kw)

    def record_stop_event(self, run_id, *, decision_id, time, state, attempt, detail):
        return self._call("record_stop_event", run_id, decision_id=decision_id, state=state)

    def finish_run(self, run_id, **kw):
        return self._call("finish_run", run_id, **kw)

    def record_waste(self, run_id, **kw):
        if kw.get("reason") == "bad":
            raise LedgerError("no run 'x' in the ledger")
        return self._call("record_waste", run_id, **kw)


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, line: str) -> None:
        with self.changed:
            self.lines.append(line)
            self.changed.notify_all()

    def wait_for(self, text: str, timeout: float = 10) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: any(text in ln for ln in self.lines), timeout), self.lines

    def count(self, text: str) -> int:
        return sum(text in ln for ln in self.lines)


@pytest.fixture
def fake():
    return FakeLedger()


@pytest.fixture
def said():
    return Said()


def make(fake, said, **kw) -> LedgerWriter:
    kw.setdefault("sleep", lambda s: time.sleep(0.002))
    return LedgerWriter(fake, say=said, **kw)


def names(fake) -> list[str]:
    return [c[0] for c in fake.calls]


def test_transient_errors_are_told_from_lasting_ones():
    assert is_transient(locked())
    assert not is_transient(LedgerError("no run 'x' in the ledger"))
    assert not is_transient(ValueError("x"))


def test_writes_run_in_order_and_a_ticket_feeds_a_later_write(fake, said):
    w = make(fake, said)
    decision = w.record_decision("r1", "stop", outcome="stopped")
    w.submit("record_stop_event", "r1", decision_id=decision, time=T0, state="requested", attempt=1, detail=None)
    request = w.record_checkpoint_request("r1", reason="periodic", requested_at=T0, deadline=T0)
    w.complete_checkpoint(request, outcome="saved", completed_at=T0)
    assert w.flush(5).complete
    assert names(fake) == ["record_decision", "record_stop_event", "record_checkpoint_request",
                           "complete_checkpoint"]
    assert isinstance(decision, Ticket) and fake.calls[1][2]["decision_id"] == decision.result(0) == 101
    assert fake.calls[3][1][0] == request.result(0) == 103
    w.close()
    assert said.lines == []


def test_an_outage_holds_writes_says_so_once_and_its_end_once(fake, said):
    fake.down.set()
    w = make(fake, said)
    first = w.record_decision("r1", "d1")
    said.wait_for("unreachable")
    for i in range(5):
        w.record_samples("r1", [i])
        w.record_decision("r1", f"d{i + 2}")
    while fake.attempts < 20:  # several retries, no second outage line
        time.sleep(0.005)
    assert not first.done and w.outage
    fake.down.clear()
    assert w.flush(5).complete
    assert first.result(0) == 101
    assert said.count("the ledger is unreachable") == 1 and said.count("after a write first failed") == 1
    assert "database is locked" in said.lines[0] and "1 writes are held in memory and retried" in said.lines[0]
    assert "11 writes flushed (0 telemetry rows dropped)" in said.lines[1]
    assert [c[1][1] for c in fake.calls] == ["d1", [0], "d2", [1], "d3", [2], "d4", [3], "d5", [4], "d6"]
    w.close()


def test_at_the_bound_the_oldest_telemetry_goes_first_and_durable_writes_stay(fake, said):
    fake.down.set()
    w = make(fake, said, max_pending=4)
    w.record_decision("r1", "head")
    said.wait_for("unreachable")
    samples = [w.record_samples("r1", [i]) for i in range(4)]
    decisions = [w.record_decision("r1", f"d{i}") for i in range(4)]
    assert w.pending == 1 + 4  # telemetry all gone; durable kept past the bound
    assert all(s.done for s in samples)
    with pytest.raises(LedgerError, match="dropped"):
        samples[0].result(0)
    late = w.record_samples("r1", ["late"])  # durable only queued: a new sample still gets in
    fake.down.clear()
    assert w.flush(5).complete
    assert [c[1][1] for c in fake.calls] == ["head", "d0", "d1", "d2", "d3", ["late"]]
    assert late.result(0) is not None and w.dropped_telemetry == 4
    assert "(4 telemetry rows dropped)" in said.lines[-1]
    w.close()


def test_dropping_keeps_the_newest_telemetry(fake, said):
    fake.down.set()
    w = make(fake, said, max_pending=3)
    w.record_decision("r1", "head")
    said.wait_for("unreachable")
    for i in range(6):
        w.record_samples("r1", [i])
    fake.down.clear()
    assert w.flush(5).complete
    assert [c[1][1] for c in fake.calls] == ["head", [4], [5]]
    w.close()


def test_accruals_of_one_run_at_one_rate_coalesce_to_the_latest_until(fake, said):
    fake.down.set()
    w = make(fake, said)
    w.record_decision("r1", "head")
    said.wait_for("unreachable")
    t1 = w.accrue("r1", T0 + timedelta(seconds=5), RATE, "USD")
    w.record_samples("r1", [1])  # telemetry in between does not break a run of accruals
    t2 = w.accrue("r1", T0 + timedelta(seconds=10), RATE, "usd")
    t3 = w.accrue("r1", T0 + timedelta(seconds=15), RATE, "USD")
    w.accrue("r1", T0 + timedelta(seconds=20), Decimal("1.00"), "USD")  # another rate: its own charge
    w.finish_run("r1", ended_at=T0, exit_code=0, status="completed")
    w.accrue("r1", T0 + timedelta(seconds=25), Decimal("1.00"), "USD")  # after a durable write: not merged
    assert t1 is t2 is t3
    fake.down.clear()
    assert w.flush(5).complete
    accruals = [(c[1][1], c[1][2]) for c in fake.calls if c[0] == "accrue"]
    assert accruals == [(T0 + timedelta(seconds=15), RATE), (T0 + timedelta(seconds=20), Decimal("1.00")),
                        (T0 + timedelta(seconds=25), Decimal("1.00"))]
    w.close()


def test_a_write_that_fails_for_good_is_said_and_the_next_ones_go_on(fake, said):
    w = make(fake, said)
    bad = w.record_waste("r1", reason="bad")
    good = w.record_waste("r1", reason="preemption")
    assert w.flush(5).complete
    with pytest.raises(LedgerError, match="no run"):
        bad.result(0)
    assert good.result(0) is not None
    assert said.count("a ledger write failed and was not recorded (record waste)") == 1
    w.close()


def test_flush_at_its_deadline_says_plainly_which_charges_were_not_written(fake, said):
    start = T0
    w = make(fake, said, charge_start=lambda run: start if run == "r1" else None)
    w.accrue("r1", T0 + timedelta(seconds=60), RATE, "USD")
    assert w.flush(5).complete  # the first minute is written
    fake.down.set()
    w.accrue("r1", T0 + timedelta(seconds=120), RATE, "USD")
    w.accrue("r1", T0 + timedelta(seconds=3600), RATE, "USD")
    w.finish_run("r1", ended_at=T0 + timedelta(seconds=3600), exit_code=0, status="completed")
    result = w.flush(0.3)
    assert not result.complete and result.pending == 2
    # from the end of the last written charge to the last accrual: 59 minutes at 3.60/h
    assert result.charges == {("r1", "USD"): (T0 + timedelta(seconds=60), T0 + timedelta(seconds=3600),
                                              Decimal("3.54"))}
    line = said.lines[-1]
    assert "NOT written" in line and "3.54 USD" in line and "2 writes" in line
    assert (T0 + timedelta(seconds=60)).isoformat() in line
    final = w.close()
    assert final.pending == 2
    assert names(fake) == ["accrue"]
