"""Spend accrual from stored timestamps: never a second charged twice, none lost.

An accrual charges an instance for ``[start, until)`` where ``start`` is the later of the
run's start and the end of the newest charge of the same INSTANCE (any run). So:

* a skipped tick loses nothing — the next accrual covers the gap (time, not ticks, counts);
* a watch killed with SIGKILL leaves charges up to its last committed accrual;
* a new watch on the same instance starts charging where the last charge ended, even when
  its own run started earlier than that (two watches, or a restarted one).

Each accrual is one transaction, with Core statements only (no ORM objects): the charge row
(extended or inserted, with its exact length in integer microseconds), the run's
``last_seen_at``/``charged_until`` and the run's :class:`~costctl.ledger.schema.ChargeRollup`
rows — the new interval split at UTC 15-minute boundaries, each piece added to its bucket with
an upsert (``INSERT ... ON CONFLICT DO UPDATE`` on SQLite and PostgreSQL; select-then-update
elsewhere). Concurrent accruals on one instance are serialised: on PostgreSQL by
``SELECT ... FOR UPDATE`` on the instance row, on SQLite by the write lock that
``BEGIN IMMEDIATE`` takes before the first read (see :mod:`costctl.ledger.engine`).
"""

from __future__ import annotations

import functools
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import bindparam, case, func, insert, select, update
from sqlalchemy.orm import Session

from ..clock import ensure_utc
from ..errors import LedgerError
from ..i18n import _
from ..money import MAX_AMOUNT, cost_of
from .schema import Charge, ChargeRollup, Instance, Run
# The bucket arithmetic lives in .timebuckets (the bill's queries use it without this module).
from .timebuckets import BUCKET_S, BUCKET_US, US_PER_S, bucket_pieces, epoch_us, from_epoch_us


def charge_start(session: Session, run: Any) -> datetime:
    """Where the next charge of ``run`` starts: max(run start, newest charge end on its instance).

    ``run`` is anything with ``instance_pk`` and ``started_at`` (a :class:`Run`, a row)."""
    latest = session.scalar(select(func.max(Charge.end_at)).where(Charge.instance_pk == run.instance_pk))
    started = ensure_utc(run.started_at)
    return max(started, ensure_utc(latest)) if latest is not None else started


@functools.cache
def _rollup_upsert(dialect: str) -> Any:
    """The ``charge_rollups`` upsert of ``dialect`` (sqlite, postgresql), with bound parameters:
    built once per process (building it per accrual cost more than running it)."""
    t = ChargeRollup.__table__
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    # bound parameters named apart from the columns (SQLAlchemy reserves the column names)
    stmt = dialect_insert(t).values({name: bindparam(f"p_{name}") for name in _ROLLUP_COLUMNS})
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[t.c.run_id, t.c.bucket_s, t.c.rate_per_hour, t.c.currency],
        set_={
            "duration_us": t.c.duration_us + new.duration_us,
            "first_us": case((new.first_us < t.c.first_us, new.first_us), else_=t.c.first_us),
            "last_us": case((new.last_us > t.c.last_us, new.last_us), else_=t.c.last_us),
        },
    )


_ROLLUP_COLUMNS = ("run_id", "bucket_s", "rate_per_hour", "currency", "instance_pk", "duration_us", "first_us",
                   "last_us")


def add_to_rollup(session: Session, *, run_id: str, instance_pk: int, rate: Decimal, currency: str,
                  start_us: int, end_us: int, connection: Any = None) -> None:
    """Add the charged interval ``[start_us, end_us)`` (POSIX µs) of ``run_id`` to its 15-minute
    buckets in ``charge_rollups`` (inside the caller's transaction; ``connection``: the
    session's connection, when the caller has it)."""
    t = ChargeRollup.__table__
    conn = connection if connection is not None else session.connection()
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        # One statement for every bucket (executemany): a long interval (a watch that slept, a
        # simulated clock that jumped a year) spans thousands of buckets.
        rows = [{"p_run_id": run_id, "p_bucket_s": bucket_s, "p_rate_per_hour": rate, "p_currency": currency,
                 "p_instance_pk": instance_pk, "p_duration_us": hi - lo, "p_first_us": lo, "p_last_us": hi}
                for bucket_s, lo, hi in bucket_pieces(start_us, end_us)]
        if rows:
            conn.execute(_rollup_upsert(dialect), rows)
        return
    for bucket_s, lo, hi in bucket_pieces(start_us, end_us):
        values = dict(run_id=run_id, bucket_s=bucket_s, rate_per_hour=rate, currency=currency,
                      instance_pk=instance_pk, duration_us=hi - lo, first_us=lo, last_us=hi)
        key = ((t.c.run_id == run_id) & (t.c.bucket_s == bucket_s) & (t.c.rate_per_hour == rate)
               & (t.c.currency == currency))
        row = session.execute(select(t.c.first_us, t.c.last_us).where(key)).first()
        if row is None:
            session.execute(insert(t).values(**values))
        else:
            session.execute(update(t).where(key).values(duration_us=t.c.duration_us + (hi - lo),
                                                        first_us=min(row.first_us, lo), last_us=max(row.last_us, hi)))


class _LastCharge(NamedTuple):
    """The run's newest charge, as the ``last_charge`` statement reads it."""

    id: int
    end_at: datetime
    rate_per_hour: Decimal
    currency: str


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    """The Core statements of one accrual on ``dialect``, with bound parameters: built once per
    process and dialect (an accrual runs every few seconds; building and compiling its ORM
    statements each time cost more than running them)."""
    r, c, i = Run.__table__, Charge.__table__, Instance.__table__
    ci, cl = c.alias("on_instance"), c.alias("of_run")  # the subqueries' own charges
    newest_on_instance = (select(func.max(ci.c.end_at)).where(ci.c.instance_pk == r.c.instance_pk)
                          .correlate(r).scalar_subquery())
    stmts: dict[str, Any] = {
        "run": select(r.c.instance_pk, r.c.started_at, r.c.last_seen_at).where(r.c.id == bindparam("p_run")),
        # On SQLite the write lock is held from BEGIN IMMEDIATE: the run, the newest charge end
        # of its instance and the run's newest charge are read in one statement.
        "run_and_latest": (
            select(r.c.instance_pk, r.c.started_at, r.c.last_seen_at, newest_on_instance.label("latest"),
                   c.c.id.label("last_id"), c.c.end_at.label("last_end"),
                   c.c.rate_per_hour.label("last_rate"), c.c.currency.label("last_currency"))
            .select_from(r.outerjoin(c, c.c.id == (
                select(cl.c.id).where(cl.c.run_id == r.c.id).order_by(cl.c.end_at.desc()).limit(1)
                .correlate(r).scalar_subquery())))
            .where(r.c.id == bindparam("p_run"))
        ),
        "lock": select(i.c.id).where(i.c.id == bindparam("p_instance")).with_for_update(),
        "latest": select(func.max(c.c.end_at)).where(c.c.instance_pk == bindparam("p_instance")),
        "last_charge": (select(c.c.id, c.c.end_at, c.c.rate_per_hour, c.c.currency)
                        .where(c.c.run_id == bindparam("p_run")).order_by(c.c.end_at.desc()).limit(1)),
        "extend": (update(c).where(c.c.id == bindparam("p_id"))
                   .values(end_at=bindparam("p_end"), duration_us=c.c.duration_us + bindparam("p_us"))),
        "insert": insert(c).values(run_id=bindparam("p_run"), instance_pk=bindparam("p_instance"),
                                   start_at=bindparam("p_start"), end_at=bindparam("p_end"),
                                   rate_per_hour=bindparam("p_rate"), currency=bindparam("p_currency"),
                                   duration_us=bindparam("p_us")),
        "seen": update(r).where(r.c.id == bindparam("p_run")).values(last_seen_at=bindparam("p_seen")),
        "charged": update(r).where(r.c.id == bindparam("p_run")).values(charged_until=bindparam("p_until")),
        "charged_seen": (update(r).where(r.c.id == bindparam("p_run"))
                         .values(charged_until=bindparam("p_until"), last_seen_at=bindparam("p_seen"))),
    }
    return stmts


def accrue(session: Session, run_id: str, until: datetime, rate_per_hour: Decimal, currency: str) -> Decimal:
    """Charge ``run_id``'s instance up to ``until`` at ``rate_per_hour`` (per instance-hour):
    :func:`accrue_charge`'s amount."""
    return accrue_charge(session, run_id, until, rate_per_hour, currency)[0]


def accrue_charge(session: Session, run_id: str, until: datetime, rate_per_hour: Decimal,
                  currency: str) -> tuple[Decimal, int | None]:
    """Charge ``run_id``'s instance up to ``until`` at ``rate_per_hour`` (per instance-hour).

    Must run inside the caller's write transaction (which commits it). If the run's newest
    charge ends exactly where this one starts, at the same rate and currency, that row is
    extended; otherwise a row is inserted. ``run.last_seen_at`` moves to ``until``; the run's
    ``charged_until`` and its rollup buckets follow the new charge. Prebuilt Core statements
    on the session's connection (:func:`_statements`).

    Returns:
        ``(amount, charge id)``: the newly charged amount, unrounded (``rate * seconds /
        3600``), and the id of the charge row extended or inserted; ``(0, None)`` when
        ``until`` is not after the charge start.

    Raises:
        LedgerError: no run ``run_id``.
        TypeError / ValueError: a float rate, a rate outside 0 to 10^9, or a naive ``until``.
    """
    if isinstance(rate_per_hour, (float, bool)) or not isinstance(rate_per_hour, (Decimal, int)):
        raise TypeError(f"rate_per_hour must be a Decimal, not {type(rate_per_hour).__name__}")
    rate = Decimal(rate_per_hour)
    if not rate.is_finite() or rate < 0 or rate > MAX_AMOUNT:
        raise ValueError(f"rate_per_hour must be a finite amount from 0 to 1000000000, got {rate:.6g}")
    if until.tzinfo is None:
        raise ValueError("until must be an aware datetime")
    until = ensure_utc(until)
    currency = currency.upper()

    conn = session.connection()
    dialect = conn.dialect.name
    q = _statements(dialect)
    last: Any = False  # not read yet
    if dialect == "sqlite":
        run = conn.execute(q["run_and_latest"], {"p_run": run_id}).first()
        if run is None:
            raise LedgerError(_("no run {run!r} in the ledger").format(run=run_id))
        latest = run.latest
        last = None if run.last_id is None else _LastCharge(run.last_id, run.last_end, run.last_rate,
                                                            run.last_currency)
    else:
        run = conn.execute(q["run"], {"p_run": run_id}).first()
        if run is None:
            raise LedgerError(_("no run {run!r} in the ledger").format(run=run_id))
        if dialect == "postgresql":
            # Serialise accruals on this instance; released at commit.
            conn.execute(q["lock"], {"p_instance": run.instance_pk})
        latest = conn.execute(q["latest"], {"p_instance": run.instance_pk}).scalar()
    started = ensure_utc(run.started_at)
    start = max(started, ensure_utc(latest)) if latest is not None else started
    last_seen = ensure_utc(run.last_seen_at)
    if until <= start:
        if until > last_seen:
            conn.execute(q["seen"], {"p_run": run_id, "p_seen": until})
        return Decimal(0), None
    start_us, until_us = epoch_us(start), epoch_us(until)
    if last is False:
        last = conn.execute(q["last_charge"], {"p_run": run_id}).first()
    if last is not None and ensure_utc(last.end_at) == start and last.rate_per_hour == rate \
            and last.currency == currency:
        conn.execute(q["extend"], {"p_id": last.id, "p_end": until, "p_us": until_us - start_us})
        charge_id = int(last.id)
    else:
        inserted = conn.execute(q["insert"], {"p_run": run_id, "p_instance": run.instance_pk, "p_start": start,
                                              "p_end": until, "p_rate": rate, "p_currency": currency,
                                              "p_us": until_us - start_us})
        charge_id = int(inserted.inserted_primary_key[0])
    add_to_rollup(session, run_id=run_id, instance_pk=run.instance_pk, rate=rate, currency=currency,
                  start_us=start_us, end_us=until_us, connection=conn)
    if until > last_seen:
        conn.execute(q["charged_seen"], {"p_run": run_id, "p_until": until, "p_seen": until})
    else:
        conn.execute(q["charged"], {"p_run": run_id, "p_until": until})
    return cost_of(rate, until - start), charge_id


__all__ = ["BUCKET_S", "BUCKET_US", "US_PER_S", "accrue", "accrue_charge", "add_to_rollup", "bucket_pieces", "charge_start",
           "epoch_us", "from_epoch_us"]
