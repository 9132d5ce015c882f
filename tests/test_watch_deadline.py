"""A stall/hung-job deadline between two ticks gets a tick of its own: the decision comes on
the first tick after the deadline, not up to a sample interval late (simulated clock)."""

from __future__ import annotations

from datetime import timedelta

from costctl.policies import History, StallPolicy
from costctl.config import StallConfig
from costctl.records import ProgressPoint
from lifecycle_support import T0, FixedGpu, SimClock, settings, watcher

BUSY = FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0)


def test_stall_due_at_names_the_advice_and_the_hung_stop_deadlines() -> None:
    history = History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True,
                      child_running=True)
    policy = StallPolicy(StallConfig(stall_window="45s", stop_after="2m", min_reports=2))
    assert policy.due_at(history, T0) is None  # no progress yet
    for s in (0, 10, 20):
        history.add_progress(ProgressPoint(time=T0 + timedelta(seconds=s), value=1.0))
    last = T0 + timedelta(seconds=20)
    assert policy.due_at(history, last) == last + timedelta(seconds=45)
    assert policy.due_at(history, last + timedelta(seconds=45)) == last + timedelta(minutes=2)
    history.last_output_at = last + timedelta(seconds=50)  # output moves the hung stop only
    assert policy.due_at(history, last + timedelta(seconds=46)) == last + timedelta(seconds=170)
    history.child_running = False
    assert policy.due_at(history, last) is None


class FakeScheduler:
    def __init__(self) -> None:
        self.jobs: list[dict] = []

    def add_job(self, func, trigger, **kw) -> None:
        self.jobs.append({"func": func, "trigger": trigger, **kw})


def test_the_stall_advice_comes_at_its_deadline_not_at_the_next_periodic_tick(tmp_path) -> None:
    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\nsample_interval = "30s"\n'
                 '[policies.idle]\ntime_window = "6h"\n[policies.stall]\nstall_window = "45s"\nstop_after = "off"\n')
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=BUSY)
    w.start()
    fake = FakeScheduler()
    try:
        w._scheduler = fake  # what run() sets: the periodic driver, here one that records
        w.history.child_running = True
        w.history.progress_source = True
        w.history.add_progress(ProgressPoint(time=T0 + timedelta(seconds=1), value=1.0))
        w.tick(clock.now())
        assert w.next_deadline is None  # 46 s away: past the next periodic tick (30 s)
        clock.advance(30)
        assert w.tick(clock.now()) == []
        deadline = T0 + timedelta(seconds=46)
        assert w.next_deadline == deadline  # before the next periodic tick (60 s)
        assert [(j["trigger"], j["id"]) for j in fake.jobs] == [("date", "deadline")]
        w.tick(clock.now())
        assert len(fake.jobs) == 1  # the same deadline is scheduled once
        clock.advance(16)  # the one-off tick at the deadline
        decisions = w.tick(clock.now())
        assert [d.policy for d in decisions] == ["stall"] and decisions[0].time == deadline
    finally:
        w._scheduler = None
        w.finish(0, "completed")
