"""Fleet mode's merge: rows of a watch's ledger written into the central (team) ledger.

:func:`read_rows` reads the rows an outbox batch names from the local ledger (with what they
need: each row's run, each run's instance, each stop event's decision); :func:`apply` writes
them into the central ledger inside the caller's transaction. Every write is idempotent, so a
batch sent twice (the commit went through but its answer was lost, or the watch was killed
before it took the entries out of its outbox) changes nothing the second time:

* **instances** are upserted on their natural key ``(provider, provider_instance_id)``; the
  central primary key is looked up, never copied (each ledger numbers its own).
* **runs** are upserted on their id (a uuid4: unique across machines); ``last_seen_at`` (the
  heartbeat) and ``charged_until`` keep the later of the two values. The command goes with
  its secrets masked (:func:`costctl.redaction.redact_argv`: ``--hf-token ****``,
  ``HF_TOKEN=****``, ``hf_****``): the team ledger is read by the whole team, while the
  machine's own ledger keeps the command as typed (a resume or ``--attach`` runs it).
* **decisions, checkpoints, waste, stop events** are upserted on ``(run_id, origin_id)``:
  the run's uuid plus the row's id in the writing ledger (a stop event's decision id is
  translated the same way).
* **charges** follow the merge rule: the central ledger charges each instance-second at most
  once. A local charge ``[start, end)`` adds only the parts of it that no central charge of
  the same instance covers yet (any run, any machine); each part extends the run's central
  charge that ends where it starts (same rate and currency: a charge that grows in place
  grows in place centrally, with the later end kept) or becomes a new row, and is added to
  the run's 15-minute rollups. The instance's row is locked first (``SELECT ... FOR UPDATE``
  on PostgreSQL; SQLite's write lock from ``BEGIN IMMEDIATE``), as the accrual does, so two
  machines syncing the same instance, or a watch that writes the central ledger directly,
  take turns. When two writers charged one instance while apart (a watch restarted on
  another machine, two watches naming one instance), the first to sync a second keeps it
  and the other's run is charged only for the seconds left: the instance's total is the
  union of what they saw, whatever the order, and nothing is summed twice. With one writer
  per instance the central charges are exactly the local ones.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from ..clock import ensure_utc
from ..redaction import redact_argv
from . import tables
from .accrual import add_to_rollup
from .outbox import Entry
from .timebuckets import epoch_us

INSTANCES, RUNS, CHARGES = tables.instances, tables.runs, tables.charges
DECISIONS, CHECKPOINTS, WASTE, STOP_EVENTS = tables.decisions, tables.checkpoints, tables.waste, tables.stop_events

#: Ids per ``IN (...)`` list when reading rows (well under SQLite's bound-parameter limit).
_CHUNK = 500


def uncovered(start: datetime, end: datetime, covered: Iterable[tuple[datetime, datetime]]
              ) -> list[tuple[datetime, datetime]]:
    """The parts of ``[start, end)`` that no interval of ``covered`` (``[a, b)`` pairs, any
    order, may overlap each other) covers, in order; empty when ``end <= start``."""
    gaps: list[tuple[datetime, datetime]] = []
    cursor = start
    for a, b in sorted(covered):
        if b <= cursor:
            continue
        if a >= end:
            break
        if a > cursor:
            gaps.append((cursor, a))
        cursor = max(cursor, b)
        if cursor >= end:
            break
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


@dataclass
class Rows:
    """The local rows of one batch (SQLAlchemy rows, keyed by their local ids)."""

    instances: dict[int, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    charges: list[Any] = field(default_factory=list)
    decisions: list[Any] = field(default_factory=list)
    checkpoints: list[Any] = field(default_factory=list)
    waste: list[Any] = field(default_factory=list)
    stop_events: list[Any] = field(default_factory=list)


def _fetch(conn: sa.Connection, table: sa.Table, ids: Iterable[Any]) -> list[Any]:
    wanted = sorted(set(ids))
    out: list[Any] = []
    for i in range(0, len(wanted), _CHUNK):
        out.extend(conn.execute(sa.select(table).where(table.c.id.in_(wanted[i:i + _CHUNK]))).all())
    return out


def read_rows(conn: sa.Connection, entries: Sequence[Entry]) -> Rows:
    """The local rows ``entries`` name, plus their runs, those runs' instances and the
    decisions of their stop events (read on ``conn``, one snapshot). An entry whose row is
    gone is left out (there is nothing to send)."""
    ids: dict[str, list[Any]] = defaultdict(list)
    for entry in entries:
        ids[entry.table].append(entry.row_id)
    rows = Rows()
    rows.charges = sorted(_fetch(conn, CHARGES, ids["charges"]), key=lambda r: (ensure_utc(r.start_at), r.id))
    rows.checkpoints = _fetch(conn, CHECKPOINTS, ids["checkpoints"])
    rows.waste = _fetch(conn, WASTE, ids["waste"])
    rows.stop_events = _fetch(conn, STOP_EVENTS, ids["stop_events"])
    wanted = set(ids["decisions"]) | {r.decision_id for r in rows.stop_events if r.decision_id is not None}
    rows.decisions = _fetch(conn, DECISIONS, wanted)
    children = (*rows.charges, *rows.decisions, *rows.checkpoints, *rows.waste, *rows.stop_events)
    rows.runs = {r.id: r for r in _fetch(conn, RUNS, set(ids["runs"]) | {r.run_id for r in children})}
    rows.instances = {r.id: r for r in _fetch(conn, INSTANCES, {r.instance_pk for r in rows.runs.values()})}
    return rows


def _dialect_insert(dialect: str) -> Any:
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        raise ValueError(f"a central ledger is PostgreSQL (or SQLite), not {dialect}")
    return insert


def _later(column: sa.ColumnElement[Any], new: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """The later of two times in SQL, NULL only when both are (GREATEST, portable)."""
    return sa.case((sa.or_(column.is_(None), new > column), new), else_=column)


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    """The upserts of ``dialect`` (built once per process)."""
    insert = _dialect_insert(dialect)
    out: dict[str, Any] = {}
    stmt = insert(INSTANCES)
    out["instance"] = stmt.on_conflict_do_update(
        index_elements=[INSTANCES.c.provider, INSTANCES.c.provider_instance_id],
        set_={"gpu": stmt.excluded.gpu, "gpu_count": stmt.excluded.gpu_count, "billing": stmt.excluded.billing,
              "price_per_hour": stmt.excluded.price_per_hour, "currency": stmt.excluded.currency,
              "region": sa.func.coalesce(stmt.excluded.region, INSTANCES.c.region)})
    stmt = insert(RUNS)
    run_set: dict[str, Any] = {c.name: stmt.excluded[c.name] for c in RUNS.c if c.name != "id"}
    run_set["last_seen_at"] = _later(RUNS.c.last_seen_at, stmt.excluded.last_seen_at)
    run_set["charged_until"] = _later(RUNS.c.charged_until, stmt.excluded.charged_until)
    out["run"] = stmt.on_conflict_do_update(index_elements=[RUNS.c.id], set_=run_set)
    for name, table in (("decision", DECISIONS), ("checkpoint", CHECKPOINTS), ("waste", WASTE),
                        ("stop_event", STOP_EVENTS)):
        stmt = insert(table)
        out[name] = stmt.on_conflict_do_update(
            index_elements=[table.c.run_id, table.c.origin_id],
            set_={c.name: stmt.excluded[c.name] for c in table.c if c.name not in ("id", "run_id", "origin_id")})
    return out


def _copy(row: Any, table: sa.Table, **override: Any) -> dict[str, Any]:
    """``row``'s columns of ``table`` but the id, as the central row's values: ``origin_id``
    is the local id (for tables that have one), then ``override``."""
    values = {c.name: getattr(row, c.name) for c in table.c if c.name not in ("id", "origin_id")}
    if "origin_id" in table.c:
        values["origin_id"] = row.id
    values.update(override)
    return values


def apply(conn: sa.Connection, rows: Rows) -> None:
    """Write ``rows`` into the central ledger on ``conn``, inside the caller's write
    transaction (see the module docstring for each table's rule).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the central ledger could not be written (the caller's
            transaction rolls everything back).
    """
    q = _statements(conn.dialect.name)
    # Instances in their natural key's order, so two machines lock shared ones in one order.
    central_pk: dict[int, int] = {}
    for inst in sorted(rows.instances.values(), key=lambda r: (r.provider, r.provider_instance_id)):
        conn.execute(q["instance"], [_copy(inst, INSTANCES)])
        central_pk[inst.id] = conn.scalar(sa.select(INSTANCES.c.id).where(
            INSTANCES.c.provider == inst.provider, INSTANCES.c.provider_instance_id == inst.provider_instance_id))
    runs = sorted(rows.runs.values(), key=lambda r: (ensure_utc(r.started_at), r.id))
    if runs:
        conn.execute(q["run"], [_copy(r, RUNS, id=r.id, instance_pk=central_pk[r.instance_pk],
                                      command=redact_argv(r.command)) for r in runs])
    run_instance = {r.id: central_pk[r.instance_pk] for r in runs}
    if rows.charges and conn.dialect.name == "postgresql":
        for pk in sorted({run_instance[c.run_id] for c in rows.charges}):
            conn.execute(sa.select(INSTANCES.c.id).where(INSTANCES.c.id == pk).with_for_update())
    for charge in rows.charges:
        merge_charge(conn, run_id=charge.run_id, instance_pk=run_instance[charge.run_id],
                     start=ensure_utc(charge.start_at), end=ensure_utc(charge.end_at),
                     rate=charge.rate_per_hour, currency=charge.currency)
    if rows.decisions:
        conn.execute(q["decision"], [_copy(r, DECISIONS) for r in rows.decisions])
    if rows.checkpoints:
        conn.execute(q["checkpoint"], [_copy(r, CHECKPOINTS) for r in rows.checkpoints])
    if rows.waste:
        conn.execute(q["waste"], [_copy(r, WASTE, instance_pk=run_instance[r.run_id]) for r in rows.waste])
    if rows.stop_events:
        decision_pk = _central_decisions(conn, {(r.run_id, r.decision_id) for r in rows.stop_events
                                                if r.decision_id is not None})
        conn.execute(q["stop_event"], [
            _copy(r, STOP_EVENTS, decision_id=decision_pk.get((r.run_id, r.decision_id)))
            for r in rows.stop_events])


def _central_decisions(conn: sa.Connection, keys: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """``{(run id, local decision id): central decision id}`` for ``keys``."""
    out: dict[tuple[str, int], int] = {}
    runs = sorted({run for run, _ in keys})
    for i in range(0, len(runs), _CHUNK):
        for row in conn.execute(sa.select(DECISIONS.c.id, DECISIONS.c.run_id, DECISIONS.c.origin_id).where(
                DECISIONS.c.run_id.in_(runs[i:i + _CHUNK]), DECISIONS.c.origin_id.is_not(None))):
            if (row.run_id, row.origin_id) in keys:
                out[(row.run_id, int(row.origin_id))] = int(row.id)
    return out


def merge_charge(conn: sa.Connection, *, run_id: str, instance_pk: int, start: datetime, end: datetime,
                 rate: Decimal, currency: str) -> list[tuple[datetime, datetime]]:
    """Charge the central ledger for the parts of ``[start, end)`` of ``run_id`` on central
    instance ``instance_pk`` that no central charge covers yet (the merge rule: module
    docstring), inside the caller's transaction, which must hold the instance's lock.

    Returns:
        the parts added, in order (empty when all of it was there already).
    """
    c = CHARGES
    found = conn.execute(
        sa.select(c.c.id, c.c.run_id, c.c.start_at, c.c.end_at, c.c.rate_per_hour, c.c.currency)
        .where(c.c.instance_pk == instance_pk, c.c.end_at >= start, c.c.start_at < end)
        .order_by(c.c.start_at)).all()
    gaps = uncovered(start, end, [(ensure_utc(r.start_at), ensure_utc(r.end_at)) for r in found])
    for lo, hi in gaps:
        lo_us, hi_us = epoch_us(lo), epoch_us(hi)
        grows = next((r for r in found if r.run_id == run_id and ensure_utc(r.end_at) == lo
                      and r.rate_per_hour == rate and r.currency == currency), None)
        if grows is not None:
            conn.execute(sa.update(c).where(c.c.id == grows.id)
                         .values(end_at=hi, duration_us=c.c.duration_us + (hi_us - lo_us)))
        else:
            conn.execute(sa.insert(c).values(run_id=run_id, instance_pk=instance_pk, start_at=lo, end_at=hi,
                                             rate_per_hour=rate, currency=currency, duration_us=hi_us - lo_us))
        add_to_rollup(None, run_id=run_id, instance_pk=instance_pk, rate=rate,  # type: ignore[arg-type]
                      currency=currency, start_us=lo_us, end_us=hi_us, connection=conn)
    return gaps


__all__ = ["Rows", "apply", "merge_charge", "read_rows", "uncovered"]
