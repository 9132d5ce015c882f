"""The stall policy's hung-job stop: cadence known, silent (no progress, no output) for
max(stop_after, cadence_factor x the longest gap), then one stop."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from costctl.config import StallConfig
from costctl.policies import History, StallPolicy
from costctl.progress.batch import PointBatch
from costctl.records import ProgressPoint

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
STEP = 10  # seconds between evaluations


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def drive(progress: list[int], end: int, *, output: list[int] = (), exits_at: int | None = None,
          **config) -> list[tuple[int, str, str]]:
    history = History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True,
                      child_running=True)
    policy = StallPolicy(StallConfig(**config))
    todo, out = sorted(progress), sorted(output)
    fired, seen = [], set()
    for second in range(0, end + 1, STEP):
        while todo and todo[0] <= second:
            history.add_progress(ProgressPoint(time=at(todo.pop(0)), value=1.0))
        while out and out[0] <= second:
            history.last_output_at = at(out.pop(0))
        if exits_at is not None and second >= exits_at:
            history.child_running = False
        decision = policy.evaluate(history, at(second))
        if decision is not None and decision.key not in seen:
            seen.add(decision.key)
            fired.append((second, str(decision.action), decision.key.split(":")[0]))
    return fired


def stops(fired):
    return [sec for sec, action, _ in fired if action == "stop"]


EVERY_MINUTE = list(range(0, 3600, 60))  # 60 reports, longest gap 60 s; last at 3540


def test_a_hung_job_is_stopped_stop_after_past_its_last_report() -> None:
    fired = drive(EVERY_MINUTE, end=3540 + 3 * 3600)
    assert stops(fired) == [3540 + 7200]
    assert ("stall" in [kind for _, _, kind in fired])  # the 30-minute advice came first
    assert [kind for _, action, kind in fired if action == "stop"] == ["stall-stop"]


def test_a_slow_job_gets_cadence_factor_times_its_longest_gap() -> None:
    every_40_min = list(range(0, 12 * 2400, 2400))  # 12 reports, gap 40 min; last at 26400
    assert stops(drive(every_40_min, end=26400 + 4 * 2400 + 600)) == [26400 + 4 * 2400]


def test_any_output_is_a_sign_of_life() -> None:
    # Loss lines stop at 3540, but an evaluation progress bar prints until 3540 + 3 h.
    bar = list(range(3540, 3540 + 3 * 3600, 30))
    assert stops(drive(EVERY_MINUTE, end=bar[-1] + 7200 - STEP, output=bar)) == []
    assert stops(drive(EVERY_MINUTE, end=bar[-1] + 7200 + 60, output=bar)) == [bar[-1] + 7200]


def test_not_before_min_reports() -> None:
    assert stops(drive(list(range(0, 540, 60)), end=20000)) == []  # 9 reports
    assert stops(drive(list(range(0, 600, 60)), end=20000)) == [540 + 7200]  # 10


def test_not_after_the_job_exited_and_off_means_advice_only() -> None:
    assert stops(drive(EVERY_MINUTE, end=20000, exits_at=4000)) == []
    fired = drive(EVERY_MINUTE, end=20000, stop_after="off")
    assert stops(fired) == [] and [kind for _, _, kind in fired] == ["stall"]


def test_a_replay_block_of_many_report_times_counts_each_gap() -> None:
    history = History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True,
                      child_running=True)
    batch = PointBatch()
    for t in [0, 60, 120, 1020, 1080]:  # one gap of 15 minutes
        batch.append(1.0, time=at(t).timestamp())
    history.add_batch(batch)
    assert history.progress_reports == 5 and history.longest_progress_gap == timedelta(minutes=15)
    assert history.last_progress_at == at(1080)


def test_pending_counts_down_to_the_hung_stop() -> None:
    history = History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True,
                      child_running=True)
    for t in EVERY_MINUTE:
        history.add_progress(ProgressPoint(time=at(t), value=1.0))
    policy = StallPolicy(StallConfig())
    assert policy.pending(history, at(3540 + 3000)) is None  # advice fired; < half the stop's wait
    pending = policy.pending(history, at(3540 + 4000))
    assert pending is not None and pending.action == "stop" and pending.at == at(3540 + 7200)
    assert "hung job" in pending.progress
