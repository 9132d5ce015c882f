"""The replay: the live policy engine driven over recorded timelines on a simulated clock, the
idle stretches, the oracle and the peers' rules."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.config import Settings, load_settings
from costctl.errors import UsageError
from costctl.money import Money, cost_of
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample
from costctl.replay.analysis import AnalyzeOptions, analyze
from costctl.replay.engine import replay_loss, replay_timeline
from costctl.replay.gpu_log import GpuLog
from costctl.replay.peers import dstack_utilization_policy, skypilot_autostop
from costctl.replay.readers import read_gpu_log, read_train_log
from costctl.replay.timeline import place_progress
from costctl.replay.train_log import TrainLog

from replay_support import corpus_file

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
CNY = Money(Decimal("2.5"), "CNY")
CENT = Decimal("0.01")


def _settings(**idle: object) -> Settings:
    return load_settings(None, {"policies": {"idle": idle}} if idle else None)


def _sample(t: float, *utils: float | None, cpu: float | None = None) -> TelemetrySample:
    return TelemetrySample(
        time=T0 + timedelta(seconds=t),
        gpus=tuple(GpuReading(index=i, utilization=u) for i, u in enumerate(utils)),
        gpu_status=SignalStatus.OK if utils else SignalStatus.ABSENT,
        cpu_percent=cpu, cpu_status=SignalStatus.OK if cpu is not None else SignalStatus.ABSENT,
        source="test",
    )


def _log(samples: list[TelemetrySample]) -> GpuLog:
    return GpuLog("nvidia-smi-csv", samples)


# -- the forgotten instance ---------------------------------------------------------------------
def test_forgotten_instance_final_stretch_stop_and_saving() -> None:
    log = read_gpu_log(corpus_file("gpu_query_forgotten_idle.csv"))
    a = analyze(load_settings(None), gpu_log=log, rate=CNY)
    end = log.samples[-1].time
    final = a.stretches[-1]
    assert final.stretch.final
    assert final.stretch.start == datetime(2026, 2, 2, 2, 33, 37, 502000, tzinfo=timezone.utc)  # 02:33:37.5
    assert final.stretch.end == end
    stops = [d for d in a.decisions if d.decision.action == "stop"]
    assert [d.decision.policy for d in stops] == ["idle"]
    stop = stops[0]
    into = stop.decision.time - final.stretch.start
    assert timedelta(minutes=30) <= into <= timedelta(minutes=30, seconds=15)  # ~30 min into it
    assert final.stopped_at == stop.decision.time
    expected = cost_of(Decimal("2.5"), end - stop.decision.time)
    assert stop.saving == Money(expected, "CNY")
    assert stop.saving.rounded(2) == expected.quantize(CENT) == Decimal("12.23")
    assert not stop.work_after and not stop.after_stop
    # the 26-minute pause mid-run: reported, not stopped
    pause = a.stretches[0]
    assert not pause.stretch.final and pause.stopped_at is None
    assert pause.stretch.start == datetime(2026, 2, 2, 1, 39, 22, 203000, tzinfo=timezone.utc)
    assert round(pause.stretch.duration.total_seconds() / 60) == 27  # 26.5 min of idle samples, to the next busy one
    assert not any(pause.stretch.start <= d.decision.time <= pause.stretch.end for d in a.decisions)
    # the oracle stops at the first sample of the final stretch
    assert a.oracle.time == final.stretch.start and a.oracle.reason == "final idle stretch"
    assert a.oracle_saving == Money(cost_of(Decimal("2.5"), end - final.stretch.start), "CNY")
    assert a.oracle_saving.amount > stop.saving.amount
    assert a.signals_used == ["gpu utilization (1 GPU)"]
    assert "cpu (not recorded)" in a.signals_absent


def test_forgotten_instance_a_shorter_window_stops_inside_the_pause_and_says_so() -> None:
    log = read_gpu_log(corpus_file("gpu_query_forgotten_idle.csv"))
    a = analyze(_settings(time_window="20m"), gpu_log=log, rate=CNY)
    first, second = [d for d in a.decisions if d.decision.action == "stop"]
    assert first.work_after and first.saving is not None  # it would have cut the run short
    assert second.after_stop and second.saving is None  # the instance was already stopped
    assert a.oracle.time == a.stretches[-1].stretch.start  # the oracle never stops in that pause


# -- two GPUs: costctl's ALL rule against dstack's ANY rule ------------------------------------
def test_two_gpus_idle_gpu_reported_machine_busy_dstack_terminates() -> None:
    log = read_gpu_log(corpus_file("gpu_query_2gpu_a6000.csv"))
    a = analyze(_settings(time_window="5m"), gpu_log=log, rate=CNY, options=AnalyzeOptions(compare=True))
    gpu1 = a.gpu_idle_stretches[1]
    assert len(gpu1) == 1 and gpu1[0].stretch.final
    assert gpu1[0].stretch.start == log.samples[0].time and gpu1[0].stretch.end == log.samples[-1].time
    assert a.gpu_idle_stretches[0] == []
    assert a.stretches == [] and a.idle_total == timedelta(0)  # machine busy under costctl's rule
    assert not [d for d in a.decisions if d.decision.policy == "idle"]
    # dstack is replayed with its own settings, not costctl's: the documented example (10 %, 1h)
    # cannot decide on an 8-minute log; its 5-minute minimum window terminates on GPU 1
    example, minimum = [p for p in a.peers if p.result.name == "dstack-utilization-policy"]
    assert example.result.variant == "documented-example" and example.result.stop_time is None
    dstack = minimum
    assert dstack.result.variant == "minimum-window"
    assert dstack.result.stop_time is not None and dstack.result.gpu == 1
    assert dstack.work_after  # GPU 0 was still training
    sky = next(p for p in a.peers if p.result.name == "skypilot-autostop")
    assert sky.result.stop_time is None and "any GPU" in sky.result.assumption


# -- signals -----------------------------------------------------------------------------------
def test_only_recorded_signals_decide() -> None:
    samples = [_sample(t, 0) for t in range(0, 3601, 60)]
    run = replay_timeline(_settings(time_window="30m"), samples)
    # the idle stop at 30 min; the idle-fraction advice once its hour is covered
    assert [d.policy for d in run.decisions] == ["idle", "idle_fraction"]
    assert [d.evidence["signals"] for d in run.decisions] == [["gpu"], ["gpu"]]
    assert [d.time for d in run.decisions] == [T0 + timedelta(minutes=30), T0 + timedelta(hours=1)]


def test_unreadable_gpu_never_idle() -> None:
    samples = [_sample(t, None) for t in range(0, 3601, 60)]
    assert replay_timeline(_settings(time_window="30m"), samples).decisions == []


def test_no_signal_at_all_never_idle() -> None:
    samples = [_sample(t) for t in range(0, 3601, 60)]  # no GPU, no CPU recorded
    assert replay_timeline(_settings(time_window="30m"), samples).decisions == []


def test_recorded_cpu_takes_part() -> None:
    samples = [_sample(t, 0, cpu=150.0) for t in range(0, 3601, 60)]  # CPU-bound job, GPU idle
    assert replay_timeline(_settings(time_window="30m"), samples).decisions == []


def test_progress_on_the_time_axis_is_work() -> None:
    samples = [_sample(t, 0) for t in range(0, 7201, 60)]
    progress = [ProgressPoint(time=T0 + timedelta(seconds=t), value=1.0 / (1 + t), step=t)
                for t in range(0, 3001, 120)]
    run = replay_timeline(_settings(time_window="30m"), samples, progress)
    idle = [d for d in run.decisions if d.policy == "idle"]
    assert len(idle) == 1
    # the first sample whose 30-minute window holds no progress (the last point was at 50:00)
    assert idle[0].time == T0 + timedelta(seconds=3000 + 1800 + 60)
    assert "progress" in idle[0].evidence["signals"]


def test_equal_times_are_spread_for_the_history() -> None:
    samples = [_sample(0, 0), _sample(0, 0), _sample(60, 0)]
    run = replay_timeline(_settings(time_window="30m"), samples)  # must not raise
    assert run.evaluations == 3


# -- budget in a replay ------------------------------------------------------------------------
def test_budget_cap_fires_when_the_recorded_spend_reaches_it() -> None:
    settings = load_settings(None, {"instance": {"currency": "CNY"}, "policies": {"budget": {"total": "1"}}})
    samples = [_sample(t, 99) for t in range(0, 3601, 60)]
    run = replay_timeline(settings, samples, rate=CNY)
    act = [d for d in run.decisions if d.policy == "budget" and d.evidence["level"] == "act"]
    assert act and act[0].time == T0 + timedelta(minutes=24)  # 1 CNY at 2.5 CNY/h


# -- the oracle --------------------------------------------------------------------------------
def _plateau_run() -> tuple[list[TelemetrySample], list[ProgressPoint]]:
    samples = [_sample(t, 95 if t <= 3600 else 0) for t in range(0, 7201, 60)]
    values = [2.0 - 0.05 * k for k in range(20)] + [1.05] * 40  # improves for 20 points, then flat
    progress = [ProgressPoint(time=T0 + timedelta(seconds=60 * k), value=v, step=k) for k, v in enumerate(values)]
    return samples, progress


def test_oracle_stops_at_the_plateau_onset_when_a_plateau_policy_is_configured() -> None:
    samples, progress = _plateau_run()
    settings = load_settings(None, {"policies": {"plateau": {"patience": 5}}})
    a = analyze(settings, gpu_log=_log(samples), progress=progress, placement="start+rate", rate=CNY)
    assert a.oracle.reason == "plateau onset"
    assert a.oracle.time == T0 + timedelta(minutes=19)  # the last improving point
    assert a.oracle.idle_start == T0 + timedelta(seconds=3660)
    plateau = [d for d in a.decisions if d.decision.policy == "plateau"]
    assert plateau and plateau[0].decision.action == "advise" and plateau[0].saving_if_followed is not None


def test_oracle_without_a_configured_plateau_uses_the_final_idle_stretch() -> None:
    samples, progress = _plateau_run()
    a = analyze(load_settings(None), gpu_log=_log(samples), progress=progress, rate=CNY)
    assert a.oracle.reason == "final idle stretch"
    assert a.oracle.time == T0 + timedelta(seconds=3660)


def test_oracle_never_stops_in_a_pause_that_work_follows() -> None:
    utils = [90] * 10 + [0] * 60 + [90] * 10  # one hour of pause, then work to the end
    samples = [_sample(60 * k, u) for k, u in enumerate(utils)]
    a = analyze(_settings(time_window="30m"), gpu_log=_log(samples), rate=CNY)
    assert a.oracle.time is None and a.oracle_saving is None
    stop = a.first_stop
    assert stop is not None and stop.work_after  # costctl's stop would have cut the run


# -- peers --------------------------------------------------------------------------------------
def test_dstack_needs_a_covered_window() -> None:
    samples = [_sample(60 * k, 0) for k in range(4)]  # 3 minutes of log, 5-minute window
    r = dstack_utilization_policy(samples, min_gpu_utilization=5, time_window=timedelta(minutes=5))
    assert r.stop_time is None
    samples = [_sample(60 * k, 0) for k in range(6)]
    r = dstack_utilization_policy(samples, min_gpu_utilization=5, time_window=timedelta(minutes=5))
    assert r.stop_time == T0 + timedelta(minutes=4)  # oldest sample within 1 min of the window start


def test_dstack_any_gpu_and_unknown_values() -> None:
    samples = [_sample(60 * k, 80, 0) for k in range(12)]
    r = dstack_utilization_policy(samples, min_gpu_utilization=5, time_window=timedelta(minutes=5))
    assert r.gpu == 1 and r.stop_time is not None
    samples = [_sample(60 * k, 80, None) for k in range(12)]
    r = dstack_utilization_policy(samples, min_gpu_utilization=5, time_window=timedelta(minutes=5))
    assert r.stop_time is None  # no reading is no evidence of idleness


def test_skypilot_idle_timer_restarts_on_work() -> None:
    utils = [50, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0]
    samples = [_sample(60 * k, u) for k, u in enumerate(utils)]
    r = skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=5)
    assert r.stop_time == T0 + timedelta(minutes=9)
    span = (T0, T0 + timedelta(minutes=2))
    r = skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=5, job_span=span)
    assert r.stop_time == T0 + timedelta(minutes=7) and "progress" in r.assumption


# -- placing steps in time; the loss on its own axis --------------------------------------------
def test_place_progress_by_start_and_rate() -> None:
    log = TrainLog("console", [ProgressPoint(None, 2.0, step=100), ProgressPoint(None, 1.0, step=300)], [])
    points, how = place_progress(log, start=T0, step_rate=2.0)
    assert how == "start+rate" and [p.time for p in points] == [T0, T0 + timedelta(seconds=100)]
    assert place_progress(log) == (log.points, None)
    with pytest.raises(UsageError, match="go together"):
        place_progress(log, start=T0)
    with pytest.raises(UsageError, match="positive"):
        place_progress(log, start=T0, step_rate=0)


def test_place_progress_by_file_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"loss": 2.0, "global_step": 1, "_timestamp": 1767225600}\n'
                    '{"loss": 1.5, "global_step": 2, "_timestamp": 1767225660}\n')
    log = read_train_log(path)
    points, how = place_progress(log)
    assert how == "file timestamps"
    assert [p.time for p in points] == [T0, T0 + timedelta(minutes=1)]


def test_loss_policies_on_their_own_axis() -> None:
    log = read_train_log(corpus_file("nanogpt_nan_termux.log"))
    run = replay_loss(load_settings(None), log.points)
    div = [d for d in run.decisions if d.policy == "divergence"]
    assert [(d.evidence["kind"], d.evidence["step"]) for d in div] == [("train", 425)]
    t5 = read_train_log(corpus_file("hf_trainer_state_t5_plateau.json"))
    run = replay_loss(load_settings(None), t5.points)
    plateau = [d for d in run.decisions if d.policy == "plateau"]
    assert plateau and all(d.evidence["step"] is not None for d in plateau)


def test_train_log_alone_reports_no_time_axis() -> None:
    log = read_train_log(corpus_file("nanogpt_nan_termux.log"))
    a = analyze(load_settings(None), train_log=log, rate=CNY)
    assert a.start is None and a.oracle.time is None and "no time axis" in a.oracle.reason
    assert [d.at for d in a.decisions if d.decision.policy == "divergence"] == ["step 425"]
    assert all(not d.on_time_axis and d.saving is None for d in a.decisions)


def test_same_job_gpu_table_and_console_log_on_one_axis() -> None:
    """The SLURM job's dashboard log and its HF console log: 3 epochs in ~188 s from 19:01."""
    gpu = read_gpu_log(corpus_file("gpu_nvsmi_table_slurm_l40s.log"))
    train = read_train_log(corpus_file("hf_stdout_slurm_bert_sst2.log"))
    start = datetime(2024, 10, 29, 19, 1, 0, tzinfo=timezone.utc)
    progress, how = place_progress(train, start=start, step_rate=3.0 / 188)
    a = analyze(_settings(time_window="5m"), gpu_log=gpu, train_log=train, progress=progress,
                placement=how, rate=Money(Decimal("1.2"), "USD"))
    assert "training progress (on the time axis)" in a.signals_used
    final = a.stretches[-1].stretch
    assert final.final and final.start == datetime(2024, 10, 29, 19, 4, 24, tzinfo=timezone.utc)
    stop = a.first_stop
    assert stop is not None and stop.decision.time == final.start + timedelta(minutes=5)
    assert max(p.time for p in progress) < final.start


def test_replay_loss_over_blocks_equals_replay_over_points() -> None:
    """``costctl analyze`` replays a streamed log block by block (one evaluation per block, as
    the watch per tick): the loss decisions (plateau episodes, divergence) equal those of the
    point-by-point replay, evidence and reasons included, whatever the block size."""
    from costctl.progress.batch import PointBatch

    points = []
    for i in range(6000):
        value = 2.0 / (1 + i / 50) + (0.3 if i % 1500 > 1200 else 0.0)
        if i in (3100, 3101, 4500):
            value = float("nan")
        points.append(ProgressPoint(time=None, value=value, kind="train", name="loss", step=i))
    # the eval loss falls to step 3000, then rises: an overfitting episode from step 3200 on,
    # which covers (drops) the train plateaus after it in both replays
    points += [ProgressPoint(time=None, value=1.0 - min(i, 30) / 100 + max(0, i - 30) / 200, kind="eval",
                             name="eval_loss", step=i * 100)
               for i in range(60)]
    settings = Settings()

    def view(run) -> list[tuple]:
        return [(d.key, d.reason, {k: v for k, v in d.evidence.items() if k != "point_time"})
                for d in run.decisions]

    expected = view(replay_loss(settings, points))
    assert any(k.startswith("plateau:") for k, _, _ in expected)
    assert any(k.startswith("overfitting:") for k, _, _ in expected)
    opened = next(e["step"] for k, _, e in expected if k.startswith("overfitting:"))
    assert not any(k.startswith("plateau:") and e["step"] >= opened for k, _, e in expected)
    assert any(k.startswith("divergence:") for k, _, _ in expected)
    for size in (1, 97, 4096, 10_000):
        blocks = [PointBatch.from_points(points[s:s + size]) for s in range(0, len(points), size)]
        assert view(replay_loss(settings, blocks)) == expected, size
