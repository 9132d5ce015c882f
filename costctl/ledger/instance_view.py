"""What the ledger knows of provider instances, read for ``costctl fleet``: each instance's
spend by the ledger's view and its open runs with their heartbeats.

Core only (no ``sqlalchemy.orm``), on any connection :class:`~costctl.ledger.reader.LedgerReader`
gives. Three statements per chunk of at most :data:`CHUNK` instance ids, whatever the ledger's
size: the instances rows, their spend summed in SQL from the 15-minute ``charge_rollups`` (per
instance, currency and rate; the money is ``rate × µs / 3.6e9``, multiplied exactly in Python),
and their runs not ended. The ledger keys instances by ``(provider, provider's instance id)``;
it does not record the provider account an instance belongs to.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from ..clock import ensure_utc
from . import tables

#: Microseconds per hour: a rate per hour times microseconds over this is money.
US_PER_HOUR = Decimal(3_600_000_000)

#: Instance ids per ``IN (...)`` list: far below SQLite's 32,766 bound variables and
#: PostgreSQL's 65,535.
CHUNK = 500


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A run of the ledger that has not ended, and its heartbeat.

    Attributes:
        run_id: the run's id.
        host: the machine of its watch (None when not recorded).
        pid: its watch's process id (None when not recorded).
        last_seen_at: aware UTC; the watch moves it with every spend it records (every tick).
        mode: None for a watch that stops the instance when a policy says so; ``"dry-run"``
            or ``"advise-only"`` (:data:`costctl.ledger.tables.RUN_MODES`) for one that never does.
    """

    run_id: str
    host: str | None
    pid: int | None
    last_seen_at: datetime
    mode: str | None


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One instance as the ledger knows it.

    Attributes:
        provider: the adapter's name.
        instance_id: the provider's instance id.
        spend: every charge of the instance, per currency (ISO 4217 -> unrounded Decimal), sorted
            by code; empty when nothing was charged. Currencies are never added together.
        open_runs: its runs not ended, newest heartbeat first.
    """

    provider: str
    instance_id: str
    spend: dict[str, Decimal] = field(default_factory=dict)
    open_runs: tuple[Heartbeat, ...] = ()


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def instance_records(conn: Any, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], InstanceRecord]:
    """The ledger's :class:`InstanceRecord` of each ``(provider, instance id)`` in ``keys`` that
    it knows (an instance it never recorded is absent from the result).

    Args:
        conn: a Core connection (or session) on the ledger.
        keys: ``(provider, provider's instance id)`` pairs.

    Returns:
        ``{(provider, instance id): InstanceRecord}``.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read (a
            :meth:`~costctl.ledger.reader.LedgerReader.connection` turns it into one
            :class:`~costctl.errors.LedgerError` line).
    """
    wanted = set(keys)
    ids = sorted({instance_id for _provider, instance_id in wanted})
    inst, runs, rollups = tables.instances, tables.runs, tables.charge_rollups
    by_pk: dict[int, tuple[str, str]] = {}
    for chunk in _chunks(ids):
        for pk, provider, instance_id in conn.execute(
                select(inst.c.id, inst.c.provider, inst.c.provider_instance_id)
                .where(inst.c.provider_instance_id.in_(chunk))):
            if (provider, instance_id) in wanted:
                by_pk[pk] = (provider, instance_id)
    spend: dict[int, dict[str, Decimal]] = {}
    beats: dict[int, list[Heartbeat]] = {}
    pks = sorted(by_pk)
    for chunk in _chunks(pks):
        for pk, currency, rate, us in conn.execute(
                select(rollups.c.instance_pk, rollups.c.currency, rollups.c.rate_per_hour,
                       func.sum(rollups.c.duration_us))
                .where(rollups.c.instance_pk.in_(chunk))
                .group_by(rollups.c.instance_pk, rollups.c.currency, rollups.c.rate_per_hour)):
            amounts = spend.setdefault(pk, {})
            amounts[currency] = amounts.get(currency, Decimal(0)) + Decimal(str(rate)) * int(us or 0) / US_PER_HOUR
        for pk, run_id, host, pid, seen, mode in conn.execute(
                select(runs.c.instance_pk, runs.c.id, runs.c.host, runs.c.pid, runs.c.last_seen_at, runs.c.mode)
                .where(runs.c.instance_pk.in_(chunk), runs.c.ended_at.is_(None))):
            beats.setdefault(pk, []).append(Heartbeat(str(run_id), host, pid, ensure_utc(seen), mode))
    return {
        key: InstanceRecord(
            key[0], key[1], dict(sorted(spend.get(pk, {}).items())),
            tuple(sorted(beats.get(pk, []), key=lambda b: b.last_seen_at, reverse=True)))
        for pk, key in by_pk.items()
    }


__all__ = ["CHUNK", "Heartbeat", "InstanceRecord", "instance_records"]
