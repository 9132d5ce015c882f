"""What a telemetry source returns on one read, and the protocols the sampler relies on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from costctl.records import GpuReading, SignalStatus


@dataclass(frozen=True, slots=True)
class GpuRead:
    """All GPUs of the machine, read once.

    Attributes:
        status: OK when the device list could be read (a single GPU whose utilization failed
            is still OK overall: that :class:`GpuReading` carries ``error`` and counts as busy);
            ERROR when the read failed as a whole (``gpus`` is then empty).
        gpus: one reading per device, in index order.
        error: one line saying why, when ``status`` is ERROR.
    """

    status: SignalStatus
    gpus: tuple[GpuReading, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CpuRead:
    """CPU use, in percent of one core (200 = two cores busy).

    Attributes:
        status: OK (``percent`` decides), UNKNOWN (some process was seen for the first time,
            so its share is not known yet; counts as busy), ERROR (could not be read).
        percent: the measured sum; with UNKNOWN it is the sum over the processes that could
            be measured (a lower bound), or None when nothing could be.
        error: one line saying why the status is not OK.
    """

    status: SignalStatus
    percent: float | None = None
    error: str | None = None


class GpuSource(Protocol):
    """Something that reads every GPU: NVML or nvidia-smi."""

    #: short source name for reports: ``"nvml"`` or ``"nvidia-smi"``.
    name: str

    def read(self) -> GpuRead:
        """Read every GPU now. Must not raise for driver failures: those are ERROR reads."""
        ...  # pragma: no cover - protocol

    def close(self) -> None:
        """Release driver handles; idempotent."""
        ...  # pragma: no cover - protocol


class CpuSource(Protocol):
    """Something that reads CPU use: the watched process tree or the whole machine."""

    name: str

    def read(self) -> CpuRead:
        """Read CPU use since the previous read (percent of one core)."""
        ...  # pragma: no cover - protocol
