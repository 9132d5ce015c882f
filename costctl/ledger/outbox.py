"""Fleet mode's local outbox: which rows of this ledger the central ledger has not seen yet.

A watch with ``[ledger] central_url`` writes its own ledger (the SQLite file) as always, so
guarding never waits on the network; every write that changes a row the team ledger keeps
also puts that row in the ``outbox`` table, in the same transaction
(:meth:`~costctl.ledger.db.Ledger.outbox` on). :mod:`costctl.ledger.sync` sends the rows
the outbox names and then takes their entries out, so the outbox survives a network
partition, a kill -9 and a reboot: what was committed here is sent by the next sync, from
this watch or the next one on this machine (or ``costctl db sync``).

An entry is ``(table_name, row_key, version)``: one per row, however often the row changed
(a charge that grows in place, a run's heartbeat); each change adds 1 to ``version``. An
entry is taken out only at the version that was sent (:func:`acknowledge`), so a row that
changed again meanwhile is sent again.

Kept: ``runs``, ``charges``, ``decisions``, ``checkpoints``, ``waste``, ``stop_events``, and
the instances of those runs. Telemetry (``samples``, ``progress``, ``progress_buckets``) is
append-only and too large for an entry per row: it is sent by cursor
(:mod:`costctl.ledger.telemetry_sync`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import tables

#: The tables whose rows the outbox names, in the order they are sent (a row's run before
#: the row; a stop event's decision before the stop event).
SYNCED_TABLES = ("runs", "charges", "decisions", "checkpoints", "waste", "stop_events")

#: The tables keyed by an integer id (``runs`` is keyed by its uuid text).
_INT_KEYED = frozenset(SYNCED_TABLES) - {"runs"}

OUTBOX = tables.outbox


@functools.cache
def _upsert(dialect: str) -> Any:
    """The outbox upsert of ``dialect``: a new entry at version 1, or version + 1."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        from sqlalchemy.dialects.postgresql import insert
    stmt = insert(OUTBOX).values(table_name=sa.bindparam("p_table"), row_key=sa.bindparam("p_key"), version=1)
    return stmt.on_conflict_do_update(index_elements=[OUTBOX.c.table_name, OUTBOX.c.row_key],
                                      set_={"version": OUTBOX.c.version + 1})


def mark(conn: sa.Connection, table: str, keys: Iterable[Any]) -> None:
    """Put rows ``keys`` (primary keys) of ``table`` in the outbox, inside the caller's
    transaction (one statement for all of them).

    Raises:
        ValueError: ``table`` is not one of :data:`SYNCED_TABLES`.
    """
    if table not in SYNCED_TABLES:
        raise ValueError(f"the outbox keeps {', '.join(SYNCED_TABLES)}, not {table!r}")
    rows = [{"p_table": table, "p_key": str(key)} for key in keys if key is not None]
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        conn.execute(_upsert(dialect), rows)
        return
    for row in rows:  # another database: read, then write (the caller's transaction holds it)
        key = (OUTBOX.c.table_name == row["p_table"]) & (OUTBOX.c.row_key == row["p_key"])
        if conn.execute(sa.update(OUTBOX).where(key).values(version=OUTBOX.c.version + 1)).rowcount == 0:
            conn.execute(sa.insert(OUTBOX).values(table_name=row["p_table"], row_key=row["p_key"], version=1))


def mark_run(conn: sa.Connection, run_id: str) -> None:
    """Put run ``run_id`` and every row of it that the outbox keeps in the outbox (a watch
    that takes over a run, ``costctl watch --attach``: its earlier rows may never have been
    sent, e.g. its first watch had no central ledger), and move the telemetry cursors back to
    its first rows (:func:`costctl.ledger.telemetry_sync.rewind_for_run`)."""
    mark(conn, "runs", [run_id])
    for table in SYNCED_TABLES[1:]:
        t = tables.metadata.tables[table]
        mark(conn, table, conn.execute(sa.select(t.c.id).where(t.c.run_id == run_id)).scalars())
    from .telemetry_sync import rewind_for_run

    rewind_for_run(conn, run_id)  # its telemetry too, skipped while the central ledger lacked the run


@dataclass(frozen=True, slots=True)
class Entry:
    """One outbox entry: row ``key`` of ``table`` as changed up to ``version``."""

    table: str
    key: str
    version: int

    @property
    def row_id(self) -> Any:
        """The row's primary key: an int, or the run id (text) for ``runs``."""
        return int(self.key) if self.table in _INT_KEYED else self.key


def pending(conn: sa.Connection, *, limit: int, skip: frozenset[tuple[str, str]] = frozenset()) -> list[Entry]:
    """Up to ``limit`` outbox entries, in sending order (:data:`SYNCED_TABLES`, then key),
    leaving out ``skip`` (``(table, key)`` pairs that failed for good in this process)."""
    order = sa.case({name: i for i, name in enumerate(SYNCED_TABLES)}, value=OUTBOX.c.table_name, else_=99)
    # integer keys in numeric order (the order rows were written)
    key_order = sa.case((OUTBOX.c.table_name == "runs", 0), else_=sa.func.length(OUTBOX.c.row_key))
    stmt = (sa.select(OUTBOX.c.table_name, OUTBOX.c.row_key, OUTBOX.c.version)
            .order_by(order, key_order, OUTBOX.c.row_key).limit(limit + len(skip)))
    out = [Entry(r.table_name, r.row_key, int(r.version)) for r in conn.execute(stmt)
           if (r.table_name, r.row_key) not in skip]
    return out[:limit]


def waiting(conn: sa.Connection, table: str, keys: Iterable[Any]) -> set[str]:
    """Those of ``keys`` (rows of ``table``, as text) the outbox holds."""
    wanted = sorted({str(k) for k in keys})
    out: set[str] = set()
    for i in range(0, len(wanted), 500):
        out.update(conn.execute(sa.select(OUTBOX.c.row_key).where(
            OUTBOX.c.table_name == table, OUTBOX.c.row_key.in_(wanted[i:i + 500]))).scalars())
    return out


def count(conn: sa.Connection) -> int:
    """How many rows wait in the outbox."""
    return int(conn.scalar(sa.select(sa.func.count()).select_from(OUTBOX)) or 0)


def acknowledge(conn: sa.Connection, entries: Iterable[Entry]) -> None:
    """Take the sent ``entries`` out of the outbox, each only at the version that was sent (a
    row changed since stays); inside the caller's transaction, one statement."""
    rows = [{"p_table": e.table, "p_key": e.key, "p_version": e.version} for e in entries]
    if rows:
        conn.execute(sa.delete(OUTBOX).where(OUTBOX.c.table_name == sa.bindparam("p_table"),
                                             OUTBOX.c.row_key == sa.bindparam("p_key"),
                                             OUTBOX.c.version == sa.bindparam("p_version")), rows)


__all__ = ["Entry", "SYNCED_TABLES", "acknowledge", "count", "mark", "mark_run", "pending", "waiting"]
