"""The ledger off the watch's path: :class:`LedgerWriter`, one daemon thread with a bounded queue.

Every write of a running watch (telemetry, progress, charges, decisions, checkpoint and waste
rows, the end of a run, stop events) is submitted here and executed by one thread, in the order
submitted; the watch never waits on the database. Each write has a kind:

* **telemetry** (samples, progress): when the queue is at its bound the OLDEST telemetry write
  is dropped (counted, reported when the ledger returns);
* **durable** (everything else): never dropped. Consecutive accruals of one run at one rate
  and currency are coalesced to the latest ``until`` (an accrual covers any gap since the
  run's last charge: :mod:`costctl.ledger.accrual`), so an outage queues one charge per run.

The thread takes everything queued (up to ``max_batch`` writes) and runs it in ONE transaction
(:meth:`~costctl.ledger.db.Ledger.batch`); :meth:`LedgerWriter.hold` lets a tick queue its
writes (telemetry, progress, the charge, its decisions) before the thread starts, so a tick
costs one short write transaction. When a batch fails for a reason other than an outage, its
writes are run again one by one, so one bad write loses only itself.

A write whose result a later one needs (a checkpoint request's id for its completion, a
decision's id for its stop event) returns a :class:`Ticket`; pass the ticket itself as the
later write's argument: it is replaced by its value when that write runs (order guarantees the
earlier one ran first).

When the ledger is unreachable or locked (a :class:`~costctl.errors.LedgerError` caused by a
driver ``OperationalError``/``InterfaceError``: server down, connection dropped, SQLite busy
past its timeout) the write is kept and retried with capped exponential backoff (tenacity);
the outage is said once, and its end once. Any other failure (no such run, a constraint) drops
that one write with one line. :meth:`LedgerWriter.flush` waits for the queue to drain and, at
its deadline, says plainly what was not written.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import exc as sa_exc
from tenacity import Retrying, RetryCallState, retry_if_exception, stop_never, wait_exponential

from ..errors import LedgerError
from ..i18n import _
from ..money import cost_of
from ..progress.batch import PointBatch
from .progress_store import ProgressRows
from .sample_rollup import DEFAULT_MAX_ROWS as DEFAULT_COMPACT_ROWS

TELEMETRY = "telemetry"
DURABLE = "durable"

#: The writes a batch merges (:meth:`Ledger.record_telemetry`): return nothing, need no ticket.
_MERGED = frozenset({"record_samples", "record_progress"})


#: Guards the hand-over between a ticket's writer and a waiter (:meth:`Ticket.result`): most
#: tickets are never waited for, so their Event is made only when one is.
_TICKET_LOCK = threading.Lock()


class Ticket:
    """The result of one submitted write, available once the writer thread executed it.

    Pass a ticket as an argument of a later write to use its value there."""

    __slots__ = ("what", "_done", "_event", "_value", "_error")

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = False
        self._event: threading.Event | None = None  # made by the first result() that must wait
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """The write was executed (or failed for good, or was dropped)."""
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The write's return value (e.g. a row id), waiting up to ``timeout`` seconds.

        Raises:
            TimeoutError: not executed within ``timeout``.
            LedgerError: the write failed for good or was dropped.
        """
        if not self._done:
            with _TICKET_LOCK:
                if not self._done and self._event is None:
                    self._event = threading.Event()
                event = self._event
            if event is not None and not event.wait(timeout):
                raise TimeoutError(f"{self.what}: not written within {timeout}s")
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self) -> None:
        with _TICKET_LOCK:
            self._done = True
            event = self._event
        if event is not None:
            event.set()

    def _resolve(self, value: Any) -> None:
        self._value = value
        self._settle()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._settle()

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("failed" if self._error else repr(self._value))
        return f"<Ticket {self.what}: {state}>"


@dataclass
class _Op:
    seq: int
    kind: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ticket: Ticket
    what: str
    accrual_key: tuple[str, Decimal, str] | None = None
    started: bool = False
    at: float = field(default_factory=time.monotonic)  # when it was queued (monotonic seconds)


@dataclass(frozen=True)
class FlushResult:
    """What :meth:`LedgerWriter.flush` left unwritten (all zero/empty when everything was written).

    Attributes:
        pending: writes still queued.
        charges: per (run id, currency): ``(from, to, amount)`` of the spend not written.
        dropped_telemetry: telemetry writes dropped at the queue's bound over the writer's life.
    """

    pending: int
    charges: dict[tuple[str, str], tuple[datetime, datetime, Decimal]] = field(default_factory=dict)
    dropped_telemetry: int = 0

    @property
    def complete(self) -> bool:
        """Everything submitted was written (or failed for good and was reported)."""
        return self.pending == 0


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is the ledger being unreachable or locked (worth retrying): a
    :class:`LedgerError` raised from a driver OperationalError/InterfaceError or a pool timeout."""
    if not isinstance(error, LedgerError):
        return False
    cause = error.__cause__
    return isinstance(cause, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)) or (
        isinstance(cause, sa_exc.DBAPIError) and bool(cause.connection_invalidated))


class LedgerWriter:
    """One daemon thread that writes to ``ledger`` in submission order (see the module docstring).

    Args:
        ledger: the :class:`~costctl.ledger.db.Ledger` (anything with its methods).
        say: prints one of costctl's own lines (called from the writer thread).
        max_pending: the queue's bound, in writes; at the bound the oldest telemetry write is
            dropped (durable writes are kept beyond it).
        retry_initial_s / retry_max_s: backoff between retries of a failing write, seconds
            (exponential from the first, capped at the second).
        charge_start: for :meth:`flush`'s report: where a run's unwritten charges start
            (``run_id -> datetime``; the writer also remembers the end of each run's last
            written accrual).
        sleep: ``(seconds) -> None`` between retries; the default waits on an event that
            :meth:`flush` and :meth:`close` set, so a retry is never slept through at the end.
        max_batch: the most queued writes run in one transaction.
        linger_s: while only telemetry and charges are queued, wait up to this many seconds
            (since the oldest was queued) to write them in one transaction: a watch sampling
            every second then commits every few seconds (its spend is in memory; a watch
            killed outright leaves at most this much of its time uncharged). 0: write at once.

    Raises:
        nothing: writes never raise into the caller; results and failures come through tickets.
    """

    def __init__(self, ledger: Any, *, say: Callable[[str], None], max_pending: int = 10_000,
                 retry_initial_s: float = 0.5, retry_max_s: float = 30.0,
                 charge_start: Callable[[str], datetime | None] | None = None,
                 sleep: Callable[[float], None] | None = None, name: str = "costctl-ledger-writer",
                 max_batch: int = 1000, linger_s: float = 0.0) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.ledger = ledger
        self.say = say
        self.max_pending = max_pending
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._charge_start = charge_start
        self._sleep = sleep
        self._queue: deque[_Op] = deque()
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._seq = itertools.count(1)
        self._closed = False
        self._abandon = False
        self._flushing = False
        self._dropped = 0  # telemetry dropped, whole life
        self._written_to: dict[str, datetime] = {}  # run -> end of its last written accrual
        # outage state (writer thread only, read under _cond for reports)
        self._down_since: float | None = None
        self._down_dropped_at_start = 0
        self._down_written = 0
        self._back_after: float | None = None
        self._back_target: int | None = None
        self.max_batch = max_batch
        self.linger_s = linger_s
        self._held = 0  # hold() depth: the writer starts no transaction while a tick queues its writes
        self._idle = False  # the writer thread waits with no deadline (nothing queued, or held)
        self._newest_durable: _Op | None = None  # the last durable write queued (started once written)
        self._wake_at_release = False  # a write queued inside hold() must be written at once
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ submitting
    @contextmanager
    def hold(self) -> Iterator[None]:
        """Queue the writes submitted inside the block as one batch: the writer thread starts no
        transaction until the block ends, then writes everything queued in one (a tick's
        telemetry, progress and charge: one short write transaction per tick)."""
        with self._cond:
            self._held += 1
        try:
            yield
        finally:
            with self._cond:
                self._held -= 1
                # The writer is woken only when it must look: it sleeps with no deadline, or a
                # write that is not lingered over was queued (a lingering writer wakes at its
                # deadline by itself: one wake-up per write transaction, not one per write).
                if not self._held and self._queue and (self._idle or self._wake_at_release):
                    self._wake_at_release = False
                    self._cond.notify_all()

    def _queued(self, op: _Op) -> None:
        """``op`` was queued: wake the writer thread if it must look now (caller holds _cond)."""
        urgent = self.linger_s <= 0 or not self._lingerable(op)
        if self._held:
            self._wake_at_release = self._wake_at_release or urgent
            return
        if urgent or self._idle:
            self._cond.notify_all()

    def submit(self, method: str, *args: Any, kind: str = DURABLE, what: str | None = None,
               **kwargs: Any) -> Ticket:
        """Queue ``ledger.<method>(*args, **kwargs)``; returns its :class:`Ticket`. Arguments
        that are tickets are replaced by their values when it runs. ``kind`` is
        :data:`TELEMETRY` (droppable) or :data:`DURABLE` (never dropped).

        Raises:
            RuntimeError: after :meth:`close`.
        """
        if kind not in (TELEMETRY, DURABLE):
            raise ValueError(f"kind must be {TELEMETRY!r} or {DURABLE!r}")
        ticket = Ticket(what or method)
        with self._cond:
            if self._closed:
                raise RuntimeError("the ledger writer is closed")
            op = _Op(next(self._seq), kind, method, args, kwargs, ticket, what or method)
            self._make_room()
            self._queue.append(op)
            if kind == DURABLE:
                self._newest_durable = op
            self._queued(op)
        return ticket

    def _make_room(self) -> None:
        """At the bound, drop the oldest queued telemetry write (caller holds _cond)."""
        while len(self._queue) >= self.max_pending:
            victim = next((op for op in self._queue if op.kind == TELEMETRY and not op.started), None)
            if victim is None:
                return  # only durable writes: they are kept beyond the bound
            self._queue.remove(victim)
            self._dropped += 1
            victim.ticket._fail(LedgerError(_("{what}: dropped (the ledger write queue was full)").format(
                what=victim.what)))

    def record_samples(self, run_id: str, samples: Any) -> Ticket:
        """Telemetry (droppable): :meth:`Ledger.record_samples`."""
        return self.submit("record_samples", run_id, list(samples), kind=TELEMETRY, what=_("record telemetry"))

    def record_progress(self, run_id: str, points: Any) -> Ticket:
        """Telemetry (droppable): :meth:`Ledger.record_progress`. A
        :class:`~costctl.progress.batch.PointBatch` or a progress store's
        :class:`~costctl.ledger.progress_store.ProgressRows` is passed as it is (the caller
        hands it over); other iterables of points are copied into a list."""
        if not isinstance(points, PointBatch | ProgressRows):
            points = list(points)
        return self.submit("record_progress", run_id, points, kind=TELEMETRY, what=_("record progress"))

    def compact(self, now: datetime, retention: timedelta, *, max_rows: int = DEFAULT_COMPACT_ROWS) -> Ticket:
        """Telemetry (droppable): one bounded retention pass, :meth:`Ledger.compact` (its
        ticket's result is the :class:`~costctl.ledger.sample_rollup.CompactResult`; not
        ``done``: submit another later)."""
        return self.submit("compact", now, retention, max_rows=max_rows, kind=TELEMETRY, what=_("compact telemetry"))

    def accrue(self, run_id: str, until: datetime, rate_per_hour: Decimal, currency: str) -> Ticket:
        """Durable: charge ``run_id`` up to ``until`` (:meth:`Ledger.accrue`). Coalesced with the
        newest queued durable write when that is an accrual of the same run, rate and currency:
        it then charges up to the later ``until`` and its ticket is returned."""
        key = (run_id, Decimal(rate_per_hour), currency.upper())
        with self._cond:
            if self._closed:
                raise RuntimeError("the ledger writer is closed")
            # The newest queued durable write (the queue is in order: once it was taken for
            # writing, every older one was too).
            last = self._newest_durable
            if last is not None and not last.started and last.accrual_key == key:
                if until > last.args[1]:
                    last.args = (run_id, until, rate_per_hour, currency)
                return last.ticket
            what = _("record spend")
            ticket = Ticket(what)
            op = _Op(next(self._seq), DURABLE, "accrue", (run_id, until, rate_per_hour, currency), {}, ticket,
                     what, accrual_key=key)
            self._make_room()
            self._queue.append(op)
            self._newest_durable = op
            self._queued(op)
        return ticket

    def record_decision(self, run_id: str, decision: Any, *, outcome: str | None = None,
                        dry_run: bool = False) -> Ticket:
        """Durable: :meth:`Ledger.record_decision`; the ticket resolves to the decision's id."""
        return self.submit("record_decision", run_id, decision, outcome=outcome, dry_run=dry_run,
                           what=_("record a decision"))

    def record_checkpoint_request(self, run_id: str, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.record_checkpoint_request`; the ticket resolves to its id."""
        return self.submit("record_checkpoint_request", run_id, what=_("record a checkpoint request"), **kwargs)

    def complete_checkpoint(self, checkpoint_id: int | Ticket, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.complete_checkpoint` (``checkpoint_id`` may be the request's ticket)."""
        return self.submit("complete_checkpoint", checkpoint_id, what=_("record a checkpoint outcome"), **kwargs)

    def record_waste(self, run_id: str, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.record_waste`."""
        return self.submit("record_waste", run_id, what=_("record waste"), **kwargs)

    def finish_run(self, run_id: str, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.finish_run`."""
        return self.submit("finish_run", run_id, what=_("record the end of the run"), **kwargs)

    def record_stop_event(self, run_id: str, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.record_stop_event` (``decision_id`` may be the decision's ticket)."""
        return self.submit("record_stop_event", run_id, what=_("record a stop event"), **kwargs)

    def set_decision_outcome(self, decision_id: int | Ticket, outcome: str, **kwargs: Any) -> Ticket:
        """Durable: :meth:`Ledger.set_decision_outcome` (``decision_id`` may be the decision's ticket)."""
        return self.submit("set_decision_outcome", decision_id, outcome, what=_("record a decision's outcome"),
                           **kwargs)

    # ------------------------------------------------------------------ state
    @property
    def pending(self) -> int:
        """Writes queued or being written."""
        with self._cond:
            return len(self._queue)

    @property
    def dropped_telemetry(self) -> int:
        """Telemetry writes dropped at the bound so far."""
        with self._cond:
            return self._dropped

    @property
    def outage(self) -> bool:
        """The ledger is unreachable now (a write is being retried)."""
        return self._down_since is not None

    # ------------------------------------------------------------------ the end
    def flush(self, timeout_s: float) -> FlushResult:
        """Wait up to ``timeout_s`` seconds for every queued write; retries are not slept through.

        At the deadline with writes left (the ledger is still down) it says, in one line, what
        was not written: the charges per run (from, to, amount) and how many other writes.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._flushing = True
            self._cond.notify_all()  # a lingering writer writes now
            self._wake.set()  # a long backoff is cut short: retry at least every second now
            while self._queue and not self._abandon:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            self._flushing = False
            result = self._unwritten()
        if not result.complete:
            parts = [_("{run}: {amount} {currency} from {start} to {end}").format(
                         run=run[:8], amount=amount, currency=cur, start=start.isoformat(), end=end.isoformat())
                     for (run, cur), (start, end, amount) in result.charges.items()]
            if parts:
                line = _("costctl: the ledger is still unreachable after {timeout:g}s: {pending} writes were NOT "
                         "written (charges not recorded: {charges}); `costctl bill` will not show them")
            else:
                line = _("costctl: the ledger is still unreachable after {timeout:g}s: {pending} writes were NOT "
                         "written (no charges among them); `costctl bill` will not show them")
            self.say(line.format(timeout=timeout_s, pending=result.pending, charges="; ".join(parts)))
        return result

    def _unwritten(self) -> FlushResult:
        charges: dict[tuple[str, str], tuple[datetime, datetime, Decimal]] = {}
        for op in self._queue:
            if op.accrual_key is None:
                continue
            run_id, until, rate, currency = op.args
            key = (run_id, currency.upper())
            if key in charges:
                start, end, amount = charges[key]
                charges[key] = (start, max(end, until), amount + cost_of(Decimal(rate), max(until - end, timedelta(0))))
                continue
            start = self._written_to.get(run_id) or (self._charge_start(run_id) if self._charge_start else None)
            if start is not None:
                charges[key] = (start, until, cost_of(Decimal(rate), max(until - start, timedelta(0))))
        return FlushResult(pending=len(self._queue), charges=charges, dropped_telemetry=self._dropped)

    def close(self, timeout_s: float = 0.0) -> FlushResult:
        """:meth:`flush` for ``timeout_s``, then stop the thread (writes still queued are
        abandoned, their tickets fail). Safe to call twice."""
        result = self.flush(timeout_s) if timeout_s > 0 else self._snapshot()
        with self._cond:
            self._closed = True
            self._abandon = True
            self._cond.notify_all()
        self._wake.set()
        self._thread.join(5)
        with self._cond:
            for op in self._queue:
                op.ticket._fail(LedgerError(_("{what}: not written (the ledger was unreachable at the end)").format(
                    what=op.what)))
            self._queue.clear()
        return result

    def _snapshot(self) -> FlushResult:
        with self._cond:
            return self._unwritten()

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            wait=wait_exponential(multiplier=self._retry_initial_s, min=self._retry_initial_s, max=self._retry_max_s),
            stop=self._stop_retrying,
            sleep=self._sleep_between,
            before_sleep=self._on_retry,
            reraise=True,
        )
        while True:
            with self._cond:
                while (not self._queue or self._held or self._lingering()) and not self._abandon:
                    timeout = self._linger_left() if self._queue and not self._held else None
                    self._idle = timeout is None
                    self._cond.wait(timeout)
                self._idle = False
                if self._abandon:
                    return
                ops = list(itertools.islice(self._queue, self.max_batch))
                for op in ops:
                    op.started = True
            if len(ops) > 1 and hasattr(self.ledger, "batch"):
                try:
                    values = retrying(self._execute_batch, ops)
                except BaseException as error:  # noqa: BLE001 - one of them failed for good: one by one
                    if self._abandon and is_transient(error):
                        return
                    values = None
                if values is not None:
                    for op, value in zip(ops, values):
                        self._done(op, value)
                    continue
            for op in ops:
                try:
                    value = retrying(self._execute, op)
                except BaseException as error:  # noqa: BLE001 - one write failed for good: say it, go on
                    if self._abandon and is_transient(error):
                        return
                    with self._cond:
                        self._queue.popleft()
                        self._cond.notify_all()
                    op.ticket._fail(error if isinstance(error, LedgerError) else LedgerError(f"{op.what}: {error}"))
                    message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
                    self.say(_("costctl: a ledger write failed and was not recorded ({what}): {error}").format(
                        what=op.what, error=message))
                    continue
                self._done(op, value)

    def _lingering(self) -> bool:
        """Only telemetry and charges are queued, the oldest for less than ``linger_s``: wait
        to write them together (caller holds _cond). A decision, a run's end, a run's first
        charge, a flush or a close write at once."""
        if self.linger_s <= 0 or self._flushing or self._closed or not self._queue:
            return False
        if time.monotonic() - self._queue[0].at >= self.linger_s:
            return False
        # A run's first charge is written at once (the bill shows the run from its start).
        return all(self._lingerable(op) for op in self._queue)

    def _lingerable(self, op: _Op) -> bool:
        """Whether ``op`` may wait for the linger (telemetry, or a charge of a run already charged)."""
        return op.kind == TELEMETRY or (op.accrual_key is not None and op.args[0] in self._written_to)

    def _linger_left(self) -> float | None:
        if not self._lingering():
            return None
        return max(0.01, self.linger_s - (time.monotonic() - self._queue[0].at))

    def _done(self, op: _Op, value: Any) -> None:
        """``op`` (the head of the queue) was written: dequeue it and resolve its ticket."""
        with self._cond:
            self._queue.popleft()
            if op.accrual_key is not None:
                self._written_to[op.args[0]] = op.args[1]
            self._cond.notify_all()
        op.ticket._resolve(value)
        self._after_success(op)

    def _execute_batch(self, ops: list[_Op]) -> list[Any]:
        """Every op of ``ops`` in one transaction (:meth:`Ledger.batch`); the values in order.
        A ticket of an earlier op of the batch is replaced by that op's value."""
        values: dict[int, Any] = {}
        out: list[Any] = []
        merge = hasattr(self.ledger, "record_telemetry")
        samples: list[tuple[str, Any]] = []
        progress: list[tuple[str, Any]] = []

        def write_telemetry() -> None:
            if samples or progress:
                self.ledger.record_telemetry(samples=samples, progress=progress)
                samples.clear()
                progress.clear()

        with self.ledger.batch(_("write to the ledger")):
            for op in ops:
                if merge and op.method in _MERGED and not op.kwargs \
                        and not any(isinstance(a, Ticket) for a in op.args):
                    # The batch's telemetry goes in one executemany per table, written before
                    # the next write that is not a charge (charges touch other tables).
                    (samples if op.method == "record_samples" else progress).append(op.args)
                    values[id(op.ticket)] = None
                    out.append(None)
                    continue
                if op.method != "accrue":
                    write_telemetry()
                value = self._execute(op, values)
                values[id(op.ticket)] = value
                out.append(value)
            write_telemetry()
        return out

    def _execute(self, op: _Op, batch: dict[int, Any] | None = None) -> Any:
        def arg(a: Any) -> Any:
            if not isinstance(a, Ticket):
                return a
            if batch is not None and id(a) in batch:
                return batch[id(a)]
            return a.result(0)

        args = tuple(arg(a) for a in op.args)
        kwargs = {k: arg(v) for k, v in op.kwargs.items()}
        return getattr(self.ledger, op.method)(*args, **kwargs)

    def _stop_retrying(self, state: RetryCallState) -> bool:
        return self._abandon or stop_never(state)

    def _sleep_between(self, seconds: float) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
            return
        self._wake.wait(min(seconds, 1.0) if self._flushing else seconds)
        self._wake.clear()

    def _on_retry(self, state: RetryCallState) -> None:
        if self._down_since is not None:
            return
        error = state.outcome.exception() if state.outcome is not None else None
        line = getattr(error, "message", None) or str(error)
        with self._cond:
            held = len(self._queue)
            self._down_dropped_at_start = self._dropped
        self._down_since = time.monotonic()
        self._down_written = 0
        self._back_target = None
        self.say(_("costctl: the ledger is unreachable ({error}): {held} writes are held in memory and retried").format(
            error=line, held=held))

    def _after_success(self, op: _Op) -> None:
        if self._down_since is None:
            return
        self._down_written += 1
        if self._back_target is None:  # the first write after the outage: the ledger is back
            self._back_after = time.monotonic() - self._down_since
            with self._cond:
                self._back_target = self._queue[-1].seq if self._queue else op.seq
        if op.seq >= self._back_target:  # what was held when it came back is written
            with self._cond:
                dropped = self._dropped - self._down_dropped_at_start
            # measured from the first write that failed: writes are batched (the watch's linger), so
            # the outage may have begun up to one batch before it
            self.say(_("costctl: the ledger is back, {seconds:.0f}s after a write first failed: {written} writes "
                       "flushed ({dropped} telemetry rows dropped)").format(
                seconds=self._back_after, written=self._down_written, dropped=dropped))
            self._down_since = None
            self._back_target = None


__all__ = ["DURABLE", "TELEMETRY", "FlushResult", "LedgerWriter", "Ticket", "is_transient"]
