"""NvidiaSmiGpuSource against fake nvidia-smi scripts (real subprocesses, real deadlines)."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

import psutil
import pytest

from costctl.records import SignalStatus
from costctl.telemetry.nvidia_smi import NvidiaSmiGpuSource
from costctl.telemetry.sampler import Sampler, detect_gpu_source
from telemetry_fakes import FakeNvml, write_fake_smi

MiB = 1024**2

# What `nvidia-smi --query-gpu=index,name,uuid,utilization.gpu,memory.used,memory.total,power.draw
# --format=csv,noheader,nounits` prints on a 2-GPU machine, one GPU with an unsupported power read.
TWO_GPUS = (
    "0, NVIDIA A100-SXM4-80GB, GPU-5f0f2b3c-8e3a-1d2b-9a4e-6f7a8b9c0d1e, 97, 71234, 81920, 312.45\n"
    "1, NVIDIA A100-SXM4-80GB, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 0, 4, 81920, [N/A]\n"
)


def smi(tmp_path, body: str):
    return write_fake_smi(tmp_path, body)


def test_reads_two_gpus_and_sends_the_documented_query(tmp_path):
    path = smi(tmp_path, f"sys.stdout.write({TWO_GPUS!r})\n")
    source = NvidiaSmiGpuSource(path)
    read = source.read()
    assert read.status is SignalStatus.OK, read.error
    g0, g1 = read.gpus
    assert g0.index == 0 and g0.name == "NVIDIA A100-SXM4-80GB"
    assert g0.uuid == "GPU-5f0f2b3c-8e3a-1d2b-9a4e-6f7a8b9c0d1e"
    assert g0.utilization == 97.0
    assert g0.memory_used_bytes == 71234 * MiB and g0.memory_total_bytes == 81920 * MiB
    assert g0.power_w == pytest.approx(312.45)
    assert g1.utilization == 0.0 and g1.power_w is None  # [N/A] is unknown, never 0
    assert g0.processes is None  # nvidia-smi --query-gpu does not list processes
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        "--query-gpu=index,name,uuid,utilization.gpu,memory.used,memory.total,power.draw "
        "--format=csv,noheader,nounits"
    ]


def test_not_supported_utilization_marks_that_gpu_busy(tmp_path):
    out = "0, Tesla K80, GPU-1, [Not Supported], 10, 11441, [Not Supported]\n"
    read = NvidiaSmiGpuSource(smi(tmp_path, f"sys.stdout.write({out!r})\n")).read()
    assert read.status is SignalStatus.OK
    (g0,) = read.gpus
    assert g0.utilization is None and g0.error == "utilization.gpu reads [Not Supported]"


@pytest.mark.realtime  # a deadline in real seconds
def test_a_hang_is_cut_at_the_deadline_and_killed(tmp_path):
    path = smi(
        tmp_path,
        """\
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pids"), "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(60)
        """,
    )
    source = NvidiaSmiGpuSource(path, timeout=1.0)
    start = time.monotonic()
    read = source.read()
    elapsed = time.monotonic() - start
    assert read.status is SignalStatus.ERROR
    assert "did not answer within 1 s" in (read.error or "")
    assert elapsed < 3.0
    # The hung command and the process it started (same process group) are gone.
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.02)
    assert not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_driver_failure_exit_status_is_an_error_read(tmp_path):
    path = smi(
        tmp_path,
        """\
        print("Unable to determine the device handle for GPU0000:01:00.0: Unknown Error")
        sys.exit(255)
        """,
    )
    read = NvidiaSmiGpuSource(path).read()
    assert read.status is SignalStatus.ERROR and read.gpus == ()
    assert read.error == (
        "nvidia-smi failed (exit status 255): "
        "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error"
    )


def test_unexpected_output_is_an_error_read_not_a_zero(tmp_path):
    path = smi(tmp_path, 'print("Failed to initialize NVML: Driver/library version mismatch")\n')
    read = NvidiaSmiGpuSource(path).read()
    assert read.status is SignalStatus.ERROR
    assert "unexpected nvidia-smi output" in (read.error or "")


# -- probe: absent versus error ---------------------------------------------------------------
def test_probe_absent_when_not_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert NvidiaSmiGpuSource.probe() is None
    assert NvidiaSmiGpuSource.probe(tmp_path / "missing") is None


def test_probe_finds_nvidia_smi_on_path(tmp_path, monkeypatch):
    smi(tmp_path, f"sys.stdout.write({TWO_GPUS!r})\n")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    source = NvidiaSmiGpuSource.probe()
    assert source is not None and source.binary == str(tmp_path / "nvidia-smi")
    assert len(source.read().gpus) == 2


@pytest.mark.parametrize(
    "status, message",
    [
        (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running."),
        (6, "No devices were found"),
        (12, "NVML Shared Library Not Found"),
    ],
)
def test_probe_absent_when_no_driver_or_device(tmp_path, status, message):
    path = smi(tmp_path, f"print({message!r}); sys.exit({status})\n")
    lines: list[str] = []
    assert NvidiaSmiGpuSource.probe(path, log=lines.append) is None
    assert lines and message[:20] in lines[0]


def test_probe_keeps_a_failing_nvidia_smi_as_an_error_source(tmp_path):
    path = smi(tmp_path, 'print("GPU is lost"); sys.exit(15)\n')
    source = NvidiaSmiGpuSource.probe(path)
    assert source is not None
    assert source.read().status is SignalStatus.ERROR


def test_detect_falls_back_to_nvidia_smi_when_nvml_is_absent(tmp_path):
    path = smi(tmp_path, f"sys.stdout.write({TWO_GPUS!r})\n")
    lines: list[str] = []
    source = detect_gpu_source(
        log=lines.append,
        nvml_module=FakeNvml(init_error=12),  # NVML library not found
        smi_binary=path,
    )
    assert isinstance(source, NvidiaSmiGpuSource)
    assert lines == []
    sample = Sampler(source, None).sample(datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert sample.source == "nvidia-smi" and sample.gpu_status is SignalStatus.OK
    assert [g.utilization for g in sample.gpus] == [97.0, 0.0]
