"""Sampler: combining sources, ABSENT rules, and no exception losing a sample."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from costctl.records import SignalStatus
from costctl.telemetry.cpu import ProcessTreeCpu
from costctl.telemetry.nvml import NvmlGpuSource
from costctl.telemetry.sampler import Sampler, detect_gpu_source
from telemetry_fakes import FakeDevice, FakeNvml

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


@pytest.fixture
def busy_child():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


def test_no_source_at_all_is_all_absent():
    sample = Sampler(None, None, count_ssh=False).sample(T0)
    assert sample.time == T0
    assert (sample.gpu_status, sample.cpu_status, sample.ssh_status) == (SignalStatus.ABSENT,) * 3
    assert sample.gpus == () and sample.cpu_percent is None and sample.ssh_sessions is None
    assert sample.source == "" and sample.reasons == ()


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_cpu_stands_in_when_there_is_no_gpu(busy_child):
    sampler = Sampler(None, ProcessTreeCpu(busy_child.pid), count_ssh=False)
    first = sampler.sample(T0)
    assert first.gpu_status is SignalStatus.ABSENT and first.source == "cpu"
    assert first.cpu_status is SignalStatus.OK and first.cpu_percent is not None  # since creation
    assert first.reasons == ()
    time.sleep(0.4)
    second = sampler.sample(T0 + timedelta(seconds=1))
    assert second.cpu_status is SignalStatus.OK and second.cpu_percent > 25.0
    assert second.reasons == ()


def test_naive_time_is_taken_as_utc():
    sample = Sampler(None, None).sample(datetime(2026, 1, 1, 3, 0))
    assert sample.time == T0 and sample.time.tzinfo is not None


def test_ssh_is_counted_only_when_asked():
    assert Sampler(None, None, count_ssh=False).sample(T0).ssh_status is SignalStatus.ABSENT
    sample = Sampler(None, None, count_ssh=True).sample(T0)
    assert sample.ssh_status is SignalStatus.OK and isinstance(sample.ssh_sessions, int)


class ExplodingCpu:
    name = "cpu"

    def read(self):
        raise RuntimeError("psutil exploded")


def test_an_exception_in_one_source_makes_it_error_and_the_others_still_read(busy_child):
    # A pynvml that raises something other than NVMLError (here: a malformed memory struct).
    fake = FakeNvml([FakeDevice(util=50, memory=None)])

    def broken_counter():
        raise PermissionError("/var/run/utmp: permission denied")

    sampler = Sampler(NvmlGpuSource(fake), ProcessTreeCpu(busy_child.pid), True,
                      ssh_counter=broken_counter)
    sample = sampler.sample(T0)
    assert sample.gpu_status is SignalStatus.ERROR and sample.gpus == ()
    assert sample.cpu_status is SignalStatus.OK  # still read
    assert sample.ssh_status is SignalStatus.ERROR and sample.ssh_sessions is None
    assert sample.reasons[0].startswith("gpu: nvml read raised TypeError")
    assert any(r == "ssh: count raised PermissionError: /var/run/utmp: permission denied"
               for r in sample.reasons)

    sample = Sampler(NvmlGpuSource(FakeNvml([FakeDevice(util=3)])), ExplodingCpu()).sample(T0)
    assert sample.gpu_status is SignalStatus.OK and sample.gpus[0].utilization == 3.0
    assert sample.cpu_status is SignalStatus.ERROR and sample.cpu_percent is None
    assert sample.reasons == ("cpu: read raised RuntimeError: psutil exploded",)


def test_gpu_error_read_carries_its_reason():
    fake = FakeNvml([FakeDevice()], init_error=4)  # insufficient permissions: present, failing
    source = detect_gpu_source(log=lambda line: pytest.fail(line), nvml_module=fake)
    sampler = Sampler(source, None)
    sample = sampler.sample(T0)
    assert sample.gpu_status is SignalStatus.ERROR and sample.source == "nvml"
    assert sample.reasons == ("gpu: nvmlInit failed: NVMLError_NoPermission: No Permission",)
    sampler.close()


def test_close_shuts_nvml_down_once():
    fake = FakeNvml([FakeDevice()])
    sampler = Sampler(NvmlGpuSource.probe(fake), None)
    sampler.sample(T0)
    sampler.close()
    sampler.close()
    assert fake.shutdown_calls == 1
