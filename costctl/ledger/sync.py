"""Fleet mode's sender: :class:`CentralSync` sends a ledger's outbox to the central ledger.

A watch with ``[ledger] central_url`` keeps writing its own ledger (the SQLite file) from its
writer thread; this module's one daemon thread wakes every ``[ledger] sync_interval``, reads
what the outbox names (:mod:`costctl.ledger.outbox`), writes it into the central PostgreSQL
ledger in one transaction per batch (:func:`costctl.ledger.central.apply`: idempotent upserts
and the charge merge rule), and only after that commit takes the entries out of the outbox.
Nothing on the watch's path waits for it: no tick, no stop, no write touches the network.

When the central ledger cannot be reached (or written) the batch is retried with capped
exponential backoff (tenacity), the outage is said once and its end once; the rows wait in the
outbox meanwhile (on disk, so a kill -9 or a reboot loses nothing committed locally: the next
watch on this machine, or ``costctl db sync``, sends them). A batch that fails for another
reason is sent again one row at a time, so one row the central ledger refuses (said once)
holds up nothing else. The central connections have TCP keepalives, so a partition that drops
packets ends a stuck call within about a minute rather than never, and are checked before use
(``pool_pre_ping``): a connection the central server dropped meanwhile (it restarted) is
replaced on the spot, not taken for an outage.

After the outbox, each pass sends the telemetry (``samples``, ``progress``,
``progress_buckets``) by cursor (:mod:`costctl.ledger.telemetry_sync`), so ``costctl serve``
on the central ledger shows a fleet watch's GPU use and status line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_never, wait_exponential

from ..errors import LedgerError, UsageError
from ..i18n import _
from . import central, outbox, telemetry_sync
from .engine import make_engine, parse_url, redact, translate_errors
from .writer import is_transient

#: Rows sent in one central transaction.
BATCH_ROWS = 500

#: libpq TCP keepalives for the central connections (seconds): a connection whose peer went
#: silent is found dead after about idle + interval * count = 60 s (libpq's parameters,
#: postgresql.org/docs/current/libpq-connect.html).
PG_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10", "keepalives_count": "3"}


def central_url(url: str) -> sa.URL:
    """The central ledger's URL, parsed (:func:`costctl.ledger.engine.parse_url`), with
    :data:`PG_KEEPALIVES` added to a PostgreSQL URL that does not set them.

    Raises:
        LedgerError: the text is not a database URL.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.update_query_dict({k: v for k, v in PG_KEEPALIVES.items() if k not in parsed.query})
    return parsed


def central_target(url: str | None, local_url: str) -> str | None:
    """The central ledger's URL for a ledger at ``local_url`` (``[ledger] central_url`` or
    ``costctl db sync --central``), or None when none is set.

    Raises:
        UsageError: (exit 2) it is the local ledger itself: its rows would be sent into themselves.
        LedgerError: (exit 2) the URL is not a database URL.
    """
    if url is None:
        return None
    central, local = parse_url(url), parse_url(local_url)
    if central.render_as_string(hide_password=False) == local.render_as_string(hide_password=False):
        raise UsageError(_("[ledger] central_url is this machine's own ledger ({url}): set it to the team's "
                           "central ledger, or leave it out").format(url=redact(central)))
    if central.get_backend_name() != "sqlite":  # an unknown dialect or a missing driver: said now, not later
        make_engine(central).dispose()
    return url


def open_central(url: str) -> Engine:
    """An engine on the central ledger, checked to answer and migrated to the newest schema (a
    migration runs in a child process; an empty database is created at the newest revision).
    Its pooled connections are checked before each use (``pool_pre_ping``): one the server
    dropped (a restart between two sends) is replaced, not reported as an outage.

    Raises:
        LedgerError: one line (unreachable, refused, a failed migration), password redacted.
    """
    from .reader import open_engine

    return open_engine(central_url(url).render_as_string(hide_password=False), isolated_migration=True,
                       pool_pre_ping=True)


class _Closing(Exception):
    """Ends the retries of a closing :class:`CentralSync`."""


class CentralSync:
    """Sends ``ledger``'s outbox to the central ledger at ``url`` (see the module docstring).

    Args:
        ledger: the local :class:`~costctl.ledger.db.Ledger` (anything with an ``engine``).
        url: the central ledger's SQLAlchemy URL (PostgreSQL; SQLite works too).
        say: prints one of costctl's own lines (called from the sending thread).
        interval_s: seconds between two sends (``[ledger] sync_interval``).
        retry_initial_s / retry_max_s: backoff between retries while the central ledger
            cannot be written, seconds (exponential from the first, capped at the second;
            default: ``interval_s``).
        batch_rows: outbox rows per central transaction.
        telemetry_batch_rows: telemetry rows per central transaction.
        open_engine: ``(url) -> Engine`` for the central ledger (default :func:`open_central`).

    Raises:
        nothing from the thread: every failure is said (once per outage) and retried.
    """

    def __init__(self, ledger: Any, url: str, *, say: Callable[[str], None], interval_s: float = 30.0,
                 retry_initial_s: float = 1.0, retry_max_s: float | None = None, batch_rows: int = BATCH_ROWS,
                 telemetry_batch_rows: int = telemetry_sync.TELEMETRY_BATCH_ROWS,
                 open_engine: Callable[[str], Engine] | None = None, name: str = "costctl-central-sync") -> None:
        if interval_s <= 0 or batch_rows < 1:
            raise ValueError("interval_s must be positive and batch_rows at least 1")
        self.ledger = ledger
        self.url = url
        self.shown = redact(url)
        self.say = say
        self.interval_s = interval_s
        self.batch_rows = batch_rows
        self.telemetry_batch_rows = max(1, telemetry_batch_rows)
        self._central_runs: set[str] = set()  # runs known to be in the central ledger
        self.telemetry_sent = 0  # telemetry rows sent (or found there) over this object's life
        self._open_engine = open_engine or open_central
        self._central: Engine | None = None
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s if retry_max_s is not None else max(interval_s, retry_initial_s)
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._closing = False
        self._started = 0  # attempts started / finished (under _cond)
        self._finished = 0
        self._last_ok = False
        self._failed: dict[tuple[str, str], str] = {}  # rows the central ledger refused, for this process's life
        self._down_since: float | None = None
        self._sent_before_outage = 0
        self.sent = 0  # rows sent over this object's life
        self._thread: threading.Thread | None = None
        self._name = name

    # ------------------------------------------------------------------ control
    def start(self) -> CentralSync:
        """Start the sending thread (its first send comes at once); returns self."""
        if self._thread is None:
            self._wake.set()
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return self

    def sync_now(self, timeout_s: float) -> bool:
        """Have the thread send now (cutting short its wait or backoff) and wait up to
        ``timeout_s`` seconds for that attempt. True when it emptied the outbox (rows the
        central ledger refused aside); False when it failed or did not end in time."""
        if self._thread is None or not self._thread.is_alive():
            return False
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self._started + 1
            self._wake.set()
            while self._finished < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return self._last_ok

    def close(self, timeout_s: float) -> int:
        """One last send (up to ``timeout_s`` seconds), then stop the thread. Returns the rows
        left in the outbox, and says how many when there are any (they are sent by the next
        watch on this machine, or ``costctl db sync``). Safe to call twice."""
        if self._closing:
            return 0
        if self._thread is not None:
            self.sync_now(timeout_s)
        with self._cond:
            self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(1.0)
        try:
            left = self.pending()
        except LedgerError:
            left = -1
        if left:
            self.say(_("costctl: {count} changes were not sent to the central ledger ({url}); they wait in this "
                       "machine's ledger: the next watch here, or `costctl db sync`, sends them").format(
                count=left if left > 0 else "?", url=self.shown))
        if self._thread is None or not self._thread.is_alive():
            self.dispose()
        return max(left, 0)

    def dispose(self) -> None:
        """Release the central ledger's connections (a later send opens new ones)."""
        if self._central is not None:
            self._central.dispose()

    @property
    def outage(self) -> bool:
        """The last send failed (the central ledger is unreachable, or refused the batch)."""
        return self._down_since is not None

    def pending(self) -> int:
        """Rows waiting in the outbox.

        Raises:
            LedgerError: the local ledger cannot be read.
        """
        with translate_errors(_("read the ledger"), self.ledger.engine.url), self.ledger.engine.connect() as conn:
            return outbox.count(conn)

    # ------------------------------------------------------------------ sending
    def check(self) -> None:
        """Connect to the central ledger (and migrate it to the newest schema) now.

        Raises:
            LedgerError: one line: it cannot be reached, or refused the connection or migration.
        """
        self._engine()

    def drain(self) -> int:
        """Send everything the outbox holds, batch by batch, in the calling thread, then the
        telemetry past its cursors (:meth:`send_telemetry`); returns the outbox rows sent. A row
        the central ledger refuses is said once and left in the outbox.

        Raises:
            LedgerError: the central (or the local) ledger cannot be reached or written; what
                was sent before stays sent.
        """
        sent = 0
        while True:
            with self._cond:
                skip = frozenset(self._failed)
            entries = self._read_entries(skip)
            if not entries:
                self.send_telemetry()
                return sent
            self._engine()  # one that cannot be opened is no row's fault: raised as it is
            try:
                sent += self._send(entries)
            except LedgerError as error:
                if is_transient(error):
                    raise
                sent += self._send_one_by_one(entries)

    def send_telemetry(self) -> int:
        """Send each telemetry table's rows past its cursor, batch by batch, in id order (see
        :mod:`costctl.ledger.telemetry_sync`); returns the rows sent (rows of runs the central
        ledger lacks are skipped, not counted).

        Raises:
            LedgerError: the central (or the local) ledger cannot be reached or written; the
                batches sent before stay sent, their cursors moved.
        """
        sent = 0
        local = self.ledger.engine
        for table in telemetry_sync.TELEMETRY_TABLES:
            while True:
                with translate_errors(_("read the ledger"), local.url), local.connect() as conn:
                    after = first = telemetry_sync.cursor(conn, table)
                    if after is None:
                        after = telemetry_sync.start_after(conn, table,
                                                           self._known_runs(telemetry_sync.local_run_ids(conn)))
                    rows = telemetry_sync.read_batch(conn, table, after, self.telemetry_batch_rows)
                if not rows:
                    if first is None:  # a first pass with nothing to send: where the next one starts
                        with translate_errors(_("write to the ledger"), local.url), \
                                local.execution_options(immediate=True).begin() as conn:
                            telemetry_sync.set_cursor(conn, table, after)
                    break
                known = self._known_runs({r.run_id for r in rows})
                rows = self._up_to_a_waiting_run(rows, known)
                if not rows:  # its run is still in the outbox: the next pass sends it, then these
                    break
                wanted = [r for r in rows if r.run_id in known]
                engine = self._engine()
                if wanted:
                    with translate_errors(_("write to the central ledger"), engine.url), engine.begin() as conn:
                        telemetry_sync.apply(conn, table, wanted)
                # Only now that the central ledger committed: a kill before this line sends the
                # batch again, which inserts nothing there.
                with translate_errors(_("write to the ledger"), local.url), \
                        local.execution_options(immediate=True).begin() as conn:
                    telemetry_sync.set_cursor(conn, table, int(rows[-1].id))
                sent += len(wanted)
                self.telemetry_sent += len(wanted)
                if len(rows) < self.telemetry_batch_rows:
                    break
        return sent

    def _up_to_a_waiting_run(self, rows: Sequence[Any], known: Collection[str]) -> Sequence[Any]:
        """``rows`` up to (not including) the first row of a run the central ledger lacks but
        this machine's outbox still holds (a run that began after this pass read the outbox, or
        waits out an outage): its telemetry is sent after the run, never skipped for good."""
        unknown = {r.run_id for r in rows} - set(known)
        if not unknown:
            return rows
        with self._cond:
            refused = {key for table, key in self._failed if table == "runs"}
        local = self.ledger.engine
        with translate_errors(_("read the ledger"), local.url), local.connect() as conn:
            waiting = outbox.waiting(conn, "runs", unknown - refused)
        for i, row in enumerate(rows):
            if row.run_id in waiting:
                return rows[:i]
        return rows

    def _known_runs(self, run_ids: Collection[str]) -> set[str]:
        """Those of ``run_ids`` the central ledger has (asked once per run until it has it)."""
        ask = set(run_ids) - self._central_runs
        if ask:
            engine = self._engine()
            with translate_errors(_("read the central ledger"), engine.url), engine.connect() as conn:
                self._central_runs |= telemetry_sync.runs_present(conn, ask)
        return set(run_ids) & self._central_runs

    def _read_entries(self, skip: frozenset[tuple[str, str]]) -> list[outbox.Entry]:
        with translate_errors(_("read the ledger"), self.ledger.engine.url), self.ledger.engine.connect() as conn:
            return outbox.pending(conn, limit=self.batch_rows, skip=skip)

    def _engine(self) -> Engine:
        if self._central is None:
            self._central = self._open_engine(self.url)
        return self._central

    def _send(self, entries: Sequence[outbox.Entry]) -> int:
        """Send ``entries``' rows in one central transaction, then take them out of the outbox."""
        local = self.ledger.engine
        with translate_errors(_("read the ledger"), local.url), local.connect() as conn, conn.begin():
            rows = central.read_rows(conn, entries)
        engine = self._engine()
        with translate_errors(_("write to the central ledger"), engine.url), \
                engine.execution_options(immediate=True).begin() as conn:
            central.apply(conn, rows)
        # Only now that the central ledger committed: a kill before this line sends the batch
        # again next time, which changes nothing there (every write is idempotent).
        with translate_errors(_("write to the ledger"), local.url), \
                local.execution_options(immediate=True).begin() as conn:
            outbox.acknowledge(conn, entries)
        self.sent += len(entries)
        return len(entries)

    def _send_one_by_one(self, entries: Sequence[outbox.Entry]) -> int:
        sent = 0
        for entry in entries:
            try:
                sent += self._send([entry])
            except LedgerError as error:
                if is_transient(error):
                    raise
                with self._cond:
                    self._failed[(entry.table, entry.key)] = error.message
                self.say(_("costctl: the central ledger refused a row ({table} {key}); it stays in this machine's "
                           "ledger: {error}").format(table=entry.table, key=entry.key, error=error.message))
        return sent

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=self._retry_initial_s, min=self._retry_initial_s, max=self._retry_max_s),
            stop=self._stop_retrying, sleep=self._backoff, before_sleep=self._on_failure, reraise=True)
        while True:
            self._sleep(self.interval_s)
            if self._closing:
                return
            try:
                retrying(self._attempt)
            except Exception:  # noqa: BLE001 - only when closing: the outbox keeps the rest
                return

    def _attempt(self) -> None:
        with self._cond:
            self._started += 1
        ok = False
        try:
            self.drain()
            ok = True
        except Exception:
            if self._central is not None:
                self._central.dispose()  # connections the outage cut are not reused
            raise
        finally:
            with self._cond:
                self._finished += 1
                self._last_ok = ok
                self._cond.notify_all()
        if self._down_since is not None:
            self.say(_("costctl: the central ledger is back, {seconds:.0f}s after a send first failed: {sent} changes "
                       "sent").format(seconds=time.monotonic() - self._down_since,
                                      sent=self.sent - self._sent_before_outage))
            self._down_since = None

    def _stop_retrying(self, state: RetryCallState) -> bool:
        return self._closing or stop_never(state)

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until :meth:`sync_now` or :meth:`close` wakes the thread."""
        self._wake.wait(seconds)
        self._wake.clear()

    def _backoff(self, seconds: float) -> None:
        """:meth:`_sleep` between two retries; once closing, no more retries (the outbox keeps the rest)."""
        self._sleep(seconds)
        if self._closing:
            raise _Closing

    def _on_failure(self, state: RetryCallState) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self._sent_before_outage = self.sent
        error = state.outcome.exception() if state.outcome is not None else None
        line = getattr(error, "message", None) or str(error)
        try:
            waiting: Any = self.pending()
        except LedgerError:
            waiting = "?"
        self.say(_("costctl: the central ledger is unreachable ({error}); this watch goes on guarding, and "
                   "{pending} changes wait in this machine's ledger until it is back").format(
            error=line, pending=waiting))


__all__ = ["BATCH_ROWS", "CentralSync", "PG_KEEPALIVES", "central_target", "central_url", "open_central"]
