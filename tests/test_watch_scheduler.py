"""The watch's APScheduler driven by its own main loop (costctl.watch.scheduler): jobs run in
the loop's thread when it calls run_due, outside APScheduler's locks, with APScheduler's own
trigger, max_instances and error handling; other executors still run on their threads.

No test sleeps to the schedule: jobs are given run dates in the past (due now) or far ahead."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED
from apscheduler.executors.pool import ThreadPoolExecutor

from costctl.watch.scheduler import DeferredExecutor, LoopScheduler


def _now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture
def sched():
    wakes = []
    s = LoopScheduler(lambda: wakes.append(threading.current_thread().name), timezone=timezone.utc,
                      executors={"threads": ThreadPoolExecutor(max_workers=1)})
    s.wakes = wakes
    s.start()
    yield s
    if s.running:
        s.shutdown(wait=True)


def test_a_due_job_runs_in_the_loops_thread_only_when_run_due_is_called(sched) -> None:
    ran = []
    sched.add_job(lambda: ran.append(threading.current_thread()), "date", run_date=_now() - timedelta(seconds=1),
                  misfire_grace_time=60)
    assert sched.wait_s() == 0.0  # the job store changed: the loop must look
    assert ran == []  # nothing runs by itself: no scheduler thread, no pool worker
    assert sched.run_due() == 1
    assert ran == [threading.current_thread()]
    assert sched.wait_s() is None  # the one-off job is gone; nothing else scheduled
    assert sched.run_due() == 0


def test_wait_s_says_how_long_the_loop_may_sleep_until_the_next_job(sched) -> None:
    sched.add_job(lambda: None, "interval", seconds=3600, next_run_time=_now() + timedelta(seconds=600), id="tick")
    assert sched.wait_s() == 0.0
    assert sched.run_due() == 0
    left = sched.wait_s()
    assert left is not None and 500 < left <= 600


def test_adding_a_job_from_another_thread_wakes_the_loop(sched) -> None:
    sched.run_due()
    sched.wakes.clear()
    t = threading.Thread(target=lambda: sched.add_job(lambda: None, "date", run_date=_now() + timedelta(hours=1)),
                         name="other")
    t.start()
    t.join()
    assert "other" in sched.wakes
    assert sched.wait_s() == 0.0


def test_a_job_may_replace_itself_under_its_own_id(sched) -> None:
    """A deadline tick that queues the next deadline under the same id: the new one survives
    (run inside APScheduler's _process_jobs, the job store's removal of the finished one-off
    job would delete it)."""
    calls = []

    def deadline() -> None:
        calls.append(1)
        if len(calls) == 1:
            sched.add_job(deadline, "date", run_date=_now() - timedelta(seconds=1), id="deadline",
                          replace_existing=True, misfire_grace_time=60)

    sched.add_job(deadline, "date", run_date=_now() - timedelta(seconds=1), id="deadline", misfire_grace_time=60)
    sched.run_due()
    assert calls == [1]
    assert sched.get_job("deadline") is not None
    assert sched.wait_s() == 0.0
    sched.run_due()
    assert calls == [1, 1]
    assert sched.get_job("deadline") is None


def test_a_job_that_raises_is_reported_and_the_others_still_run(sched) -> None:
    events = []
    sched.add_listener(lambda e: events.append((e.job_id, e.code)), EVENT_JOB_ERROR | EVENT_JOB_EXECUTED)
    ran = []

    def boom() -> None:
        raise RuntimeError("policy bug")

    past = _now() - timedelta(seconds=1)
    sched.add_job(boom, "date", run_date=past, id="a", misfire_grace_time=60)
    sched.add_job(lambda: ran.append("b"), "date", run_date=past, id="b", misfire_grace_time=60)
    assert sched.run_due() == 2
    assert ran == ["b"]
    assert ("a", EVENT_JOB_ERROR) in events and ("b", EVENT_JOB_EXECUTED) in events


def test_max_instances_holds_for_an_interval_job_that_is_behind(sched) -> None:
    """coalesce: a tick job that missed many runs runs once per look, not once per missed run."""
    ran = []
    sched.add_job(lambda: ran.append(1), "interval", seconds=1, next_run_time=_now() - timedelta(seconds=30),
                  coalesce=True, max_instances=1, misfire_grace_time=60, id="tick")
    sched.run_due()
    assert ran == [1]


def test_a_job_on_another_executor_runs_on_its_thread(sched) -> None:
    seen = []
    done = threading.Event()

    def poll() -> None:
        seen.append(threading.current_thread())
        done.set()

    sched.add_job(poll, "date", run_date=_now() - timedelta(seconds=1), executor="threads", misfire_grace_time=60)
    assert sched.run_due() == 0  # not in the loop's thread
    assert done.wait(30)
    assert seen and seen[0] is not threading.current_thread()


def test_after_shutdown_nothing_runs(sched) -> None:
    ran = []
    sched.add_job(lambda: ran.append(1), "date", run_date=_now() - timedelta(seconds=1), misfire_grace_time=60)
    sched.shutdown(wait=True)
    assert sched.wait_s() is None
    assert sched.run_due() == 0
    assert ran == []


def test_the_default_executor_is_the_deferred_one(sched) -> None:
    assert isinstance(sched._lookup_executor("default"), DeferredExecutor)
