"""Read-side queries: spend per currency, and the rows of ``costctl bill``.

All money is Decimal, unrounded, per currency; two currencies are never added. Charges are
clipped to the half-open window ``[since, until)``: a charge that straddles a bound counts
only for its seconds inside the window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from sqlalchemy import BigInteger, and_, case, distinct, false, func, literal, or_, select, union_all

from ..clock import ensure_utc, utcnow
from ..money import cost_of, round_money
from . import tables
from .engine import Reader, dialect_name
from .lifecycle import GpuUse
from .outcomes import DEFAULT_SAVED_HORIZON, RunStory, run_stories
from .sqltime import epoch_us_sql
from .timebuckets import BUCKET_S, BUCKET_US, US_PER_S, epoch_us, from_epoch_us

if TYPE_CHECKING:
    from sqlalchemy import Row

# SQLAlchemy Core only (the tables of :mod:`.tables`, no ORM): ``costctl bill`` reads through a
# plain connection and never imports ``sqlalchemy.orm``. A session works as well.
RUNS, INSTANCES, CHARGES = tables.runs, tables.instances, tables.charges
DRY_RUN, ADVISE_ONLY = tables.DRY_RUN, tables.ADVISE_ONLY
ROLLUPS, STOP_EVENTS = tables.charge_rollups, tables.stop_events


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
    session: Reader,
    *,
    instance_pk: int | None = None,
    run_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[ChargeSlice]:
    """Charges, optionally of one instance and/or run, clipped to ``[since, until)``, by start."""
    since = ensure_utc(since) if since else None
    until = ensure_utc(until) if until else None
    stmt = select(CHARGES).order_by(CHARGES.c.start_at, CHARGES.c.id)
    if instance_pk is not None:
        stmt = stmt.where(CHARGES.c.instance_pk == instance_pk)
    if run_id is not None:
        stmt = stmt.where(CHARGES.c.run_id == run_id)
    if since is not None:
        stmt = stmt.where(CHARGES.c.end_at > since)
    if until is not None:
        stmt = stmt.where(CHARGES.c.start_at < until)
    out = []
    for c in session.execute(stmt):
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
    money whose work was lost or never done, a share of ``spend``: the idle stretch before a
    stop (``idle_waste_s``/``idle_waste``) and the work a preemption lost (last checkpoint →
    preemption); ``saved_s``/``saved`` what its confirmed stop saved under the counterfactual of
    :mod:`costctl.ledger.outcomes` (``saved_until``: where the counterfactual ended,
    ``saved_bound``: why, ``next run`` / ``horizon`` / ``now``); ``stop_policy`` the policy
    whose stop was carried through. ``dry_run``: watched with ``--dry-run`` (nothing was
    stopped, nothing saved); ``advise_only``: watched by a watch that stops nothing."""

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
    idle_waste_s: float = 0.0
    idle_waste: Decimal = Decimal(0)
    saved_s: float = 0.0
    saved: Decimal = Decimal(0)
    saved_until: datetime | None = None
    saved_bound: str | None = None
    stop_policy: str | None = None
    dry_run: bool = False
    advise_only: bool = False


@dataclass(frozen=True, slots=True)
class InstanceBill:
    """One instance (per currency): charged seconds and spend inside the window.

    Prices are the rates actually charged in ``currency`` inside the window (per
    instance-hour), never the instance's current price, which may be in another currency:
    ``price_per_hour`` is the rate of the newest such charge, ``min_price_per_hour`` /
    ``max_price_per_hour`` the range when the price changed. ``waste``/``saved`` (and their
    seconds): its runs' waste inside the window and the savings of stops confirmed inside it
    (:mod:`costctl.ledger.outcomes`)."""

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
    waste_s: float = 0.0
    waste: Decimal = Decimal(0)
    saved_s: float = 0.0
    saved: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class DayBill:
    """One calendar day in the report's time zone (per currency); charges and waste spanning
    midnight are split at midnight; a saving counts on the day its stop was confirmed."""

    day: date
    currency: str
    runs: int
    instances: int
    duration_s: float
    spend: Decimal
    waste_s: float = 0.0
    waste: Decimal = Decimal(0)
    saved_s: float = 0.0
    saved: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class GpuBill:
    """One GPU type (per currency). ``gpu_hours`` counts every GPU of an instance
    (charged instance-hours × gpu_count); waste and savings count with the run's card."""

    gpu: str | None
    currency: str
    runs: int
    instances: int
    duration_s: float
    gpu_hours: float
    spend: Decimal
    waste_s: float = 0.0
    waste: Decimal = Decimal(0)
    saved_s: float = 0.0
    saved: Decimal = Decimal(0)




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


# --------------------------------------------------------------------------- summed in SQL
#
# Every figure of the bill is ``SUM(duration_us) ... GROUP BY key, rate, currency`` in SQL over
# the "slices" of a window (:func:`window_slices`): the rollup rows of the whole 15-minute
# buckets inside ``[since, until)`` plus, for a bucket that ``since`` or ``until`` cuts, one
# aggregate over the charges of that bucket only, clipped in SQL. The integer microsecond sums
# are multiplied by the Decimal rate in Python (rate x µs overflows 64-bit integers, and SQLite
# would turn an overflow into REAL): :func:`amount_of_us`.

US_PER_HOUR = Decimal(3_600_000_000)


def amount_of_us(rate_per_hour: Decimal, us: int) -> Decimal:
    """``rate_per_hour * us / 3_600_000_000``: the money for ``us`` microseconds, unrounded."""
    return Decimal(rate_per_hour) * Decimal(int(us)) / US_PER_HOUR


def _end_us_sql(dialect: str) -> Any:
    """SQL for ``charges.end_at`` as POSIX microseconds (exact: no julianday, no float)."""
    return epoch_us_sql(CHARGES.c.end_at, dialect)


def _window(since_us: int | None, until_us: int | None
            ) -> tuple[int | None, int | None, bool, list[tuple[int, int, int]]]:
    """``(first whole bucket, end of whole buckets, any whole bucket, edges)``: bucket starts in
    POSIX seconds; edges are ``(bucket_s, lo_us, hi_us)`` for the buckets the window cuts."""
    edges: list[tuple[int, int, int]] = []
    lo_b = hi_b = None
    if since_us is not None:
        b = since_us // BUCKET_US * BUCKET_S
        lo_b = b if since_us == b * US_PER_S else b + BUCKET_S
        if lo_b != b:
            hi = (b + BUCKET_S) * US_PER_S
            edges.append((b, since_us, hi if until_us is None else min(hi, until_us)))
    if until_us is not None:
        b = until_us // BUCKET_US * BUCKET_S
        hi_b = b
        if until_us != b * US_PER_S and not (edges and edges[0][0] == b):
            edges.append((b, b * US_PER_S if since_us is None else max(b * US_PER_S, since_us), until_us))
    edges = [e for e in edges if e[2] > e[1]]
    whole = lo_b is None or hi_b is None or lo_b < hi_b
    return lo_b, hi_b, whole, edges


def window_slices(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                  instance_pk: int | None = None, run_ids: Sequence[str] | None = None) -> Any:
    """The charged time inside ``[since, until)`` as a subquery of rows ``(run_id, instance_pk,
    bucket_s, rate_per_hour, currency, us, first_us, last_us)``: rollup rows of whole buckets,
    and per cut bucket one aggregate of its charges clipped in SQL (index on ``end_at``: the
    charges ending inside the cut part, plus per instance the one charge running across its end).
    Optionally of one instance and/or some runs. Times in µs are POSIX microseconds."""
    R = ROLLUPS
    C = CHARGES
    since_us = epoch_us(since) if since is not None else None
    until_us = epoch_us(until) if until is not None else None
    lo_b, hi_b, whole, edges = _window(since_us, until_us)
    parts = []
    if whole:
        q = select(R.c.run_id, R.c.instance_pk, R.c.bucket_s, R.c.rate_per_hour, R.c.currency,
                   R.c.duration_us.label("us"), R.c.first_us, R.c.last_us)
        if lo_b is not None:
            q = q.where(R.c.bucket_s >= lo_b)
        if hi_b is not None:
            q = q.where(R.c.bucket_s < hi_b)
        if instance_pk is not None:
            q = q.where(R.c.instance_pk == instance_pk)
        if run_ids is not None:
            q = q.where(R.c.run_id.in_(list(run_ids)))
        parts.append(q)
    dialect = dialect_name(session)
    end_e = _end_us_sql(dialect)
    start_e = end_e - C.c.duration_us
    for bucket_s, lo, hi in edges:
        lo_dt, hi_dt = from_epoch_us(lo), from_epoch_us(hi)
        first = case((start_e > lo, start_e), else_=lo)
        last = case((end_e < hi, end_e), else_=hi)
        keys = (C.c.run_id, C.c.instance_pk, C.c.rate_per_hour, C.c.currency)
        agg = (C.c.run_id, C.c.instance_pk, literal(bucket_s, BigInteger).label("bucket_s"), C.c.rate_per_hour,
               C.c.currency, func.sum(last - first).label("us"), func.min(first).label("first_us"),
               func.max(last).label("last_us"))

        def filtered(q: Any) -> Any:
            if instance_pk is not None:
                q = q.where(C.c.instance_pk == instance_pk)
            if run_ids is not None:
                q = q.where(C.c.run_id.in_(list(run_ids)))
            return q.group_by(*keys)

        # The charges ending inside (lo, hi] ...
        ending = filtered(select(*agg).where(C.c.end_at > lo_dt, C.c.end_at <= hi_dt))
        # ... and, per instance with time in this bucket, the one charge running across hi.
        c2 = C.alias("c2")
        in_bucket = select(R.c.instance_pk).where(R.c.bucket_s == bucket_s).distinct().subquery()
        across = (select(c2.c.id).where(c2.c.instance_pk == in_bucket.c.instance_pk, c2.c.end_at > hi_dt)
                  .order_by(c2.c.end_at).limit(1).scalar_subquery())
        running = filtered(select(*agg).where(C.c.id.in_(select(across).select_from(in_bucket)),
                                              C.c.start_at < hi_dt))
        parts += [ending, running]
    if not parts:  # an empty window
        parts.append(select(R.c.run_id, R.c.instance_pk, R.c.bucket_s, R.c.rate_per_hour, R.c.currency,
                            R.c.duration_us.label("us"), R.c.first_us, R.c.last_us).where(false()))
    return (parts[0] if len(parts) == 1 else union_all(*parts)).subquery("slices")


def _money(rows: Any) -> dict[Any, Decimal]:
    """``{key: amount}`` from ``(key, rate, µs)`` rows (amount summed per key, exact)."""
    out: dict[Any, Decimal] = defaultdict(Decimal)
    for key, rate, us in rows:
        out[key] += amount_of_us(Decimal(str(rate)), us)
    return out


def spend_by_currency(session: Reader, *, instance_pk: int | None = None, run_id: str | None = None,
                      since: datetime | None = None, until: datetime | None = None) -> dict[str, Decimal]:
    """Spend per currency inside ``[since, until)`` (of one instance and/or run), unrounded,
    sorted by code; empty when nothing was charged. Summed in SQL (see :func:`window_slices`)."""
    S = window_slices(session, since, until, instance_pk=instance_pk,
                      run_ids=[run_id] if run_id is not None else None)
    rows = session.execute(select(S.c.currency, S.c.rate_per_hour, func.sum(S.c.us))
                           .group_by(S.c.currency, S.c.rate_per_hour))
    return dict(sorted(_money(rows).items()))


def _s(us: int | None) -> float:
    return int(us or 0) / 1_000_000


# --------------------------------------------------------------------------- by run


@dataclass(frozen=True, slots=True)
class RunPage:
    """The newest runs of a window (``rows``, oldest first, at most ``limit`` runs), the totals
    per currency over ALL runs of the window, how many runs the window has (``runs_total``)
    and how many are shown (``runs_shown``); ``use`` is the GPU use of the shown runs from
    their summaries (runs with readable GPU samples only); ``waste_totals`` / ``saved_totals``
    the waste and savings over ALL runs of the window, added as ``totals`` is."""

    rows: list[RunBill]
    totals: dict[str, Decimal]
    runs_total: int
    runs_shown: int
    use: dict[str, GpuUse]
    waste_totals: dict[str, Decimal] = field(default_factory=dict)
    saved_totals: dict[str, Decimal] = field(default_factory=dict)


def _rounded(amount: Decimal, places: int | None) -> Decimal:
    """``amount`` rounded half-even to ``places`` decimals (None: as is)."""
    return amount if places is None else round_money(amount, places)


def story_money(stories: dict[str, RunStory]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(run_id, currency): {"waste_s", "waste", "idle_waste_s", "idle_waste", "saved_s",
    "saved", "saving"}}`` of runs' stories (exact amounts; ``saving`` the
    :class:`~costctl.ledger.outcomes.Saving` or None)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}

    def slot(run_id: str, currency: str) -> dict[str, Any]:
        return out.setdefault((run_id, currency), {"waste_s": 0.0, "waste": Decimal(0), "idle_waste_s": 0.0,
                                                   "idle_waste": Decimal(0), "saved_s": 0.0, "saved": Decimal(0),
                                                   "saving": None})

    for run_id, story in stories.items():
        for p in story.waste:
            m = slot(run_id, p.currency)
            m["waste_s"] += p.seconds
            m["waste"] += p.amount
            if p.reason == "idle":
                m["idle_waste_s"] += p.seconds
                m["idle_waste"] += p.amount
        if story.saving is not None:
            m = slot(run_id, story.saving.currency)
            m["saved_s"], m["saved"], m["saving"] = story.saving.seconds, story.saving.amount, story.saving
    return out


def _story_totals(money: dict[tuple[Any, str], dict[str, Any]], name: str, places: int | None) -> dict[str, Decimal]:
    """Per-currency totals of ``money[...][name]``, each key's amount rounded first (as rows are)."""
    return sum_by_currency([(cur, _rounded(m[name], places)) for (_, cur), m in money.items() if m[name]])


#: A run's waste and saving in a currency it has none in.
_NO_MONEY: dict[str, Any] = {"waste_s": 0.0, "waste": Decimal(0), "idle_waste_s": 0.0, "idle_waste": Decimal(0),
                             "saved_s": 0.0, "saved": Decimal(0), "saving": None}


def _run_end_sql() -> Any:
    """The end of a run as :class:`RunBill` counts it: the later of ``ended_at`` and its newest
    charge end, else whichever exists, else ``last_seen_at``."""
    return case(
        (and_(RUNS.c.charged_until.is_(None), RUNS.c.ended_at.is_(None)), RUNS.c.last_seen_at),
        (RUNS.c.charged_until.is_(None), RUNS.c.ended_at),
        (RUNS.c.ended_at.is_(None), RUNS.c.charged_until),
        (RUNS.c.charged_until > RUNS.c.ended_at, RUNS.c.charged_until),
        else_=RUNS.c.ended_at,
    )


def active_runs_sql(since: datetime | None, until: datetime | None) -> list[Any]:
    """SQL conditions on ``runs`` for the runs active inside ``[since, until)``, as the bill counts
    them (a run meets the window; a zero-length run counts at its instant)."""
    end = _run_end_sql()
    where = []
    if until is not None:
        where.append(RUNS.c.started_at < until)
    if since is not None:
        where.append(or_(end > since, and_(end == RUNS.c.started_at, RUNS.c.started_at >= since)))
    return where


def run_page(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
             limit: int | None = 100, unguarded: Callable[[Row[Any]], bool] | None = None,
             places: int | None = None, run_ids: Collection[str] | None = None,
             with_totals: bool = True, now: datetime | None = None,
             horizon: timedelta = DEFAULT_SAVED_HORIZON, stories: dict[str, RunStory] | None = None) -> RunPage:
    """The runs active inside ``[since, until)`` (see :class:`RunBill`): the newest ``limit``
    (None: all) as rows, oldest first, with the totals over all of them. Reads the runs and
    their summaries, the rollups and the edge buckets' charges (aggregates only): never the
    samples, never a charge row.

    ``places``: None, the totals are exact; else each run's amount (per currency) is rounded
    half-even to ``places`` decimals, as its exported row is, and the totals are the sums of those
    rounded amounts over every run of the window (shown or not), so a bill's rows add up to its
    totals exactly (see :mod:`costctl.report`).

    ``unguarded(run)``, asked of each shown open run, True when its watch is gone while its job
    runs on: the run's status reads ``unguarded``.

    ``run_ids``: only these runs are counted and shown (the totals still cover every run of
    the window). ``with_totals=False``: the totals are not computed (``{}``; a caller that sums
    the window itself, :func:`chain_page`).

    Waste and savings: :func:`costctl.ledger.outcomes.run_stories` of the window's runs, at
    ``now`` (aware UTC; default the current time) with ``horizon`` (``[bill] saved_horizon``),
    unless the caller read them already (``stories``)."""
    since = ensure_utc(since) if since else None
    until = ensure_utc(until) if until else None
    active = active_runs_sql(since, until)
    if run_ids is not None:
        active.append(RUNS.c.id.in_(sorted(run_ids)))
    runs_total = int(session.scalar(select(func.count()).select_from(RUNS).where(*active)) or 0)
    stmt = select(RUNS).where(*active).order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc())
    if limit is not None:
        stmt = stmt.limit(limit)
    runs = list(reversed(session.execute(stmt).all()))
    ids = [r.id for r in runs]

    totals: dict[str, Decimal] = {}
    if with_totals:
        S = window_slices(session, since, until)
        if places is None:
            totals = dict(sorted(_money(session.execute(
                select(S.c.currency, S.c.rate_per_hour, func.sum(S.c.us)).group_by(S.c.currency, S.c.rate_per_hour)
            )).items()))
        else:  # each run's amount rounded as its row is, then added (aggregate rows: one per run and rate)
            per_run = _money(((run_id, currency), rate, us) for run_id, currency, rate, us in session.execute(
                select(S.c.run_id, S.c.currency, S.c.rate_per_hour, func.sum(S.c.us))
                .group_by(S.c.run_id, S.c.currency, S.c.rate_per_hour)))
            totals = sum_by_currency([(cur, round_money(amount, places))
                                      for (_, cur), amount in per_run.items()])
    spend: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    newest: dict[tuple[str, str], tuple[int, Decimal]] = {}
    instances: dict[int, Row[Any]] = {}
    if ids:
        W = window_slices(session, since, until, run_ids=ids)
        for run_id, currency, rate, us in session.execute(
                select(W.c.run_id, W.c.currency, W.c.rate_per_hour, func.sum(W.c.us))
                .group_by(W.c.run_id, W.c.currency, W.c.rate_per_hour)):
            spend[(run_id, currency)] += amount_of_us(Decimal(str(rate)), us)
        R = ROLLUPS
        for run_id, currency, rate, last in session.execute(
                select(R.c.run_id, R.c.currency, R.c.rate_per_hour, func.max(R.c.last_us))
                .where(R.c.run_id.in_(ids)).group_by(R.c.run_id, R.c.currency, R.c.rate_per_hour)):
            if (run_id, currency) not in newest or last > newest[(run_id, currency)][0]:
                newest[(run_id, currency)] = (int(last), Decimal(str(rate)))
        pks = {r.instance_pk for r in runs}
        instances = {i.id: i for i in session.execute(select(INSTANCES).where(INSTANCES.c.id.in_(pks)))}
    if stories is None:
        stories = run_stories(session, since, until, now=now or utcnow(), horizon=horizon, active=active)
    money = story_money(stories)
    if with_totals:
        waste_totals, saved_totals = _story_totals(money, "waste", places), _story_totals(money, "saved", places)
    else:
        waste_totals, saved_totals = {}, {}
    stops = stop_history_by_run(session, set(ids))
    rows: list[RunBill] = []
    use: dict[str, GpuUse] = {}
    for run in runs:
        inst = instances[run.instance_pk]
        summarized = run.billing is not None
        ends = [t for t in (run.ended_at, run.charged_until) if t is not None]
        end = max(ends) if ends else run.last_seen_at
        window = _clip(run.started_at, end, since, until)
        duration = (window[1] - window[0]).total_seconds() if window else 0.0
        own_currency = (run.price_currency or inst.currency) if summarized else inst.currency
        per_currency = {cur: amount for (rid, cur), amount in sorted(spend.items()) if rid == run.id} \
            or {own_currency: Decimal(0)}
        for rid, cur in money:  # waste or a saving in a currency the window charged nothing in
            if rid == run.id and cur not in per_currency:
                per_currency[cur] = Decimal(0)
        story = stories.get(run.id)
        if summarized and (run.peak_memory_bytes is not None or run.mean_utilization is not None):
            use[run.id] = GpuUse(run.peak_memory_bytes, run.memory_total_bytes, run.mean_utilization,
                                 int(run.gpu_samples or 0))
        for currency, amount in per_currency.items():
            m = money.get((run.id, currency), _NO_MONEY)
            if (run.id, currency) in newest:
                price: Decimal | None = newest[(run.id, currency)][1]
            elif summarized and run.price_currency == currency:
                price = run.price_per_hour
            else:
                price = inst.price_per_hour
            rows.append(RunBill(
                run_id=run.id,
                instance_id=inst.provider_instance_id,
                provider=inst.provider,
                gpu=run.gpu if summarized else inst.gpu,
                gpu_count=(run.gpu_count if summarized and run.gpu_count is not None else inst.gpu_count),
                started_at=run.started_at,
                ended_at=run.ended_at,
                duration_s=duration,
                price_per_hour=price,
                currency=currency,
                spend=amount,
                status=("unguarded" if run.ended_at is None and unguarded is not None and unguarded(run)
                        else run.status),
                exit_code=run.exit_code,
                host=run.host,
                billing=(run.billing if summarized else inst.billing) or inst.billing,
                waste_s=m["waste_s"],
                waste=m["waste"],
                stop_state=stops[run.id][-1]["state"] if run.id in stops else None,
                stop_attempts=max(e["attempt"] for e in stops[run.id]) if run.id in stops else None,
                stop_history=tuple(stops.get(run.id, ())),
                idle_waste_s=m["idle_waste_s"],
                idle_waste=m["idle_waste"],
                saved_s=m["saved_s"],
                saved=m["saved"],
                saved_until=m["saving"].until if m["saving"] is not None else None,
                saved_bound=m["saving"].bound if m["saving"] is not None else None,
                stop_policy=story.stop_policy if story is not None else None,
                dry_run=run.mode == DRY_RUN,
                advise_only=run.mode == ADVISE_ONLY,
            ))
    return RunPage(rows, totals, runs_total, len(runs), use, waste_totals, saved_totals)


def bill_by_run(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                unguarded: Callable[[Row[Any]], bool] | None = None, limit: int | None = None) -> list[RunBill]:
    """Runs active inside ``[since, until)``, oldest first (see :class:`RunBill`); the newest
    ``limit`` only when given (see :func:`run_page`)."""
    return run_page(session, since, until, limit=limit, unguarded=unguarded).rows


def stop_history_by_run(session: Reader, run_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's stop events, oldest first: ``{"time", "state", "attempt", "detail"}`` dicts
    (``time`` aware UTC) — the history of the stop decision of that run, if it had one."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not run_ids:
        return out
    stmt = (select(STOP_EVENTS).where(STOP_EVENTS.c.run_id.in_(sorted(run_ids)))
            .order_by(STOP_EVENTS.c.run_id, STOP_EVENTS.c.time, STOP_EVENTS.c.id))
    for ev in session.execute(stmt):
        out[ev.run_id].append({"time": ev.time, "state": ev.state, "attempt": ev.attempt, "detail": ev.detail})
    return out


# --------------------------------------------------------------------------- chains of runs


@dataclass(frozen=True, slots=True)
class ChainBill:
    """One job's chain of runs (per currency): a run and the runs that resumed it, linked by
    ``runs.continues_run_id`` (``costctl watch --resume``), inside the window.

    ``chain_id`` is the first run's id; ``run_ids`` the runs of the chain active in the window,
    oldest first (``runs`` of them); ``started_at`` the first one's start, ``ended_at`` the
    newest one's end (None while it runs); ``status``/``exit_code`` the newest run's;
    ``preemptions`` the runs that ended preempted; ``resumes`` the runs that resumed from a
    checkpoint (the newest's checkpoint in ``resumed_from``); ``duration_s``, ``spend``,
    ``waste_s``, ``waste``, ``saved_s``, ``saved`` the sums over its runs (as :class:`RunBill`
    counts them); ``dry_runs`` how many of its runs were dry runs."""

    chain_id: str
    runs: int
    run_ids: tuple[str, ...]
    instance_id: str
    provider: str
    gpu: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_s: float
    currency: str
    spend: Decimal
    status: str
    exit_code: int | None
    preemptions: int
    resumes: int
    resumed_from: str | None
    waste_s: float = 0.0
    waste: Decimal = Decimal(0)
    saved_s: float = 0.0
    saved: Decimal = Decimal(0)
    dry_runs: int = 0


@dataclass(frozen=True, slots=True)
class ChainPage:
    """The newest chains of a window (``rows``, oldest first, at most ``limit`` chains), the
    totals per currency over ALL chains of the window (the sums of each chain's rounded spend,
    as :func:`run_page`'s; ``waste_totals`` / ``saved_totals`` likewise), how many chains the
    window has and how many are shown, and the :class:`RunBill` rows of the shown chains' runs
    (``--expand``)."""

    rows: list[ChainBill]
    totals: dict[str, Decimal]
    chains_total: int
    chains_shown: int
    runs: list[RunBill]
    waste_totals: dict[str, Decimal] = field(default_factory=dict)
    saved_totals: dict[str, Decimal] = field(default_factory=dict)


def chain_roots(session: Reader) -> dict[str, str]:
    """``{run_id: first run of its chain}`` for every linked run (a run absent from the map is
    its own chain). Reads only the linked runs' ids; a cycle (impossible through costctl, but a
    hand-edited ledger) ends at the first run seen twice."""
    parent = {r.id: r.continues_run_id for r in session.execute(
        select(RUNS.c.id, RUNS.c.continues_run_id).where(RUNS.c.continues_run_id.is_not(None)))}
    roots: dict[str, str] = {}
    for run_id in parent:
        seen = [run_id]
        cur = run_id
        while cur in parent and parent[cur] not in seen:
            cur = parent[cur]
            if cur in roots:
                cur = roots[cur]
                break
            seen.append(cur)
        for member in seen:
            roots[member] = cur
    return roots


def chain_page(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
               limit: int | None = 100, unguarded: Callable[[Row[Any]], bool] | None = None,
               places: int = 6, now: datetime | None = None,
               horizon: timedelta = DEFAULT_SAVED_HORIZON) -> ChainPage:
    """The chains of runs active inside ``[since, until)`` (see :class:`ChainBill`): the newest
    ``limit`` (None: all; ordered by their newest run's start) as rows, oldest first, with the
    totals over all of them. Aggregates only (the runs' ids and links, one sum per run and
    rate): never a charge row, never the samples.

    ``places``: each chain's amount is rounded half-even to ``places`` decimals and the totals
    are the sums of those rounded amounts, so the rows of a complete bill add up to its totals.
    Waste and savings as :func:`run_page` reads them (``now``, ``horizon``)."""
    since = ensure_utc(since) if since else None
    until = ensure_utc(until) if until else None
    roots = chain_roots(session)
    ordered: list[str] = []  # chains, newest first (by their newest run active in the window)
    members: dict[str, list[str]] = defaultdict(list)
    for run in session.execute(select(RUNS.c.id).where(*active_runs_sql(since, until))
                               .order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc())):
        root = roots.get(run.id, run.id)
        if root not in members:
            ordered.append(root)
        members[root].append(run.id)
    # Totals: each chain's exact amount (its runs' sums per rate) rounded once, then added.
    S = window_slices(session, since, until)
    per_chain: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for run_id, currency, rate, us in session.execute(
            select(S.c.run_id, S.c.currency, S.c.rate_per_hour, func.sum(S.c.us))
            .group_by(S.c.run_id, S.c.currency, S.c.rate_per_hour)):
        per_chain[(roots.get(run_id, run_id), currency)] += amount_of_us(Decimal(str(rate)), us)
    totals = sum_by_currency([(cur, round_money(amount, places))
                              for (_, cur), amount in per_chain.items()])
    stories = run_stories(session, since, until, now=now or utcnow(), horizon=horizon,
                          active=active_runs_sql(since, until))
    chain_money: dict[tuple[str, str], dict[str, Any]] = {}
    for (run_id, cur), m in story_money(stories).items():
        c = chain_money.setdefault((roots.get(run_id, run_id), cur), {"waste": Decimal(0), "saved": Decimal(0)})
        c["waste"] += m["waste"]
        c["saved"] += m["saved"]
    waste_totals = _story_totals(chain_money, "waste", places)
    saved_totals = _story_totals(chain_money, "saved", places)
    shown = ordered if limit is None else ordered[:limit]
    wanted = {run_id for root in shown for run_id in members[root]}
    runs = run_page(session, since, until, limit=None, unguarded=unguarded, run_ids=wanted,
                    with_totals=False, stories=stories).rows if wanted else []
    resumed = {r.id: r.resumed_from for r in session.execute(
        select(RUNS.c.id, RUNS.c.resumed_from).where(RUNS.c.id.in_(sorted(wanted))))} if wanted else {}
    by_chain: dict[tuple[str, str], list[RunBill]] = defaultdict(list)
    for r in runs:  # oldest first
        by_chain[(roots.get(r.run_id, r.run_id), r.currency)].append(r)
    rows: list[ChainBill] = []
    for root in reversed(shown):
        for (chain, currency), group in sorted(by_chain.items()):
            if chain != root:
                continue
            last = group[-1]
            ids = tuple(dict.fromkeys(r.run_id for r in group))
            newest_resume = next((resumed[i] for i in reversed(ids) if resumed.get(i)), None)
            rows.append(ChainBill(
                chain_id=root, runs=len(ids), run_ids=ids, instance_id=last.instance_id, provider=last.provider,
                gpu=last.gpu, started_at=group[0].started_at, ended_at=last.ended_at,
                duration_s=sum(r.duration_s for r in group), currency=currency,
                spend=sum((r.spend for r in group), Decimal(0)), status=last.status, exit_code=last.exit_code,
                preemptions=sum(1 for r in group if r.status == "preempted"),
                resumes=sum(1 for i in ids if resumed.get(i)), resumed_from=newest_resume,
                waste_s=sum(r.waste_s for r in group), waste=sum((r.waste for r in group), Decimal(0)),
                saved_s=sum(r.saved_s for r in group), saved=sum((r.saved for r in group), Decimal(0)),
                dry_runs=sum(1 for i in ids if any(r.dry_run for r in group if r.run_id == i)),
            ))
    return ChainPage(rows, totals, len(ordered), len(shown), runs, waste_totals, saved_totals)


# --------------------------------------------------------------------------- other groupings


def grouped_story_money(stories: dict[str, RunStory], key: Callable[[RunStory], Any] | None = None, *,
                        tz: ZoneInfo | None = None) -> dict[tuple[Any, str], dict[str, Any]]:
    """Waste and savings of ``stories`` per ``(key, currency)``: ``{"waste_s", "waste",
    "saved_s", "saved", "first"}`` (exact amounts; ``first`` the earliest time counted, aware
    UTC). ``key(story)`` gives a run's group; with ``tz`` the group is the local day instead:
    waste split at the midnights of ``tz``, a saving on the day its stop was confirmed."""
    out: dict[tuple[Any, str], dict[str, Any]] = {}

    def slot(k: Any, currency: str, when: datetime) -> dict[str, Any]:
        m = out.setdefault((k, currency), {"waste_s": 0.0, "waste": Decimal(0), "saved_s": 0.0, "saved": Decimal(0),
                                           "first": when})
        m["first"] = min(m["first"], when)
        return m

    for story in stories.values():
        for p in story.waste:
            if tz is None:
                parts = [(key(story) if key else None, p.start, p.end)]
            else:
                parts = split_at_midnights(p.start, p.end, tz) or [(p.start.astimezone(tz).date(), p.start, p.end)]
            for k, a, b in parts:
                m = slot(k, p.currency, a)
                m["waste_s"] += (b - a).total_seconds()
                m["waste"] += cost_of(p.rate_per_hour, b - a)
        if story.saving is not None:
            sv = story.saving
            k = sv.at.astimezone(tz).date() if tz is not None else (key(story) if key else None)
            m = slot(k, sv.currency, sv.at)
            m["saved_s"] += sv.seconds
            m["saved"] += sv.amount
    return out


def _money_fields(m: dict[str, Any] | None) -> dict[str, Any]:
    """``waste_s``, ``waste``, ``saved_s``, ``saved`` of a :func:`grouped_story_money` entry (zeros for None)."""
    m = m or _NO_MONEY
    return {"waste_s": m["waste_s"], "waste": m["waste"], "saved_s": m["saved_s"], "saved": m["saved"]}


def bill_by_instance(
    session: Reader, since: datetime | None = None, until: datetime | None = None, *,
    now: datetime | None = None, horizon: timedelta = DEFAULT_SAVED_HORIZON,
) -> list[InstanceBill]:
    """Instances with charges (or waste, or a saving) inside ``[since, until)``, one row per
    currency, by first charge (see :class:`InstanceBill` for which rate is shown); waste and
    savings as :func:`run_page` reads them (``now``, ``horizon``)."""
    S = window_slices(session, since, until)
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for pk, currency, rate, us, first, last in session.execute(
            select(S.c.instance_pk, S.c.currency, S.c.rate_per_hour, func.sum(S.c.us), func.min(S.c.first_us),
                   func.max(S.c.last_us)).group_by(S.c.instance_pk, S.c.currency, S.c.rate_per_hour)):
        rate = Decimal(str(rate))
        g = groups.setdefault((pk, currency), {"us": 0, "spend": Decimal(0), "rates": [], "first": first,
                                               "last": last, "newest": (last, rate)})
        g["us"] += int(us)
        g["spend"] += amount_of_us(rate, us)
        g["rates"].append(rate)
        g["first"], g["last"] = min(g["first"], first), max(g["last"], last)
        if last > g["newest"][0]:
            g["newest"] = (last, rate)
    runs = {(pk, cur): int(n) for pk, cur, n in session.execute(
        select(S.c.instance_pk, S.c.currency, func.count(distinct(S.c.run_id))).group_by(S.c.instance_pk, S.c.currency))}
    stories = run_stories(session, since, until, now=now or utcnow(), horizon=horizon,
                          active=active_runs_sql(since, until))
    money = grouped_story_money(stories, lambda story: story.instance_pk)
    for (pk, currency), m in money.items():  # waste or a saving where the window charged nothing
        if (pk, currency) not in groups:
            at = epoch_us(m["first"])
            groups[(pk, currency)] = {"us": 0, "spend": Decimal(0), "rates": [], "first": at, "last": at,
                                      "newest": (at, None)}
    instances = {i.id: i for i in session.execute(select(INSTANCES).where(INSTANCES.c.id.in_({pk for pk, _ in groups})))}
    rows = []
    for (pk, currency), g in groups.items():
        inst = instances[pk]
        m = money.get((pk, currency), _NO_MONEY)
        rows.append(InstanceBill(
            instance_id=inst.provider_instance_id,
            provider=inst.provider,
            gpu=inst.gpu,
            gpu_count=inst.gpu_count,
            billing=inst.billing,
            region=inst.region,
            price_per_hour=g["newest"][1],
            min_price_per_hour=min(g["rates"], default=None),
            max_price_per_hour=max(g["rates"], default=None),
            currency=currency,
            runs=runs.get((pk, currency), 0),
            first_charge_at=from_epoch_us(int(g["first"])),
            last_charge_at=from_epoch_us(int(g["last"])),
            duration_s=_s(g["us"]),
            spend=g["spend"],
            waste_s=m["waste_s"],
            waste=m["waste"],
            saved_s=m["saved_s"],
            saved=m["saved"],
        ))
    return sorted(rows, key=lambda r: (r.first_charge_at, r.instance_id, r.currency))


def utc_offsets(tz: ZoneInfo, first_s: int, last_s: int) -> list[tuple[int | None, int]]:
    """The UTC offsets of ``tz`` (seconds) over POSIX seconds ``[first_s, last_s]``:
    ``[(from_s, offset)]`` with ``from_s`` None for the first, each change found to the second
    (day steps, then bisection)."""
    def off(t: int) -> int:
        value = datetime.fromtimestamp(t, timezone.utc).astimezone(tz).utcoffset()
        return int(value.total_seconds()) if value is not None else 0

    out: list[tuple[int | None, int]] = [(None, off(first_s))]
    t = first_s
    while t < last_s:
        nxt = min(t + 86400, last_s)
        if off(nxt) != out[-1][1]:
            lo, hi = t, nxt  # off(lo) == current, off(hi) differs
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if off(mid) == out[-1][1] else (lo, mid)
            out.append((hi, off(hi)))
        t = nxt
    return out


def local_day_sql(bucket_s: Any, tz: ZoneInfo, first_s: int, last_s: int) -> Any:
    """SQL for the local day number (days since 1970-01-01 in ``tz``) of a bucket start:
    ``(bucket_s + offset) // 86400`` with the zone's offset at that time (a CASE over its
    changes in ``[first_s, last_s]``). Offsets and DST changes fall on 15-minute bounds, so
    a bucket never straddles a local midnight."""
    offsets = utc_offsets(tz, first_s, last_s)
    if len(offsets) == 1:
        offset: Any = literal(offsets[0][1], BigInteger)
    else:
        whens = [(bucket_s < start, literal(prev, BigInteger))
                 for (_, prev), (start, _) in zip(offsets, offsets[1:])]
        offset = case(*whens, else_=literal(offsets[-1][1], BigInteger))
    return (bucket_s + offset) // 86400


def bill_by_day(
    session: Reader, tz: ZoneInfo, since: datetime | None = None, until: datetime | None = None, *,
    now: datetime | None = None, horizon: timedelta = DEFAULT_SAVED_HORIZON,
) -> list[DayBill]:
    """Spend per local day of ``tz`` inside ``[since, until)``, oldest first (days of 23 or 25
    hours and zones 15 or 30 minutes off UTC exact: days are made of whole UTC 15-minute
    buckets, the cut edges of the window clipped in SQL); waste and savings as
    :func:`run_page` reads them (``now``, ``horizon``), by :func:`grouped_story_money`'s days."""
    R = ROLLUPS
    # Two statements: each min/max alone is one step down the bucket_s index.
    lo = session.scalar(select(func.min(R.c.bucket_s)))
    hi = session.scalar(select(func.max(R.c.bucket_s)))
    if lo is None or hi is None:
        return []
    S = window_slices(session, since, until)
    day = local_day_sql(S.c.bucket_s, tz, int(lo), int(hi) + BUCKET_S).label("day")
    spend: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    us_by: dict[tuple[int, str], int] = defaultdict(int)
    for d, currency, rate, us in session.execute(
            select(day, S.c.currency, S.c.rate_per_hour, func.sum(S.c.us)).group_by(day, S.c.currency,
                                                                                     S.c.rate_per_hour)):
        spend[(int(d), currency)] += amount_of_us(Decimal(str(rate)), us)
        us_by[(int(d), currency)] += int(us)
    counts = {(int(d), cur): (int(r), int(i)) for d, cur, r, i in session.execute(
        select(day, S.c.currency, func.count(distinct(S.c.run_id)), func.count(distinct(S.c.instance_pk)))
        .group_by(day, S.c.currency))}
    epoch_day = date(1970, 1, 1)
    stories = run_stories(session, since, until, now=now or utcnow(), horizon=horizon,
                          active=active_runs_sql(since, until))
    money = grouped_story_money(stories, tz=tz)
    for day_date, currency in money:  # waste or a saving on a day the window charged nothing
        d = (day_date - epoch_day).days
        if (d, currency) not in spend:
            spend[(d, currency)] = Decimal(0)
    return [
        DayBill(day=epoch_day + timedelta(days=d), currency=currency, runs=counts.get((d, currency), (0, 0))[0],
                instances=counts.get((d, currency), (0, 0))[1], duration_s=_s(us_by.get((d, currency), 0)),
                spend=amount, **_money_fields(money.get((epoch_day + timedelta(days=d), currency))))
        for (d, currency), amount in sorted(spend.items())
    ]


def bill_by_gpu(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                now: datetime | None = None, horizon: timedelta = DEFAULT_SAVED_HORIZON) -> list[GpuBill]:
    """Spend per GPU type inside ``[since, until)``, by spend, largest first. A run counts with
    the card it ran on (its summary); an open run with its instance's current card. Waste and
    savings as :func:`run_page` reads them (``now``, ``horizon``)."""
    W = window_slices(session, since, until)
    # Summed per run first, so the join to the runs meets one row per run and rate.
    S = (select(W.c.run_id, W.c.instance_pk, W.c.currency, W.c.rate_per_hour, func.sum(W.c.us).label("us"))
         .group_by(W.c.run_id, W.c.instance_pk, W.c.currency, W.c.rate_per_hour).subquery("per_run"))
    summarized = RUNS.c.billing.is_not(None)
    gpu = case((summarized, RUNS.c.gpu), else_=INSTANCES.c.gpu).label("gpu")
    count = case((and_(summarized, RUNS.c.gpu_count.is_not(None)), RUNS.c.gpu_count), else_=INSTANCES.c.gpu_count)
    joined = S.join(RUNS, RUNS.c.id == S.c.run_id).join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk)
    spend: dict[tuple[str | None, str], Decimal] = defaultdict(Decimal)
    us_by: dict[tuple[str | None, str], int] = defaultdict(int)
    gpu_us: dict[tuple[str | None, str], int] = defaultdict(int)
    for g, currency, rate, us, gus in session.execute(
            select(gpu, S.c.currency, S.c.rate_per_hour, func.sum(S.c.us), func.sum(S.c.us * count))
            .select_from(joined).group_by(gpu, S.c.currency, S.c.rate_per_hour)):
        spend[(g, currency)] += amount_of_us(Decimal(str(rate)), us)
        us_by[(g, currency)] += int(us)
        gpu_us[(g, currency)] += int(gus)
    counts = {(g, cur): (int(r), int(i)) for g, cur, r, i in session.execute(
        select(gpu, S.c.currency, func.count(distinct(S.c.run_id)), func.count(distinct(S.c.instance_pk)))
        .select_from(joined).group_by(gpu, S.c.currency))}
    stories = run_stories(session, since, until, now=now or utcnow(), horizon=horizon,
                          active=active_runs_sql(since, until))
    money = grouped_story_money(stories, lambda story: story.gpu)
    for key in money:  # waste or a saving where the window charged nothing
        spend.setdefault(key, Decimal(0))
    rows = [
        GpuBill(gpu=g, currency=currency, runs=counts.get((g, currency), (0, 0))[0],
                instances=counts.get((g, currency), (0, 0))[1], duration_s=_s(us_by.get((g, currency), 0)),
                gpu_hours=gpu_us.get((g, currency), 0) / 3_600_000_000, spend=amount,
                **_money_fields(money.get((g, currency))))
        for (g, currency), amount in spend.items()
    ]
    return sorted(rows, key=lambda r: (r.currency, -r.spend, r.gpu or ""))
