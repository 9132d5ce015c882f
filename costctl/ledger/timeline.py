"""Time series for ``costctl bill --plot``: cumulative spend per instance, the decisions to mark,
and a run's utilization, each summed in SQL into at most ``max_points`` time bins.

Spend comes from the window's slices (:func:`costctl.ledger.queries.window_slices`: the
15-minute rollups plus the cut edges of the window), grouped by instance, currency, rate and bin
(whole multiples of 15 minutes wide); utilization from the run's raw samples and per-minute
rollups (:mod:`.sample_rollup`), grouped by GPU and bin. Nothing here reads a charge row or a
sample one by one, so the cost stays bounded by the bins, not by the ledger's size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, func, literal, select

from ..clock import ensure_utc
from ..errors import UsageError
from ..i18n import _
from . import tables
from .engine import Reader, dialect_name
from .queries import active_runs_sql, amount_of_us, window_slices
from .sqltime import epoch_us_sql
from .timebuckets import BUCKET_S, US_PER_S, epoch_us, from_epoch_us

RUNS, INSTANCES, DECISIONS = tables.runs, tables.instances, tables.decisions
SAMPLES, SAMPLE_MINUTES, STOP_EVENTS = tables.samples, tables.sample_minutes, tables.stop_events

#: Most time bins per series (a PNG 11 inches wide at 100 dpi shows about 1,100 pixels).
MAX_POINTS = 2000
#: Decisions drawn at most (the newest kept): advice and stops are one per episode, but a
#: ledger of years may hold many.
MAX_MARKS = 2000
#: Actions marked on the spend and utilization panels.
MARKED_ACTIONS = ("stop", "advise", "warn", "downsize")


@dataclass(frozen=True, slots=True)
class SpendSeries:
    """One instance's (or one run's: ``run_id`` set) cumulative spend in one currency: ``times``
    (aware UTC: the start and the end of each bin with a charge, the first and last clipped to
    the charges) and ``amounts`` (exact Decimals, the spend up to that time inside the window),
    so a line through them rises while it was charged and stays flat between its charges."""

    instance_pk: int
    label: str
    currency: str
    times: list[datetime]
    amounts: list[Decimal]
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    """A decision to mark: when, on which instance (and its currency), its policy and action,
    whether it was a dry run, and the stop's final state (``confirmed``...; None for advice or
    a stop never carried through)."""

    time: datetime
    instance_pk: int
    currency: str
    run_id: str
    policy: str
    action: str
    dry_run: bool
    stop_state: str | None = None


@dataclass(frozen=True, slots=True)
class UtilizationSeries:
    """Mean utilization per bin (percent; the CPU row: percent of one core, may exceed 100):
    ``gpu_index`` None is the CPU of the job's process tree."""

    gpu_index: int | None
    times: list[datetime]
    values: list[float]


@dataclass(frozen=True, slots=True)
class RunTimeline:
    """A run's utilization over its life (readable samples only) and its decisions."""

    run_id: str
    label: str
    started_at: datetime
    ended_at: datetime
    series: list[UtilizationSeries]
    marks: list[Mark] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PlotData:
    """Everything ``costctl bill --plot`` draws (see :func:`plot_data`)."""

    spend: list[SpendSeries]
    marks: list[Mark]
    run: RunTimeline | None


def _bin_width(lo: int, hi: int, unit: int, max_points: int) -> int:
    """A bin width, a whole multiple of ``unit``, that splits ``[lo, hi]`` into at most ``max_points`` bins."""
    span = max(hi - lo, unit)
    per = -(-span // max_points)  # ceil
    return -(-per // unit) * unit


def spend_series(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                 max_points: int = MAX_POINTS, by: str = "instance",
                 run_ids: Sequence[str] | None = None) -> list[SpendSeries]:
    """Cumulative spend per instance (``by="instance"``) or per run (``by="run"``, optionally of
    ``run_ids`` only) and currency inside ``[since, until)`` (see :class:`SpendSeries`), in bins
    of whole 15-minute buckets, at most ``max_points`` per series. Two aggregate statements over
    the window's slices, one over the instances (and, per run, one over the runs).

    Raises:
        ValueError: ``by`` is neither ``instance`` nor ``run``.
    """
    if by not in ("instance", "run"):
        raise ValueError(f"by={by!r}: expected 'instance' or 'run'")
    if run_ids is not None and not run_ids:
        return []
    S = window_slices(session, since, until, run_ids=run_ids)
    lo, hi = session.execute(select(func.min(S.c.bucket_s), func.max(S.c.bucket_s))).one()
    if lo is None:
        return []
    width = _bin_width(int(lo), int(hi) + BUCKET_S, BUCKET_S, max_points)
    base = int(lo)
    bin_s = (literal(base, BigInteger) + (S.c.bucket_s - base) // width * width).label("bin_s")
    key_col = S.c.instance_pk if by == "instance" else S.c.run_id
    per: dict[tuple[Any, str], dict[int, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    first_us: dict[tuple[Any, str], int] = {}
    last_us: dict[tuple[Any, str], int] = {}
    owner: dict[Any, int] = {}  # series key -> instance pk
    for key_value, pk, currency, rate, b, us, first, last in session.execute(
            select(key_col, func.min(S.c.instance_pk), S.c.currency, S.c.rate_per_hour, bin_s, func.sum(S.c.us),
                   func.min(S.c.first_us), func.max(S.c.last_us))
            .group_by(key_col, S.c.currency, S.c.rate_per_hour, bin_s)):
        key = (int(key_value) if by == "instance" else str(key_value), currency)
        owner[key[0]] = int(pk)
        per[key][int(b)] += amount_of_us(Decimal(str(rate)), us)
        first_us[key] = min(first_us.get(key, int(first)), int(first))
        last_us[key] = max(last_us.get(key, int(last)), int(last))
    labels = {i.id: f"{i.provider}:{i.provider_instance_id}" + (f" ({i.gpu})" if i.gpu else "")
              for i in session.execute(select(INSTANCES.c.id, INSTANCES.c.provider, INSTANCES.c.provider_instance_id,
                                              INSTANCES.c.gpu).where(INSTANCES.c.id.in_(sorted(set(owner.values())))))}
    out = []
    for (key_value, currency), bins in sorted(per.items()):
        first, last = first_us[(key_value, currency)], last_us[(key_value, currency)]
        times: list[datetime] = []
        amounts: list[Decimal] = []
        running = Decimal(0)
        for b, amount in sorted(bins.items()):
            # Linear inside a bin (charged as it ran), flat across bins with no charge.
            times.append(from_epoch_us(max(b * US_PER_S, first)))
            amounts.append(running)
            running += amount
            times.append(from_epoch_us(min((b + width) * US_PER_S, last)))
            amounts.append(running)
        pk = owner[key_value]
        if by == "instance":
            out.append(SpendSeries(pk, labels.get(pk, str(pk)), currency, times, amounts))
        else:
            out.append(SpendSeries(pk, f"{str(key_value)[:8]} {labels.get(pk, str(pk))}", currency, times, amounts,
                                   run_id=str(key_value)))
    return out


def decision_marks(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                   run_id: str | None = None, limit: int = MAX_MARKS) -> list[Mark]:
    """Stops, advice, warnings and moves decided inside ``[since, until)`` (of one run when
    given), oldest first, the newest ``limit`` of them, with each stop's final state."""
    where = [DECISIONS.c.action.in_(MARKED_ACTIONS)]
    if since is not None:
        where.append(DECISIONS.c.time >= ensure_utc(since))
    if until is not None:
        where.append(DECISIONS.c.time < ensure_utc(until))
    if run_id is not None:
        where.append(DECISIONS.c.run_id == run_id)
    rows = session.execute(
        select(DECISIONS.c.id, DECISIONS.c.time, DECISIONS.c.run_id, DECISIONS.c.policy, DECISIONS.c.action,
               DECISIONS.c.dry_run, RUNS.c.instance_pk, INSTANCES.c.currency)
        .join(RUNS, RUNS.c.id == DECISIONS.c.run_id).join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk)
        .where(*where).order_by(DECISIONS.c.time.desc(), DECISIONS.c.id.desc()).limit(limit)).all()
    stop_ids = [r.id for r in rows if r.action == "stop"]
    states: dict[int, str] = {}
    if stop_ids:
        for decision_id, state in session.execute(
                select(STOP_EVENTS.c.decision_id, STOP_EVENTS.c.state).where(STOP_EVENTS.c.decision_id.in_(stop_ids))
                .order_by(STOP_EVENTS.c.time, STOP_EVENTS.c.id)):
            states[int(decision_id)] = state  # the last one wins
    return [Mark(ensure_utc(r.time), int(r.instance_pk), r.currency, r.run_id, r.policy, r.action, bool(r.dry_run),
                 states.get(r.id)) for r in reversed(rows)]


def find_run(session: Reader, ref: str | None, since: datetime | None = None,
             until: datetime | None = None) -> Any | None:
    """The run ``ref`` names (its id or a unique prefix), else the newest run active inside
    ``[since, until)``; None when the window has none.

    Raises:
        UsageError: no run starts with ``ref``, or more than one does.
    """
    cols = (RUNS.c.id, RUNS.c.instance_pk, RUNS.c.started_at, RUNS.c.ended_at, RUNS.c.charged_until,
            RUNS.c.last_seen_at)
    if ref is None:
        return session.execute(select(*cols).where(*active_runs_sql(since, until))
                               .order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc()).limit(1)).first()
    text = ref.strip().lower()
    if not text or any(c not in "0123456789abcdef" for c in text):
        raise UsageError(_("--run {ref!r}: expected a run id or its first characters (hexadecimal, as "
                           "`costctl bill` shows them)").format(ref=ref))
    found = session.execute(select(*cols).where(RUNS.c.id.like(f"{text}%")).order_by(RUNS.c.id).limit(2)).all()
    if not found:
        raise UsageError(_("--run {ref!r}: no run in the ledger starts with it").format(ref=ref))
    if len(found) > 1:
        raise UsageError(_("--run {ref!r}: more than one run starts with it ({first}, {second}...); give more "
                           "characters").format(ref=ref, first=found[0].id[:12], second=found[1].id[:12]))
    return found[0]


def run_timeline(session: Reader, run: Any, *, max_points: int = MAX_POINTS) -> RunTimeline:
    """``run``'s (a :func:`find_run` row) utilization per GPU and CPU, from its raw samples and
    per-minute rollups, as means per bin (at most ``max_points`` bins over its life), and its
    decisions."""
    dialect = dialect_name(session)
    ends = [t for t in (run.ended_at, run.charged_until) if t is not None]
    start = ensure_utc(run.started_at)
    end = ensure_utc(max(ends) if ends else run.last_seen_at)
    lo = epoch_us(start)
    hi = max(epoch_us(end), lo + US_PER_S)
    width = _bin_width(lo, hi, US_PER_S, max_points)
    acc: dict[tuple[int | None, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    raw_us = epoch_us_sql(SAMPLES.c.time, dialect)
    raw_bin = (literal(lo, BigInteger) + (raw_us - lo) // width * width).label("bin_us")
    for gpu, b, total, count in session.execute(
            select(SAMPLES.c.gpu_index, raw_bin, func.sum(SAMPLES.c.utilization), func.count(SAMPLES.c.utilization))
            .where(SAMPLES.c.run_id == run.id, SAMPLES.c.status == "ok")
            .group_by(SAMPLES.c.gpu_index, raw_bin)):
        a = acc[(gpu, int(b))]
        a[0] += float(total or 0.0)
        a[1] += int(count or 0)
    m = SAMPLE_MINUTES
    minute_bin = (literal(lo, BigInteger) + (epoch_us_sql(m.c.minute, dialect) - lo) // width * width).label("bin_us")
    for gpu, b, total, count in session.execute(
            select(m.c.gpu_index, minute_bin, func.sum(m.c.utilization_sum), func.sum(m.c.utilization_count))
            .where(m.c.run_id == run.id, m.c.ok_samples > 0).group_by(m.c.gpu_index, minute_bin)):
        a = acc[(gpu, int(b))]
        a[0] += float(total or 0.0)
        a[1] += int(count or 0)
    by_gpu: dict[int | None, list[tuple[int, float]]] = defaultdict(list)
    for (gpu, b), (total, count) in sorted(acc.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0, kv[0][1])):
        if count:
            by_gpu[gpu].append((b + width // 2, total / count))
    series = [UtilizationSeries(gpu, [from_epoch_us(b) for b, _ in points], [v for _, v in points])
              for gpu, points in by_gpu.items()]
    label = session.scalar(select(INSTANCES.c.provider + literal(":") + INSTANCES.c.provider_instance_id)
                           .where(INSTANCES.c.id == run.instance_pk)) or ""
    return RunTimeline(run.id, label, start, end, series, decision_marks(session, run_id=run.id))


def plot_data(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
              run: str | None = None, max_points: int = MAX_POINTS) -> PlotData:
    """What ``costctl bill --plot`` draws for the window: :func:`spend_series`,
    :func:`decision_marks` and, for the run ``run`` names (else the newest of the window),
    :func:`run_timeline`.

    Raises:
        UsageError: ``run`` names no run, or more than one.
    """
    found = find_run(session, run, since, until)
    return PlotData(spend_series(session, since, until, max_points=max_points),
                    decision_marks(session, since, until),
                    run_timeline(session, found, max_points=max_points) if found is not None else None)


__all__ = ["MARKED_ACTIONS", "MAX_MARKS", "MAX_POINTS", "Mark", "PlotData", "RunTimeline", "SpendSeries",
           "UtilizationSeries", "decision_marks", "find_run", "plot_data", "run_timeline", "spend_series"]
