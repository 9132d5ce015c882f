"""Combine the telemetry sources into one :class:`~costctl.records.TelemetrySample` per tick.

Source selection (:func:`detect_gpu_source`), as DESIGN.md lays it out: NVML first, then
``nvidia-smi``, then "no GPU" — in which case the CPU of the watched process tree stands in for
GPU utilization, and the user is told so once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import datetime
from types import ModuleType
from typing import Any

from costctl.clock import ensure_utc
from costctl.i18n import N_, _
from costctl.records import GpuReading, SignalStatus, TelemetrySample
from costctl.telemetry.base import CpuSource, GpuSource
from costctl.telemetry.jupyter import JupyterActivity, JupyterReading
from costctl.telemetry.nvidia_smi import DEFAULT_TIMEOUT_S, NvidiaSmiGpuSource
from costctl.telemetry.nvml import NvmlGpuSource
from costctl.telemetry.ssh import SshSessionCounter

#: the line :func:`detect_gpu_source` says once when the machine has no NVIDIA GPU (an English
#: message id: translated where it is said, with its ``stand_in`` translated too).
NO_GPU_MESSAGE = N_(
    "no NVIDIA GPU found: using the CPU utilization of {stand_in} in place of GPU utilization"
)


def detect_gpu_source(
    log: Callable[[str], None] | None = None,
    *,
    stand_in: str = N_("the watched process tree"),
    nvml_module: ModuleType | Any | None = None,
    smi_binary: str | os.PathLike[str] = "nvidia-smi",
    smi_timeout: float = DEFAULT_TIMEOUT_S,
    debug: Callable[[str], None] | None = None,
) -> GpuSource | None:
    """Pick the GPU source for this machine: NVML, else nvidia-smi, else None.

    Call it once per watch. With no GPU source it says, once, through ``log``:
    ``"no NVIDIA GPU found: using the CPU utilization of the watched process tree in place of
    GPU utilization"`` (``stand_in`` names what stands in, e.g. ``"all user processes"`` when
    guarding the machine), in the language of :mod:`costctl.i18n` (``stand_in``, an English
    message id, translated too).

    A driver that is there but broken is not "no GPU": NVML's probe then returns a source whose
    reads are ERROR (busy). nvidia-smi is tried only when NVML is absent.

    Args:
        log: receives the one user-facing line (e.g. the watch's stderr console); default:
            printed on stderr.
        nvml_module / smi_binary / smi_timeout: injection points for tests (the fake pynvml,
            a fake nvidia-smi script, its deadline in seconds).
        debug: optional sink for the probes' detail lines.
    """
    source: GpuSource | None = NvmlGpuSource.probe(nvml_module, log=debug)
    if source is None:
        source = NvidiaSmiGpuSource.probe(smi_binary, timeout=smi_timeout, log=debug)
    if source is None:
        line = _(NO_GPU_MESSAGE).format(stand_in=_(stand_in))
        if log is None:
            print(line, file=sys.stderr)
        else:
            log(line)
    return source


class Sampler:
    """Reads every configured source once per :meth:`sample`.

    Args:
        gpu: NVML / nvidia-smi source, or None when the machine has none (gpu_status ABSENT).
        cpu: :class:`~costctl.telemetry.cpu.ProcessTreeCpu` / ``MachineCpu``, or None
            (cpu_status ABSENT).
        count_ssh: count open SSH sessions (``[policies.idle] count_ssh_sessions``); ABSENT
            otherwise.
        ssh_counter: injectable ``() -> (status, count, error)``; default a
            :class:`~costctl.telemetry.ssh.SshSessionCounter` (a scan at most every 60 s).
        jupyter: a :class:`~costctl.telemetry.jupyter.JupyterActivity` (read at most every
            30 s), or None (``jupyter_status`` ABSENT).
        on_error: called with ``(source, exception)`` (``source``: ``"gpu"``, ``"cpu"`` or
            ``"ssh"``) when a source raises, so that the caller can log its traceback; an
            exception it raises itself is ignored.

    No exception from one source can lose the sample: that source reads ERROR with the reason
    (in ``TelemetrySample.reasons``), the others are still read.
    """

    def __init__(
        self,
        gpu: GpuSource | None,
        cpu: CpuSource | None,
        count_ssh: bool = False,
        *,
        ssh_counter: Callable[[], tuple[SignalStatus, int | None, str | None]] | None = None,
        jupyter: JupyterActivity | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self.gpu = gpu
        self.on_error = on_error
        self.cpu = cpu
        self.count_ssh = count_ssh
        self.jupyter = jupyter
        self._ssh_counter = ssh_counter if ssh_counter is not None else SshSessionCounter()

    @property
    def source_name(self) -> str:
        """``"nvml"``, ``"nvidia-smi"``, ``"cpu"`` (CPU stand-in only) or ``""`` (nothing)."""
        if self.gpu is not None:
            return self.gpu.name
        if self.cpu is not None:
            return "cpu"
        return ""

    def sample(self, now: datetime) -> TelemetrySample:
        """Read all sources and stamp the result with ``now`` (converted to aware UTC).

        The GPU is read first, then the CPU (so a nvidia-smi call of ours is over before the
        process list is taken), then SSH, then the Jupyter server.
        """
        reasons: list[str] = []

        gpus: tuple[GpuReading, ...] = ()
        gpu_status = SignalStatus.ABSENT
        if self.gpu is not None:
            try:
                read = self.gpu.read()
                gpus, gpu_status = read.gpus, read.status
                if read.error:
                    reasons.append(f"gpu: {read.error}")
            except Exception as exc:  # noqa: BLE001 - a failing source is ERROR, not a lost tick
                gpus, gpu_status = (), SignalStatus.ERROR
                reasons.append(f"gpu: {self.gpu.name} read raised {_short(exc)}")
                self._failed("gpu", exc)
            for reading in gpus:
                if reading.error:
                    reasons.append(f"gpu{reading.index}: {reading.error}")

        cpu_percent: float | None = None
        cpu_status = SignalStatus.ABSENT
        if self.cpu is not None:
            try:
                cpu_read = self.cpu.read()
                cpu_percent, cpu_status = cpu_read.percent, cpu_read.status
                if cpu_read.error:
                    reasons.append(f"cpu: {cpu_read.error}")
            except Exception as exc:  # noqa: BLE001
                cpu_percent, cpu_status = None, SignalStatus.ERROR
                reasons.append(f"cpu: read raised {_short(exc)}")
                self._failed("cpu", exc)

        ssh_sessions: int | None = None
        ssh_status = SignalStatus.ABSENT
        if self.count_ssh:
            try:
                ssh_status, ssh_sessions, ssh_error = self._ssh_counter()
                if ssh_error:
                    reasons.append(f"ssh: {ssh_error}")
            except Exception as exc:  # noqa: BLE001
                ssh_status, ssh_sessions = SignalStatus.ERROR, None
                reasons.append(f"ssh: count raised {_short(exc)}")
                self._failed("ssh", exc)

        jupyter = JupyterReading(SignalStatus.ABSENT)
        if self.jupyter is not None:
            try:
                jupyter = self.jupyter.read()
            except Exception as exc:  # noqa: BLE001 - unreadable is busy, never a lost tick
                jupyter = JupyterReading(SignalStatus.ERROR, error=f"read raised {type(exc).__name__}: {exc}")
            if jupyter.error:
                reasons.append(f"jupyter: {jupyter.error}")

        return TelemetrySample(
            time=ensure_utc(now),
            gpus=gpus,
            gpu_status=gpu_status,
            cpu_percent=cpu_percent,
            cpu_status=cpu_status,
            ssh_sessions=ssh_sessions,
            ssh_status=ssh_status,
            source=self.source_name,
            reasons=tuple(reasons),
            jupyter_status=jupyter.status,
            jupyter_last_activity=jupyter.last_activity,
            jupyter_busy_kernels=jupyter.busy_kernels,
        )

    def _failed(self, source: str, exc: BaseException) -> None:
        if self.on_error is not None:
            try:
                self.on_error(source, exc)
            except Exception:  # noqa: BLE001 - reporting must not lose the sample
                pass

    def close(self) -> None:
        """Close the GPU source (``nvmlShutdown``); idempotent."""
        if self.gpu is not None:
            try:
                self.gpu.close()
            except Exception:  # noqa: BLE001 - closing must not mask the watch's own exit
                pass


def _short(exc: BaseException) -> str:
    """``Type: message`` with the message cut to 200 characters (it becomes a sample's reason,
    stored in the ledger)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text if len(text) <= 200 else text[:197] + '...'}"
