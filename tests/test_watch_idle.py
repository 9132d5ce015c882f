"""A watch that costs nothing while nothing happens: its main loop sleeps on a self-pipe
(costctl.watch.wakeup) until a tick, a signal, the job's exit or a stop wakes it, instead of
looking every 0.1 s; it polls only while it follows something (a checkpoint request, a stop,
the grace period of a job ending after Ctrl-C)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import costctl.watch.watcher as watcher_mod
from costctl.watch import Watcher, WatchOptions
from costctl.watch.wakeup import Wakeup
from lifecycle_support import PY, T0, FixedGpu, SimClock, settings

IDLE_GPU = FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0)


# ------------------------------------------------------------------ the self-pipe
def test_a_wake_from_another_thread_ends_a_wait_without_timeout():
    w = Wakeup()
    try:
        threading.Timer(0.05, w.wake).start()
        assert w.wait(30) is True
        assert w.wait(0) is False  # consumed
    finally:
        w.close()


def test_wakes_coalesce_and_a_closed_wakeup_ignores_wakes():
    w = Wakeup()
    for _ in range(10_000):  # more than a pipe holds: a full pipe is already a pending wake
        w.wake()
    assert w.wait(0) is True and w.wait(0) is False
    w.close()
    w.wake()  # no error, and no write to a reused fd number
    assert w.wait(0) is False


def test_a_signal_handler_wakes_a_wait_that_has_no_timeout():
    w = Wakeup()
    old = signal.signal(signal.SIGUSR1, lambda *a: w.wake())
    try:
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        assert w.wait(30) is True  # the retried poll(2) sees the byte the handler wrote
    finally:
        signal.signal(signal.SIGUSR1, old)
        w.close()


# ------------------------------------------------------------------ the main loop
def _watch(tmp_path, command, **options) -> Watcher:
    # One tick a minute: only the first tick happens during the test, so whatever ends a wait
    # early is one of the wakes under test (the job's exit, a signal), not the next tick.
    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\nsample_interval = "1m"\n')
    fd = os.open(os.devnull, os.O_WRONLY)
    opts = WatchOptions(command=command, quiet=True, on_exit="leave", **options)
    return Watcher(s, opts, clock=SimClock(T0), sampler=IDLE_GPU, stdout_fd=fd, stderr_fd=fd)


class _Recording(Wakeup):
    """A Wakeup that records each wait's timeout and whether a wake (not the timeout) ended it."""

    waits: list[tuple[float | None, bool]] = []

    def wait(self, timeout_s):
        woken = super().wait(timeout_s)
        self.waits.append((timeout_s, woken))
        return woken


@pytest.fixture
def recording(monkeypatch):
    _Recording.waits = []
    monkeypatch.setattr(watcher_mod, "Wakeup", _Recording)
    # A missing wake makes the test fail after a few seconds (a wait that timed out), not hang.
    monkeypatch.setattr(watcher_mod, "IDLE_WAIT_MAX_S", 20.0)
    return _Recording.waits


def test_the_loop_sleeps_until_the_jobs_exit_wakes_it(tmp_path, recording):
    w = _watch(tmp_path, [PY, "-c", "import time; time.sleep(1.0); raise SystemExit(4)"])
    assert w.run() == 4
    assert recording, "the loop never slept"
    assert all(timeout == 20.0 for timeout, _ in recording), recording  # no 0.1 s polling while idle
    assert all(woken for _, woken in recording), recording  # each wait ended by a wake, none timed out
    assert len(recording) <= 6, recording  # the first tick, the job's exit: a handful, not one per 0.1 s


def test_ctrl_c_wakes_the_loop_and_the_grace_period_bounds_its_sleep(tmp_path, recording):
    job = ("import signal, time\nsignal.signal(signal.SIGINT, lambda *a: None)\n"
           "print('ready', flush=True)\ntime.sleep(300)\n")
    w = _watch(tmp_path, [PY, "-c", job])
    sent: list[int] = []

    def ctrl_c() -> None:
        # Sent from another thread, as the terminal would; the loop's waits must end at each one.
        while w.child is None or "ready" not in w.log_path.read_text(errors="replace"):
            threading.Event().wait(0.02)
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            sent.append(1)
            threading.Event().wait(0.5)

    threading.Thread(target=ctrl_c, daemon=True).start()
    assert w.run() == 128 + signal.SIGKILL  # the second Ctrl-C killed the job
    assert len(sent) >= 2
    ending = [t for t, _ in recording if t is not None and t < 20.0]
    assert ending, recording  # while the job ends, the sleep is bounded by the grace period
    assert all(t <= w.settings.watch.grace_period.total_seconds() for t in ending)
    assert all(woken for _, woken in recording), recording


def test_the_loop_polls_only_while_it_follows_something(tmp_path):
    w = _watch(tmp_path, None)
    w.start()
    try:
        assert w._loop_timeout() == watcher_mod.IDLE_WAIT_MAX_S
        w._ending = (signal.SIGINT, 1, watcher_mod.time.monotonic() + 7.0)
        assert 6.0 < w._loop_timeout() <= 7.0  # up to the end of the grace period
        w._ending = None
        w._done.set()
        assert w._loop_timeout() == watcher_mod.BUSY_POLL_S  # ending: never a busy loop
    finally:
        w._done.clear()
        w.finish(0, "running")


# ------------------------------------------------------------------ sample retention from the watch
def _retention_watch(tmp_path, toml: str):
    from lifecycle_support import watcher

    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\nsample_interval = "5s"\n'
                 '[policies.idle]\ntime_window = "6h"\n' + toml)
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0))
    return w, clock


def _queued_passes(w, clock, minutes: int, done_after: int) -> list[float]:
    """Tick every 5 s for ``minutes``; the pass's result is ``done`` from pass ``done_after`` on.
    Returns the seconds since the start at which a pass was queued."""
    from costctl.ledger.sample_rollup import CompactResult
    from costctl.ledger.writer import Ticket

    queued: list[float] = []

    def compact(now, retention, **kw):
        queued.append((now - T0).total_seconds())
        ticket = Ticket("compact telemetry")
        ticket._resolve(CompactResult(cutoff=now - retention, resume_at=None if len(queued) > done_after else now))
        return ticket

    w.writer.compact = compact
    for _ in range(minutes * 12):
        w.tick(clock.now())
        clock.advance(5)
    return queued


def test_the_watch_queues_a_retention_pass_every_ten_minutes_not_per_tick(tmp_path):
    w, clock = _retention_watch(tmp_path, '[ledger]\nsample_retention = "2h"\n')
    w.start()
    try:
        queued = _queued_passes(w, clock, 35, done_after=0)
    finally:
        w.finish(0, "completed")
    assert queued == [60.0, 660.0, 1260.0, 1860.0]  # a minute in, then every 10 minutes


def test_while_a_pass_leaves_work_the_next_comes_a_minute_later(tmp_path):
    w, clock = _retention_watch(tmp_path, '[ledger]\nsample_retention = "2h"\n')
    w.start()
    try:
        queued = _queued_passes(w, clock, 16, done_after=3)  # three passes with a backlog, then done
    finally:
        w.finish(0, "completed")
    assert queued == [60.0, 120.0, 180.0, 240.0, 840.0]


def test_no_pass_when_retention_is_off(tmp_path):
    w, clock = _retention_watch(tmp_path, '[ledger]\nsample_retention = "off"\n')
    w.start()
    try:
        assert _queued_passes(w, clock, 12, done_after=0) == []
    finally:
        w.finish(0, "completed")
