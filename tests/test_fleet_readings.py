"""What the adapters read for the fleet: the providers' utilization readings (None when
unreported, never 0), what an instance costs while stopped, and uptime by the provider's times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.clock import SimClock
from costctl_providers.base import BillingMode, Instance, Status
from costctl_providers.runpod.normalize import instance_from_pod
from costctl_providers.sim import SimProvider
from costctl_providers.vastai.normalize import instance_from_payload, utilization_percent
from tests.fakes.runpod import pod
from tests.fakes.vastai import instance as vast_instance

T = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


# ----------------------------------------------------------------------------- Vast.ai


@pytest.mark.parametrize("raw, percent", [
    (0, 0.0), (0.0, 0.0), (0.75, 75.0), (1, 100.0),     # the OpenAPI's fraction
    (43.5, 43.5), (100, 100.0),                          # the CLI's percentage
    ("0.5", 50.0),
])
def test_vast_gpu_util_is_read_on_the_busier_of_its_two_scales(raw, percent):
    assert utilization_percent(raw) == pytest.approx(percent)


@pytest.mark.parametrize("raw", [None, -1, -0.5, 100.5, 1e9, float("nan"), float("inf"), True, "busy", [], {}])
def test_vast_gpu_util_that_is_no_reading_is_unreported_not_idle(raw):
    assert utilization_percent(raw) is None


def test_vast_instance_carries_gpu_util_and_its_disk_price():
    inst = instance_from_payload(vast_instance(312, gpu_util=0.75, disk_hour=0.0021))
    assert inst.status is Status.RUNNING
    assert inst.gpu_utilization == pytest.approx(75.0)
    assert inst.cpu_utilization is None  # Vast's cpu_util scale is undocumented: not read
    assert inst.stopped_price_per_hour == Decimal("0.0021")


def test_vast_stopped_instance_has_no_utilization_but_its_disk_still_costs():
    inst = instance_from_payload(vast_instance(313, actual="stopped", intended="stopped", gpu_util=0,
                                               disk_hour=0.0021))
    assert inst.status is Status.STOPPED
    assert inst.gpu_utilization is None
    assert inst.stopped_price_per_hour == Decimal("0.0021")


def test_vast_without_disk_price_or_reading():
    inst = instance_from_payload(vast_instance(314))
    assert inst.gpu_utilization is None and inst.stopped_price_per_hour is None
    # storage_total_cost alone is read when the instance object is missing; a negative one is not
    assert instance_from_payload(vast_instance(315, storage_total_cost=0.004)).stopped_price_per_hour == Decimal("0.004")
    assert instance_from_payload(vast_instance(316, storage_total_cost=-1)).stopped_price_per_hour is None


# ----------------------------------------------------------------------------- RunPod


def test_runpod_reads_the_busiest_gpu_and_the_container_cpu():
    inst = instance_from_pod(pod("p1", gpus=2, gpu_util=[3, 88], cpu_percent=140), now=T)
    assert inst.gpu_utilization == 88 and inst.cpu_utilization == 140


def test_runpod_idle_only_when_every_gpu_reads_low():
    assert instance_from_pod(pod("p1", gpus=2, gpu_util=[0, 2]), now=T).gpu_utilization == 2


@pytest.mark.parametrize("utils", [None, [], [0], [0, None], [0, "x"], [0, -1], [0, 101]])
def test_runpod_a_gpu_not_read_makes_the_whole_reading_unreported(utils):
    """Two GPUs, one of them without a usable reading: no idle-looking partial figure."""
    assert instance_from_pod(pod("p1", gpus=2, gpu_util=utils), now=T).gpu_utilization is None


def test_runpod_stopped_pod_has_no_reading_and_its_volume_price():
    inst = instance_from_pod(pod("p2", desired="EXITED", volume_gb=50), now=T)
    assert inst.status is Status.STOPPED
    assert inst.gpu_utilization is None and inst.cpu_utilization is None
    # 50 GB at RunPod's published $0.20 per GB-month for a stopped pod's volume, over 730 h
    assert inst.stopped_price_per_hour == Decimal(50) * Decimal("0.20") / Decimal(730)


def test_runpod_without_volume_size_has_no_stopped_price():
    raw = pod("p3")
    del raw["volumeInGb"]
    assert instance_from_pod(raw, now=T).stopped_price_per_hour is None


# ----------------------------------------------------------------------------- sim


def test_sim_reports_utilization_only_when_told_and_only_while_running(tmp_path):
    sim = SimProvider({}, data_dir=tmp_path, clock=SimClock(T))
    assert sim.get_instance("sim-local").gpu_utilization is None
    assert sim.report_utilization("sim-local", gpu=4, cpu=30).gpu_utilization == 4
    again = SimProvider({}, data_dir=tmp_path, clock=SimClock(T))  # another process sees it too
    assert (again.get_instance("sim-local").gpu_utilization, again.get_instance("sim-local").cpu_utilization) == (4, 30)
    sim.stop_instance("sim-local")
    assert sim.get_instance("sim-local").gpu_utilization is None
    with pytest.raises(ValueError):
        sim.report_utilization("sim-local", gpu=101)
    with pytest.raises(ValueError):
        sim.report_utilization("sim-local", cpu=float("nan"))


# ----------------------------------------------------------------------------- uptime


def _inst(status: Status, started: datetime | None, stopped: datetime | None = None) -> Instance:
    return Instance("sim", "i", "RTX 4090", "RTX 4090", 1, BillingMode.ON_DEMAND, Decimal("1"), "USD", status,
                    started_at=started, stopped_at=stopped)


def test_running_seconds_by_the_providers_times():
    assert _inst(Status.RUNNING, T).running_seconds(T + timedelta(seconds=90.5)) == Decimal("90.5")
    assert _inst(Status.STOPPED, T, T + timedelta(hours=1)).running_seconds(T + timedelta(days=9)) == 3600
    assert _inst(Status.RUNNING, None).running_seconds(T) is None      # billed, start unknown
    assert _inst(Status.STOPPED, None).running_seconds(T) == 0         # never started
    assert _inst(Status.STOPPED, T).running_seconds(T) is None         # stopped, stop time unknown
    assert _inst(Status.RUNNING, T + timedelta(seconds=5)).running_seconds(T) == 0  # a start ahead of now


# ----------------------------------------------------------------------------- values refused at the boundary


def test_a_value_out_of_range_is_refused_with_a_note_and_read_as_unknown():
    """A present value the adapter drops (NaN price, utilization over 100) leaves a note; a null
    or the "not measured" marker (negative) leaves none."""
    vast = instance_from_payload(vast_instance(312, dph_total="NaN", gpu_util=250))
    assert vast.price_per_hour is None and vast.gpu_utilization is None
    assert vast.refused == ("vastai reported a dph_total of 'NaN' for instance 312; expected a finite amount of money",
                            "vastai reported a gpu_util of 250 for instance 312; expected a utilization from 0 to "
                            "100 percent (negative: not measured)")
    assert instance_from_payload(vast_instance(313, gpu_util=-1)).refused == ()
    assert instance_from_payload(vast_instance(314, dph_total=None, gpu_util=None)).refused == ()
    assert instance_from_payload(vast_instance(315, actual="stopped", gpu_util=250)).refused == ()  # not read
    runpod = instance_from_pod({**pod("p1", gpus=2, gpu_util=[3, 101], cpu_percent="inf"), "costPerHr": "abc"},
                               now=T)
    assert runpod.price_per_hour is None and runpod.gpu_utilization is None and runpod.cpu_utilization is None
    assert [note.split(" for ")[0] for note in runpod.refused] == [
        "runpod reported a costPerHr of 'abc'", "runpod reported a gpuUtilPercent of 101",
        "runpod reported a cpuPercent of 'inf'"]
    assert instance_from_pod(pod("p2", gpus=2, gpu_util=[0, -1], cpu_percent=140), now=T).refused == ()
