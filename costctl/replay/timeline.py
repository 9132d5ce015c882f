"""Putting recorded records on one time axis for a replay.

* Training files rarely record wall times. A point is placed on the GPU log's time axis only
  when the user says how: ``start`` (wall time of the file's first point) and ``step_rate``
  (x-axis units per second: steps, or epochs for a per-epoch file) give
  ``time = start + (x - x_first) / step_rate``; or the file's own ``_timestamp`` /
  ``timestamp`` column (Unix seconds) is used. Otherwise the points keep ``time=None`` and the
  loss analysis stands on its own axis.
* The replay's nominal sample interval (the idle window tolerates gaps up to twice it) is the
  log's median positive gap, unless the user gives one.
* The replayed History needs strictly increasing sample times; snapshots recorded within the
  same timestamp (the nvidia-smi table has 1 s resolution) are spread by 1 microsecond each.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import datetime, timedelta

from ..errors import UsageError
from ..i18n import _
from ..records import ProgressPoint, TelemetrySample
from .times import from_unix, offset
from .train_log import TrainLog

_TIMESTAMP_SERIES = ("_timestamp", "timestamp")


def place_progress(
    log: TrainLog, *, start: datetime | None = None, step_rate: float | None = None
) -> tuple[list[ProgressPoint], str | None]:
    """The log's points (train then eval) with times, and how they were placed.

    Returns:
        ``(points, how)``: ``how`` is ``"start+rate"``, ``"file timestamps"`` or None (not
        placed: every time is None).

    Raises:
        UsageError: only one of ``start`` / ``step_rate`` given, a rate <= 0, points that have
            no x position (no step, no epoch) when a rate is given, or a point the rate places
            outside the years 1 to 9999.
    """
    if (start is None) != (step_rate is None):
        raise UsageError(_("--start-time and --step-rate go together: give both to place the training log in time"))
    points = log.points
    if start is not None and step_rate is not None:
        if step_rate <= 0:
            raise UsageError(_("--step-rate {rate:g}: expected a positive number of steps (or epochs) per "
                               "second").format(rate=step_rate))
        xs = [log.x(p) for p in log.train] or [log.x(p) for p in log.eval]
        known = [x for x in xs if x is not None]
        if not known:
            raise UsageError(_("the training log has neither steps nor epochs: it cannot be placed with --step-rate"))
        x0 = known[0]
        out = []
        outside: float | None = None  # the first step the rate places outside the years 1 to 9999
        skipped = 0
        for p in points:
            x = log.x(p)
            if x is None:
                x = p.epoch if p.epoch is not None else (float(p.step) if p.step is not None else None)
            if x is None:
                continue
            try:
                when = start + timedelta(seconds=(x - x0) / step_rate)
            except (OverflowError, ValueError):  # past year 1 or 9999, or past timedelta's range
                # an outlier position (a garbled step of 10**18) is skipped; when most points fall
                # outside, the options are what is wrong: one line below
                outside = x if outside is None else outside
                skipped += 1
                continue
            out.append(replace(p, time=when))
        if outside is not None and skipped > len(out):
            raise UsageError(_("--start-time {start} with --step-rate {rate:g} places step {step:g} of the training log "
                               "outside the years 1 to 9999: give an earlier start or a faster rate").format(
                start=start.isoformat(), rate=step_rate, step=outside))
        return out, "start+rate"
    stamps = _file_timestamps(log)
    if stamps:
        out = []
        for p in points:
            when = stamps.get(log.x(p))
            if when is not None:
                out.append(replace(p, time=when))
        if out:
            return out, "file timestamps"
    return points, None


def _file_timestamps(log: TrainLog) -> dict[float | None, datetime]:
    for name in _TIMESTAMP_SERIES:
        series = log.series.get(name)
        if series:
            stamps = {x: from_unix(v) for x, v in series if x is not None}
            return {x: when for x, when in stamps.items() if when is not None}  # unplaceable: left out
    return {}


def nominal_interval(samples: list[TelemetrySample], given: timedelta | None = None) -> timedelta:
    """``given``, else the median positive gap between sample times, else 5 s."""
    if given is not None:
        return given
    gaps = [
        (b.time - a.time).total_seconds() for a, b in zip(samples, samples[1:]) if b.time > a.time
    ]
    if not gaps:
        return timedelta(seconds=5)
    return timedelta(seconds=statistics.median(gaps))


def strictly_increasing(samples: list[TelemetrySample]) -> list[TelemetrySample]:
    """The samples with equal (or backwards) times moved 1 microsecond after their predecessor."""
    out: list[TelemetrySample] = []
    for s in samples:
        if out and s.time <= out[-1].time:
            s = replace(s, time=out[-1].time + timedelta(microseconds=1))
        out.append(s)
    return out
