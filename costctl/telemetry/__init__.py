"""Telemetry sources: what the sampler reads on every tick.

* :mod:`costctl.telemetry.nvml` — per-GPU readings through NVML (the only ``pynvml`` importer);
* :mod:`costctl.telemetry.nvidia_smi` — the same through ``nvidia-smi --query-gpu`` with a deadline;
* :mod:`costctl.telemetry.smi_parse` — parsing primitives for nvidia-smi CSV (live output and logs);
* :mod:`costctl.telemetry.cpu` — CPU of the watched process tree, or of all user processes;
* :mod:`costctl.telemetry.ssh` — open SSH sessions;
* :mod:`costctl.telemetry.sampler` — combines them into one :class:`~costctl.records.TelemetrySample`.

Every source answers with a status (:class:`~costctl.records.SignalStatus`): a source that should
be there but fails reads ERROR (busy), never a 0 that would look idle.
"""

from costctl.telemetry.base import CpuRead, CpuSource, GpuRead, GpuSource

__all__ = ["CpuRead", "CpuSource", "GpuRead", "GpuSource"]
