"""A recorded GPU log as costctl's own records: one :class:`~costctl.records.TelemetrySample` per
snapshot, each holding one :class:`~costctl.records.GpuReading` per GPU (never averaged).

In a replay only what the log recorded is a signal: ``gpu_status`` is OK (the GPUs were
read), and CPU and SSH are ABSENT because no GPU log records the watched process tree or SSH
sessions. A reading whose utilization the log marks ``[N/A]`` / ``[Not Supported]`` keeps
``utilization=None`` and counts as busy, as live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..records import GpuReading, SignalStatus, TelemetrySample

MIB = 2**20

#: anchor for logs whose times are only offsets from their start (``elapsed_sec``), when the
#: user gives no ``--start-time``.
RELATIVE_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(slots=True)
class GpuLog:
    """The samples read from one GPU log.

    Attributes:
        format: ``"nvidia-smi-csv"``, ``"nvidia-smi-table"``, ``"wandb-system"`` or ``"gpu-csv"``.
        samples: in file order (times never decrease within a well-formed log).
        path: where it was read from, when from a file.
        relative: True when the log only had offsets from its start; times are then
            ``start + offset`` (``start`` defaults to :data:`RELATIVE_EPOCH`).
        fields: which GpuReading fields the log recorded (``"utilization"``,
            ``"memory_used_bytes"``, ``"memory_total_bytes"``, ``"power_w"``, ``"name"``,
            ``"processes"``), for the report's "signals used".
        skipped: lines or records that could not be read (kept count, never fatal).
        source / scan_: see below; a streamed log (``source`` set) keeps ``samples`` empty and
            reads the file again for each :meth:`iter_samples`.
    """

    format: str
    samples: list[TelemetrySample]
    path: Path | None = None
    relative: bool = False
    fields: tuple[str, ...] = ()
    skipped: int = 0
    notes: list[str] = field(default_factory=list)
    #: set for a streamed log (:func:`costctl.replay.readers.open_gpu_log`): a fresh pass over
    #: the file's samples; :attr:`samples` is then empty and :attr:`scan` holds the figures.
    source: Callable[[], Iterator[TelemetrySample]] | None = None
    #: the first pass's figures (see :class:`LogScan`); computed on first use for a kept list.
    scan_: LogScan | None = None

    @property
    def streamed(self) -> bool:
        """True when the samples are read again per pass, not kept."""
        return self.source is not None

    def iter_samples(self) -> Iterator[TelemetrySample]:
        """Every sample in file order (kept, or read again from the file)."""
        return self.source() if self.source is not None else iter(self.samples)

    @property
    def scan(self) -> LogScan:
        """Whole-log figures from one pass (cached)."""
        if self.scan_ is None:
            self.scan_ = scan_samples(self.iter_samples())
        return self.scan_

    @property
    def sample_count(self) -> int:
        """How many samples the log holds."""
        return self.scan.count if self.streamed else len(self.samples)

    @property
    def gpu_indices(self) -> list[int]:
        """Sorted indices of every GPU seen in the log."""
        if self.streamed:
            return sorted(self.scan.stats)
        return sorted({g.index for s in self.samples for g in s.gpus})

    def readings(self, index: int) -> list[tuple[datetime, GpuReading]]:
        """``(time, reading)`` of GPU ``index`` in every sample that has it."""
        out = []
        for s in self.samples:
            for g in s.gpus:
                if g.index == index:
                    out.append((s.time, g))
        return out

    @property
    def start(self) -> datetime | None:
        """Time of the first sample."""
        if self.streamed:
            return self.scan.first
        return self.samples[0].time if self.samples else None

    @property
    def end(self) -> datetime | None:
        """Time of the last sample (the end of the log)."""
        if self.streamed:
            return self.scan.last
        return self.samples[-1].time if self.samples else None


@dataclass(slots=True)
class LogScan:
    """Figures of a whole GPU log from one pass (bounded memory: see :mod:`.streaming`).

    Attributes:
        count: samples.
        first / last: time of the first / last sample (file order).
        earliest / latest: smallest / largest sample time.
        interval_s: median positive gap between consecutive sample times (None: no such gap).
        stats: per GPU index, its :class:`~costctl.replay.stats.GpuStats`.
        fields: as :func:`recorded_fields`.
        gpu_status_seen / cpu_status_seen / ssh_status_seen: some sample has that signal (not ABSENT).
    """

    count: int
    first: datetime | None
    last: datetime | None
    earliest: datetime | None
    latest: datetime | None
    interval_s: float | None
    stats: dict
    fields: tuple[str, ...]
    gpu_status_seen: bool
    cpu_status_seen: bool
    ssh_status_seen: bool


_FIELD_NAMES = ("name", "utilization", "memory_used_bytes", "memory_total_bytes", "power_w", "processes")


def scan_samples(samples: Iterable[TelemetrySample]) -> LogScan:
    """:class:`LogScan` of ``samples`` in one pass, keeping none of them."""
    from .streaming import GapMedian, GpuStatsStream

    gaps = GapMedian(positive_only=True)
    per_gpu: dict[int, GpuStatsStream] = {}
    seen: set[str] = set()
    count = 0
    first = last = earliest = latest = None
    gpu_seen = cpu_seen = ssh_seen = False
    for s in samples:
        t = s.time
        if first is None:
            first = earliest = latest = t
        elif t < earliest:  # type: ignore[operator]
            earliest = t
        elif t > latest:  # type: ignore[operator]
            latest = t
        last = t
        count += 1
        gaps.add(t)
        gpu_seen = gpu_seen or s.gpu_status is not SignalStatus.ABSENT
        cpu_seen = cpu_seen or s.cpu_status is not SignalStatus.ABSENT
        ssh_seen = ssh_seen or s.ssh_status is not SignalStatus.ABSENT
        for g in s.gpus:
            acc = per_gpu.get(g.index)
            if acc is None:
                acc = per_gpu[g.index] = GpuStatsStream(g.index)
            acc.add(t, g)
            if len(seen) < len(_FIELD_NAMES):
                for n in _FIELD_NAMES:
                    if n not in seen and getattr(g, n) is not None:
                        seen.add(n)
    return LogScan(count, first, last, earliest, latest, gaps.median(),
                   {i: per_gpu[i].stats() for i in sorted(per_gpu)},
                   tuple(n for n in _FIELD_NAMES if n in seen), gpu_seen, cpu_seen, ssh_seen)


def make_sample(time: datetime, gpus: list[GpuReading], source: str) -> TelemetrySample:
    """A replayed sample: GPUs sorted by index, GPU signal OK, CPU/SSH ABSENT (never recorded)."""
    return TelemetrySample(
        time=time,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        gpu_status=SignalStatus.OK,
        cpu_percent=None,
        cpu_status=SignalStatus.ABSENT,
        ssh_sessions=None,
        ssh_status=SignalStatus.ABSENT,
        source=source,
    )


def recorded_fields(samples: list[TelemetrySample]) -> tuple[str, ...]:
    """Names of the GpuReading fields that at least one reading in ``samples`` has a value for."""
    names = ("name", "utilization", "memory_used_bytes", "memory_total_bytes", "power_w", "processes")
    seen = set()
    for s in samples:
        for g in s.gpus:
            for n in names:
                if n not in seen and getattr(g, n) is not None:
                    seen.add(n)
    return tuple(n for n in names if n in seen)


def relative_time(seconds: float, start: datetime | None) -> datetime:
    """``start`` (default :data:`RELATIVE_EPOCH`) + ``seconds``."""
    return (start or RELATIVE_EPOCH) + timedelta(seconds=seconds)
