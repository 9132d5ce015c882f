"""A run's heartbeat: is a watch guarding it now?

``runs.last_seen_at`` is the heartbeat: every accrual moves it (a watch writes its ledger at
least every 10 s: ``costctl.watch.watcher.WRITE_EVERY_S``), and in fleet mode it reaches the
central ledger with the run's row at every send (``[ledger] sync_interval``). A run is
**guarded** when it is not ended, its watch was not found gone (status ``unguarded``: its job
runs on without a watch) and its heartbeat is at most ``lag`` old. The lag is
``[ledger] heartbeat_lag`` (default :data:`DEFAULT_LAG`); it must exceed the time a heartbeat
takes to arrive (the write interval plus, in fleet mode, the sync interval), which the
configuration checks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from ..clock import ensure_utc
from . import tables

#: The default ``[ledger] heartbeat_lag``: four sends of the default 30 s sync interval.
DEFAULT_LAG = timedelta(minutes=2)

#: The status a watch gives a run whose watch is gone but whose job runs on.
UNGUARDED = "unguarded"


def is_guarded(*, ended_at: datetime | None, last_seen_at: datetime, status: str, now: datetime,
               lag: timedelta = DEFAULT_LAG) -> bool:
    """Whether a run with these columns is guarded at ``now`` (aware UTC): not ended, not
    ``unguarded``, and ``now - last_seen_at <= lag``. A heartbeat ahead of ``now`` (another
    machine's clock) counts as fresh."""
    if ended_at is not None or status == UNGUARDED:
        return False
    return ensure_utc(now) - ensure_utc(last_seen_at) <= lag


def guarded_clause(now: datetime, lag: timedelta = DEFAULT_LAG) -> sa.ColumnElement[bool]:
    """:func:`is_guarded` as a SQL condition on ``runs`` (for a ``WHERE`` or a labelled column)."""
    runs = tables.runs
    return sa.and_(runs.c.ended_at.is_(None), runs.c.status != UNGUARDED,
                   runs.c.last_seen_at >= ensure_utc(now) - lag)


__all__ = ["DEFAULT_LAG", "UNGUARDED", "guarded_clause", "is_guarded"]
