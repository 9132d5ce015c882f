"""The oracle: the best stop a policy with perfect hindsight could make on a recorded timeline.

It knows the whole log, so it

* stops at the first sample of the *final* idle stretch (the one after which no work follows);
* when a plateau policy is configured and the loss is on the same time axis, stops at the
  plateau's onset if that is earlier: the last point at which the monitored loss improved by
  ReduceLROnPlateau's own rule (:class:`~costctl.policies.PlateauTracker`), provided at least
  ``patience + 1`` points without improvement follow (so the rule fires after it);
* never stops inside a pause that work follows (only the final stretch qualifies).

Its saving is ``price x (end of log - stop time)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..config import PlateauConfig
from ..policies import PlateauTracker
from ..records import ProgressPoint
from .stretches import Stretch


@dataclass(frozen=True, slots=True)
class OracleStop:
    """Where the oracle stops and why.

    Attributes:
        time: the stop time (None: it would not stop before the end of the log).
        reason: ``"final idle stretch"`` or ``"plateau onset"`` or why it does not stop.
        plateau_onset: the plateau onset considered (None when none).
        idle_start: the final idle stretch's start considered (None when the log ends busy).
    """

    time: datetime | None
    reason: str
    plateau_onset: datetime | None = None
    idle_start: datetime | None = None


def plateau_onset(points: list[ProgressPoint], config: PlateauConfig) -> ProgressPoint | None:
    """The monitored point after which the loss never improved again by the plateau rule, when
    at least ``patience + 1`` monitored points follow it; else None.

    Points are taken in order; only those of ``config.monitor`` kind count.
    """
    tracker = PlateauTracker.from_config(config)
    monitored = [p for p in points if p.kind == config.monitor]
    last_best: int | None = None
    for k, point in enumerate(monitored):
        before = tracker.best
        tracker.step(point.value)
        if tracker.best != before:
            last_best = k
    if last_best is None:
        return None
    if len(monitored) - 1 - last_best < config.patience + 1:
        return None
    return monitored[last_best]


def oracle_stop(
    stretches: list[Stretch],
    *,
    timed_progress: list[ProgressPoint] | None = None,
    plateau: PlateauConfig | None = None,
) -> OracleStop:
    """The oracle's stop (see the module docstring).

    Args:
        stretches: the machine's idle stretches (costctl's rule), in order.
        timed_progress: progress points on the time axis, in order (None/empty: no loss on the axis).
        plateau: the plateau configuration when a plateau policy is configured.
    """
    final = stretches[-1] if stretches and stretches[-1].final else None
    idle_start = final.start if final else None
    onset_time = None
    if plateau is not None and timed_progress:
        onset = plateau_onset(timed_progress, plateau)
        onset_time = onset.time if onset is not None else None
    candidates = [(t, why) for t, why in ((idle_start, "final idle stretch"), (onset_time, "plateau onset")) if t]
    if not candidates:
        return OracleStop(None, "the log ends busy: nothing to stop", onset_time, idle_start)
    when, why = min(candidates, key=lambda c: c[0])
    return OracleStop(when, why, onset_time, idle_start)
