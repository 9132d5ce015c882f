"""The recent window the policies look at, kept in memory and bounded.

:class:`History` holds the telemetry samples and progress points of one watch (or one replay)
plus the few facts about the run the policies need (is the child alive, what has been spent,
what the instance costs per hour). It never reads a clock: every time in it comes from the
records themselves, and trimming is relative to the newest sample.

Policies that work incrementally (idle, plateau, divergence) read "what is new since I last
looked" through :meth:`History.new_samples` / :meth:`History.new_batches` (or the slower
:meth:`History.new_progress`), which count every record ever added (a sequence number), so
trimming old records never makes a policy see a record twice or skip one silently.

Progress is kept in columns (:class:`~costctl.progress.batch.PointBatch` chunks, the newest
``max_progress`` points and at most one chunk more), never one object per point: a job that
prints millions of loss lines costs a few bytes per point held, and nothing per point dropped.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice

from ..clock import ensure_utc
from ..money import Money
from ..progress.batch import PointBatch
from ..records import ProgressPoint, TelemetrySample

DEFAULT_RETENTION = timedelta(hours=1)
DEFAULT_MAX_PROGRESS = 100_000
#: The most logged gradient norms held (the newest): policies read them incrementally.
MAX_GRAD_NORMS = 100_000

#: the bytes of an array("d") NaN entry (what a batch with no times holds).
_NAN_BYTES = array("d", [float("nan")]).tobytes()


@dataclass(slots=True)
class History:
    """Recent telemetry and progress of one run, plus run facts, for the policies.

    Attributes:
        sample_interval: the sampler's nominal period (``[watch] sample_interval``); the idle
            window tolerates gaps up to twice this.
        started_at: when the run (or the guard) started, aware UTC; used by the plateau
            policy's cost-of-the-rest estimate.
        samples: telemetry, oldest first (strictly time-ordered by :meth:`add_sample`).
        progress: the progress points held, in arrival order, as objects (a compatibility
            view built on each access: slow for many points; policies read
            :meth:`new_batches`). Construction accepts a list of points.
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
        last_output_at: when the watched job last wrote any output at all (set by the watch's
            output thread; None when unknown, e.g. a replay): a job printing anything (an eval
            progress bar) is not hung, whatever its loss lines say.
        longest_progress_gap: the longest time between two consecutive progress reports
            (distinct report times) seen so far: the job's own cadence, for the stall stop.
        progress_reports: how many distinct report times were seen (a chunk of points read at
            one time is one report).
        last_progress_at: the latest ``time`` of any progress point ever added (kept even
            when the point itself is trimmed); None until a timed point arrives.
    """

    sample_interval: timedelta = timedelta(seconds=5)
    started_at: datetime | None = None
    samples: list[TelemetrySample] = field(default_factory=list)
    progress: InitVar[list[ProgressPoint] | None] = None  # read back through the property below
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
    last_output_at: datetime | None = None
    longest_progress_gap: timedelta = timedelta(0)
    progress_reports: int = 0
    _samples_added: int = field(default=0, init=False, repr=False)
    _progress_added: int = field(default=0, init=False, repr=False)
    _chunks: deque = field(default_factory=deque, init=False, repr=False)  # of PointBatch
    _held: int = field(default=0, init=False, repr=False)
    _open: PointBatch | None = field(default=None, init=False, repr=False)  # ours, for add_progress
    _floor: int = field(default=0, init=False, repr=False)  # the newest add_batch's size: held whole
    #: the logged gradient norms, newest :data:`MAX_GRAD_NORMS` (see :meth:`add_grad_norms`)
    _grad_norms: deque = field(default_factory=lambda: deque(maxlen=MAX_GRAD_NORMS), init=False, repr=False)
    _grad_added: int = field(default=0, init=False, repr=False)

    def __post_init__(self, progress: list[ProgressPoint] | None) -> None:
        if self.sample_interval <= timedelta(0):
            raise ValueError("History.sample_interval must be positive")
        if self.started_at is not None:
            self.started_at = ensure_utc(self.started_at)
        initial_samples = list(self.samples)
        initial_progress = list(progress or ())
        self.samples = []
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
        """Append one progress point (train or eval loss); only the ``max_progress`` newest are held.

        ``last_progress_at`` moves to ``point.time`` when that is later. Points without a time
        (file records with no timestamps) are kept for the loss policies but take no part in
        the time-based ones (idle, stall).
        """
        chunk = self._open
        if chunk is None or len(chunk) >= 4096 or not self._chunks or self._chunks[-1] is not chunk:
            chunk = self._open = PointBatch()
            self._chunks.append(chunk)
        chunk.append_point(point)
        self._progress_added += 1
        self._held += 1
        if point.time is not None:
            self._report_at(ensure_utc(point.time).timestamp())
        self._trim()

    def add_batch(self, batch: PointBatch) -> None:
        """Append the points of ``batch`` (kept as they are: do not change the batch afterwards)."""
        n = len(batch)
        if not n:
            return
        # A batch larger than max_progress (a flood between two reads) is held whole until the
        # next batch: the loss policies see every point.
        self._floor = n
        self._chunks.append(batch)
        self._open = None
        self._progress_added += n
        self._held += n
        times = batch.times
        first, last = times[0], times[-1]
        if first == last:
            if first == first:  # not NaN: one report time (a live chunk)
                self._report_at(first)
        elif first != first and last != last and times.tobytes() == _NAN_BYTES * n:
            pass  # no time at all (a file replay without timestamps): no report
        else:  # several report times (a replay's block, or a tick's chunks): the cadence between each
            # distinct ones, in order (C speed: a time seen before is always a no-op for
            # _report_at, whose last time only grows)
            for t in dict.fromkeys(times):
                if t == t:
                    self._report_at(t)
        self._trim()

    def add_grad_norms(self, records) -> None:
        """Append logged gradient norms, in log order: ``(grad_norm, loss on the same record or
        None, step or None, epoch or None)`` tuples
        (:data:`costctl.progress.grad_norms.GradNormRecord`); the newest
        :data:`MAX_GRAD_NORMS` are held."""
        for record in records:
            self._grad_norms.append(record)
            self._grad_added += 1

    def new_grad_norms(self, seen: int) -> tuple[list[tuple], int]:
        """Gradient norms added after the first ``seen`` ones: ``(records, missed)``, ``missed``
        the new ones already dropped before the caller read them."""
        new = self._grad_added - seen
        if new <= 0:
            return [], 0
        held = min(new, len(self._grad_norms))
        return list(islice(reversed(self._grad_norms), held))[::-1], new - held

    def _report_at(self, t: float) -> None:
        """A progress report at POSIX time ``t``: moves ``last_progress_at`` and the cadence."""
        previous = self.last_progress_at
        if previous is None:
            self.last_progress_at = datetime.fromtimestamp(t, UTC)
            self.progress_reports = 1
            return
        gap = t - previous.timestamp()
        if gap <= 0:
            return
        self.progress_reports += 1
        if gap > self.longest_progress_gap.total_seconds():
            self.longest_progress_gap = timedelta(seconds=gap)
        self.last_progress_at = datetime.fromtimestamp(t, UTC)

    def _trim(self) -> None:
        """Drop whole oldest chunks while the rest still holds ``max_progress`` points."""
        chunks = self._chunks
        bound = max(self.max_progress, self._floor)
        while len(chunks) > 1 and self._held - len(chunks[0]) >= bound:
            self._held -= len(chunks.popleft())

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
        """Progress points added after the first ``seen`` ones: ``(points, missed)`` (objects:
        slow for many points, see :meth:`new_batches`)."""
        batches, missed = self.new_batches(seen)
        return [p for b in batches for p in b.points()], missed

    def new_batches(self, seen: int) -> tuple[list[PointBatch], int]:
        """Progress added after the first ``seen`` points, as batches in order: ``(batches,
        missed)``, ``missed`` the new points already trimmed before the caller read them."""
        new = self._progress_added - seen
        if new <= 0:
            return [], 0
        held = min(new, self.progress_held)
        out: list[PointBatch] = []
        need = held
        for chunk in reversed(self._chunks):
            if need <= 0:
                break
            n = len(chunk)
            out.append(chunk if n <= need else chunk.slice(n - need))
            need -= n
        out.reverse()
        return out, new - held

    @property
    def progress_held(self) -> int:
        """How many progress points are held now: at most ``max_progress``, or the newest
        :meth:`add_batch`'s size when larger (the columns may keep up to one chunk more, unread)."""
        return min(self._held, max(self.max_progress, self._floor))

    def newest_sample(self) -> TelemetrySample | None:
        """The latest sample, or None."""
        return self.samples[-1] if self.samples else None

    def last_progress(self, kind: str | None = None) -> ProgressPoint | None:
        """The latest progress point held (of ``kind`` when given), or None."""
        for chunk in reversed(self._chunks):
            if not chunk:
                continue
            if kind is None:
                return chunk.point(len(chunk) - 1)
            wanted = chunk.series_of_kind(kind)
            if not wanted:
                continue
            series = chunk.series
            for i in range(len(chunk) - 1, -1, -1):
                if series[i] in wanted:
                    return chunk.point(i)
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


def _progress_view(self: History) -> list[ProgressPoint]:
    """The progress points held, in arrival order, as objects (built on each read)."""
    batches, _ = self.new_batches(0)
    return [p for chunk in batches for p in chunk.points()]


# ``progress`` is an init-only argument (the points to start with) and, once built, this
# read-only view: set after the dataclass is made so that its default stays the argument's
# (an attribute read costs nothing extra, as a ``__getattribute__`` hook did on every read).
History.progress = property(_progress_view)  # type: ignore[assignment,method-assign]


def _tail(items: list, added: int, seen: int) -> tuple[list, int]:
    new = added - seen
    if new <= 0:
        return [], 0
    held = min(new, len(items))
    return items[len(items) - held:], new - held


#: The most values of one batch the statistical diagnoses (not learning, unstable, the plateau
#: rule's hold) read: a larger batch — a job flooding its output, a block of a huge log — is
#: thinned to every k-th value (:func:`thin`). Those rules judge a trend against the noise,
#: which a uniform thinning keeps; the exact rules (plateau, divergence, stall) read every value.
DIAGNOSIS_MAX_PER_BATCH = 1000


def thin(indexes: Sequence[int], limit: int = DIAGNOSIS_MAX_PER_BATCH) -> Sequence[int]:
    """``indexes`` as is when there are at most ``limit`` of them, else every k-th, k the
    smallest step that leaves at most ``limit`` (the last one kept too, so a batch's newest
    value is always read)."""
    n = len(indexes)
    if n <= limit:
        return indexes
    step = -(-n // limit)
    picked = list(indexes[::step])
    if picked[-1] != indexes[-1]:
        picked[-1] = indexes[-1]
    return picked


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
