"""Idle stretches in a recorded timeline: for the machine (costctl's rule) and for each GPU.

A *stretch* is a maximal run of consecutive idle samples. It starts at its first idle sample
and ends at the first sample after it that is not idle (the pause lasted until then), or at
the end of the log; a gap between samples longer than ``2 x sample_interval`` (the idle
policy's own continuity limit) ends it at its last idle sample. ``final`` marks the stretch
that runs to the end of the log with no work after it.

* Machine rule (costctl, :func:`costctl.policies.classify_sample`): every present signal idle,
  i.e. ALL GPUs below ``min_gpu_utilization`` (plus CPU/SSH when recorded); a GPU whose
  utilization is unknown is busy; when progress is on the time axis, a stretch also ends at
  each progress point (new progress is work).
* Per-GPU rule: that GPU's utilization is known and below ``min_gpu_utilization``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..policies import classify_sample
from ..records import TelemetrySample


@dataclass(frozen=True, slots=True)
class Stretch:
    """One idle stretch.

    Attributes:
        start: time of its first idle sample.
        end: time of the first non-idle sample after it, or the end of the log.
        samples: idle samples in it.
        final: True when it runs to the end of the log (no work follows).
        gpu: the GPU index for a per-GPU stretch, None for the machine.
    """

    start: datetime
    end: datetime
    samples: int
    final: bool
    gpu: int | None = None

    @property
    def duration(self) -> timedelta:
        """``end - start``."""
        return self.end - self.start


def _stretches(
    samples: list[TelemetrySample],
    idle: Callable[[TelemetrySample], bool],
    max_gap: timedelta,
    breaks: list[datetime],
    gpu: int | None,
) -> list[Stretch]:
    out: list[Stretch] = []
    first: int | None = None

    def close(last: int, end: datetime, final: bool) -> None:
        out.append(Stretch(samples[first].time, end, last - first + 1, final, gpu))  # type: ignore[index]

    for k, sample in enumerate(samples):
        is_idle = idle(sample)
        if first is not None:
            prev = samples[k - 1].time
            end: datetime | None = prev if sample.time - prev > max_gap else None
            if end is None and breaks:
                # a progress point after the previous sample and up to this one is work
                pos = bisect.bisect_right(breaks, prev)
                if pos < len(breaks) and breaks[pos] <= sample.time:
                    end = breaks[pos]
            if end is not None:
                close(k - 1, end, False)
                first = None
            elif not is_idle:
                close(k - 1, sample.time, False)
                first = None
        if is_idle and first is None:
            first = k
    if first is not None:
        close(len(samples) - 1, samples[-1].time, True)
    return out


def machine_stretches(
    samples: list[TelemetrySample],
    *,
    min_gpu_utilization: float,
    min_cpu_utilization: float,
    sample_interval: timedelta,
    progress_times: list[datetime] | None = None,
) -> list[Stretch]:
    """Idle stretches of the whole machine under costctl's rule (see the module docstring).

    ``progress_times`` (sorted) are the times of progress points on the same axis; a stretch
    with progress after its end is not ``final``.
    """
    def idle(sample: TelemetrySample) -> bool:
        verdict = classify_sample(
            sample, min_gpu_utilization=min_gpu_utilization, min_cpu_utilization=min_cpu_utilization
        )
        return verdict.idle is True

    breaks = sorted(progress_times or [])
    found = _stretches(samples, idle, 2 * sample_interval, breaks, None)
    if found and found[-1].final and breaks and breaks[-1] > found[-1].start:
        last = found[-1]
        found[-1] = Stretch(last.start, last.end, last.samples, False, None)
    return found


def gpu_stretches(
    samples: list[TelemetrySample], index: int, *, min_gpu_utilization: float, sample_interval: timedelta
) -> list[Stretch]:
    """Idle stretches of GPU ``index`` alone (known utilization below ``min_gpu_utilization``)."""
    series = [s for s in samples if any(g.index == index for g in s.gpus)]

    def idle(sample: TelemetrySample) -> bool:
        for g in sample.gpus:
            if g.index == index:
                return g.error is None and g.utilization is not None and g.utilization < min_gpu_utilization
        return False

    return _stretches(series, idle, 2 * sample_interval, [], index)
