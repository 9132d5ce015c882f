"""Fakes for the telemetry tests (no GPU on the test machines).

* :class:`FakeNvml` — a module object with pynvml's API and exception machinery (error
  classes generated from ``NVML_ERROR_*`` codes, ``NVMLError(code)`` returning the subclass,
  ``.value`` holding the code), driving any number of scripted devices. A conformance test
  checks every name costctl uses exists in the real ``pynvml`` with the same codes.
* :func:`write_fake_smi` — an executable script standing in for ``nvidia-smi``.
"""

from __future__ import annotations

import string
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Codes from nvml.h (nvmlReturn_t), as pynvml defines them.
NVML_CODES = {
    "NVML_SUCCESS": 0,
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_UNKNOWN": 999,
}


@dataclass
class Fail:
    """A scripted NVML failure: the call raises ``NVMLError(code)``."""

    code: int


@dataclass
class FakeDevice:
    """One scripted GPU; any field may be a :class:`Fail` to make that query raise."""

    name: Any = "NVIDIA GeForce RTX 4090"
    uuid: Any = "GPU-00000000-0000-0000-0000-000000000000"
    util: Any = 0            # percent
    memory: Any = (0, 24 * 1024**3)   # (used, total) bytes
    power_mw: Any = 30_000   # milliwatts
    pids: Any = field(default_factory=list)
    handle: Any = None       # Fail(...) makes nvmlDeviceGetHandleByIndex raise


def _make_errors(module: types.ModuleType) -> None:
    """Build pynvml's exception hierarchy on ``module`` the way pynvml does."""

    class NVMLError(Exception):
        _valClassMapping: dict[int, type] = {}

        def __new__(typ, value):  # noqa: N804 - mirrors pynvml
            if typ is NVMLError:
                typ = NVMLError._valClassMapping.get(value, typ)
            obj = Exception.__new__(typ)
            obj.value = value
            return obj

        def __str__(self) -> str:
            name = next((k for k, v in NVML_CODES.items() if v == self.value), "UNKNOWN")
            return string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", " ")

        def __eq__(self, other: object) -> bool:
            return getattr(other, "value", None) == self.value

        __hash__ = Exception.__hash__

    NVMLError.__module__ = module.__name__
    module.NVMLError = NVMLError
    for const, code in NVML_CODES.items():
        setattr(module, const, code)
        if not const.startswith("NVML_ERROR_"):
            continue
        cls_name = "NVMLError_" + string.capwords(const.replace("NVML_ERROR_", ""), "_").replace("_", "")

        def gen_new(val: int):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        cls = type(cls_name, (NVMLError,), {"__new__": gen_new(code)})
        cls.__module__ = module.__name__
        setattr(module, cls_name, cls)
        NVMLError._valClassMapping[code] = cls


class FakeNvml(types.ModuleType):
    """Stand-in for the ``pynvml`` module.

    Args:
        devices: the GPUs, in index order.
        init_error: code raised by ``nvmlInit`` (e.g. 12 library not found, 9 driver not loaded).
        count_error: code raised by ``nvmlDeviceGetCount``.
        names_as_bytes: return names/UUIDs as bytes (pynvml < 11.5).
    """

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        *,
        init_error: int | None = None,
        count_error: int | None = None,
        names_as_bytes: bool = False,
    ) -> None:
        super().__init__("fake_pynvml")
        _make_errors(self)
        self.devices = list(devices or [])
        self.init_error = init_error
        self.count_error = count_error
        self.names_as_bytes = names_as_bytes
        self.init_calls = 0
        self.shutdown_calls = 0
        self.initialized = 0

    # -- library lifetime --
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.shutdown_calls += 1
        self.initialized -= 1

    def _check(self) -> None:
        if self.initialized <= 0:
            raise self.NVMLError(self.NVML_ERROR_UNINITIALIZED)

    def _value(self, value: Any) -> Any:
        if isinstance(value, Fail):
            raise self.NVMLError(value.code)
        return value

    # -- queries --
    def nvmlDeviceGetCount(self) -> int:
        self._check()
        if self.count_error is not None:
            raise self.NVMLError(self.count_error)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._check()
        if not 0 <= index < len(self.devices):
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        device = self.devices[index]
        self._value(device.handle)
        return device

    def _text(self, value: Any) -> Any:
        value = self._value(value)
        return value.encode() if self.names_as_bytes else value

    def nvmlDeviceGetName(self, handle: FakeDevice) -> Any:
        self._check()
        return self._text(handle.name)

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> Any:
        self._check()
        return self._text(handle.uuid)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        self._check()
        return types.SimpleNamespace(gpu=self._value(handle.util), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> Any:
        self._check()
        used, total = self._value(handle.memory)
        return types.SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        self._check()
        return self._value(handle.power_mw)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[Any]:
        self._check()
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self._value(handle.pids)]


def write_fake_smi(directory: Path, body: str, name: str = "nvidia-smi") -> Path:
    """Write an executable Python script named ``name`` whose body is ``body`` (dedented).

    The script receives nvidia-smi's argv in ``sys.argv``; it writes a file ``calls`` next to
    itself with the arguments of each call, so tests can check the query.
    """
    path = directory / name
    script = "#!" + sys.executable + "\n" + textwrap.dedent(
        """\
        import sys, os, time
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls"), "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\\n")
        """
    ) + textwrap.dedent(body)
    path.write_text(script)
    path.chmod(0o755)
    return path
