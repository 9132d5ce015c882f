"""Read-side queries: spend per currency, and the rows of ``costctl bill``.

All money is Decimal, unrounded, per currency; two currencies are never added. Charges are
clipped to the half-open window ``[since, until)``: a charge that straddles a bound counts
only for its seconds inside the window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..clock import ensure_utc
from ..money import cost_of
from .lifecycle import waste_by_run
from .schema import Charge, Instance, Run, StopEventRow


@dataclass(frozen=True, slots=True)
class ChargeSlice:
    """A charge (or the part of it inside a window): ``[start, end)`` at ``rate_per_hour``."""

    run_id: str
    instance_pk: int
    start: datetime
    end: datetime
    rate_per_hour: Decimal
    currency: str

    @property
    def seconds(self) -> float:
        """Length in seconds."""
        return (self.end - self.start).total_seconds()

    @property
    def amount(self) -> Decimal:
        """``rate_per_hour * seconds / 3600``, unrounded."""
        return cost_of(self.rate_per_hour, self.end - self.start)


def _clip(
    start: datetime, end: datetime, since: datetime | None, until: datetime | None
) -> tuple[datetime, datetime] | None:
    lo = max(start, since) if since else start
    hi = min(end, until) if until else end
    return (lo, hi) if hi > lo else None


def _active_in(start: datetime, end: datetime, since: datetime | None, until: datetime | None) -> bool:
    """Whether ``[start, end)`` meets ``[since, until)``; a zero-length run counts at its instant."""
    if until is not None and start >= until:
        return False
    return since is None or end > since or (end == start and start >= since)


def charge_slices(
    session: Session,
    *,
    instance_pk: int | None = None,
    run_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[ChargeSlice]:
    """Charges, optionally of one instance and/or run, clipped to ``[since, until)``, by start."""
    since = ensure_utc(since) if since else None
    until = ensure_utc(until) if until else None
    stmt = select(Charge).order_by(Charge.start_at, Charge.id)
    if instance_pk is not None:
        stmt = stmt.where(Charge.instance_pk == instance_pk)
    if run_id is not None:
        stmt = stmt.where(Charge.run_id == run_id)
    if since is not None:
        stmt = stmt.where(Charge.end_at > since)
    if until is not None:
        stmt = stmt.where(Charge.start_at < until)
    out = []
    for c in session.scalars(stmt):
        clipped = _clip(c.start_at, c.end_at, since, until)
        if clipped:
            out.append(ChargeSlice(c.run_id, c.instance_pk, clipped[0], clipped[1], c.rate_per_hour, c.currency))
    return out


def sum_by_currency(amounts: list[tuple[str, Decimal]]) -> dict[str, Decimal]:
    """Add amounts per currency (``[(currency, amount)]`` -> ``{currency: total}``), sorted by code."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for currency, amount in amounts:
        totals[currency] += amount
    return dict(sorted(totals.items()))


# --------------------------------------------------------------------------- bill rows


@dataclass(frozen=True, slots=True)
class RunBill:
    """One run (per currency it was charged in). ``duration_s`` is the run's time inside the
    window: from ``started_at`` to ``ended_at`` — or, for a run whose end was never recorded
    (its watch was killed), to its last charge end (else its last accrual) — extended to the
    last charge when charging went on after ``ended_at``. ``price_per_hour`` is the rate of its
    newest charge (else the instance's price). ``spend`` covers the window only. ``billing`` is
    the instance's (on-demand | spot | prepaid); ``waste_s``/``waste`` the paid seconds and
    money whose work was lost (e.g. last checkpoint → preemption), a share of ``spend``."""

    run_id: str
    instance_id: str
    provider: str
    gpu: str | None
    gpu_count: int
    started_at: datetime
    ended_at: datetime | None
    duration_s: float
    price_per_hour: Decimal | None
    currency: str
    spend: Decimal
    status: str
    exit_code: int | None
    host: str | None
    billing: str = "on-demand"
    waste_s: float = 0.0
    waste: Decimal = Decimal(0)
    stop_state: str | None = None
    stop_attempts: int | None = None
    stop_history: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class InstanceBill:
    """One instance (per currency): charged seconds and spend inside the window.

    Prices are the rates actually charged in ``currency`` inside the window (per
    instance-hour), never the instance's current price, which may be in another currency:
    ``price_per_hour`` is the rate of the newest such charge, ``min_price_per_hour`` /
    ``max_price_per_hour`` the range when the price changed."""

    instance_id: str
    provider: str
    gpu: str | None
    gpu_count: int
    billing: str
    region: str | None
    price_per_hour: Decimal | None
    min_price_per_hour: Decimal | None
    max_price_per_hour: Decimal | None
    currency: str
    runs: int
    first_charge_at: datetime
    last_charge_at: datetime
    duration_s: float
    spend: Decimal


@dataclass(frozen=True, slots=True)
class DayBill:
    """One calendar day in the report's time zone (per currency); charges spanning midnight
    are split at midnight."""

    day: date
    currency: str
    runs: int
    instances: int
    duration_s: float
    spend: Decimal


@dataclass(frozen=True, slots=True)
class GpuBill:
    """One GPU type (per currency). ``gpu_hours`` counts every GPU of an instance
    (charged instance-hours × gpu_count)."""

    gpu: str | None
    currency: str
    runs: int
    instances: int
    duration_s: float
    gpu_hours: float
    spend: Decimal


def _instances(session: Session) -> dict[int, Instance]:
    return {i.id: i for i in session.scalars(select(Instance))}


def bill_by_run(session: Session, since: datetime | None = None, until: datetime | None = None, *,
                unguarded: Callable[[Run], bool] | None = None) -> list[RunBill]:
    """Runs active inside ``[since, until)``, oldest first (see :class:`RunBill`).

    ``unguarded(run)``, asked of each open run, True when its watch is gone while its job runs
    on: the run's status reads ``unguarded``."""
    instances = _instances(session)
    stmt = select(Run).order_by(Run.started_at, Run.id)
    if until is not None:
        stmt = stmt.where(Run.started_at < until)
    runs = list(session.scalars(stmt))
    all_charges: dict[str, list[Charge]] = defaultdict(list)
    for c in session.scalars(select(Charge).order_by(Charge.start_at)):
        all_charges[c.run_id].append(c)
    wasted = waste_by_run(session, since, until)
    stops = stop_history_by_run(session, {r.id for r in runs})
    rows: list[RunBill] = []
    for run in runs:
        charges = all_charges.get(run.id, [])
        last_charge_end = max((c.end_at for c in charges), default=None)
        ends = [t for t in (run.ended_at, last_charge_end) if t is not None]
        end = max(ends) if ends else run.last_seen_at
        if not _active_in(run.started_at, end, since, until):
            continue
        window = _clip(run.started_at, end, since, until)
        duration = (window[1] - window[0]).total_seconds() if window else 0.0
        inst = instances[run.instance_pk]
        per_currency = sum_by_currency(
            [(c.currency, cost_of(c.rate_per_hour, w[1] - w[0]))
             for c in charges if (w := _clip(c.start_at, c.end_at, since, until))]
        ) or {inst.currency: Decimal(0)}
        for currency, spend in per_currency.items():
            rated = [c for c in charges if c.currency == currency]
            price = rated[-1].rate_per_hour if rated else inst.price_per_hour
            rows.append(
                RunBill(
                    run_id=run.id,
                    instance_id=inst.provider_instance_id,
                    provider=inst.provider,
                    gpu=inst.gpu,
                    gpu_count=inst.gpu_count,
                    started_at=run.started_at,
                    ended_at=run.ended_at,
                    duration_s=duration,
                    price_per_hour=price,
                    currency=currency,
                    spend=spend,
                    status=("unguarded" if run.ended_at is None and unguarded is not None and unguarded(run)
                            else run.status),
                    exit_code=run.exit_code,
                    host=run.host,
                    billing=inst.billing,
                    waste_s=wasted[(run.id, currency)].seconds if (run.id, currency) in wasted else 0.0,
                    waste=wasted[(run.id, currency)].amount if (run.id, currency) in wasted else Decimal(0),
                    stop_state=stops[run.id][-1]["state"] if run.id in stops else None,
                    stop_attempts=max(e["attempt"] for e in stops[run.id]) if run.id in stops else None,
                    stop_history=tuple(stops.get(run.id, ())),
                )
            )
    return rows


def stop_history_by_run(session: Session, run_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's stop events, oldest first: ``{"time", "state", "attempt", "detail"}`` dicts
    (``time`` aware UTC) — the history of the stop decision of that run, if it had one."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not run_ids:
        return out
    stmt = select(StopEventRow).order_by(StopEventRow.run_id, StopEventRow.time, StopEventRow.id)
    for ev in session.scalars(stmt):
        if ev.run_id in run_ids:
            out[ev.run_id].append({"time": ev.time, "state": ev.state, "attempt": ev.attempt, "detail": ev.detail})
    return out


def bill_by_instance(
    session: Session, since: datetime | None = None, until: datetime | None = None
) -> list[InstanceBill]:
    """Instances with charges inside ``[since, until)``, one row per currency charged in, by
    first charge (see :class:`InstanceBill` for which rate is shown)."""
    instances = _instances(session)
    groups: dict[tuple[int, str], list[ChargeSlice]] = defaultdict(list)
    for s in charge_slices(session, since=since, until=until):
        groups[(s.instance_pk, s.currency)].append(s)
    rows = []
    for (pk, currency), slices in groups.items():
        inst = instances[pk]
        rates = [s.rate_per_hour for s in slices]
        rows.append(
            InstanceBill(
                instance_id=inst.provider_instance_id,
                provider=inst.provider,
                gpu=inst.gpu,
                gpu_count=inst.gpu_count,
                billing=inst.billing,
                region=inst.region,
                price_per_hour=max(slices, key=lambda s: (s.start, s.end)).rate_per_hour,
                min_price_per_hour=min(rates),
                max_price_per_hour=max(rates),
                currency=currency,
                runs=len({s.run_id for s in slices}),
                first_charge_at=min(s.start for s in slices),
                last_charge_at=max(s.end for s in slices),
                duration_s=sum(s.seconds for s in slices),
                spend=sum((s.amount for s in slices), Decimal(0)),
            )
        )
    return sorted(rows, key=lambda r: (r.first_charge_at, r.instance_id, r.currency))


def split_at_midnights(start: datetime, end: datetime, tz: ZoneInfo) -> list[tuple[date, datetime, datetime]]:
    """Split ``[start, end)`` at local midnights of ``tz`` -> ``[(local day, start, end)]`` (UTC).

    Midnights are computed with zoneinfo, so days of 23 or 25 hours (DST) are handled.
    """
    parts = []
    cursor = start
    while cursor < end:
        day = cursor.astimezone(tz).date()
        next_midnight = ensure_utc(datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz))
        stop = min(end, next_midnight)
        parts.append((day, cursor, stop))
        cursor = stop
    return parts


def bill_by_day(
    session: Session, tz: ZoneInfo, since: datetime | None = None, until: datetime | None = None
) -> list[DayBill]:
    """Spend per local day of ``tz`` inside ``[since, until)``, oldest first."""
    groups: dict[tuple[date, str], list[ChargeSlice]] = defaultdict(list)
    for s in charge_slices(session, since=since, until=until):
        for day, lo, hi in split_at_midnights(s.start, s.end, tz):
            groups[(day, s.currency)].append(
                ChargeSlice(s.run_id, s.instance_pk, lo, hi, s.rate_per_hour, s.currency)
            )
    return [
        DayBill(
            day=day,
            currency=currency,
            runs=len({s.run_id for s in slices}),
            instances=len({s.instance_pk for s in slices}),
            duration_s=sum(s.seconds for s in slices),
            spend=sum((s.amount for s in slices), Decimal(0)),
        )
        for (day, currency), slices in sorted(groups.items())
    ]


def bill_by_gpu(session: Session, since: datetime | None = None, until: datetime | None = None) -> list[GpuBill]:
    """Spend per GPU type (the instance's ``gpu``) inside ``[since, until)``, by spend, largest first."""
    instances = _instances(session)
    groups: dict[tuple[str | None, str], list[ChargeSlice]] = defaultdict(list)
    for s in charge_slices(session, since=since, until=until):
        groups[(instances[s.instance_pk].gpu, s.currency)].append(s)
    rows = [
        GpuBill(
            gpu=gpu,
            currency=currency,
            runs=len({s.run_id for s in slices}),
            instances=len({s.instance_pk for s in slices}),
            duration_s=sum(s.seconds for s in slices),
            gpu_hours=sum(s.seconds * instances[s.instance_pk].gpu_count for s in slices) / 3600,
            spend=sum((s.amount for s in slices), Decimal(0)),
        )
        for (gpu, currency), slices in groups.items()
    ]
    return sorted(rows, key=lambda r: (r.currency, -r.spend, r.gpu or ""))


__all__ = [
    "ChargeSlice",
    "charge_slices",
    "sum_by_currency",
    "RunBill",
    "InstanceBill",
    "DayBill",
    "GpuBill",
    "bill_by_run",
    "bill_by_instance",
    "bill_by_day",
    "bill_by_gpu",
    "split_at_midnights",
]
