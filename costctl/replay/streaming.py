"""Streaming figures of a GPU log: what ``costctl analyze`` computes, one sample at a time.

Each class here takes samples (or one GPU's readings) in file order and keeps only bounded
state, yet ends with exactly the figures of the whole-list functions it mirrors (those stay as
the reference the tests compare with):

* :class:`GpuStatsStream` -> :func:`costctl.replay.stats.gpu_stats` (per GPU: count, mean,
  min/max, zero runs, memory peak; the median gap from a count of each distinct gap value, so
  its memory grows with the number of *distinct* gaps, not of samples: nvidia-smi writes
  millisecond times, so at most a few thousand);
* :class:`GapMedian` -> :func:`costctl.replay.timeline.nominal_interval`;
* :class:`StretchStream` -> :func:`costctl.replay.stretches.machine_stretches` /
  :func:`~costctl.replay.stretches.gpu_stretches` (stretches kept only when listed: at least
  ``min_stretch`` long or final; the idle total counts all);
* :class:`SkypilotStream` / :class:`DstackStream` -> :func:`costctl.replay.peers.skypilot_autostop`
  / :func:`~costctl.replay.peers.dstack_utilization_policy` (dstack: the readings of the last
  ``time_window`` only);
* :class:`PlotSeries`: a decimated ``(time, utilization)`` series per GPU for ``--plot``
  (at most ``max_points``: each kept point is the lowest and highest of a run of readings whose
  length doubles as the log grows, so idle dips and peaks show).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, deque
from collections.abc import Callable
from datetime import datetime, timedelta

from ..i18n import _
from ..policies.base import iso
from ..records import GpuReading, SignalStatus, TelemetrySample
from .peers import DSTACK_COVERAGE_SLACK, DstackSetting, PeerResult, skypilot_describe
from .stats import GpuStats, Run
from .stretches import Stretch


class ExactSum:
    """An exactly rounded running float sum (Shewchuk's partials, the algorithm of :func:`math.fsum`):
    :attr:`value` equals ``math.fsum`` of every value added."""

    __slots__ = ("_partials",)

    def __init__(self) -> None:
        self._partials: list[float] = []

    def add(self, x: float) -> None:
        """Add ``x`` (finite)."""
        partials = self._partials
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    @property
    def value(self) -> float:
        """The correctly rounded sum so far."""
        return math.fsum(self._partials)


class GapMedian:
    """Median of positive (or all) gaps between consecutive times, from a count per distinct value."""

    __slots__ = ("_counts", "_prev", "_positive", "n")

    def __init__(self, *, positive_only: bool) -> None:
        self._counts: Counter[float] = Counter()
        self._prev: datetime | None = None
        self._positive = positive_only
        self.n = 0

    def add(self, when: datetime) -> None:
        """Take the next time."""
        prev, self._prev = self._prev, when
        if prev is None or (self._positive and not when > prev):
            return
        self._counts[(when - prev).total_seconds()] += 1
        self.n += 1

    def median(self) -> float | None:
        """:func:`statistics.median` of the gaps (seconds), None without any."""
        if not self.n:
            return None
        values = sorted(self._counts)
        want = (self.n - 1) // 2, self.n // 2
        found: list[float] = []
        seen = 0
        for v in values:
            c = self._counts[v]
            while len(found) < 2 and seen <= want[len(found)] < seen + c:
                found.append(v)
            seen += c
            if len(found) == 2:
                break
        return found[0] if self.n % 2 else (found[0] + found[1]) / 2

    def max(self) -> float | None:
        """Largest gap (seconds)."""
        return max(self._counts) if self._counts else None


class GpuStatsStream:
    """:class:`~costctl.replay.stats.GpuStats` of one GPU from its readings in order."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.count = 0
        self.start: datetime | None = None
        self.end: datetime | None = None
        self.gaps = GapMedian(positive_only=False)
        self.util_sum = ExactSum()
        self.known = 0
        self.min_u: float | None = None
        self.max_u: float | None = None
        self.zeros = 0
        self.best: Run | None = None
        self.run_first: int | None = None
        self.run_start: datetime | None = None
        self.mem_min: int | None = None
        self.mem_max: int | None = None
        self.mem_total: int | None = None
        self.name: str | None = None

    def add(self, when: datetime, g: GpuReading) -> None:
        """Take this GPU's next reading, recorded at ``when``."""
        pos = self.count
        self.count += 1
        if self.start is None:
            self.start = when
        self.gaps.add(when)
        u = g.utilization
        if u is not None:
            self.known += 1
            self.util_sum.add(u)
            if self.min_u is None or u < self.min_u:
                self.min_u = u
            if self.max_u is None or u > self.max_u:
                self.max_u = u
        if u == 0:
            self.zeros += 1
            if self.run_first is None:
                self.run_first, self.run_start = pos, when
        elif self.run_first is not None:
            self._close(pos, self.end)  # type: ignore[arg-type]
        self.end = when
        used = g.memory_used_bytes
        if used is not None:
            self.mem_min = used if self.mem_min is None else min(self.mem_min, used)
            self.mem_max = used if self.mem_max is None else max(self.mem_max, used)
        if g.memory_total_bytes is not None:
            self.mem_total = g.memory_total_bytes if self.mem_total is None else max(self.mem_total, g.memory_total_bytes)
        if self.name is None and g.name:
            self.name = g.name

    def _close(self, pos: int, last_zero_at: datetime) -> None:
        count = pos - self.run_first  # type: ignore[operator]
        if self.best is None or count > self.best.count:  # the first of equal runs wins
            self.best = Run(count, self.run_first, pos - 1, self.run_start, last_zero_at)  # type: ignore[arg-type]
        self.run_first = self.run_start = None

    def stats(self) -> GpuStats:
        """The figures so far (the zero run in progress counts as ended)."""
        best, trailing = self.best, 0
        if self.run_first is not None:
            trailing = self.count - self.run_first
            if best is None or trailing > best.count:
                best = Run(trailing, self.run_first, self.count - 1, self.run_start, self.end)  # type: ignore[arg-type]
        return GpuStats(
            index=self.index, samples=self.count, start=self.start, end=self.end,
            interval_s=self.gaps.median(), max_gap_s=self.gaps.max(),
            mean_utilization=self.util_sum.value / self.known if self.known else None,
            min_utilization=self.min_u, max_utilization=self.max_u, zero_samples=self.zeros,
            longest_zero_run=best, trailing_zero_samples=trailing,
            memory_used_min=self.mem_min, memory_used_max=self.mem_max, memory_total=self.mem_total,
            unknown_samples=self.count - self.known, name=self.name,
        )


def gpu_stats_stream(index: int) -> GpuStatsStream:
    """A :class:`GpuStatsStream` for GPU ``index``."""
    return GpuStatsStream(index)


class StretchStream:
    """Idle stretches from ``(time, idle)`` in order, as :func:`~costctl.replay.stretches._stretches`.

    Args:
        max_gap: a longer gap ends a stretch at its last idle sample.
        breaks: sorted progress times (work) on the same axis.
        gpu: the GPU for per-GPU stretches (None: the machine).
        listed: which closed stretches to keep (the others only add to :attr:`total`).
        machine: apply the machine rule's end fix (a final stretch with progress after its start
            is not final).
    """

    def __init__(self, max_gap: timedelta, breaks: list[datetime], gpu: int | None,
                 listed: Callable[[Stretch], bool], *, machine: bool) -> None:
        self.max_gap, self.breaks, self.gpu, self.listed, self.machine = max_gap, breaks, gpu, listed, machine
        self.kept: list[Stretch] = []
        self.total = timedelta(0)
        self.last: Stretch | None = None
        self._first: datetime | None = None
        self._n = 0
        self._prev: datetime | None = None

    def _close(self, end: datetime, final: bool) -> None:
        s = Stretch(self._first, end, self._n, final, self.gpu)  # type: ignore[arg-type]
        if self.last is not None and self.listed(self.last):
            self.kept.append(self.last)
        self.last = s
        self.total += s.duration
        self._first = None

    def add(self, when: datetime, idle: bool) -> None:
        """Take the next sample's time and verdict."""
        if self._first is not None:
            prev = self._prev
            end = prev if when - prev > self.max_gap else None  # type: ignore[operator]
            if end is None and self.breaks:
                pos = bisect.bisect_right(self.breaks, prev)
                if pos < len(self.breaks) and self.breaks[pos] <= when:
                    end = self.breaks[pos]
            if end is not None:
                self._close(end, False)
            elif not idle:
                self._close(when, False)
        if idle:
            if self._first is None:
                self._first, self._n = when, 0
            self._n += 1
        self._prev = when

    def finish(self) -> list[Stretch]:
        """Close the open stretch; the listed stretches in order (the last one always checked)."""
        if self._first is not None:
            self._close(self._prev, True)  # type: ignore[arg-type]
        last = self.last
        if last is not None:
            if self.machine and last.final and self.breaks and self.breaks[-1] > last.start:
                last = self.last = Stretch(last.start, last.end, last.samples, False, None)
            if self.listed(last):
                self.kept.append(last)
        return self.kept


def _running(sample: TelemetrySample, threshold: float) -> bool:
    if not sample.gpus:
        return True
    return any(g.utilization is None or g.error is not None or g.utilization >= threshold for g in sample.gpus)


class SkypilotStream:
    """:func:`~costctl.replay.peers.skypilot_autostop` one sample at a time (the replay's case:
    the job is the progress span when given, else any GPU at or above the threshold)."""

    def __init__(self, *, idle_minutes: float, min_gpu_utilization: float,
                 job_span: tuple[datetime, datetime | None] | None) -> None:
        self.idle_minutes, self.threshold, self.job_span = idle_minutes, min_gpu_utilization, job_span
        self.idle_for = timedelta(minutes=idle_minutes)
        self.last_active: datetime | None = None
        self.stop: datetime | None = None
        self.reason = _("no samples")

    def add(self, sample: TelemetrySample) -> None:
        """Take the next sample."""
        if self.stop is not None:
            return
        if self.last_active is None:
            self.last_active = sample.time
            self.reason = _("never idle long enough")
        if self.job_span is not None:
            begin, exit_at = self.job_span
            running = begin <= sample.time and (exit_at is None or sample.time <= exit_at)
            if not running and exit_at is not None and exit_at <= sample.time:
                self.last_active = max(self.last_active, exit_at)
        else:
            running = _running(sample, self.threshold)
        ssh = sample.ssh_status is SignalStatus.OK and bool(sample.ssh_sessions)
        if running or ssh:
            self.last_active = sample.time
            return
        if sample.time - self.last_active >= self.idle_for:
            self.stop = sample.time
            self.reason = _("no job running and no SSH session since {time} ({minutes:g} min)").format(
                time=iso(self.last_active), minutes=self.idle_minutes)

    def result(self) -> PeerResult:
        """The verdict, as :func:`~costctl.replay.peers.skypilot_autostop` words it."""
        m = self.idle_minutes
        if self.job_span is not None:
            assumption = _("job running from the first to the last recorded training progress point")
        else:
            assumption = _("a GPU log records no jobs: a job is taken to be running while any GPU is "
                           ">= {threshold:g} %").format(threshold=self.threshold)
        rule = _("stop after {minutes:g} min with no job running and no SSH session (sky autostop -i {minutes:g})").format(
            minutes=m)
        from .peers import SKYPILOT_DEFAULT_IDLE_MINUTES

        variant = "default" if m == SKYPILOT_DEFAULT_IDLE_MINUTES else f"-i {m:g}"
        return PeerResult("skypilot-autostop", rule, assumption, self.stop, self.reason,
                          settings=skypilot_describe(m), variant=variant)


class DstackStream:
    """:func:`~costctl.replay.peers.dstack_utilization_policy` one sample at a time, holding the
    samples of the last ``time_window`` only (their times and per-GPU below/above flags)."""

    def __init__(self, setting: DstackSetting) -> None:
        self.setting = setting
        self.window: deque[tuple[datetime, tuple[tuple[int, bool], ...]]] = deque()
        self.count: Counter[int] = Counter()
        self.busy: Counter[int] = Counter()
        self.result_: PeerResult | None = None

    def add(self, sample: TelemetrySample) -> None:
        """Take the next sample."""
        if self.result_ is not None:
            return
        threshold, tw = self.setting.min_gpu_utilization, self.setting.time_window
        flags = tuple((g.index, g.utilization < threshold) for g in sample.gpus
                      if g.utilization is not None and g.error is None)
        self.window.append((sample.time, flags))
        for index, below in flags:
            self.count[index] += 1
            if not below:
                self.busy[index] += 1
        now = sample.time
        after = now - tw
        while len(self.window) > 1 and self.window[0][0] <= after:
            _when, old = self.window.popleft()
            for index, below in old:
                self.count[index] -= 1
                if not below:
                    self.busy[index] -= 1
        if self.window[0][0] > after + DSTACK_COVERAGE_SLACK:
            return
        for index in sorted(i for i, c in self.count.items() if c > 0):
            if self.busy[index] == 0:
                self.result_ = PeerResult(
                    "dstack-utilization-policy", self._rule(), None, now,
                    _("GPU {gpu}: all {count} samples since {time} below {threshold:g} %").format(
                        gpu=index, count=self.count[index], time=iso(after), threshold=threshold),
                    gpu=index, settings=self.setting.describe(), variant=self.setting.key)
                return

    def _rule(self) -> str:
        s = self.setting
        return _("terminate when any GPU has all samples of the last {minutes:g} min below {threshold:g} % "
                 "(dstack utilization_policy)").format(minutes=s.time_window.total_seconds() / 60,
                                                      threshold=s.min_gpu_utilization)

    def result(self) -> PeerResult:
        """The verdict, as :func:`~costctl.replay.peers.dstack_utilization_policy` words it."""
        if self.result_ is not None:
            return self.result_
        return PeerResult("dstack-utilization-policy", self._rule(), None, None,
                          _("no GPU stayed below the threshold for a whole window"),
                          settings=self.setting.describe(), variant=self.setting.key)


class PlotSeries:
    """A bounded ``(time, utilization)`` series of one GPU (see the module docstring)."""

    def __init__(self, max_points: int = 4096) -> None:
        self.max_points = max(4, max_points)
        self.points: list[tuple[datetime, float]] = []  # pairs [low, high] per bucket, flattened
        self._width = 1
        self._fill = 0
        self._low: tuple[datetime, float] | None = None
        self._high: tuple[datetime, float] | None = None

    def add(self, when: datetime, u: float | None) -> None:
        """Take the next reading (unknown utilization: NaN, a gap in the line)."""
        v = math.nan if u is None else u
        p = (when, v)
        if self._fill == 0:
            self._low = self._high = p
        else:
            if v < self._low[1] or math.isnan(v):  # type: ignore[index]
                self._low = p
            if v > self._high[1]:  # type: ignore[index]
                self._high = p
        self._fill += 1
        if self._fill == self._width:
            self._flush()

    def _flush(self) -> None:
        a, b = self._low, self._high
        pair = [a, b] if a[0] <= b[0] else [b, a]  # type: ignore[index]
        self.points.extend(pair if pair[0] is not pair[1] else pair[:1])  # type: ignore[arg-type]
        self._fill = 0
        if len(self.points) > self.max_points:
            merged: list[tuple[datetime, float]] = []
            for k in range(0, len(self.points), 4):
                chunk = self.points[k:k + 4]
                finite = [q for q in chunk if not math.isnan(q[1])]
                if not finite:
                    merged.append(chunk[0])
                    continue
                lo = min(finite, key=lambda q: q[1])
                hi = max(finite, key=lambda q: q[1])
                merged.extend([lo, hi] if lo[0] < hi[0] else [hi, lo] if lo is not hi else [lo])
            self.points = merged
            self._width *= 2

    def series(self) -> list[tuple[datetime, float]]:
        """The kept points in time order (the bucket in progress included)."""
        out = list(self.points)
        if self._fill:
            a, b = self._low, self._high
            out.extend(sorted({a, b}, key=lambda q: q[0]))  # type: ignore[arg-type]
        return out
