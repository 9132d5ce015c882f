"""Fleet mode's telemetry send: ``samples``, ``progress`` and ``progress_buckets`` by cursor.

Telemetry is append-only and large (one ``samples`` row per GPU, plus one CPU row, per tick),
so it does not go through the outbox (an entry per sample would double the watch's writes).
Instead :mod:`costctl.ledger.sync`, after each outbox pass, sends each telemetry table's rows
**in local id order** past a cursor: ``sync_cursors.last_id``, the highest local id the central
ledger has. A batch is read locally, written centrally in one transaction (insert, or nothing
when ``(run_id, origin_id)`` is there already: sending twice inserts nothing), and only after
that commit is the cursor moved to the batch's last id, locally. A kill between the two sends
the batch again, to no effect.

* Rows of a run the central ledger does not have (a run written before ``central_url`` was
  set, or a run whose row it refused) are skipped: the central ledger's foreign key would
  refuse them, and they are no fleet watch's telemetry. If such a run is taken over later by
  a watch in fleet mode (``--attach``), :func:`rewind_for_run` moves the cursors back to its
  first row, and the next passes send it (sending again what lies between changes nothing).
* The first send on a machine (no cursor yet) does not walk the whole local history: the
  cursor starts just before the first row of a run the central ledger has
  (:func:`start_after`), or past every row when there is none.
* Raw samples not sent yet are never compacted (:meth:`costctl.ledger.db.Ledger.compact`
  bounds the pass by the ``samples`` cursor in fleet mode).

Ids are read in commit order, which holds for a SQLite ledger (one writer at a time: a
watch's own ledger in fleet mode).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa

from . import tables

#: The telemetry tables sent by cursor, in sending order.
TELEMETRY_TABLES = ("samples", "progress", "progress_buckets")

#: Telemetry rows per central transaction.
TELEMETRY_BATCH_ROWS = 5_000

CURSORS = tables.sync_cursors

#: Ids per ``IN (...)`` list.
_CHUNK = 500


def _table(name: str) -> sa.Table:
    if name not in TELEMETRY_TABLES:
        raise ValueError(f"telemetry tables are {', '.join(TELEMETRY_TABLES)}, not {name!r}")
    return tables.metadata.tables[name]


def cursor(conn: sa.Connection, table: str) -> int | None:
    """The highest local id of ``table`` the central ledger has; None before a first send."""
    _table(table)
    value = conn.scalar(sa.select(CURSORS.c.last_id).where(CURSORS.c.table_name == table))
    return None if value is None else int(value)


def set_cursor(conn: sa.Connection, table: str, last_id: int) -> None:
    """Move ``table``'s cursor to ``last_id`` (inside the caller's write transaction)."""
    _table(table)
    if conn.execute(sa.update(CURSORS).where(CURSORS.c.table_name == table).values(last_id=last_id)).rowcount == 0:
        conn.execute(sa.insert(CURSORS).values(table_name=table, last_id=last_id))


def rewind_for_run(conn: sa.Connection, run_id: str) -> None:
    """Move each cursor back to just before run ``run_id``'s first row, where it is past it
    (a run taken over by a watch in fleet mode: its rows may have been skipped while the
    central ledger did not have the run). Inside the caller's transaction."""
    for name in TELEMETRY_TABLES:
        t = _table(name)
        first = conn.scalar(sa.select(sa.func.min(t.c.id)).where(t.c.run_id == run_id))
        if first is not None:
            conn.execute(sa.update(CURSORS).where(CURSORS.c.table_name == name, CURSORS.c.last_id >= first)
                         .values(last_id=int(first) - 1))


def start_after(conn: sa.Connection, table: str, central_runs: Collection[str]) -> int:
    """Where a first send of ``table`` starts: just before the first row of one of
    ``central_runs`` (the local runs the central ledger has), else past the last row (every
    row belongs to a run the central ledger lacks), 0 for an empty table."""
    t = _table(table)
    runs = sorted(central_runs)
    firsts = [conn.scalar(sa.select(sa.func.min(t.c.id)).where(t.c.run_id.in_(runs[i:i + _CHUNK])))
              for i in range(0, len(runs), _CHUNK)]
    found = [int(f) for f in firsts if f is not None]
    if found:
        return min(found) - 1
    return int(conn.scalar(sa.select(sa.func.max(t.c.id))) or 0)


def read_batch(conn: sa.Connection, table: str, after_id: int, limit: int) -> list[Any]:
    """Up to ``limit`` rows of ``table`` with id > ``after_id``, in id order."""
    t = _table(table)
    return conn.execute(sa.select(t).where(t.c.id > after_id).order_by(t.c.id).limit(limit)).all()


def unsent(conn: sa.Connection, table: str) -> int:
    """Rows of ``table`` past its cursor (all of them before a first send)."""
    t = _table(table)
    after = cursor(conn, table) or 0
    return int(conn.scalar(sa.select(sa.func.count()).select_from(t).where(t.c.id > after)) or 0)


def local_run_ids(conn: sa.Connection) -> list[str]:
    """Every run id of the local ledger."""
    return list(conn.execute(sa.select(tables.runs.c.id)).scalars())


def runs_present(conn: sa.Connection, run_ids: Collection[str]) -> set[str]:
    """Those of ``run_ids`` the ledger on ``conn`` (the central one) has."""
    wanted = sorted(set(run_ids))
    runs = tables.runs
    out: set[str] = set()
    for i in range(0, len(wanted), _CHUNK):
        out.update(conn.execute(sa.select(runs.c.id).where(runs.c.id.in_(wanted[i:i + _CHUNK]))).scalars())
    return out


@functools.cache
def _insert(dialect: str, table: str) -> Any:
    """``INSERT ... ON CONFLICT (run_id, origin_id) WHERE origin_id IS NOT NULL DO NOTHING``."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        raise ValueError(f"a central ledger is PostgreSQL (or SQLite), not {dialect}")
    t = _table(table)
    return insert(t).on_conflict_do_nothing(index_elements=[t.c.run_id, t.c.origin_id],
                                            index_where=t.c.origin_id.is_not(None))


def apply(conn: sa.Connection, table: str, rows: Sequence[Any]) -> None:
    """Insert the local ``rows`` of ``table`` into the central ledger on ``conn`` (inside the
    caller's transaction), ``origin_id`` their local id; rows already there are left alone.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the central ledger could not be written.
    """
    if not rows:
        return
    t = _table(table)
    names = [c.name for c in t.c if c.name not in ("id", "origin_id")]
    values = [{**{n: getattr(r, n) for n in names}, "origin_id": r.id} for r in rows]
    conn.execute(_insert(conn.dialect.name, table), values)


__all__ = ["TELEMETRY_BATCH_ROWS", "TELEMETRY_TABLES", "apply", "cursor", "local_run_ids", "read_batch",
           "rewind_for_run", "runs_present", "set_cursor", "start_after", "unsent"]
