"""Feedback a person can act on: the status line counts down to a pending stop, and Ctrl-C
says what it did — the first is passed to the job (the watch keeps going while it ends), a
second kills the job's whole process group at once, and either way the instance is left
running and that is said, naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from costctl.watch import Watcher, WatchOptions
from helpers import REPO, costctl_cmd, costctl_env
from lifecycle_support import PY, T0, FixedGpu, SimClock, log_text, settings

IDLE_GPU = FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0)

# A job that traps SIGINT (says so and goes on), with a grandchild in its group that ignores it.
TRAPS_SIGINT = """
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, lambda *a: print("job: got SIGINT, going on", flush=True))
g = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)"])
print(f"grandchild {g.pid}", flush=True)
while True:
    time.sleep(0.05)
"""
EXITS_ON_SIGINT = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *a: sys.exit(3))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def make(tmp_path: Path, toml: str, command: list[str], clock: SimClock, **options) -> Watcher:
    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n' + toml)
    fd = os.open(os.devnull, os.O_WRONLY)
    opts = WatchOptions(command=command or None, quiet=False, **options)
    return Watcher(s, opts, clock=clock, sampler=IDLE_GPU, stdout_fd=fd, stderr_fd=fd)


def wait_for(cond, what: str, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# ------------------------------------------------------------------ the countdown
def guard_status_after(tmp_path: Path, minutes: int, **options) -> str:
    clock = SimClock(T0)  # 08:00 UTC = 16:00 in Shanghai
    w = make(tmp_path, '[watch]\nsample_interval = "1m"\ntimezone = "Asia/Shanghai"\n'
             '[policies.idle]\ntime_window = "30m"\n', [], clock, status_line=True, **options)
    w.start()
    try:
        for _ in range(minutes + 1):
            w.tick(clock.now())
            if _ < minutes:
                clock.advance(60)
        return w.status.text
    finally:
        w.finish(0, "running")


def test_the_status_line_counts_down_to_the_idle_stop_in_the_configured_zone(tmp_path):
    text = guard_status_after(tmp_path, 25)
    assert "idle 25m of 30m — stopping at 16:30" in text


def test_a_dry_run_says_it_would_stop(tmp_path):
    text = guard_status_after(tmp_path, 25, dry_run=True)
    assert "idle 25m of 30m — would stop at 16:30" in text and "stopping at" not in text


def test_no_countdown_while_busy(tmp_path):
    clock = SimClock(T0)
    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\nsample_interval = "1m"\n')
    fd = os.open(os.devnull, os.O_WRONLY)
    busy = FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=90.0)
    w = Watcher(s, WatchOptions(command=None, quiet=False, status_line=True), clock=clock, sampler=busy,
                stdout_fd=fd, stderr_fd=fd)
    w.start()
    w.tick(clock.now())
    clock.advance(60)
    w.tick(clock.now())
    assert "GPU0 90%" in w.status.text and "stop" not in w.status.text
    w.finish(0, "running")


# ------------------------------------------------------------------ Ctrl-C
def test_first_ctrl_c_goes_to_the_job_and_a_second_kills_its_whole_group(tmp_path, capsys):
    clock = SimClock(T0)
    w = make(tmp_path, '[watch]\ngrace_period = "10m"\n', [PY, "-c", TRAPS_SIGINT], clock, on_exit="leave")
    w.start()
    try:
        wait_for(lambda: "grandchild" in log_text(w), "the job to start")
        grandchild = int(log_text(w).split("grandchild ")[1].split()[0])
        w._handle_signal(signal.SIGINT, None)
        assert w.step() is None  # passed to the job; the watch goes on
        wait_for(lambda: "got SIGINT" in log_text(w), "the job to see SIGINT")
        for _ in range(5):
            w.tick(clock.now())
            assert w.step() is None and w.job.running
            clock.advance(5)
        err = capsys.readouterr().err
        assert "costctl: SIGINT: passing it to the job (Ctrl-C again to end it at once)" in err
        w._handle_signal(signal.SIGINT, None)
        result = w.step()  # at once, not after the 10-minute grace period
        assert result == (128 + signal.SIGKILL, "interrupted")
        assert not w.job.running
        wait_for(lambda: not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE,
                 "the grandchild to be killed", limit_s=5)
        err = capsys.readouterr().err
        assert "costctl: second Ctrl-C: the job was killed" in err
        assert f"sim instance {w.instance_id} is left running and bills on" in err
        assert w.finish(*result) == (137, "interrupted")
    finally:
        if w.child is not None and w.child.running:
            os.killpg(w.child.pgid, signal.SIGKILL)


def test_a_job_that_exits_on_ctrl_c_ends_the_watch_and_the_instance_is_said_to_be_left_running(tmp_path, capsys):
    clock = SimClock(T0)
    w = make(tmp_path, "", [PY, "-c", EXITS_ON_SIGINT], clock, on_exit="stop")
    w.start()
    wait_for(lambda: "ready" in log_text(w), "the job to start")
    w._handle_signal(signal.SIGINT, None)
    result = None
    deadline = time.monotonic() + 30
    while result is None and time.monotonic() < deadline:
        result = w.step()
        time.sleep(0.02)
    assert result == (3, "interrupted")  # --on-exit stop does not apply: Ctrl-C leaves it running
    w.finish(*result)
    err = capsys.readouterr().err
    assert f"sim instance {w.instance_id} is left running and bills on" in err and "costctl stop" in err
    assert w.stopped_at is None


def test_ctrl_c_while_guarding_ends_the_watch_and_says_the_instance_is_left_running(tmp_path, capsys):
    clock = SimClock(T0)
    w = make(tmp_path, "", [], clock, advise_only=True)
    w.start()
    w.tick(clock.now())
    w._handle_signal(signal.SIGINT, None)
    assert w.step() == (128 + signal.SIGINT, "interrupted")
    w.finish(130, "interrupted")
    err = capsys.readouterr().err
    assert "costctl: SIGINT: the watch ends" in err
    assert f"sim instance {w.instance_id} is left running and bills on" in err and "stops nothing anyway" in err


def test_two_ctrl_c_to_a_real_watch_kill_a_job_that_traps_it(tmp_path):
    """The real signal handler and loop: the watch never blocks in the grace period."""
    env = costctl_env(tmp_path, COSTCTL_WATCH__GRACE_PERIOD="10m")
    watch = subprocess.Popen(costctl_cmd("watch", "--", sys.executable, "-c", TRAPS_SIGINT), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        assert watch.stdout.readline().startswith(b"grandchild")
        watch.send_signal(signal.SIGINT)
        assert watch.stdout.readline() == b"job: got SIGINT, going on\n"
        watch.send_signal(signal.SIGINT)
        rc = watch.wait(60)
        err = watch.stderr.read().decode()
    finally:
        if watch.poll() is None:
            watch.kill()
    assert rc == 137, err
    assert "SIGINT: passing it to the job (Ctrl-C again to end it at once)" in err
    assert "second Ctrl-C: the job was killed" in err and "sim instance sim-local is left running" in err
