"""GPU telemetry through NVML (package ``nvidia-ml-py``, imported as ``pynvml``).

This is the only module of costctl that imports ``pynvml`` (gpustat/nvitop keep NVML in one
module the same way). Facts it relies on (NVML API reference, ``nvmlDevice*`` queries):

* ``nvmlDeviceGetUtilizationRates(h).gpu``: percent of the last sample period (1/6 s to 1 s,
  depending on the product) during which one or more kernels ran — a tiny kernel reads 100 %.
* ``nvmlDeviceGetMemoryInfo(h)``: ``.used`` / ``.total`` in **bytes**.
* ``nvmlDeviceGetPowerUsage(h)``: board power in **milliwatts** (converted to watts here).
* ``nvmlDeviceGetComputeRunningProcesses(h)``: ``.pid`` are **host** PIDs, so inside a
  container a job's own PID may not be listed.
* Any query may raise ``NVMLError_NotSupported`` / ``NVMLError_FunctionNotFound`` (older
  boards, old drivers, vGPU/MIG): that field is unknown (None), never 0, and the other fields
  are still read.

"Absent" versus "error" (see :meth:`NvmlGpuSource.probe`): a machine without NVIDIA
(``NVMLError_LibraryNotFound``, ``NVMLError_DriverNotLoaded``, zero devices, ``pynvml`` not
installed) has no GPU signal at all; a driver that is there but fails reads ERROR, which the
idle policy counts as busy.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable

from costctl.records import GpuReading, SignalStatus
from costctl.telemetry.base import GpuRead

#: Every ``pynvml`` attribute this module uses. A fake module for tests must provide them all;
#: a test checks the real ``pynvml`` still does.
NVML_API: tuple[str, ...] = (
    "NVMLError",
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetComputeRunningProcesses",
)

# NVML return codes (nvml.h, nvmlReturn_t) used when the module lacks the constants.
_LIBRARY_NOT_FOUND = 12
_DRIVER_NOT_LOADED = 9


#: What an NVIDIA driver leaves on a Linux machine (or container given its GPUs): the control
#: device, the kernel module's /proc entry, WSL2's GPU paravirtualization device. With none of
#: them NVML cannot reach a GPU, and importing pynvml (~80 ms, a large module) is skipped.
DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def driver_present(paths: tuple[str, ...] | None = None) -> bool:
    """Whether this machine may have an NVIDIA driver: one of :data:`DRIVER_PATHS` exists
    (True off Linux, where there is no such sign to read)."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in (DRIVER_PATHS if paths is None else paths))


def load_pynvml() -> ModuleType | None:
    """Import and return the real ``pynvml`` module, or None when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class NvmlGpuSource:
    """Reads every GPU through NVML.

    Args:
        nvml: the ``pynvml`` module, or any object with the same API and exceptions
            (:data:`NVML_API`); None imports the real one.

    ``nvmlInit`` is called once, on the first read (or by :meth:`probe`); when it fails the read
    is ERROR and the next read tries again. :meth:`close` calls ``nvmlShutdown``. Reads are
    serialised by a lock, so the source may be shared between threads. An NVML call takes
    ~0.1 ms, so a read of 8 GPUs costs a few milliseconds.
    """

    name = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        if nvml is None:
            nvml = load_pynvml()
            if nvml is None:
                raise ImportError("pynvml (package nvidia-ml-py) is not installed")
        self._nvml = nvml
        self._lock = threading.Lock()
        self._initialized = False
        self._names: dict[int, str | None] = {}
        self._uuids: dict[int, str | None] = {}
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        field_errors: list[type[BaseException]] = [nvml.NVMLError]
        if isinstance(mismatch, type) and issubclass(mismatch, BaseException):
            field_errors.append(mismatch)
        self._field_errors: tuple[type[BaseException], ...] = tuple(field_errors)

    # -- discovery -------------------------------------------------------------------------
    @classmethod
    def probe(
        cls,
        nvml: ModuleType | Any | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> NvmlGpuSource | None:
        """Return a ready source when NVML is usable or broken, None when there is no NVIDIA GPU.

        * None (absent): ``pynvml`` not installed, ``NVMLError_LibraryNotFound`` (no
          ``libnvidia-ml.so.1``), ``NVMLError_DriverNotLoaded`` (library present, no kernel
          driver — e.g. an AutoDL instance started in no-GPU mode), or ``nvmlDeviceGetCount() == 0``.
        * a source whose reads are ERROR: any other failure of ``nvmlInit`` or of the device
          count (permission, GPU lost, driver/library version mismatch...). Its reads retry
          ``nvmlInit``, so a driver that recovers is picked up.
        * a working source otherwise (NVML left initialised).

        ``log`` (optional) receives one line describing what was found.
        """
        say = log or (lambda _line: None)
        if nvml is None and not driver_present():
            say(f"NVML: no NVIDIA driver on this machine (none of {', '.join(DRIVER_PATHS)}): pynvml not loaded")
            return None
        if nvml is None:
            nvml = load_pynvml()
            if nvml is None:
                say("NVML: pynvml (nvidia-ml-py) is not installed")
                return None
        source = cls(nvml)
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - classified below
            if source._is_absent(exc):
                say(f"NVML: {_describe(exc)}")
                return None
            say(f"NVML is present but failed to initialise: {_describe(exc)}")
            return source
        source._initialized = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            say(f"NVML is present but cannot count devices: {_describe(exc)}")
            return source
        if count == 0:
            say("NVML: no NVIDIA devices")
            source.close()
            return None
        say(f"NVML: {count} NVIDIA GPU(s)")
        return source

    def _is_absent(self, exc: BaseException) -> bool:
        nvml = self._nvml
        if not isinstance(exc, nvml.NVMLError):
            return False
        absent_codes = {
            getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", _LIBRARY_NOT_FOUND),
            getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", _DRIVER_NOT_LOADED),
        }
        absent_classes = tuple(
            c
            for c in (
                getattr(nvml, "NVMLError_LibraryNotFound", None),
                getattr(nvml, "NVMLError_DriverNotLoaded", None),
            )
            if isinstance(c, type)
        )
        return isinstance(exc, absent_classes) or getattr(exc, "value", None) in absent_codes

    # -- reading ---------------------------------------------------------------------------
    def read(self) -> GpuRead:
        """Read every GPU now.

        Returns:
            OK with one :class:`GpuReading` per device; a field NVML cannot give is None, and a
            device whose utilization failed has ``error`` set (busy). ERROR (no readings) when
            ``nvmlInit`` or ``nvmlDeviceGetCount`` fails. Never raises for NVML failures.
        """
        with self._lock:
            nvml = self._nvml
            if not self._initialized:
                try:
                    nvml.nvmlInit()
                except Exception as exc:  # noqa: BLE001
                    return GpuRead(SignalStatus.ERROR, error=f"nvmlInit failed: {_describe(exc)}")
                self._initialized = True
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as exc:  # noqa: BLE001
                return GpuRead(
                    SignalStatus.ERROR, error=f"nvmlDeviceGetCount failed: {_describe(exc)}"
                )
            return GpuRead(SignalStatus.OK, tuple(self._read_device(i) for i in range(count)))

    def _read_device(self, index: int) -> GpuReading:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001 - a lost GPU must not hide the others
            return GpuReading(
                index=index,
                name=self._names.get(index),
                uuid=self._uuids.get(index),
                error=f"nvmlDeviceGetHandleByIndex failed: {_describe(exc)}",
            )

        if index not in self._names:
            name = self._field(nvml.nvmlDeviceGetName, handle)
            self._names[index] = _text(name) if name is not None else None
        if index not in self._uuids:
            uuid = self._field(nvml.nvmlDeviceGetUUID, handle)
            self._uuids[index] = _text(uuid) if uuid is not None else None

        utilization: float | None = None
        error: str | None = None
        try:
            utilization = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception as exc:  # noqa: BLE001 - unknown utilization = busy, with the reason
            error = f"nvmlDeviceGetUtilizationRates failed: {_describe(exc)}"

        memory = self._field(nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = self._field(nvml.nvmlDeviceGetPowerUsage, handle)
        procs = self._field(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        return GpuReading(
            index=index,
            name=self._names[index],
            uuid=self._uuids[index],
            utilization=utilization,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            power_w=float(power_mw) / 1000.0 if power_mw is not None else None,
            processes=tuple(int(p.pid) for p in procs) if procs is not None else None,
            error=error,
        )

    def _field(self, fn: Callable[[Any], Any], handle: Any) -> Any:
        """Call one NVML query; an NVML error (NotSupported, FunctionNotFound, ...) gives None."""
        try:
            return fn(handle)
        except self._field_errors:
            return None

    def close(self) -> None:
        """``nvmlShutdown`` if initialised; idempotent, never raises."""
        with self._lock:
            if self._initialized:
                self._initialized = False
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 - shutting down a broken driver is best effort
                    pass

    def __enter__(self) -> NvmlGpuSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _text(value: Any) -> str:
    """pynvml returns str since 11.5 and bytes before; accept both."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _describe(exc: BaseException) -> str:
    """``NVMLError_NotSupported: Not Supported`` style one-liner."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and text != name else name
