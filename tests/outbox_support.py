"""Helpers for the fleet-mode tests: a local ledger with its outbox on, and a comparable dump of
what a ledger holds (ids that differ between ledgers left out or translated)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from costctl.ledger import Ledger
from costctl.ledger import tables
from costctl.money import cost_of


def local_ledger(path: Path) -> Ledger:
    """A fresh SQLite ledger at ``path`` with its outbox on (a watch in fleet mode)."""
    return Ledger.open(f"sqlite:///{path}", outbox=True)


def charges(engine: sa.Engine) -> list[tuple[Any, ...]]:
    """Every charge: ``(run, provider instance id, start, end, rate, currency, duration_us, amount)``."""
    c, i = tables.charges, tables.instances
    with engine.connect() as conn:
        rows = conn.execute(sa.select(c.c.run_id, i.c.provider_instance_id, c.c.start_at, c.c.end_at,
                                      c.c.rate_per_hour, c.c.currency, c.c.duration_us)
                            .join(i, i.c.id == c.c.instance_pk).order_by(c.c.start_at, c.c.run_id)).all()
    return [(*r, cost_of(r.rate_per_hour, r.end_at - r.start_at)) for r in rows]


def rollups(engine: sa.Engine) -> list[tuple[Any, ...]]:
    """Every charge rollup row but its instance key."""
    t = tables.charge_rollups
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            sa.select(t.c.run_id, t.c.bucket_s, t.c.rate_per_hour, t.c.currency, t.c.duration_us, t.c.first_us,
                      t.c.last_us).order_by(t.c.run_id, t.c.bucket_s, t.c.rate_per_hour))]


def runs(engine: sa.Engine) -> dict[str, dict[str, Any]]:
    """Every run's columns (its instance as the provider's id, not the ledger's key)."""
    r, i = tables.runs, tables.instances
    with engine.connect() as conn:
        rows = conn.execute(sa.select(r, i.c.provider_instance_id).join(i, i.c.id == r.c.instance_pk)).mappings()
        return {row["id"]: {k: v for k, v in row.items() if k != "instance_pk"} for row in rows}


def children(engine: sa.Engine, table: sa.Table) -> list[dict[str, Any]]:
    """The rows of a run's child ``table`` keyed as the central ledger keys them: ``origin``
    is the writing ledger's id (``origin_id`` where set, else ``id``); a stop event's decision
    as ``(run id, its origin)``."""
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(table)).mappings()]
        decisions = {r.id: r.origin_id if r.origin_id is not None else r.id
                     for r in conn.execute(sa.select(tables.decisions.c.id, tables.decisions.c.origin_id))}
    out = []
    for row in rows:
        row["origin"] = row.pop("origin_id") if row["origin_id"] is not None else row["id"]
        row.pop("origin_id", None)
        del row["id"]
        row.pop("instance_pk", None)
        if "decision_id" in row and row["decision_id"] is not None:
            row["decision_id"] = decisions[row["decision_id"]]
        out.append(row)
    return sorted(out, key=lambda d: (d["run_id"], d["origin"]))


def dump(engine: sa.Engine) -> dict[str, Any]:
    """What a ledger holds that the central ledger must hold too, comparably."""
    return {"runs": runs(engine), "charges": charges(engine), "rollups": rollups(engine),
            **{name: children(engine, tables.metadata.tables[name])
               for name in ("decisions", "checkpoints", "waste", "stop_events")}}


def spend_seconds(engine: sa.Engine, provider_instance_id: str) -> Decimal:
    """Charged seconds of one instance (from ``duration_us``)."""
    c, i = tables.charges, tables.instances
    with engine.connect() as conn:
        us = conn.scalar(sa.select(sa.func.coalesce(sa.func.sum(c.c.duration_us), 0))
                         .join(i, i.c.id == c.c.instance_pk).where(i.c.provider_instance_id == provider_instance_id))
    return Decimal(int(us)) / 1_000_000


def assert_no_second_twice(engine: sa.Engine) -> None:
    """No two charges of one instance overlap."""
    c = tables.charges
    with engine.connect() as conn:
        rows = conn.execute(sa.select(c.c.instance_pk, c.c.start_at, c.c.end_at).order_by(c.c.instance_pk,
                                                                                        c.c.start_at)).all()
    for a, b in zip(rows, rows[1:]):
        if a.instance_pk == b.instance_pk:
            assert b.start_at >= a.end_at, f"a second charged twice: {a} and {b}"


def outbox_size(ledger: Ledger) -> int:
    with ledger.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(tables.outbox)))
