"""NvmlGpuSource against a fake pynvml module (and the real pynvml for API conformance)."""

from __future__ import annotations

import ctypes
from datetime import datetime, timezone

import pytest

from costctl.records import SignalStatus
from costctl.telemetry import nvml as nvml_mod
from costctl.telemetry.nvml import NVML_API, NvmlGpuSource
from costctl.telemetry.sampler import NO_GPU_MESSAGE, Sampler, detect_gpu_source
from telemetry_fakes import NVML_CODES, Fail, FakeDevice, FakeNvml

GiB = 1024**3
NOT_SUPPORTED = NVML_CODES["NVML_ERROR_NOT_SUPPORTED"]
FUNCTION_NOT_FOUND = NVML_CODES["NVML_ERROR_FUNCTION_NOT_FOUND"]
GPU_IS_LOST = NVML_CODES["NVML_ERROR_GPU_IS_LOST"]
LIBRARY_NOT_FOUND = NVML_CODES["NVML_ERROR_LIBRARY_NOT_FOUND"]
DRIVER_NOT_LOADED = NVML_CODES["NVML_ERROR_DRIVER_NOT_LOADED"]
NO_PERMISSION = NVML_CODES["NVML_ERROR_NO_PERMISSION"]
VERSION_MISMATCH = NVML_CODES["NVML_ERROR_LIB_RM_VERSION_MISMATCH"]


def two_gpus() -> list[FakeDevice]:
    return [
        FakeDevice(
            name="NVIDIA RTX A6000",
            uuid="GPU-aaaa",
            util=92,
            memory=(25073 * 1024**2, 49140 * 1024**2),
            power_mw=287_450,
            pids=[4242, 4243],
        ),
        FakeDevice(
            name="NVIDIA RTX A6000",
            uuid="GPU-bbbb",
            util=0,
            memory=(15 * 1024**2, 49140 * 1024**2),
            power_mw=21_300,
            pids=[],
        ),
    ]


# -- the fake must stay faithful to the real pynvml ------------------------------------------
def test_fake_and_real_pynvml_provide_every_name_costctl_uses():
    real = nvml_mod.load_pynvml()
    assert real is not None, "nvidia-ml-py is a runtime dependency"
    fake = FakeNvml()
    for name in NVML_API:
        assert hasattr(real, name), f"pynvml lacks {name}"
        assert hasattr(fake, name), f"the fake lacks {name}"
    for const, code in NVML_CODES.items():
        assert getattr(real, const) == code, const
    # pynvml maps NVMLError(code) to the code's subclass; the fake must do the same.
    for module in (real, fake):
        err = module.NVMLError(module.NVML_ERROR_NOT_SUPPORTED)
        assert isinstance(err, module.NVMLError_NotSupported)
        assert err.value == 3
        assert isinstance(module.NVMLError_DriverNotLoaded(), module.NVMLError)
    # Field names of the structures the source reads.
    assert "gpu" in dict(real.c_nvmlUtilization_t._fields_)
    assert {"used", "total"} <= set(dict(real.c_nvmlMemory_t._fields_))


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_probe_matches_this_machine():
    source = NvmlGpuSource.probe()
    if _nvml_loadable():  # a machine with an NVIDIA driver
        assert source is not None
        read = source.read()
        source.close()
        assert read.status is SignalStatus.OK and read.gpus
    else:
        assert source is None  # LibraryNotFound: absent, not an error


# -- reading ----------------------------------------------------------------------------------
def test_two_gpus_read_every_field_with_units():
    fake = FakeNvml(two_gpus())
    source = NvmlGpuSource.probe(fake)
    assert source is not None
    read = source.read()
    assert read.status is SignalStatus.OK and read.error is None
    g0, g1 = read.gpus
    assert (g0.index, g0.name, g0.uuid) == (0, "NVIDIA RTX A6000", "GPU-aaaa")
    assert g0.utilization == 92.0
    assert g0.memory_used_bytes == 25073 * 1024**2
    assert g0.memory_total_bytes == 49140 * 1024**2
    assert g0.power_w == pytest.approx(287.45)  # mW -> W
    assert g0.processes == (4242, 4243)
    assert g0.error is None
    assert g1.index == 1 and g1.utilization == 0.0 and g1.processes == ()
    assert g1.power_w == pytest.approx(21.3)
    assert fake.init_calls == 1  # init once: probe initialised, reads reuse it
    source.read()
    assert fake.init_calls == 1
    source.close()
    source.close()
    assert fake.shutdown_calls == 1


def test_names_as_bytes_from_old_pynvml_are_decoded():
    source = NvmlGpuSource(FakeNvml(two_gpus(), names_as_bytes=True))
    g0 = source.read().gpus[0]
    assert g0.name == "NVIDIA RTX A6000" and g0.uuid == "GPU-aaaa"


@pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION])
def test_unsupported_power_is_unknown_not_zero_and_others_still_read(code):
    devices = two_gpus()
    devices[0].power_mw = Fail(code)
    devices[0].pids = Fail(code)
    read = NvmlGpuSource(FakeNvml(devices)).read()
    g0 = read.gpus[0]
    assert g0.power_w is None and g0.processes is None
    assert g0.utilization == 92.0 and g0.memory_used_bytes == 25073 * 1024**2
    assert g0.error is None  # utilization was read: the GPU is judged on it
    assert read.status is SignalStatus.OK


def test_memory_and_name_failures_are_unknown_fields():
    devices = two_gpus()
    devices[1].memory = Fail(NOT_SUPPORTED)
    devices[1].name = Fail(FUNCTION_NOT_FOUND)
    g1 = NvmlGpuSource(FakeNvml(devices)).read().gpus[1]
    assert g1.memory_used_bytes is None and g1.memory_total_bytes is None
    assert g1.name is None and g1.uuid == "GPU-bbbb"
    assert g1.utilization == 0.0


def test_utilization_error_on_one_gpu_marks_that_reading_busy_only():
    devices = two_gpus()
    devices[1].util = Fail(GPU_IS_LOST)
    read = NvmlGpuSource(FakeNvml(devices)).read()
    assert read.status is SignalStatus.OK
    g0, g1 = read.gpus
    assert g0.utilization == 92.0 and g0.error is None
    assert g1.utilization is None
    assert g1.error is not None and "GpuIsLost" in g1.error
    assert g1.memory_used_bytes == 15 * 1024**2  # other fields still read


def test_lost_handle_gives_an_error_reading_for_that_index():
    devices = two_gpus()
    devices[0].handle = Fail(GPU_IS_LOST)
    g0, g1 = NvmlGpuSource(FakeNvml(devices)).read().gpus
    assert g0.index == 0 and g0.utilization is None and "GetHandleByIndex" in (g0.error or "")
    assert g1.utilization == 0.0


def test_device_count_failure_makes_the_whole_read_error():
    fake = FakeNvml(two_gpus())
    source = NvmlGpuSource.probe(fake)
    assert source is not None
    fake.count_error = NVML_CODES["NVML_ERROR_UNKNOWN"]
    read = source.read()
    assert read.status is SignalStatus.ERROR and read.gpus == ()
    assert "nvmlDeviceGetCount" in (read.error or "")


# -- absent versus error ----------------------------------------------------------------------
@pytest.mark.parametrize("code", [LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED])
def test_no_driver_is_absent(code):
    lines: list[str] = []
    assert NvmlGpuSource.probe(FakeNvml(two_gpus(), init_error=code), log=lines.append) is None
    assert len(lines) == 1


def test_zero_devices_is_absent_and_shuts_nvml_down():
    fake = FakeNvml([])
    assert NvmlGpuSource.probe(fake) is None
    assert fake.init_calls == 1 and fake.shutdown_calls == 1


@pytest.mark.parametrize("code", [NO_PERMISSION, VERSION_MISMATCH, NVML_CODES["NVML_ERROR_UNKNOWN"]])
def test_a_driver_that_fails_to_initialise_is_an_error_source(code):
    fake = FakeNvml(two_gpus(), init_error=code)
    source = NvmlGpuSource.probe(fake)
    assert source is not None
    read = source.read()
    assert read.status is SignalStatus.ERROR and read.gpus == ()
    assert "nvmlInit" in (read.error or "")
    # The driver recovers: the next read initialises and reads.
    fake.init_error = None
    read = source.read()
    assert read.status is SignalStatus.OK and len(read.gpus) == 2
    assert fake.init_calls == 3


def test_count_failure_during_probe_is_an_error_source():
    fake = FakeNvml(two_gpus(), count_error=GPU_IS_LOST)
    source = NvmlGpuSource.probe(fake)
    assert source is not None
    assert source.read().status is SignalStatus.ERROR


# -- detection and the sampler ----------------------------------------------------------------
def test_detect_prefers_nvml(tmp_path):
    lines: list[str] = []
    source = detect_gpu_source(
        log=lines.append, nvml_module=FakeNvml(two_gpus()), smi_binary=str(tmp_path / "none")
    )
    assert isinstance(source, NvmlGpuSource)
    assert lines == []


def test_no_nvml_and_no_nvidia_smi_says_so_once(tmp_path):
    lines: list[str] = []
    source = detect_gpu_source(
        log=lines.append,
        nvml_module=FakeNvml(init_error=LIBRARY_NOT_FOUND),
        smi_binary=str(tmp_path / "nvidia-smi-missing"),
    )
    assert source is None
    assert lines == [
        "no NVIDIA GPU found: using the CPU utilization of the watched process tree "
        "in place of GPU utilization"
    ]
    assert lines[0] == NO_GPU_MESSAGE.format(stand_in="the watched process tree")


def test_sampler_with_nvml_marks_one_gpu_error_in_reasons():
    devices = two_gpus()
    devices[1].util = Fail(NOT_SUPPORTED)
    sampler = Sampler(NvmlGpuSource(FakeNvml(devices)), None, count_ssh=False)
    sample = sampler.sample(datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc))
    assert sample.gpu_status is SignalStatus.OK and sample.source == "nvml"
    assert [g.utilization for g in sample.gpus] == [92.0, None]
    assert sample.cpu_status is SignalStatus.ABSENT and sample.ssh_status is SignalStatus.ABSENT
    assert any(r.startswith("gpu1: ") and "NotSupported" in r for r in sample.reasons)
    sampler.close()


def test_only_the_nvml_module_imports_pynvml():
    import re
    from pathlib import Path

    import costctl

    root = Path(costctl.__file__).resolve().parent
    pattern = re.compile(r"^\s*(import\s+pynvml|from\s+pynvml\s+import)|import_module\(\s*['\"]pynvml",
                         re.MULTILINE)
    offenders = [
        str(path.relative_to(root.parent))
        for path in root.rglob("*.py")
        if path != root / "telemetry" / "nvml.py" and pattern.search(path.read_text("utf-8"))
    ]
    assert offenders == []
    assert pattern.search((root / "telemetry" / "nvml.py").read_text("utf-8"))


def test_without_a_driver_pynvml_is_not_even_imported(monkeypatch):
    """No /dev/nvidiactl, /proc/driver/nvidia nor /dev/dxg: absent at once, without the ~80 ms
    import of pynvml; with one of them (a GPU machine, a container given its GPUs, WSL2), NVML
    is probed as before."""
    lines: list[str] = []
    monkeypatch.setattr(nvml_mod, "DRIVER_PATHS", ("/nonexistent/nvidiactl",))
    monkeypatch.setattr(nvml_mod, "load_pynvml", lambda: (_ for _ in ()).throw(AssertionError("imported")))
    assert NvmlGpuSource.probe(log=lines.append) is None
    assert len(lines) == 1 and "no NVIDIA driver" in lines[0]
    assert nvml_mod.driver_present(("/nonexistent/x", "/proc")) is True
    assert nvml_mod.driver_present(("/nonexistent/x",)) is False
    # an injected module (tests, a fake) is used whatever the machine has
    assert NvmlGpuSource.probe(FakeNvml(two_gpus())) is not None
