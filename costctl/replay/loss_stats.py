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
from collections.abc import Container
from dataclasses import dataclass

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
        self._buckets: list[list] = []  # [low point, high point] per run of _width points
        self._width = 1
        self._fill = 0

    def add_batch(self, batch, indices: Container[int]) -> None:
        """Take the points of ``batch`` (a :class:`~costctl.progress.batch.PointBatch`) whose
        series is in ``indices``, in order."""
        values, series, steps = batch.values, batch.series, batch.steps
        point = batch.point
        isfinite = math.isfinite
        improvement = self.improvement
        for i in range(len(values)):
            if series[i] not in indices:
                continue
            v = values[i]
            self.count += 1
            if self._first is None:
                self._first = point(i)
            self._last = (batch, i)
            if steps[i] < 0:
                self.all_steps = False
            if not isfinite(v):
                self.nonfinite += 1
                if self._first_nonfinite is None:
                    self._first_nonfinite = point(i)
                continue
            self._last_finite = (batch, i)
            p = None
            if self._min is None or v < self._min.value:
                p = point(i)
                self._min = p
            if self._max is None or v > self._max.value:
                p = p or point(i)
                self._max = p
            running = self._running
            if v < running:
                if running == math.inf or (running - v) / abs(running) > improvement:
                    p = p or point(i)
                    self._last_imp = p
                self._running = v
            self._plot(v, p, batch, i)

    def add(self, p: ProgressPoint) -> None:
        """Take one point (the slow path)."""
        from ..progress.batch import PointBatch

        batch = PointBatch()
        batch.append_point(p)
        self.add_batch(batch, (0,))

    def _plot(self, v: float, p: ProgressPoint | None, batch, i: int) -> None:
        # bucket: [low point, high point, low's position, high's position]
        pos = self.count
        if self._fill == 0:
            p = p or batch.point(i)
            self._buckets.append([p, p, pos, pos])
        else:
            bucket = self._buckets[-1]
            if v < bucket[0].value:
                bucket[0], bucket[2] = p or batch.point(i), pos
            elif v > bucket[1].value:
                bucket[1], bucket[3] = p or batch.point(i), pos
        self._fill += 1
        if self._fill >= self._width:
            self._fill = 0
            if 2 * len(self._buckets) > self.max_plot:
                merged = []
                for a, b in zip(self._buckets[0::2], self._buckets[1::2] + [None]):
                    if b is not None:
                        low = a if a[0].value <= b[0].value else b
                        high = a if a[1].value >= b[1].value else b
                        a = [low[0], high[1], low[2], high[3]]
                    merged.append(a)
                self._buckets = merged
                self._width *= 2

    def plot_points(self) -> list[ProgressPoint]:
        """The bounded plot series in order (each run's low and high finite point)."""
        out: list[ProgressPoint] = []
        for low, high, low_pos, high_pos in self._buckets:
            if low is high:
                out.append(low)
            else:
                out.extend((low, high) if low_pos < high_pos else (high, low))
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
