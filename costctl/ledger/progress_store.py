"""Bounded progress storage: every point up to a rate, exact per-interval figures beyond it.

A job may print millions of loss lines (issue "Fast at any volume": 20 M points must leave a
few MB, not 20 M rows). The policies still see every point (they read the
:class:`~costctl.progress.batch.PointBatch` in memory); the ledger keeps a bounded record:

* Time is cut into intervals of ``interval_s`` seconds (``[ledger] progress_interval``, default
  60 s), aligned on the UTC epoch, separately for each series (``kind``, ``name``).
* In each interval of a series, the first ``points_per_interval`` points
  (``[ledger] progress_points_per_interval``, default 20) are stored as they are, one
  ``progress`` row each; so is every non-finite point (NaN, +/-inf: a divergence is evidence)
  up to ``points_per_interval`` more, and the interval's **last** point. A job that logs at most
  ``points_per_interval`` points a minute (nearly every training job) keeps every point, and
  nothing else is written.
* The interval's other points are summed up exactly in one ``progress_buckets`` row
  (:class:`~costctl.ledger.schema.ProgressBucket`): their count, counts of NaN, +inf and -inf,
  min and max of the finite values, their first and last value, step and time. A bucket row
  describes only the points *not* stored as rows, so the two tables add up without overlap:
  a series' count is ``rows + sum(bucket.count)``, its NaN count likewise, its min and max the
  min and max of both, and its first and last point are rows (the first and last point of
  every interval are stored). :func:`series_summaries` reads them so.
* Bound: per series, at most ``2 * points_per_interval + 2`` rows per interval with points
  (``points_per_interval`` first points, as many more non-finite ones, the last point, one
  bucket row) -- at the defaults 42 rows a minute however fast the job prints, about 4 KB; a
  flood of 20 M points in ten minutes leaves a few hundred rows. Beyond the non-finite cap
  (a job that prints only NaN), non-finite points are still counted exactly in the bucket row,
  with the first and last one's step and time.

The decimation happens before the ledger and off the database: the watch feeds
:meth:`ProgressStore.add` with each tick's :class:`PointBatch` and ``now``; it returns the
:class:`ProgressRows` to write (the stored points as a PointBatch, the closed intervals' bucket
rows), which :meth:`costctl.ledger.db.Ledger.record_progress` inserts with one executemany per
table. An interval's bucket row is emitted when the interval is over: when a later point of the
series arrives, when ``now`` is past its end, or at :meth:`ProgressStore.flush` (the end of the
run). A watch killed mid-interval loses that interval's bucket and last point only (at most
``interval_s`` of aggregated points); every stored row is already written.

Work per point is a few C-level passes over the batch's columns (``sum``/``min``/``max`` of
array slices); the per-point Python loop runs only for segments holding non-finite values.
Times are the batch's POSIX seconds; a point with no time (NaN) counts in the interval of
``now``, and its row keeps no time. A point whose time is before its series' open interval (a
clock step back) counts in the open interval.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from ..progress.batch import NO_INT, PointBatch, column_int
from ..records import ProgressKind, ProgressPoint
from .schema import Progress, ProgressBucket

#: Defaults of ``[ledger] progress_interval`` (seconds) and ``progress_points_per_interval``.
DEFAULT_INTERVAL_S = 60.0
DEFAULT_POINTS_PER_INTERVAL = 20

_NAN = float("nan")
_INF = float("inf")


def _special(value: float) -> str | None:
    """``"nan"``, ``"inf"`` or ``"-inf"`` for a non-finite value, None for a finite one."""
    if value == value and value not in (_INF, -_INF):
        return None
    return "nan" if value != value else ("inf" if value > 0 else "-inf")


def _when(seconds: float) -> datetime | None:
    """POSIX seconds -> aware UTC datetime; NaN -> None."""
    return None if seconds != seconds else datetime.fromtimestamp(seconds, UTC)


def _seconds(now: datetime | float | None) -> float:
    if now is None:
        return _NAN
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError("now must be an aware datetime (costctl times are UTC)")
        return now.timestamp()
    return float(now)


@dataclass(slots=True)
class IntervalAggregate:
    """The points of one series in one interval that were not stored as rows (see the module
    docstring). Times are POSIX seconds (NaN: none); steps :data:`NO_INT` when absent; ``vmin``/
    ``vmax`` are over the finite values (NaN when there were none)."""

    kind: ProgressKind
    name: str
    start: float
    end: float
    count: int
    kept: int
    nan_count: int
    posinf_count: int
    neginf_count: int
    vmin: float
    vmax: float
    first_value: float
    first_step: int
    first_time: float
    last_value: float
    last_step: int
    last_time: float
    last_epoch: float
    last_total: int

    def row(self, run_id: str) -> dict[str, Any]:
        """The ``progress_buckets`` row (column names as keys) for a Core insert."""
        return {
            "run_id": run_id, "kind": self.kind, "name": self.name,
            "start_at": _when(self.start), "end_at": _when(self.end),
            "count": self.count, "kept": self.kept, "nan_count": self.nan_count,
            "posinf_count": self.posinf_count, "neginf_count": self.neginf_count,
            "min": None if self.vmin != self.vmin else self.vmin,
            "max": None if self.vmax != self.vmax else self.vmax,
            "first_value": self.first_value if _special(self.first_value) is None else None,
            "first_special": _special(self.first_value),
            "first_step": None if self.first_step == NO_INT else self.first_step,
            "first_time": _when(self.first_time),
            "last_value": self.last_value if _special(self.last_value) is None else None,
            "last_special": _special(self.last_value),
            "last_step": None if self.last_step == NO_INT else self.last_step,
            "last_time": _when(self.last_time),
            "last_epoch": None if self.last_epoch != self.last_epoch else self.last_epoch,
            "last_total": None if self.last_total == NO_INT else self.last_total,
        }


@dataclass(slots=True)
class ProgressRows:
    """What :meth:`ProgressStore.add` decided to write: ``points`` become ``progress`` rows (in
    order), ``buckets`` ``progress_buckets`` rows. Pass it to
    :meth:`costctl.ledger.db.Ledger.record_progress`."""

    points: PointBatch = field(default_factory=PointBatch)
    buckets: list[IntervalAggregate] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.points) or bool(self.buckets)

    def __len__(self) -> int:
        """Rows to write (both tables)."""
        return len(self.points) + len(self.buckets)

    def extend(self, other: ProgressRows) -> None:
        """Append ``other``'s rows after these (order is kept)."""
        self.points.extend(other.points)
        self.buckets.extend(other.buckets)


class _Series:
    """The open interval of one series."""

    __slots__ = ("kind", "name", "bucket", "seen", "kept", "nonfinite_kept", "count", "nan", "posinf",
                 "neginf", "vmin", "vmax", "first", "last", "pending")

    def __init__(self, kind: ProgressKind, name: str) -> None:
        self.kind, self.name = kind, name
        self.bucket: int | None = None
        self.reset()

    def reset(self) -> None:
        self.seen = 0  # points of the interval so far
        self.kept = 0  # of them stored as rows (the pending last one not counted)
        self.nonfinite_kept = 0  # non-finite ones stored beyond the first points
        self.count = self.nan = self.posinf = self.neginf = 0  # the aggregated rest
        self.vmin, self.vmax = _INF, -_INF
        self.first: tuple[float, int, float] | None = None  # (value, step, time) of the rest
        self.last: tuple[float, int, float, float, int] | None = None  # + epoch, total
        #: the newest point not stored (yet): (value, step, epoch, total, time); it is stored
        #: if it turns out to be the interval's last, else folded into the rest.
        self.pending: tuple[float, int, float, int, float] | None = None

    def fold(self, value: float, step: int, epoch: float, total: int, time: float) -> None:
        """Count one point into the aggregated rest."""
        if self.count == 0:
            self.first = (value, step, time)
        self.last = (value, step, time, epoch, total)
        self.count += 1
        if value != value:
            self.nan += 1
        elif value == _INF:
            self.posinf += 1
        elif value == -_INF:
            self.neginf += 1
        else:
            if value < self.vmin:
                self.vmin = value
            if value > self.vmax:
                self.vmax = value

    def fold_pending(self) -> None:
        if self.pending is not None:
            self.fold(*self.pending)
            self.pending = None


class ProgressStore:
    """Decides which progress points of one run the ledger keeps (see the module docstring).

    Args:
        interval_s: interval length in seconds (``[ledger] progress_interval``), > 0.
        points_per_interval: points stored as rows per series and interval before the rest
            is aggregated (``[ledger] progress_points_per_interval``), >= 1; as many more
            non-finite points are stored too.

    Not thread-safe: one feeder (the watch's tick).
    """

    def __init__(self, *, interval_s: float = DEFAULT_INTERVAL_S,
                 points_per_interval: int = DEFAULT_POINTS_PER_INTERVAL) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, not {interval_s!r}")
        if points_per_interval < 1:
            raise ValueError(f"points_per_interval must be >= 1, not {points_per_interval!r}")
        self.interval_s = float(interval_s)
        self.points_per_interval = int(points_per_interval)
        self._series: dict[tuple[str, str], _Series] = {}
        #: points fed, and rows emitted (both tables), since the start.
        self.points_seen = 0
        self.rows_emitted = 0

    # ------------------------------------------------------------------ feeding

    def add(self, batch: PointBatch | Iterable[ProgressPoint], now: datetime | float | None = None) -> ProgressRows:
        """Take one chunk of points (a :class:`PointBatch`, or ProgressPoints for small inputs)
        read by ``now`` (aware datetime or POSIX seconds; None: unknown) and return the rows to
        write. Intervals over by ``now`` are closed too (their bucket rows come back)."""
        if not isinstance(batch, PointBatch):
            batch = PointBatch.from_points(batch)
        now_s = _seconds(now)
        out = ProgressRows()
        if batch:
            self._add(batch, now_s, out)
        if now_s == now_s:
            self._close_before(math.floor(now_s / self.interval_s), out)
        self.rows_emitted += len(out)
        return out

    def close(self, now: datetime | float) -> ProgressRows:
        """Close the intervals that are over by ``now`` (no new points); their rows."""
        out = ProgressRows()
        now_s = _seconds(now)
        if now_s == now_s:
            self._close_before(math.floor(now_s / self.interval_s), out)
        self.rows_emitted += len(out)
        return out

    def flush(self) -> ProgressRows:
        """Close every open interval (the end of the run): the remaining rows."""
        out = ProgressRows()
        for st in self._series.values():
            self._close(st, out)
        self.rows_emitted += len(out)
        return out

    # ------------------------------------------------------------------ internals

    def _state(self, kind: ProgressKind, name: str) -> _Series:
        key = (kind, name)
        st = self._series.get(key)
        if st is None:
            st = self._series[key] = _Series(kind, name)
        return st

    def _add(self, batch: PointBatch, now_s: float, out: ProgressRows) -> None:
        n = len(batch)
        self.points_seen += n
        states = [self._state(kind, name) for kind, name in batch.keys]
        times = batch.times
        interval = self.interval_s
        t0 = times[0]
        if t0 == t0 and t0 not in (_INF, -_INF) and times.count(t0) == n:  # one read time (the usual case)
            lo = hi = math.floor(t0 / interval)
        else:
            tsum = sum(times)
            if tsum == tsum and tsum not in (_INF, -_INF):  # every time known
                lo, hi = math.floor(min(times) / interval), math.floor(max(times) / interval)
            else:
                lo = hi = None
        if lo is not None and lo == hi:
            # the whole batch in one interval: segments are runs of one series
            if len(states) == 1:
                self._segment(states[0], lo, batch, 0, n, out)
                return
            i = 0
            for sidx, group in groupby(batch.series):
                m = sum(1 for _ in group)
                self._segment(states[sidx], lo, batch, i, i + m, out)
                i += m
            return
        now_bucket = math.floor(now_s / interval) if now_s == now_s else None
        i = 0
        for (sidx, t), group in groupby(zip(batch.series, times)):
            m = sum(1 for _ in group)
            st = states[sidx]
            if t == t:
                b = math.floor(t / interval)
            elif now_bucket is not None:
                b = now_bucket
            else:
                b = st.bucket if st.bucket is not None else 0
            self._segment(st, b, batch, i, i + m, out)
            i += m

    def _segment(self, st: _Series, b: int, batch: PointBatch, a: int, z: int, out: ProgressRows) -> None:
        """Points ``[a, z)`` of ``batch``, all of series ``st``, in interval ``b``."""
        if st.bucket is None:
            st.bucket = b
        elif b > st.bucket:
            self._close(st, out)
            st.bucket = b
        values = batch.values if a == 0 and z == len(batch) else batch.values[a:z]
        n_per = self.points_per_interval
        total = sum(values)
        if total == total and total not in (_INF, -_INF):
            # all finite: the first points (up to the rate) stored, the rest in bulk
            take = min(z - a, n_per - st.seen) if st.seen < n_per else 0
            if take:
                self._store(st, batch, a, a + take, out)
            st.seen += z - a
            if a + take < z:
                st.fold_pending()
                rest = values[take:-1]
                if rest:
                    steps, epochs, totals, times = batch.steps, batch.epochs, batch.totals, batch.times
                    r0, r1 = a + take, z - 2
                    if st.count == 0:
                        st.first = (values[take], steps[r0], times[r0])
                    st.last = (values[-2], steps[r1], times[r1], epochs[r1], totals[r1])
                    st.count += len(rest)
                    lo, hi = min(rest), max(rest)
                    if lo < st.vmin:
                        st.vmin = lo
                    if hi > st.vmax:
                        st.vmax = hi
                j = z - 1
                st.pending = (values[-1], batch.steps[j], batch.epochs[j], batch.totals[j], batch.times[j])
            return
        steps, epochs, totals, times = batch.steps, batch.epochs, batch.totals, batch.times
        if st.seen >= n_per and st.nonfinite_kept >= n_per:
            # non-finite values, but nothing more to store in this interval: counted in bulk
            st.fold_pending()
            rest = values[:-1]
            if rest:
                r1 = z - 2
                if st.count == 0:
                    st.first = (values[0], steps[a], times[a])
                st.last = (values[-2], steps[r1], times[r1], epochs[r1], totals[r1])
                finite = [v for v in rest if v - v == 0]  # inf - inf and nan - nan are nan
                pinf, ninf = rest.count(_INF), rest.count(-_INF)
                st.count += len(rest)
                st.posinf += pinf
                st.neginf += ninf
                st.nan += len(rest) - len(finite) - pinf - ninf
                if finite:
                    lo, hi = min(finite), max(finite)
                    if lo < st.vmin:
                        st.vmin = lo
                    if hi > st.vmax:
                        st.vmax = hi
            j = z - 1
            st.pending = (values[-1], steps[j], epochs[j], totals[j], times[j])
            st.seen += z - a
            return
        # non-finite values in the segment while rows are still stored: point by point
        for k in range(z - a):
            i = a + k
            value = values[k]
            finite = value == value and value not in (_INF, -_INF)
            if st.seen < n_per or (not finite and st.nonfinite_kept < n_per):
                if st.seen >= n_per:
                    st.nonfinite_kept += 1
                st.fold_pending()
                self._store(st, batch, i, i + 1, out)
            else:
                st.fold_pending()
                st.pending = (value, steps[i], epochs[i], totals[i], times[i])
            st.seen += 1

    @staticmethod
    def _store(st: _Series, batch: PointBatch, a: int, z: int, out: ProgressRows) -> None:
        """Points ``[a, z)`` of ``batch`` (one series) become rows."""
        pts = out.points
        k = pts.key_index(st.kind, st.name)
        pts.series.extend(array("i", [k]) * (z - a))
        pts.values.extend(batch.values[a:z])
        pts.steps.extend(batch.steps[a:z])
        pts.epochs.extend(batch.epochs[a:z])
        pts.totals.extend(batch.totals[a:z])
        pts.times.extend(batch.times[a:z])
        st.kept += z - a

    def _close_before(self, bucket: int, out: ProgressRows) -> None:
        for st in self._series.values():
            if st.bucket is not None and st.bucket < bucket:
                self._close(st, out)

    def _close(self, st: _Series, out: ProgressRows) -> None:
        """End the open interval of ``st``: its pending last point becomes a row, the rest a
        bucket row (when there is a rest)."""
        if st.bucket is None:
            return
        if st.pending is not None:
            value, step, epoch, total, time = st.pending
            pts = out.points
            pts.series.append(pts.key_index(st.kind, st.name))
            pts.values.append(value)
            pts.steps.append(step)
            pts.epochs.append(epoch)
            pts.totals.append(total)
            pts.times.append(time)
            st.kept += 1
            st.pending = None
        if st.count:
            assert st.first is not None and st.last is not None
            start = st.bucket * self.interval_s
            out.buckets.append(IntervalAggregate(
                kind=st.kind, name=st.name, start=start, end=start + self.interval_s, count=st.count,
                kept=st.kept, nan_count=st.nan, posinf_count=st.posinf, neginf_count=st.neginf,
                vmin=st.vmin if st.vmin != _INF else _NAN, vmax=st.vmax if st.vmax != -_INF else _NAN,
                first_value=st.first[0], first_step=st.first[1], first_time=st.first[2],
                last_value=st.last[0], last_step=st.last[1], last_time=st.last[2],
                last_epoch=st.last[3], last_total=st.last[4],
            ))
        st.bucket = None
        st.reset()


# ---------------------------------------------------------------------- rows for the ledger

def point_rows(run_id: str, points: PointBatch) -> list[dict[str, Any]]:
    """``progress`` rows (column names as keys) for every point of ``points``, in order."""
    rows = []
    keys = points.keys
    for sidx, value, step, epoch, total, t in zip(points.series, points.values, points.steps, points.epochs,
                                                  points.totals, points.times):
        kind, name = keys[sidx]
        special = _special(value)
        rows.append({
            "run_id": run_id, "time": None if t != t else datetime.fromtimestamp(t, UTC),
            "step": None if step == NO_INT else step, "epoch": None if epoch != epoch else epoch,
            "total": None if total == NO_INT else total, "kind": kind, "name": name,
            "value": value if special is None else None, "value_special": special,
        })
    return rows


def _count(value: int | None) -> int | None:
    """A step or total as the INTEGER columns hold it: None when absent, negative or past
    2**63 - 1 (a point's loss is stored; a step no column holds is no step), as
    :func:`~costctl.progress.batch.column_int` reads it."""
    return None if value is None or column_int(value) == NO_INT else value


def progress_point_rows(run_id: str, points: Sequence[ProgressPoint]) -> list[dict[str, Any]]:
    """``progress`` rows for ProgressPoints (every point; times must be aware or None). A step
    or total past the INTEGER columns (negative or past 2**63 - 1) is stored as none, a
    non-finite epoch likewise: a job's output never fails the write.

    Raises:
        ValueError: a naive time.
    """
    rows = []
    for p in points:
        if p.time is not None and p.time.tzinfo is None:
            raise ValueError("progress time must be an aware datetime (costctl times are UTC)")
        value = float(p.value)
        special = _special(value)
        epoch = p.epoch if p.epoch is None or math.isfinite(p.epoch) else None
        rows.append({
            "run_id": run_id, "time": p.time, "step": _count(p.step), "epoch": epoch, "total": _count(p.total),
            "kind": p.kind, "name": p.name, "value": value if special is None else None,
            "value_special": special,
        })
    return rows


def rows_for(run_id: str, points: Sequence[ProgressPoint] | PointBatch | ProgressRows,
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(progress rows, progress_buckets rows)`` for what :meth:`Ledger.record_progress` takes:
    ProgressPoints or a PointBatch (every point stored), or a store's :class:`ProgressRows`."""
    if isinstance(points, ProgressRows):
        return point_rows(run_id, points.points), [b.row(run_id) for b in points.buckets]
    if isinstance(points, PointBatch):
        return point_rows(run_id, points), []
    return progress_point_rows(run_id, points), []


# ---------------------------------------------------------------------- reading

@dataclass(frozen=True, slots=True)
class SeriesSummary:
    """Every point of one series of one run, from the rows and the buckets together (exact).

    ``count`` points, of which ``rows`` are stored as ``progress`` rows; ``nan``/``posinf``/
    ``neginf`` non-finite counts; ``min``/``max`` over the finite values (None without any);
    ``first``/``last`` the first and last point (arrival order) as stored rows."""

    kind: str
    name: str
    count: int
    rows: int
    nan: int
    posinf: int
    neginf: int
    min: float | None
    max: float | None
    first: Progress
    last: Progress


def series_summaries(session: Session, run_id: str) -> dict[tuple[str, str], SeriesSummary]:
    """:class:`SeriesSummary` per ``(kind, name)`` of run ``run_id``: two grouped queries and
    two row reads per series, whatever the number of points."""
    special = Progress.value_special
    raw = session.execute(
        select(Progress.kind, Progress.name, func.count(Progress.id),
               func.sum(case((special == "nan", 1), else_=0)), func.sum(case((special == "inf", 1), else_=0)),
               func.sum(case((special == "-inf", 1), else_=0)),
               func.min(Progress.value_finite), func.max(Progress.value_finite),
               func.min(Progress.id), func.max(Progress.id))
        .where(Progress.run_id == run_id).group_by(Progress.kind, Progress.name)
    ).all()
    agg = {
        (kind, name): rest for kind, name, *rest in session.execute(
            select(ProgressBucket.kind, ProgressBucket.name, func.sum(ProgressBucket.count),
                   func.sum(ProgressBucket.nan_count), func.sum(ProgressBucket.posinf_count),
                   func.sum(ProgressBucket.neginf_count), func.min(ProgressBucket.min),
                   func.max(ProgressBucket.max))
            .where(ProgressBucket.run_id == run_id).group_by(ProgressBucket.kind, ProgressBucket.name)
        ).all()
    }
    out = {}
    for kind, name, n, nan, pinf, ninf, lo, hi, first_id, last_id in raw:
        b_n, b_nan, b_pinf, b_ninf, b_lo, b_hi = agg.get((kind, name), (0, 0, 0, 0, None, None))
        lows = [v for v in (lo, b_lo) if v is not None]
        highs = [v for v in (hi, b_hi) if v is not None]
        out[(kind, name)] = SeriesSummary(
            kind=kind, name=name, count=int(n) + int(b_n or 0), rows=int(n),
            nan=int(nan or 0) + int(b_nan or 0), posinf=int(pinf or 0) + int(b_pinf or 0),
            neginf=int(ninf or 0) + int(b_ninf or 0),
            min=min(lows) if lows else None, max=max(highs) if highs else None,
            first=session.get(Progress, first_id), last=session.get(Progress, last_id),
        )
    return out


def stored_points(session: Session, run_id: str) -> PointBatch:
    """The run's ``progress`` rows in order (every point of a sparse run; at volume the
    decimated series: each interval's first points, its non-finite ones and its last point),
    as a :class:`PointBatch`."""
    batch = PointBatch()
    rows = session.execute(
        select(Progress.kind, Progress.name, Progress.value_finite, Progress.value_special, Progress.step,
               Progress.epoch, Progress.total, Progress.time)
        .where(Progress.run_id == run_id).order_by(Progress.id)
    )
    specials = {"nan": _NAN, "inf": _INF, "-inf": -_INF}
    for kind, name, finite, special, step, epoch, total, time in rows:
        batch.append(specials[special] if special is not None else finite, kind=kind, name=name, step=step,
                     epoch=epoch, total=total, time=_NAN if time is None else time.timestamp())
    return batch


__all__ = ["DEFAULT_INTERVAL_S", "DEFAULT_POINTS_PER_INTERVAL", "IntervalAggregate", "ProgressRows",
           "ProgressStore", "SeriesSummary", "point_rows", "progress_point_rows", "rows_for",
           "series_summaries", "stored_points"]
