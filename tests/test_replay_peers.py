"""The peers' rules and the oracle on tiny hand-made traces: exact stop times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from costctl.config import PlateauConfig
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample
from costctl.replay.oracle import oracle_stop, plateau_onset
from costctl.replay.peers import (
    DSTACK_DOCUMENTED_EXAMPLE,
    DSTACK_MINIMUM_WINDOW,
    DSTACK_SETTINGS,
    dstack_utilization_policy,
    skypilot_autostop,
    skypilot_describe,
)
from costctl.replay.stretches import machine_stretches

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sample(minute: float, *utils: float | None, ssh: int | None = None, cpu: float | None = None) -> TelemetrySample:
    return TelemetrySample(
        time=at(minute), gpus=tuple(GpuReading(index=i, utilization=u) for i, u in enumerate(utils)),
        gpu_status=SignalStatus.OK,
        cpu_percent=cpu, cpu_status=SignalStatus.OK if cpu is not None else SignalStatus.ABSENT,
        ssh_sessions=ssh, ssh_status=SignalStatus.OK if ssh is not None else SignalStatus.ABSENT,
    )


# -- SkyPilot autostop -i 5 ----------------------------------------------------------------------
def test_skypilot_stops_five_minutes_after_the_job_exits() -> None:
    samples = [sample(m, 0) for m in range(0, 20)]
    r = skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=5, job_span=(at(0), at(3.5)),
                          job_recorded=True)
    assert r.stop_time == at(9)  # the timer starts at the exit (3.5 min), first sample at >= 8.5 min
    assert r.assumption is None and r.variant == "default"


def test_skypilot_an_open_ssh_session_keeps_it_up() -> None:
    ssh = [1] * 10 + [0] * 10
    samples = [sample(m, 0, ssh=ssh[m]) for m in range(20)]
    r = skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=5, job_span=None, job_recorded=True)
    assert r.stop_time == at(14)  # last session seen at minute 9
    assert skypilot_autostop([sample(m, 0, ssh=1) for m in range(20)], min_gpu_utilization=5,
                             job_recorded=True).stop_time is None


def test_skypilot_no_job_recorded_ignores_the_gpu() -> None:
    samples = [sample(m, 100) for m in range(7)]  # the GPU is busy but no SkyPilot job runs
    r = skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=5, job_recorded=True)
    assert r.stop_time == at(5)


def test_skypilot_a_job_that_never_exits_is_never_idle() -> None:
    samples = [sample(m, 0) for m in range(30)]
    assert skypilot_autostop(samples, min_gpu_utilization=5, job_span=(at(0), None), job_recorded=True).stop_time is None


def test_skypilot_settings_are_said() -> None:
    assert skypilot_describe() == ("SkyPilot autostop (sky autostop -i 5: no running job and no SSH session "
                                   "for 5 min, SkyPilot's default)")
    assert "default" not in skypilot_describe(10) and "-i 10" in skypilot_describe(10)


# -- dstack utilization_policy ---------------------------------------------------------------------
def test_dstack_documented_example_and_minimum_window() -> None:
    assert DSTACK_SETTINGS == (DSTACK_DOCUMENTED_EXAMPLE, DSTACK_MINIMUM_WINDOW)
    assert (DSTACK_DOCUMENTED_EXAMPLE.min_gpu_utilization, DSTACK_DOCUMENTED_EXAMPLE.time_window) == (10, timedelta(hours=1))
    assert DSTACK_MINIMUM_WINDOW.time_window == timedelta(minutes=5)
    assert DSTACK_DOCUMENTED_EXAMPLE.describe() == (
        "dstack utilization_policy (min_gpu_utilization=10, time_window=1h, dstack's documented example)")
    assert DSTACK_MINIMUM_WINDOW.describe().startswith(
        "dstack utilization_policy (min_gpu_utilization=10, time_window=5m, dstack's 5-minute minimum window")


def test_dstack_any_gpu_below_the_threshold_for_the_whole_window() -> None:
    # GPU 0 trains at 90 %; GPU 1 reads 9 % (below 10) from minute 0; samples every minute.
    samples = [sample(m, 90, 9) for m in range(12)]
    s = DSTACK_MINIMUM_WINDOW
    r = dstack_utilization_policy(samples, min_gpu_utilization=s.min_gpu_utilization, time_window=s.time_window, setting=s)
    # the first evaluation whose window (now-5m, now] is covered (oldest sample <= 1 min after its start)
    assert r.stop_time == at(4) and r.gpu == 1 and r.variant == "minimum-window"
    assert r.settings == s.describe()


def test_dstack_one_sample_at_the_threshold_resets_the_window() -> None:
    utils = [0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0]  # 10 is not below 10
    samples = [sample(m, u) for m, u in enumerate(utils)]
    r = dstack_utilization_policy(samples, min_gpu_utilization=10, time_window=timedelta(minutes=5))
    assert r.stop_time == at(8)  # window (3, 8]: samples 4..8 all 0, the oldest 1 min after its start


def test_dstack_example_never_decides_on_a_log_shorter_than_its_window() -> None:
    samples = [sample(m, 0, 0) for m in range(50)]
    s = DSTACK_DOCUMENTED_EXAMPLE
    r = dstack_utilization_policy(samples, min_gpu_utilization=10, time_window=s.time_window, setting=s)
    assert r.stop_time is None and r.settings == s.describe()


# -- the oracle ------------------------------------------------------------------------------------
def test_oracle_stops_at_the_first_sample_of_the_final_idle_stretch() -> None:
    utils = [80, 80, 0, 0, 80, 80, 0, 0, 0, 0]
    samples = [sample(m, u) for m, u in enumerate(utils)]
    stretches = machine_stretches(samples, min_gpu_utilization=5, min_cpu_utilization=10,
                                  sample_interval=timedelta(minutes=1))
    r = oracle_stop(stretches)
    assert r.time == at(6) and r.reason == "final idle stretch"  # never in the pause at minutes 2-3


def test_oracle_plateau_onset_is_the_last_improvement() -> None:
    values = [3.0, 2.0, 1.0] + [1.5] * 4
    points = [ProgressPoint(time=at(k), value=v, step=k) for k, v in enumerate(values)]
    cfg = PlateauConfig(patience=2)
    onset = plateau_onset(points, cfg)
    assert onset is not None and onset.time == at(2)
    samples = [sample(m, 90) for m in range(8)]
    stretches = machine_stretches(samples, min_gpu_utilization=5, min_cpu_utilization=10,
                                  sample_interval=timedelta(minutes=1))
    r = oracle_stop(stretches, timed_progress=points, plateau=cfg)
    assert r.time == at(2) and r.reason == "plateau onset"
    assert plateau_onset(points[:5], cfg) is None  # only 2 points after it: the rule has not fired
