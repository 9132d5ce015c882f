"""The ledger: instances, runs, telemetry, progress, charges and decisions (SQLAlchemy 2).

* :mod:`.schema` — tables; :mod:`.types` — exact money / aware-UTC column types;
* :mod:`.engine` — engines (SQLite WAL, one-line errors); :mod:`.migrate` — Alembic, in code;
* :mod:`.accrual` — the no-second-twice charging rule; :mod:`.queries` — spend and bill rows;
* :mod:`.db` — :class:`Ledger`, the API the watch loop writes through (sessions, writes, spend).
* :mod:`.progress_store` — bounded progress (rows up to a rate, exact buckets beyond);
  :mod:`.sample_rollup` — telemetry retention (per-minute rollups).
* fleet mode: :mod:`.outbox` — the rows not yet sent to the central ledger; :mod:`.central` —
  the merge into it (idempotent upserts, each instance-second charged once); :mod:`.sync` —
  the thread that sends them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .db import Ledger
    from .engine import MissingLedgerError

__all__ = ["Ledger", "MissingLedgerError"]


def __getattr__(name: str) -> Any:
    """``Ledger`` and ``MissingLedgerError``, imported on first use: a module that needs only
    :mod:`.engine` (a URL, an engine) does not load the ORM schema and the queries with it."""
    if name == "Ledger":
        from .db import Ledger

        return Ledger
    if name == "MissingLedgerError":
        from .engine import MissingLedgerError

        return MissingLedgerError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
