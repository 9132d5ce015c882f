"""Per-GPU summary figures of a recorded GPU log (what ``costctl analyze`` prints per GPU).

Definitions (the corpus's SOURCES.md uses the same): ``samples`` = readings of that GPU;
``interval_s`` = median gap between consecutive timestamps; ``mean_utilization`` = mean over
readings whose utilization is known; ``longest_zero_run`` = the longest run of consecutive
readings whose utilization is exactly 0 (the first such run when several tie).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime

from .gpu_log import GpuLog


@dataclass(frozen=True, slots=True)
class Run:
    """A run of consecutive readings: ``count`` readings from ``start`` to ``end`` (times of the
    first and last reading), 0-based positions ``first``..``last`` in the GPU's series."""

    count: int
    first: int
    last: int
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        """``end - start`` in seconds."""
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class GpuStats:
    """Summary of one GPU's series (units: seconds, percent, bytes).

    Attributes:
        index: the GPU.
        samples: readings of this GPU.
        start / end: first and last reading's time.
        interval_s: median gap between consecutive readings (None with < 2 readings).
        max_gap_s: largest gap.
        mean_utilization / min_utilization / max_utilization: over known readings (None if none).
        zero_samples: readings at exactly 0 %.
        longest_zero_run: the longest run at exactly 0 % (None if no zero reading).
        trailing_zero_samples: readings at 0 % at the very end of the log.
        memory_used_min / memory_used_max / memory_total: bytes, None when not recorded.
        unknown_samples: readings whose utilization is unknown (``[N/A]``...).
        name: the GPU's model name as the log spells it (its first reading that has one), or None.
    """

    index: int
    samples: int
    start: datetime | None
    end: datetime | None
    interval_s: float | None
    max_gap_s: float | None
    mean_utilization: float | None
    min_utilization: float | None
    max_utilization: float | None
    zero_samples: int
    longest_zero_run: Run | None
    trailing_zero_samples: int
    memory_used_min: int | None
    memory_used_max: int | None
    memory_total: int | None
    unknown_samples: int
    name: str | None = None

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last reading (0 with fewer than 2)."""
        return (self.end - self.start).total_seconds() if self.start and self.end else 0.0

    def gaps_over(self, seconds: float, log: GpuLog) -> list[float]:
        """Gaps (seconds) between consecutive readings of this GPU in ``log`` longer than ``seconds``."""
        times = [t for t, _ in log.readings(self.index)]
        return [g for g in _gaps(times) if g > seconds]


def _gaps(times: list[datetime]) -> list[float]:
    return [(b - a).total_seconds() for a, b in zip(times, times[1:])]


def gpu_stats(log: GpuLog, index: int) -> GpuStats:
    """Summary of GPU ``index`` in ``log`` (see the module docstring for the definitions)."""
    series = log.readings(index)
    times = [t for t, _ in series]
    utils = [g.utilization for _, g in series]
    known = [u for u in utils if u is not None]
    gaps = _gaps(times)
    best: Run | None = None
    run_start: int | None = None
    for i, u in enumerate(utils + [None]):
        if u == 0:
            if run_start is None:
                run_start = i
            continue
        if run_start is not None:
            count = i - run_start
            if best is None or count > best.count:
                best = Run(count, run_start, i - 1, times[run_start], times[i - 1])
            run_start = None
    trailing = 0
    for u in reversed(utils):
        if u != 0:
            break
        trailing += 1
    used = [g.memory_used_bytes for _, g in series if g.memory_used_bytes is not None]
    totals = [g.memory_total_bytes for _, g in series if g.memory_total_bytes is not None]
    return GpuStats(
        index=index,
        samples=len(series),
        start=times[0] if times else None,
        end=times[-1] if times else None,
        interval_s=statistics.median(gaps) if gaps else None,
        max_gap_s=max(gaps) if gaps else None,
        mean_utilization=statistics.fmean(known) if known else None,
        min_utilization=min(known) if known else None,
        max_utilization=max(known) if known else None,
        zero_samples=sum(1 for u in utils if u == 0),
        longest_zero_run=best,
        trailing_zero_samples=trailing,
        memory_used_min=min(used) if used else None,
        memory_used_max=max(used) if used else None,
        memory_total=max(totals) if totals else None,
        unknown_samples=len(utils) - len(known),
        name=next((g.name for _, g in series if g.name), None),
    )


def all_gpu_stats(log: GpuLog) -> list[GpuStats]:
    """:func:`gpu_stats` for every GPU in the log, by index."""
    return [gpu_stats(log, i) for i in log.gpu_indices]
