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
    """

    format: str
    samples: list[TelemetrySample]
    path: Path | None = None
    relative: bool = False
    fields: tuple[str, ...] = ()
    skipped: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_indices(self) -> list[int]:
        """Sorted indices of every GPU seen in the log."""
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
        return self.samples[0].time if self.samples else None

    @property
    def end(self) -> datetime | None:
        """Time of the last sample (the end of the log)."""
        return self.samples[-1].time if self.samples else None


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
