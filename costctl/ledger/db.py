"""The :class:`Ledger`: the one object the watch loop writes through.

Every method is its own short transaction, committed before it returns, so a process killed
at any moment leaves the ledger as of its last completed call. Write transactions start with
``BEGIN IMMEDIATE`` on SQLite (see :mod:`costctl.ledger.engine`). Driver errors become one-line
:class:`~costctl.errors.LedgerError` messages.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..clock import ensure_utc, utcnow
from ..errors import LedgerError
from ..i18n import _
from ..numbers import INT64_MAX
from ..progress.batch import PointBatch
from ..records import Decision, ProgressPoint, TelemetrySample
from . import accrual, progress_store, sample_rollup, tables
from . import migrate as migrations
from . import outbox as outboxes
from .engine import redact, translate_errors
from .progress_store import ProgressRows
from .queries import spend_by_currency
from .reader import open_engine
from .summaries import RunUse, summarize
from .schema import (Charge, CheckpointRow, DecisionRow, Instance, Progress, ProgressBucket, Run, Sample,
                     StopEventRow, WasteRow)


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{what} must be an aware datetime (costctl times are UTC)")
    return ensure_utc(value)


#: The Core inserts of the telemetry writes, built once (executemany with one dict per row).
_SAMPLE_INSERT = insert(Sample.__table__)
_PROGRESS_INSERT = insert(Progress.__table__)
_BUCKET_INSERT = insert(ProgressBucket.__table__)


def _bytes(value: int | None) -> int | None:
    """A byte count as the BIGINT columns hold it: None when absent, negative or past 2**63 - 1
    (the readers keep to that range; this is the ledger's own guard, so no reading can fail
    the write)."""
    return value if value is not None and 0 <= value <= INT64_MAX else None


def _sample_rows(run_id: str, samples: Sequence[TelemetrySample]) -> list[dict[str, Any]]:
    """The ``samples`` rows of ``samples`` (see :meth:`Ledger.record_samples`)."""
    rows: list[dict[str, Any]] = []
    for sample in samples:
        when = _aware(sample.time, "sample time")
        source = sample.source
        gpu_status = sample.gpu_status.value
        for gpu in sample.gpus:
            rows.append({
                "run_id": run_id, "time": when, "gpu_index": gpu.index, "utilization": gpu.utilization,
                "memory_used_bytes": _bytes(gpu.memory_used_bytes), "memory_total_bytes": _bytes(gpu.memory_total_bytes),
                "power_w": gpu.power_w, "status": "error" if gpu.error else gpu_status, "source": source,
                "error": gpu.error,
            })
        rows.append({
            "run_id": run_id, "time": when, "gpu_index": None, "utilization": sample.cpu_percent,
            "memory_used_bytes": None, "memory_total_bytes": None, "power_w": None,
            "status": sample.cpu_status.value, "source": source, "error": None,
        })
    return rows


class Ledger:
    """Spend, telemetry, progress and decisions, in any SQLAlchemy database.

    Build it with :meth:`open`; use it as a context manager or call :meth:`close`.

    Attributes:
        outbox: fleet mode (``[ledger] central_url``): every write that changes a row the
            central ledger keeps also puts it in the ``outbox`` table, in the same transaction
            (:mod:`costctl.ledger.outbox`). Off by default.
    """

    def __init__(self, engine: Engine, *, outbox: bool = False) -> None:
        """Wrap an engine made by :func:`costctl.ledger.engine.make_engine` (tables must exist)."""
        self.engine = engine
        self.outbox = outbox
        self.url = redact(engine.url)
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(engine.execution_options(immediate=True), expire_on_commit=False)
        self._local = threading.local()  # .batch: the session of the open batch() of this thread

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, create: bool = True, isolated_migration: bool = False,
             outbox: bool = False) -> Ledger:
        """Open the ledger at ``url`` (any SQLAlchemy URL) and migrate it to the newest schema.

        With ``create`` (the default, used by ``costctl watch``) a SQLite file and its directory
        are created when missing; read-only commands (``costctl bill``) pass ``create=False``
        and get :class:`~costctl.ledger.engine.MissingLedgerError` instead, with nothing
        created. SQLite runs in WAL mode with a busy timeout. ``isolated_migration`` (the
        watch) runs a needed migration in a short-lived child process, so Alembic never stays
        in this process's memory (:func:`costctl.ledger.migrate.upgrade`). A database with no
        tables at all is created at the newest revision here, without Alembic
        (:func:`costctl.ledger.migrate.create_at_head`). ``outbox``: fleet mode (see the class).

        Raises:
            MissingLedgerError: ``create=False`` and the SQLite file does not exist.
            LedgerError: one line for a bad URL, a missing driver, an unwritable path, an
                unreachable server or a failed migration (password redacted).
        """
        engine = open_engine(url, migrate=migrate, create=create, isolated_migration=isolated_migration)
        return cls(engine, outbox=outbox)

    def close(self) -> None:
        """Release the database connections. Safe to call twice."""
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A read session (for queries such as :mod:`costctl.ledger.queries`); rolled back at exit."""
        with translate_errors(_("read the ledger"), self.engine.url), self._read() as s:
            yield s

    @contextmanager
    def batch(self, doing: str | None = None) -> Iterator[Session]:
        """One write transaction for several write methods called inside it (on this thread):
        each method's own transaction joins this one, and everything commits at the end, or
        nothing does (an error rolls the whole batch back). The ledger writer runs the writes
        queued in one tick this way (:class:`~costctl.ledger.writer.LedgerWriter`).

        Args:
            doing: what the batch does, a verb phrase in the shown language for the error line
                (default ``_("write to the ledger")``; see :func:`~costctl.ledger.engine.translate_errors`).

        Raises:
            LedgerError: the database cannot be written (the whole batch is rolled back).
        """
        if getattr(self._local, "batch", None) is not None:  # already in one: join it
            yield self._local.batch
            return
        with translate_errors(doing or _("write to the ledger"), self.engine.url), self._write_sessions() as s, \
                s.begin():
            self._local.batch = s
            try:
                yield s
            finally:
                self._local.batch = None

    @contextmanager
    def _write(self, doing: str) -> Iterator[Session]:
        """A write transaction, or the open :meth:`batch` of this thread (reused, committed by it)."""
        joined = getattr(self._local, "batch", None)
        if joined is not None:
            with translate_errors(doing, self.engine.url):
                yield joined
            return
        with translate_errors(doing, self.engine.url), self._write_sessions() as s, s.begin():
            yield s

    def _mark(self, s: Session, table: str, *keys: Any) -> None:
        """Fleet mode: put rows ``keys`` of ``table`` in the outbox (in ``s``'s transaction)."""
        if self.outbox:
            outboxes.mark(s.connection(), table, keys)

    # ------------------------------------------------------------------ writes

    def ensure_instance(
        self,
        provider: str,
        provider_instance_id: str,
        *,
        gpu: str | None,
        gpu_count: int,
        billing: str,
        price_per_hour: Decimal | None,
        currency: str,
        region: str | None = None,
    ) -> int:
        """The primary key of the instance ``(provider, provider_instance_id)``, created if new.

        An existing row takes the given gpu, gpu_count, billing, price (per instance-hour),
        currency and (when given) region: the latest facts win; past charges keep their own
        rates.

        Raises:
            LedgerError: the database cannot be written.
        """
        for attempt in (1, 2):
            try:
                with self._write(_("record the instance")) as s:
                    inst = s.scalars(
                        select(Instance).where(
                            Instance.provider == provider,
                            Instance.provider_instance_id == provider_instance_id,
                        )
                    ).first()
                    if inst is None:
                        inst = Instance(
                            provider=provider,
                            provider_instance_id=provider_instance_id,
                            created_at=utcnow(),
                        )
                        s.add(inst)
                    inst.gpu = gpu
                    inst.gpu_count = gpu_count
                    inst.billing = billing
                    inst.price_per_hour = price_per_hour
                    inst.currency = currency.upper()
                    if region is not None:
                        inst.region = region
                    s.flush()
                    return inst.id
            except LedgerError as err:
                # Two processes created the same instance at once: the loser reads the winner's.
                if attempt == 1 and isinstance(err.__cause__, IntegrityError):
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def start_run(
        self,
        instance_pk: int,
        *,
        started_at: datetime,
        command: list[str] | None,
        log_path: str | None,
        host: str | None,
        pid: int | None = None,
        continues_run_id: str | None = None,
        resumed_from: str | None = None,
        mode: str | None = None,
    ) -> str:
        """Record a new run (status ``running``) and return its id (uuid4 hex, 32 chars).

        ``host`` and ``pid`` identify the watch process (see :meth:`close_lost_runs`);
        ``continues_run_id`` / ``resumed_from``: a resumed run's link to the run it continues
        and the checkpoint it resumed from (:meth:`continued_run` finds the run); ``mode``: how
        the run is watched (:data:`costctl.ledger.tables.RUN_MODES`; None: a watch that guards).

        Raises:
            LedgerError: no such instance, or the database cannot be written; ValueError: an
                unknown ``mode``.
        """
        if mode is not None and mode not in tables.RUN_MODES:
            raise ValueError(f"run mode {mode!r}: expected one of {', '.join(tables.RUN_MODES)} or None")
        started_at = _aware(started_at, "started_at")
        run_id = uuid.uuid4().hex
        with self._write(_("record the run")) as s:
            if s.get(Instance, instance_pk) is None:
                raise LedgerError(_("no instance with key {key} in the ledger").format(key=instance_pk))
            # Core, naming only the columns given: a fresh run's INSERT names no link column.
            values: dict[str, Any] = dict(
                id=run_id, instance_pk=instance_pk, command=list(command) if command is not None else None,
                host=host, log_path=log_path, started_at=started_at, last_seen_at=started_at,
                status="running", pid=pid)
            if continues_run_id is not None:
                values["continues_run_id"] = continues_run_id
            if resumed_from is not None:
                values["resumed_from"] = resumed_from
            if mode is not None:
                values["mode"] = mode
            s.connection().execute(insert(tables.runs).values(**values))
            self._mark(s, "runs", run_id)
        return run_id

    def continued_run(self, checkpoint: str, *, command: Sequence[str] | None,
                      before: datetime, scan: int = 200) -> str | None:
        """The run a ``--resume`` from ``checkpoint`` continues: the newest run that recorded
        saving that checkpoint (a checkpoint row with that path, request answered), else the
        newest run of the same ``command`` started before ``before`` among the newest
        ``scan`` runs; None when neither exists (a first run resumed from a checkpoint made
        elsewhere). Paths are compared as given and resolved (a relative path from the job's
        working directory and its absolute form are the same checkpoint).

        Raises:
            LedgerError: the database cannot be read.
        """
        before = _aware(before, "before")
        names = {checkpoint}
        try:
            names.add(str(Path(checkpoint).resolve()))
        except OSError:
            pass
        with self.session() as s:
            conn = s.connection()
            ck = tables.checkpoints
            row = conn.execute(
                select(ck.c.run_id).where(ck.c.path.in_(sorted(names)), ck.c.outcome.in_(("saved", "acknowledged")))
                .order_by(ck.c.requested_at.desc(), ck.c.id.desc()).limit(1)).first()
            if row is not None:
                return str(row.run_id)
            if command is None:
                return None
            r = tables.runs
            wanted = list(command)
            for run in conn.execute(select(r.c.id, r.c.command).where(r.c.started_at < before)
                                    .order_by(r.c.started_at.desc(), r.c.id.desc()).limit(scan)):
                if run.command == wanted:
                    return str(run.id)
        return None

    def record_samples(self, run_id: str, samples: Sequence[TelemetrySample]) -> None:
        """Store telemetry: per sample one row per GPU reading plus one CPU row (gpu_index NULL,
        utilization = CPU percent of one core). A GPU reading with an ``error`` is stored with
        status ``error``. One Core executemany (no ORM objects).

        Raises:
            LedgerError: the database cannot be written.
        """
        rows = _sample_rows(run_id, samples)
        if rows:
            with self._write(_("record telemetry")) as s:
                s.connection().execute(_SAMPLE_INSERT, rows)

    def record_progress(self, run_id: str,
                        points: Sequence[ProgressPoint] | PointBatch | ProgressRows) -> None:
        """Store loss values (NaN and +/-inf kept exactly), one Core executemany per table.

        ``points`` is a list of :class:`ProgressPoint` or a :class:`PointBatch` (every point
        becomes a ``progress`` row), or the :class:`~costctl.ledger.progress_store.ProgressRows`
        a :class:`~costctl.ledger.progress_store.ProgressStore` emitted (the bounded record:
        its points, and its per-interval ``progress_buckets`` rows).

        Raises:
            ValueError: a naive time.
            LedgerError: the database cannot be written.
        """
        self.record_telemetry(progress=[(run_id, points)])

    def record_telemetry(
        self, *, samples: Sequence[tuple[str, Sequence[TelemetrySample]]] = (),
        progress: Sequence[tuple[str, Sequence[ProgressPoint] | PointBatch | ProgressRows]] = (),
    ) -> None:
        """Store several :meth:`record_samples` and :meth:`record_progress` writes at once
        (``(run_id, samples)`` / ``(run_id, points)`` pairs, in order): one Core executemany
        per table for all of them (the ledger writer merges the telemetry of a batch this way).

        Raises:
            ValueError: a naive time.
            LedgerError: the database cannot be written.
        """
        sample_rows: list[dict[str, Any]] = []
        for run_id, items in samples:
            sample_rows.extend(_sample_rows(run_id, items))
        raw: list[dict[str, Any]] = []
        buckets: list[dict[str, Any]] = []
        for run_id, points in progress:
            r, b = progress_store.rows_for(run_id, points)
            raw.extend(r)
            buckets.extend(b)
        if not (sample_rows or raw or buckets):
            return
        with self._write(_("record telemetry") if sample_rows else _("record progress")) as s:
            conn = s.connection()
            if sample_rows:
                conn.execute(_SAMPLE_INSERT, sample_rows)
            if raw:
                conn.execute(_PROGRESS_INSERT, raw)
            if buckets:
                conn.execute(_BUCKET_INSERT, buckets)

    def compact(self, now: datetime, retention: timedelta, *, max_rows: int = sample_rollup.DEFAULT_MAX_ROWS,
                dry_run: bool = False, start: datetime | None = None) -> sample_rollup.CompactResult:
        """One bounded pass of telemetry retention: roll up at most about ``max_rows`` raw
        samples older than ``now - retention`` into per-minute ``sample_minutes`` rows and
        delete them, in one short transaction (:func:`costctl.ledger.sample_rollup.compact_chunk`).
        Call again while the result is not ``done`` (a watch: one pass every few minutes from
        its writer thread; ``costctl db compact``: until done). ``dry_run`` only reads, and
        goes on from ``start`` (the previous dry pass's ``resume_at``). In fleet mode (the
        outbox on) raw samples not sent to the central ledger yet are kept.

        Raises:
            ValueError: a naive ``now``, or a retention that is not positive.
            LedgerError: the database cannot be read or written.
        """
        now = _aware(now, "now")
        if dry_run:
            with self.session() as s:
                return sample_rollup.compact_chunk(s, now=now, retention=retention, max_rows=max_rows,
                                                   dry_run=True, start=start, max_id=self._sent_samples(s))
        with self._write(_("compact telemetry")) as s:
            return sample_rollup.compact_chunk(s, now=now, retention=retention, max_rows=max_rows, start=start,
                                               max_id=self._sent_samples(s))

    def _sent_samples(self, s: Session) -> int | None:
        """Fleet mode: the highest sample id the central ledger has (0 before a first send), so
        compaction keeps the raw samples not sent yet; None (no bound) otherwise."""
        if not self.outbox:
            return None
        from .telemetry_sync import cursor

        return cursor(s.connection(), "samples") or 0

    def record_decision(
        self, run_id: str | None, decision: Decision, *, outcome: str | None = None, dry_run: bool = False,
        instance_pk: int | None = None,
    ) -> int:
        """Store a policy decision with its evidence and what was done (``outcome``); returns its id.

        A watch's decision belongs to its run (``run_id``); one made from outside the instances
        (``costctl patrol``) has no run and names its instance (``instance_pk``).

        Raises:
            ValueError: neither ``run_id`` nor ``instance_pk`` given.
            LedgerError: the database cannot be written.
        """
        if run_id is None and instance_pk is None:
            raise ValueError("a decision belongs to a run or to an instance: give run_id or instance_pk")
        if instance_pk is not None:  # a patrol's decision: Core, naming the column the ORM leaves out
            values = {"run_id": run_id, "instance_pk": instance_pk, "time": _aware(decision.time, "decision time"),
                      "policy": decision.policy, "action": str(decision.action.value), "reason": decision.reason,
                      "evidence": decision.evidence, "outcome": outcome, "dry_run": dry_run,
                      "key": decision.key or None}
            with self._write(_("record a decision")) as s:
                result = s.connection().execute(insert(tables.decisions).values(**values))
                return int(result.inserted_primary_key[0])
        row = DecisionRow(
            run_id=run_id,
            time=_aware(decision.time, "decision time"),
            policy=decision.policy,
            action=decision.action,
            reason=decision.reason,
            evidence=decision.evidence,
            outcome=outcome,
            dry_run=dry_run,
            key=decision.key or None,
        )
        with self._write(_("record a decision")) as s:
            s.add(row)
            s.flush()
            self._mark(s, "decisions", row.id)
            return row.id

    def set_decision_outcome(self, decision_id: int, outcome: str, *,
                             evidence: dict[str, Any] | None = None) -> None:
        """Replace a stored decision's outcome, and add ``evidence`` keys to its evidence (a
        stop's outcome is known only once the provider confirmed it, or it failed).

        Raises:
            LedgerError: no such decision, or the database cannot be written.
        """
        with self._write(_("record a decision's outcome")) as s:
            row = s.get(DecisionRow, decision_id)
            if row is None:
                raise LedgerError(_("no decision {decision} in the ledger").format(decision=decision_id))
            row.outcome = outcome
            if evidence:
                row.evidence = {**(row.evidence or {}), **evidence}
            self._mark(s, "decisions", decision_id)

    def record_stop_event(self, run_id: str | None, *, decision_id: int | None, time: datetime, state: str,
                          attempt: int, detail: str | None = None) -> int:
        """Store one step of a stop (``state``: requested, sent, confirmed, gone, self-stop
        sent, failed; ``attempt``: stop requests sent so far); returns its id. ``run_id`` is None
        for a stop of ``costctl patrol`` (its decision, ``decision_id``, names the instance).

        Raises:
            LedgerError: the database cannot be written.
        """
        row = StopEventRow(run_id=run_id, decision_id=decision_id, time=_aware(time, "stop event time"),
                           state=state, attempt=attempt, detail=detail)
        with self._write(_("record a stop event")) as s:
            s.add(row)
            s.flush()
            self._mark(s, "stop_events", row.id)
            return row.id

    def accrue(self, run_id: str, until: datetime, rate_per_hour: Decimal, currency: str) -> Decimal:
        """Charge the run's instance up to ``until`` at ``rate_per_hour`` (per instance-hour,
        in ``currency``); see :func:`costctl.ledger.accrual.accrue` for the rule that no second
        is charged twice. Returns the newly charged amount (unrounded Decimal).

        Raises:
            LedgerError: no such run, or the database cannot be written.
        """
        with self._write(_("record spend")) as s:
            amount, charge_id = accrual.accrue_charge(s, run_id, until, rate_per_hour, currency)
            self._mark(s, "runs", run_id)  # its heartbeat (last_seen_at) moved
            self._mark(s, "charges", charge_id)
            return amount

    def close_lost_runs(self, instance_pk: int, *, host: str, alive: Callable[[int], bool],
                        job_running: Callable[[Run], bool] | None = None) -> list[str]:
        """Close the runs of ``instance_pk`` whose watch process on ``host`` is gone.

        A run whose watch is gone but whose job still runs (``job_running(run)``, e.g. its
        output relay's state file says so) is not closed: it gets status ``unguarded`` and
        stays open (nothing charges it meanwhile; ``costctl bill`` shows it); once its job
        ended too, a later call closes it ``lost``.

        A watch killed outright (SIGKILL, OOM killer, reboot) never calls :meth:`finish_run`;
        its run would stay ``running`` forever. A run qualifies when it has no ``ended_at``,
        was recorded on ``host`` with a ``pid``, and ``alive(pid)`` is False. It gets status
        ``lost`` and ``ended_at = last_seen_at`` (its charges already end there; nothing is
        charged). Runs of other hosts are left alone: their processes cannot be checked here.

        Returns:
            the ids of the runs closed.

        Raises:
            LedgerError: the database cannot be written.
        """
        closed: list[str] = []
        with self._write(_("close runs whose watch died")) as s:
            runs = s.scalars(
                select(Run).where(Run.instance_pk == instance_pk, Run.ended_at.is_(None),
                                  Run.host == host, Run.pid.is_not(None))
            ).all()
            for run in runs:
                if run.pid is not None and not alive(run.pid):
                    if job_running is not None and job_running(run):
                        run.status = "unguarded"
                        continue
                    run.ended_at = run.last_seen_at
                    run.status = "lost"
                    closed.append(run.id)
            s.flush()
            self._mark(s, "runs", *(run.id for run in runs if run.status in ("lost", "unguarded")))
            for run_id in closed:
                summarize(s, run_id)
        return closed

    def open_runs(self, *, host: str) -> list[Run]:
        """The runs recorded on ``host`` that are not closed (no ``ended_at``), newest first;
        detached from the session (read their columns only).

        Raises:
            LedgerError: the database cannot be read.
        """
        with self.session() as s:
            runs = list(s.scalars(select(Run).where(Run.ended_at.is_(None), Run.host == host)
                                  .order_by(Run.started_at.desc())).all())
            s.expunge_all()
        return runs

    def resume_run(self, run_id: str, *, pid: int, mode: str | None = None) -> None:
        """A new watch (``costctl watch --attach``) took over open run ``run_id``: status
        ``running`` again, watched by process ``pid`` in ``mode`` (as :meth:`start_run`'s: the
        run is now watched, and any stop made, the way the new watch does). Its charges go on
        from the newest charge end of its instance (:func:`costctl.ledger.accrual.charge_start`).

        Raises:
            LedgerError: no such open run, or the database cannot be written; ValueError: an
                unknown ``mode``.
        """
        if mode is not None and mode not in tables.RUN_MODES:
            raise ValueError(f"run mode {mode!r}: expected one of {', '.join(tables.RUN_MODES)} or None")
        with self._write(_("take over the run")) as s:
            run = s.get(Run, run_id)
            if run is None or run.ended_at is not None:
                raise LedgerError(_("no open run {run!r} in the ledger").format(run=run_id))
            run.status = "running"
            run.pid = pid
            run.mode = mode
            if self.outbox:  # its earlier rows may never have been sent
                s.flush()
                outboxes.mark_run(s.connection(), run_id)

    def finish_run(self, run_id: str, *, ended_at: datetime, exit_code: int | None, status: str,
                   use: RunUse | None = None) -> None:
        """Mark the run ended (accrue up to ``ended_at`` first: this method charges nothing) and
        write its summary (:mod:`costctl.ledger.summaries`: the card, billing and price it ran
        with, its GPU use and points; ``use`` gives what the caller already knows, the rest is
        one aggregate over that run's samples), in the same transaction.

        Raises:
            LedgerError: no such run, or the database cannot be written.
        """
        ended_at = _aware(ended_at, "ended_at")
        with self._write(_("record the end of the run")) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise LedgerError(_("no run {run!r} in the ledger").format(run=run_id))
            run.ended_at = ended_at
            run.exit_code = exit_code
            run.status = status
            if ended_at > run.last_seen_at:
                run.last_seen_at = ended_at
            s.flush()
            summarize(s, run_id, use)
            self._mark(s, "runs", run_id)

    def record_checkpoint_request(
        self, run_id: str, *, reason: str, requested_at: datetime, deadline: datetime, signal: str | None = None
    ) -> int:
        """Store a pending checkpoint request (outcome NULL); returns its id for
        :meth:`complete_checkpoint`.

        Raises:
            LedgerError: the database cannot be written.
        """
        row = CheckpointRow(run_id=run_id, reason=reason, requested_at=_aware(requested_at, "requested_at"),
                            deadline=_aware(deadline, "deadline"), signal=signal)
        with self._write(_("record a checkpoint request")) as s:
            s.add(row)
            s.flush()
            self._mark(s, "checkpoints", row.id)
            return row.id

    def complete_checkpoint(
        self,
        checkpoint_id: int,
        *,
        outcome: str,
        completed_at: datetime,
        reason: str | None = None,
        deadline: datetime | None = None,
        saved_at: datetime | None = None,
        save_s: float | None = None,
        path: str | None = None,
        size_bytes: int | None = None,
        save_duration_s: float | None = None,
    ) -> None:
        """Record how a checkpoint request ended (``saved``, ``acknowledged``, ``timed-out``,
        ``job-exited``), with the checkpoint's time, path and size, the seconds from the request
        to it (``save_s``) and the save's own duration per the job's record (``save_duration_s``,
        seconds). ``reason``/``deadline`` update a request that was merged with a later one.

        Raises:
            LedgerError: no such request, or the database cannot be written.
        """
        with self._write(_("record a checkpoint outcome")) as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise LedgerError(_("no checkpoint request {checkpoint} in the ledger").format(
                    checkpoint=checkpoint_id))
            row.outcome = outcome
            row.completed_at = _aware(completed_at, "completed_at")
            if reason is not None:
                row.reason = reason
            if deadline is not None:
                row.deadline = _aware(deadline, "deadline")
            row.saved_at = _aware(saved_at, "saved_at") if saved_at is not None else None
            row.save_s = save_s
            row.path = path
            row.size_bytes = size_bytes
            row.save_duration_s = save_duration_s
            self._mark(s, "checkpoints", checkpoint_id)

    def record_waste(
        self,
        run_id: str,
        *,
        start_at: datetime,
        end_at: datetime,
        rate_per_hour: Decimal,
        currency: str,
        reason: str,
        detail: str | None = None,
    ) -> int:
        """Store paid time whose work was lost, ``[start_at, end_at)`` of the run's instance at
        ``rate_per_hour`` (per instance-hour) in ``currency``; returns its id.

        Raises:
            LedgerError: no such run, an interval that ends before it starts, or the database
                cannot be written.
        """
        start_at, end_at = _aware(start_at, "start_at"), _aware(end_at, "end_at")
        if end_at < start_at:
            raise LedgerError(_("waste interval ends ({end}) before it starts ({start})").format(
                end=end_at.isoformat(), start=start_at.isoformat()))
        with self._write(_("record waste")) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise LedgerError(_("no run {run!r} in the ledger").format(run=run_id))
            row = WasteRow(run_id=run_id, instance_pk=run.instance_pk, start_at=start_at, end_at=end_at,
                           rate_per_hour=rate_per_hour, currency=currency.upper(), reason=reason, detail=detail)
            s.add(row)
            s.flush()
            self._mark(s, "waste", row.id)
            return row.id

    # ------------------------------------------------------------------ reads

    def spend(
        self,
        *,
        instance_pk: int | None = None,
        run_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, Decimal]:
        """Recorded spend per currency (``{"USD": Decimal(...)}``, unrounded), of one instance
        and/or run or of everything, with charges clipped to ``[since, until)``. Empty when
        nothing was charged. Summed in SQL from the 15-minute rollups and the charges of the
        buckets the window cuts (:func:`costctl.ledger.queries.spend_by_currency`).

        Raises:
            LedgerError: the database cannot be read.
        """
        with self.session() as s:
            return spend_by_currency(s, instance_pk=instance_pk, run_id=run_id, since=since, until=until)

    def last_charge_end(self, instance_pk: int) -> datetime | None:
        """The end of the newest charge of instance ``instance_pk`` (any run), None before any:
        where the next run on it starts charging (:func:`costctl.ledger.accrual.charge_start`).

        Raises:
            LedgerError: the database cannot be read.
        """
        with self.session() as s:
            newest = s.scalar(select(func.max(Charge.end_at)).where(Charge.instance_pk == instance_pk))
        return ensure_utc(newest) if newest is not None else None

    def revision(self) -> str | None:
        """The schema revision the database is at (None before the first migration)."""
        return migrations.current_revision(self.engine)


__all__ = ["Ledger"]
