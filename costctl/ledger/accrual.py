"""Spend accrual from stored timestamps: never a second charged twice, none lost.

An accrual charges an instance for ``[start, until)`` where ``start`` is the later of the
run's start and the end of the newest charge of the same INSTANCE (any run). So:

* a skipped tick loses nothing — the next accrual covers the gap (time, not ticks, counts);
* a watch killed with SIGKILL leaves charges up to its last committed accrual;
* a new watch on the same instance starts charging where the last charge ended, even when
  its own run started earlier than that (two watches, or a restarted one).

Each accrual is one transaction. Concurrent accruals on one instance are serialised: on
PostgreSQL by ``SELECT ... FOR UPDATE`` on the instance row, on SQLite by the write lock that
``BEGIN IMMEDIATE`` takes before the first read (see :mod:`costctl.ledger.engine`).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..clock import ensure_utc
from ..errors import LedgerError
from ..money import cost_of
from .schema import Charge, Instance, Run


def charge_start(session: Session, run: Run) -> datetime:
    """Where the next charge of ``run`` starts: max(run start, newest charge end on its instance)."""
    latest = session.scalar(select(func.max(Charge.end_at)).where(Charge.instance_pk == run.instance_pk))
    return max(run.started_at, latest) if latest is not None else run.started_at


def accrue(session: Session, run_id: str, until: datetime, rate_per_hour: Decimal, currency: str) -> Decimal:
    """Charge ``run_id``'s instance up to ``until`` at ``rate_per_hour`` (per instance-hour).

    Must run inside the caller's write transaction (which commits it). If the run's newest
    charge ends exactly where this one starts, at the same rate and currency, that row is
    extended; otherwise a row is inserted. ``run.last_seen_at`` moves to ``until``.

    Returns:
        the newly charged amount, unrounded (``rate * seconds / 3600``), 0 when ``until`` is
        not after the charge start.

    Raises:
        LedgerError: no run ``run_id``.
        TypeError / ValueError: a float or negative rate, or a naive ``until``.
    """
    if isinstance(rate_per_hour, (float, bool)) or not isinstance(rate_per_hour, (Decimal, int)):
        raise TypeError(f"rate_per_hour must be a Decimal, not {type(rate_per_hour).__name__}")
    rate = Decimal(rate_per_hour)
    if not rate.is_finite() or rate < 0:
        raise ValueError(f"rate_per_hour must be a finite amount >= 0, got {rate}")
    if until.tzinfo is None:
        raise ValueError("until must be an aware datetime")
    until = ensure_utc(until)
    currency = currency.upper()

    run = session.get(Run, run_id)
    if run is None:
        raise LedgerError(f"no run {run_id!r} in the ledger")
    if session.get_bind().dialect.name == "postgresql":
        # Serialise accruals on this instance; released at commit.
        session.execute(select(Instance.id).where(Instance.id == run.instance_pk).with_for_update())
    if until > run.last_seen_at:
        run.last_seen_at = until

    start = charge_start(session, run)
    if until <= start:
        return Decimal(0)
    last = session.scalars(
        select(Charge).where(Charge.run_id == run_id).order_by(Charge.end_at.desc()).limit(1)
    ).first()
    if last is not None and last.end_at == start and last.rate_per_hour == rate and last.currency == currency:
        last.end_at = until
    else:
        session.add(
            Charge(
                run_id=run_id,
                instance_pk=run.instance_pk,
                start_at=start,
                end_at=until,
                rate_per_hour=rate,
                currency=currency,
            )
        )
    return cost_of(rate, until - start)


__all__ = ["accrue", "charge_start"]
