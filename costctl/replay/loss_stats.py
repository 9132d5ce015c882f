"""Summary figures of a recorded loss series (what ``costctl analyze`` prints about a training log).

Definitions (the corpus's SOURCES.md uses the same ones):

* *last significant improvement*: the last point at which the running minimum of the finite
  values fell by more than ``improvement`` (relative, default 2 %; any fall from exactly 0, a loss
  that goes negative, counts); after it the curve is flat.
  The running minimum follows every new low, however small.
* *spike*: a value more than ``factor`` (2) times the median of the previous ``window`` (5) values.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Container
from itertools import compress
from dataclasses import dataclass

from ..progress.batch import PointBatch, native, take
from ..records import ProgressPoint


@dataclass(frozen=True, slots=True)
class LossSummary:
    """Figures of one loss series (train or eval), in file order.

    Attributes:
        count: points, NaN/inf included.
        nonfinite: NaN/inf points.
        first / last: first and last point (may be non-finite).
        last_finite: last finite point.
        min / max: finite extremes (the first one when tied).
        last_improvement: see the module docstring (None when there is no finite point).
        first_nonfinite: first NaN/inf point (None when the loss stayed finite).
    """

    count: int
    nonfinite: int
    first: ProgressPoint | None
    last: ProgressPoint | None
    last_finite: ProgressPoint | None
    min: ProgressPoint | None
    max: ProgressPoint | None
    last_improvement: ProgressPoint | None
    first_nonfinite: ProgressPoint | None


def summarize(points: list[ProgressPoint], *, improvement: float = 0.02) -> LossSummary:
    """:class:`LossSummary` of ``points`` (one kind, in order)."""
    finite = [p for p in points if math.isfinite(p.value)]
    running = math.inf
    last_imp: ProgressPoint | None = None
    for p in finite:
        if p.value < running:
            if running in (math.inf, 0.0) or (running - p.value) / abs(running) > improvement:
                last_imp = p
            running = p.value
    return LossSummary(
        count=len(points),
        nonfinite=len(points) - len(finite),
        first=points[0] if points else None,
        last=points[-1] if points else None,
        last_finite=finite[-1] if finite else None,
        min=min(finite, key=lambda p: p.value) if finite else None,
        max=max(finite, key=lambda p: p.value) if finite else None,
        last_improvement=last_imp,
        first_nonfinite=next((p for p in points if not math.isfinite(p.value)), None),
    )


def spikes(points: list[ProgressPoint], *, factor: float = 2.0, window: int = 5) -> list[ProgressPoint]:
    """Points whose value exceeds ``factor`` x the median of the previous ``window`` finite values
    (fewer at the start, at least one)."""
    out = []
    previous: list[float] = []
    for p in points:
        if not math.isfinite(p.value):
            continue
        if previous and p.value > factor * statistics.median(previous[-window:]):
            out.append(p)
        previous.append(p.value)
    return out


def mean_value(points: list[ProgressPoint]) -> float | None:
    """Mean of the finite values of ``points`` (None when there is none)."""
    values = [p.value for p in points if math.isfinite(p.value)]
    return statistics.fmean(values) if values else None


def _extremes(values, start: int, stop: int) -> tuple[float, int, float, int, int]:
    """``(low, i_low, high, i_high, nonfinite)`` over ``values[start:stop]``: the first lowest
    and first highest finite value and their indexes (NaN and -1 when none is finite), and the
    count of NaN/inf values. C (``_scan.extremes``) for an array('d') where built."""
    scan = native()
    if scan is not None and isinstance(values, array) and values.typecode == "d":
        return scan.extremes(values, start, stop)
    seg = values[start:stop]
    total = sum(seg)
    if seg and total - total == 0.0:  # every value finite
        low, high = min(seg), max(seg)
        return low, start + seg.index(low), high, start + seg.index(high), 0
    low = high = math.nan
    i_low = i_high = -1
    bad = 0
    for i, v in enumerate(seg, start):
        if v - v != 0.0:
            bad += 1
        elif i_low < 0:
            low = high = v
            i_low = i_high = i
        elif v < low:
            low, i_low = v, i
        elif v > high:
            high, i_high = v, i
    return low, i_low, high, i_high, bad


def _new_lows(values, start: int, stop: int, running: float, improvement: float) -> tuple[float, int]:
    """The running minimum over the finite ``values[start:stop]`` from ``running``, and the
    index of the last new low that improved on the one before by more than ``improvement``
    (relative; any first low), -1 when none (see the module docstring). C where built."""
    scan = native()
    if scan is not None and isinstance(values, array) and values.typecode == "d":
        return scan.new_lows(values, start, stop, running, improvement)
    last = -1
    for i in range(start, stop):
        v = values[i]
        if v < running:
            if running in (math.inf, 0.0) or (running - v) / abs(running) > improvement:
                last = i
            running = v
    return running, last


class LossStream:
    """:class:`LossSummary` figures kept while points stream by, plus a bounded plot series.

    Memory does not grow with the number of points: the summary keeps a handful of points and
    the plot series at most ``max_plot`` (the lowest and highest finite point of each run of
    consecutive points, runs doubling in length as the series grows, so spikes and the minimum
    always show). :meth:`summary` equals :func:`summarize` over the same points.

    Args:
        improvement: as :func:`summarize`.
        max_plot: bound on :meth:`plot_points` (points).
    """

    def __init__(self, *, improvement: float = 0.02, max_plot: int = 4096) -> None:
        self.improvement = improvement
        self.max_plot = max(4, max_plot)
        self.count = 0
        self.nonfinite = 0
        self.all_steps = True  # every point so far has a step
        self._first: ProgressPoint | None = None
        self._last: tuple[object, int] | None = None  # (batch, i): made a record only when asked
        self._last_finite: tuple[object, int] | None = None
        self._min: ProgressPoint | None = None
        self._max: ProgressPoint | None = None
        self._running = math.inf
        self._last_imp: ProgressPoint | None = None
        self._first_nonfinite: ProgressPoint | None = None
        self._buckets: list[list] = []  # see _plot_chunk
        self._width = 1
        self._fill = 0

    def add_batch(self, batch, indices: Container[int] | None = None) -> None:
        """Take the points of ``batch`` (a :class:`~costctl.progress.batch.PointBatch`) whose
        series is in ``indices`` (None: every point), in order.

        The figures are computed per column chunk, not per point: the wanted points are cut
        out by a byte mask; count, first/last, min/max, the running minimum (last significant
        improvement, walked only up to the chunk's minimum when that is a new low) and the plot
        runs come from one pass each over the chunk's values (:func:`_extremes`,
        :func:`_new_lows`: C where built). A :class:`ProgressPoint` is made only for a point
        that becomes a figure.
        """
        mask = None if indices is None else batch.mask_of(indices)
        values = batch.values
        if mask is None:
            vals = values
            n = len(vals)
            pos = range(n)
        else:
            pos = list(compress(range(len(values)), mask))
            n = len(pos)
            vals = take(values, mask)
        if n == 0:
            return
        point = batch.point
        base = self.count  # points of this stream before the chunk
        self.count = base + n
        if self._first is None:
            self._first = point(pos[0])
        self._last = (batch, pos[-1])
        if self.all_steps:
            steps = batch.steps
            if min(steps if mask is None else compress(steps, mask)) < 0:
                self.all_steps = False
        low, i_low, high, i_high, nonfinite = _extremes(vals, 0, n)
        if not nonfinite:
            fin = vals
            fk = None  # fin[k] is vals[k]
        else:
            flags = bytes([v - v == 0.0 for v in vals])  # finite
            self.nonfinite += nonfinite
            if self._first_nonfinite is None:
                self._first_nonfinite = point(pos[flags.index(0)])
            if nonfinite == n:
                return
            fin = array("d", compress(vals, flags))
            fk = list(compress(range(n), flags))
            low, i_low, high, i_high, _ = _extremes(fin, 0, len(fin))
        nf = len(fin)

        def at(k: int) -> int:
            """Batch position of fin[k]."""
            return pos[k if fk is None else fk[k]]

        def rank(k: int) -> int:
            """1-based position of fin[k] among this stream's points (NaN/inf counted)."""
            return base + 1 + (k if fk is None else fk[k])

        made: dict[int, ProgressPoint] = {}  # one record per point, shared by the figures

        def record(k: int) -> ProgressPoint:
            p = made.get(k)
            if p is None:
                p = made[k] = point(at(k))
            return p

        self._last_finite = (batch, at(nf - 1))
        if self._min is None or low < self._min.value:
            self._min = record(i_low)
        if self._max is None or high > self._max.value:
            self._max = record(i_high)
        if low < self._running:
            # no new low after the chunk's (first) minimum: the running minimum's walk stops there
            self._running, imp = _new_lows(fin, 0, i_low + 1, self._running, self.improvement)
            if imp >= 0:
                self._last_imp = record(imp)
        row = batch.row
        self._plot_chunk(fin, lambda k: row(at(k)), rank)

    def add(self, p: ProgressPoint) -> None:
        """Take one point (the slow path)."""

        batch = PointBatch()
        batch.append_point(p)
        self.add_batch(batch, (0,))

    def _plot_chunk(self, fin, record, rank) -> None:
        """Feed the finite values ``fin`` to the plot runs, a run's segment at a time.

        A bucket is ``[low row, high row, low's rank, high's rank, low value, high value]``
        (rows: :meth:`~costctl.progress.batch.PointBatch.row`, made records by
        :meth:`plot_points`):
        the first lowest and first highest finite point of a run of ``_width`` consecutive
        finite points; when more than ``max_plot / 2`` runs are complete, neighbours merge
        pairwise and the width doubles (as point by point: the same runs, the same points)."""
        buckets = self._buckets
        width, fill = self._width, self._fill
        extremes = _extremes
        nf = len(fin)
        k = 0
        while k < nf:
            end = min(nf, k + width - fill)
            lo, klo, hi, khi, _ = extremes(fin, k, end)
            if fill == 0:
                plo = record(klo)
                buckets.append([plo, plo if khi == klo else record(khi), rank(klo), rank(khi), lo, hi])
            else:
                bucket = buckets[-1]
                if lo < bucket[4]:
                    bucket[0], bucket[2], bucket[4] = record(klo), rank(klo), lo
                if hi > bucket[5]:
                    bucket[1], bucket[3], bucket[5] = record(khi), rank(khi), hi
            fill += end - k
            k = end
            if fill >= width:
                fill = 0
                if 2 * len(buckets) > self.max_plot:
                    merged = []
                    for a, b in zip(buckets[0::2], buckets[1::2] + [None]):
                        if b is not None:
                            low = a if a[4] <= b[4] else b
                            high = a if a[5] >= b[5] else b
                            a = [low[0], high[1], low[2], high[3], low[4], high[5]]
                        merged.append(a)
                    buckets = self._buckets = merged
                    width *= 2
        self._width, self._fill = width, fill

    def plot_points(self) -> list[ProgressPoint]:
        """The bounded plot series in order (each run's low and high finite point)."""
        out: list[ProgressPoint] = []
        make = PointBatch.point_of_row
        for low, high, low_pos, high_pos, _, _ in self._buckets:
            if low_pos == high_pos:
                out.append(make(low))
            else:
                out.extend((make(low), make(high)) if low_pos < high_pos else (make(high), make(low)))
        return out

    def summary(self) -> LossSummary:
        """The figures so far, as :func:`summarize` gives them."""

        def record(ref: tuple[object, int] | None) -> ProgressPoint | None:
            return None if ref is None else ref[0].point(ref[1])  # type: ignore[attr-defined]

        return LossSummary(
            count=self.count, nonfinite=self.nonfinite, first=self._first, last=record(self._last),
            last_finite=record(self._last_finite), min=self._min, max=self._max,
            last_improvement=self._last_imp, first_nonfinite=self._first_nonfinite,
        )
