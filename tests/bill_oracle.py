"""Brute force for the bill: every charge row read into Python, clipped and priced one by one
with Decimal (the algorithm ``costctl bill`` used before it summed in SQL). The tests compare
the SQL bill with it to the micro-unit."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session

from costctl.money import cost_of
from costctl.ledger.schema import Charge, Instance, Run

UTC = timezone.utc


def _utc(t):
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def slices(session: Session, since=None, until=None):
    """``[(run_id, instance_pk, start, end, rate, currency)]`` clipped to the window."""
    out = []
    cols = Charge.__table__.c
    for run_id, pk, start, end, rate, cur in session.execute(
            select(cols.run_id, cols.instance_pk, Charge.start_at, Charge.end_at, Charge.rate_per_hour,
                   cols.currency)):
        lo = max(start, since) if since else start
        hi = min(end, until) if until else end
        if hi > lo:
            out.append((run_id, pk, lo, hi, rate, cur))
    return out


def totals(session, since=None, until=None) -> dict[str, Decimal]:
    t: dict[str, Decimal] = defaultdict(Decimal)
    for _, _, lo, hi, rate, cur in slices(session, since, until):
        t[cur] += cost_of(rate, hi - lo)
    return dict(sorted(t.items()))


def by_run(session, since=None, until=None) -> dict[tuple[str, str], tuple[Decimal, float, Decimal | None]]:
    """``{(run, currency): (spend, duration_s, price)}`` for runs active in the window."""
    runs = list(session.scalars(select(Run)))
    insts = {i.id: i for i in session.scalars(select(Instance))}
    charges = defaultdict(list)
    cols = Charge.__table__.c
    for run_id, start, end, rate, cur in session.execute(
            select(cols.run_id, Charge.start_at, Charge.end_at, Charge.rate_per_hour, cols.currency)
            .order_by(Charge.start_at)):
        charges[run_id].append((start, end, rate, cur))
    out = {}
    for run in runs:
        cs = charges.get(run.id, [])
        last = max((c[1] for c in cs), default=None)
        ends = [t for t in (run.ended_at, last) if t is not None]
        end = max(ends) if ends else run.last_seen_at
        if until is not None and run.started_at >= until:
            continue
        if not (since is None or end > since or (end == run.started_at and run.started_at >= since)):
            continue
        lo = max(run.started_at, since) if since else run.started_at
        hi = min(end, until) if until else end
        duration = (hi - lo).total_seconds() if hi > lo else 0.0
        per: dict[str, Decimal] = defaultdict(Decimal)
        for s, e, rate, cur in cs:
            a, b = (max(s, since) if since else s), (min(e, until) if until else e)
            if b > a:
                per[cur] += cost_of(rate, b - a)
        inst = insts[run.instance_pk]
        if not per:
            per[run.price_currency if run.billing is not None else inst.currency] = Decimal(0)
        for cur, amount in per.items():
            rated = [c for c in cs if c[3] == cur]
            price = rated[-1][2] if rated else (run.price_per_hour if run.billing is not None else inst.price_per_hour)
            out[(run.id, cur)] = (amount, duration, price)
    return out


def by_instance(session, since=None, until=None):
    """``{(pk, currency): (spend, duration_s, runs, first, last, min rate, max rate, newest rate)}``."""
    groups = defaultdict(list)
    for s in slices(session, since, until):
        groups[(s[1], s[5])].append(s)
    out = {}
    for key, ss in groups.items():
        rates = [s[4] for s in ss]
        out[key] = (sum((cost_of(s[4], s[3] - s[2]) for s in ss), Decimal(0)),
                    sum((s[3] - s[2]).total_seconds() for s in ss), len({s[0] for s in ss}),
                    min(s[2] for s in ss), max(s[3] for s in ss), min(rates), max(rates),
                    max(ss, key=lambda s: (s[2], s[3]))[4])
    return out


def split_at_midnights(start, end, tz):
    parts, cursor = [], start
    while cursor < end:
        day = cursor.astimezone(tz).date()
        nxt = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz).astimezone(UTC)
        stop = min(end, nxt)
        parts.append((day, cursor, stop))
        cursor = stop
    return parts


def by_day(session, tz: ZoneInfo, since=None, until=None):
    """``{(day, currency): (spend, duration_s, runs, instances)}``."""
    groups = defaultdict(list)
    for run_id, pk, lo, hi, rate, cur in slices(session, since, until):
        for day, a, b in split_at_midnights(lo, hi, tz):
            groups[(day, cur)].append((run_id, pk, a, b, rate))
    return {k: (sum((cost_of(s[4], s[3] - s[2]) for s in v), Decimal(0)), sum((s[3] - s[2]).total_seconds() for s in v),
                len({s[0] for s in v}), len({s[1] for s in v})) for k, v in groups.items()}


def by_gpu(session, since=None, until=None):
    """``{(gpu, currency): (spend, duration_s, gpu_hours, runs, instances)}``; a run with a
    summary counts with its own card, an open one with its instance's."""
    insts = {i.id: i for i in session.scalars(select(Instance))}
    runs = {r.id: r for r in session.scalars(select(Run))}

    def card(run_id):
        r = runs[run_id]
        i = insts[r.instance_pk]
        return (r.gpu, r.gpu_count) if r.billing is not None else (i.gpu, i.gpu_count)

    groups = defaultdict(list)
    for s in slices(session, since, until):
        groups[(card(s[0])[0], s[5])].append(s)
    return {k: (sum((cost_of(s[4], s[3] - s[2]) for s in v), Decimal(0)), sum((s[3] - s[2]).total_seconds() for s in v),
                sum((s[3] - s[2]).total_seconds() * card(s[0])[1] for s in v) / 3600,
                len({s[0] for s in v}), len({s[1] for s in v})) for k, v in groups.items()}
