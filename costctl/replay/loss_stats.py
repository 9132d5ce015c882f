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
