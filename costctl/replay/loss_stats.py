"""Summary figures of a recorded loss series (what ``costctl analyze`` prints about a training log).

Definitions (the corpus's SOURCES.md uses the same ones):

* *last significant improvement*: the last point at which the running minimum of the finite
  values fell by more than ``improvement`` (relative, default 2 %); after it the curve is flat.
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

from ..progress.batch import PointBatch, take
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
            if running == math.inf or (running - p.value) / abs(running) > improvement:
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
        out with :func:`itertools.compress`; count, first/last, min/max and the plot runs come
        from C-level ``min``/``max``/``index`` over the chunk's values; only the running
        minimum (last significant improvement) loops in Python, and only over the prefix up to
        the chunk's minimum when that is a new low. A :class:`ProgressPoint` is made only for
        a point that becomes a figure.
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
        total = sum(vals)
        if total - total == 0.0:  # every value finite (a finite sum: none is NaN/inf)
            fin = vals
            fk = None  # fin[k] is vals[k]
        else:
            flags = bytes([v - v == 0.0 for v in vals])
            nonfinite = n - sum(flags)
            if nonfinite:
                self.nonfinite += nonfinite
                if self._first_nonfinite is None:
                    self._first_nonfinite = point(pos[flags.index(0)])
            if nonfinite == n:
                return
            fin = array("d", compress(vals, flags))
            fk = list(compress(range(n), flags)) if nonfinite else None
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
        low = min(fin)
        high = max(fin)
        if self._min is None or low < self._min.value:
            self._min = record(fin.index(low))
        if self._max is None or high > self._max.value:
            self._max = record(fin.index(high))
        running = self._running
        if low < running:
            improvement = self.improvement
            inf = math.inf
            imp = -1
            stop = fin.index(low) + 1  # no new low after the chunk's (first) minimum
            k = 0
            for v in fin[:stop] if stop < nf else fin:
                if v < running:
                    if running == inf or (running - v) / abs(running) > improvement:
                        imp = k
                    running = v
                k += 1
            self._running = running
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
        nf = len(fin)
        k = 0
        while k < nf:
            end = min(nf, k + width - fill)
            seg = fin[k:end]
            lo, hi = min(seg), max(seg)
            if fill == 0:
                klo, khi = k + seg.index(lo), k + seg.index(hi)
                plo = record(klo)
                buckets.append([plo, plo if khi == klo else record(khi), rank(klo), rank(khi), lo, hi])
            else:
                bucket = buckets[-1]
                if lo < bucket[4]:
                    klo = k + seg.index(lo)
                    bucket[0], bucket[2], bucket[4] = record(klo), rank(klo), lo
                if hi > bucket[5]:
                    khi = k + seg.index(hi)
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
