"""The recent window the policies look at, kept in memory and bounded.

:class:`History` holds the telemetry samples and progress points of one watch (or one replay)
plus the few facts about the run the policies need (is the child alive, what has been spent,
what the instance costs per hour). It never reads a clock: every time in it comes from the
records themselves, and trimming is relative to the newest sample.

Policies that work incrementally (idle, plateau, divergence) read "what is new since I last
looked" through :meth:`History.new_samples` / :meth:`History.new_progress`, which count every
record ever added (a sequence number), so trimming old records never makes a policy see a
record twice or skip one silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..clock import ensure_utc
from ..money import Money
from ..records import ProgressPoint, TelemetrySample

DEFAULT_RETENTION = timedelta(hours=1)
DEFAULT_MAX_PROGRESS = 100_000


@dataclass(slots=True)
class History:
    """Recent telemetry and progress of one run, plus run facts, for the policies.

    Attributes:
        sample_interval: the sampler's nominal period (``[watch] sample_interval``); the idle
            window tolerates gaps up to twice this.
        started_at: when the run (or the guard) started, aware UTC; used by the plateau
            policy's cost-of-the-rest estimate.
        samples: telemetry, oldest first (strictly time-ordered by :meth:`add_sample`).
        progress: progress points in arrival order (bounded to ``max_progress`` newest).
        child_running: True while the watched child runs, False after it exited, None when
            there is no child (``costctl watch`` with no COMMAND guards the whole machine).
        child_exited_at: when the child exited (aware UTC), if it did.
        progress_source: True when a progress source exists (the child's output or a
            ``--metrics-file``): only then is "no new progress" an idle signal.
        spend_total: everything recorded for this instance so far (the budget's ``total``).
        spend_today: the spend of the current day in ``[watch] timezone`` (``daily``).
        rate: the current price per instance-hour (all GPUs together).
        total_steps: the run's length in steps when known (``[watch] total_steps``);
            a progress point's own ``total`` wins over it.
        retention: how far behind the newest sample samples are kept; the policy engine
            raises it to what the configured windows need (:meth:`keep_at_least`).
        max_progress: how many progress points are kept (the newest ones).
        last_progress_at: the latest ``time`` of any progress point ever added (kept even
            when the point itself is trimmed); None until a timed point arrives.
    """

    sample_interval: timedelta = timedelta(seconds=5)
    started_at: datetime | None = None
    samples: list[TelemetrySample] = field(default_factory=list)
    progress: list[ProgressPoint] = field(default_factory=list)
    child_running: bool | None = None
    child_exited_at: datetime | None = None
    progress_source: bool = False
    spend_total: Money | None = None
    spend_today: Money | None = None
    rate: Money | None = None
    total_steps: int | None = None
    retention: timedelta = DEFAULT_RETENTION
    max_progress: int = DEFAULT_MAX_PROGRESS
    last_progress_at: datetime | None = None
    _samples_added: int = field(default=0, init=False, repr=False)
    _progress_added: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sample_interval <= timedelta(0):
            raise ValueError("History.sample_interval must be positive")
        if self.started_at is not None:
            self.started_at = ensure_utc(self.started_at)
        initial_samples, initial_progress = list(self.samples), list(self.progress)
        self.samples, self.progress = [], []
        for sample in initial_samples:
            self.add_sample(sample)
        for point in initial_progress:
            self.add_progress(point)

    # -- adding -------------------------------------------------------------------------
    def add_sample(self, sample: TelemetrySample) -> None:
        """Append one telemetry sample and drop samples older than ``retention``.

        Samples must arrive in strictly increasing time order (one sample per tick carries
        every GPU). Trimming keeps every sample whose time is at least
        ``newest.time - retention``.

        Raises:
            ValueError: if ``sample.time`` is not later than the newest sample's time.
        """
        if self.samples and sample.time <= self.samples[-1].time:
            raise ValueError(
                f"telemetry sample at {sample.time.isoformat()} is not later than the newest "
                f"one at {self.samples[-1].time.isoformat()}; samples must be added in time order"
            )
        self.samples.append(sample)
        self._samples_added += 1
        cutoff = sample.time - self.retention
        drop = 0
        while drop < len(self.samples) - 1 and self.samples[drop].time < cutoff:
            drop += 1
        if drop:
            del self.samples[:drop]

    def add_progress(self, point: ProgressPoint) -> None:
        """Append one progress point (train or eval loss) and keep only ``max_progress`` newest.

        ``last_progress_at`` moves to ``point.time`` when that is later. Points without a time
        (file records with no timestamps) are kept for the loss policies but take no part in
        the time-based ones (idle, stall).
        """
        self.progress.append(point)
        self._progress_added += 1
        if point.time is not None:
            when = ensure_utc(point.time)
            if self.last_progress_at is None or when > self.last_progress_at:
                self.last_progress_at = when
        excess = len(self.progress) - self.max_progress
        if excess > 0:
            del self.progress[:excess]

    def keep_at_least(self, retention: timedelta) -> None:
        """Raise ``retention`` to at least ``retention`` (it never shrinks)."""
        if retention > self.retention:
            self.retention = retention

    # -- reading ------------------------------------------------------------------------
    @property
    def samples_added(self) -> int:
        """How many samples were ever added (a sequence number for incremental readers)."""
        return self._samples_added

    @property
    def progress_added(self) -> int:
        """How many progress points were ever added."""
        return self._progress_added

    def new_samples(self, seen: int) -> tuple[list[TelemetrySample], int]:
        """Samples added after the first ``seen`` ones.

        Returns:
            ``(samples, missed)``: the new samples still held, oldest first, and how many
            new ones were already trimmed before the caller read them (0 normally).
        """
        return _tail(self.samples, self._samples_added, seen)

    def new_progress(self, seen: int) -> tuple[list[ProgressPoint], int]:
        """Progress points added after the first ``seen`` ones: ``(points, missed)``."""
        return _tail(self.progress, self._progress_added, seen)

    def newest_sample(self) -> TelemetrySample | None:
        """The latest sample, or None."""
        return self.samples[-1] if self.samples else None

    def last_progress(self, kind: str | None = None) -> ProgressPoint | None:
        """The latest progress point held (of ``kind`` when given), or None."""
        for point in reversed(self.progress):
            if kind is None or point.kind == kind:
                return point
        return None

    def samples_between(self, start: datetime, end: datetime) -> list[TelemetrySample]:
        """Samples with ``start <= time <= end``, oldest first."""
        return [s for s in self.samples if start <= s.time <= end]

    def last_sample_at_or_before(self, when: datetime) -> TelemetrySample | None:
        """The latest held sample with ``time <= when`` (the idle window's anchor), or None."""
        found = None
        for sample in self.samples:
            if sample.time <= when:
                found = sample
            else:
                break
        return found


def _tail(items: list, added: int, seen: int) -> tuple[list, int]:
    new = added - seen
    if new <= 0:
        return [], 0
    held = min(new, len(items))
    return items[len(items) - held:], new - held


def finite_or_text(value: float | None) -> float | str | None:
    """A float for JSON evidence: finite floats as they are, NaN/inf as ``"nan"``/``"inf"``/``"-inf"``."""
    if value is None:
        return None
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


__all__ = ["History", "finite_or_text", "DEFAULT_RETENTION", "DEFAULT_MAX_PROGRESS"]
