"""One watch per chain: a second ``costctl watch --resume`` of a job whose first watch still runs
is refused before anything starts (one line naming the run and its watch's pid, exit status 2,
nothing in the ledger, no job started); a watch killed outright (its lock dies with it) and a
run on another host whose heartbeat went stale do not block, but a killed watch's job that runs on
unwatched does (``--attach`` takes it over). Real costctl processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from checkpoint_files import write_torch_zip
from helpers import REPO, costctl_cmd, costctl_env, run_costctl

#: Prints "ready" (and appends a line to STARTS) then runs until the file STOP exists.
JOB = r'''
import os, sys, time
starts, stop = sys.argv[1], sys.argv[2]
with open(starts, "a") as fh:
    fh.write(f"{os.getpid()} {os.environ.get('COSTCTL_RESUME_FROM', '-')}\n")
print("ready", flush=True)
while not os.path.exists(stop):
    time.sleep(0.02)
'''


def _setup(tmp_path: Path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_torch_zip(ckpt / "epoch-1.pt")
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f'[instance]\nprice_per_hour = "1.0"\n[checkpoint]\npath = "{ckpt}/*.pt"\nperiodic = "off"\n')
    command = [sys.executable, str(job), str(tmp_path / "starts"), str(tmp_path / "stop")]
    return cfg, command


def _runs(tmp_path: Path) -> list[tuple]:
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "costctl.db") as db:
        return db.execute("SELECT id, host, pid, ended_at FROM runs ORDER BY started_at").fetchall()


def _log_path(tmp_path: Path) -> str:
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "costctl.db") as db:
        return db.execute("SELECT log_path FROM runs ORDER BY started_at").fetchone()[0]


def _starts(tmp_path: Path) -> list[str]:
    try:
        return (tmp_path / "starts").read_text().splitlines()
    except FileNotFoundError:
        return []


def test_a_second_resume_while_the_first_watch_runs_is_refused_and_a_killed_watch_does_not_block(tmp_path):
    cfg, command = _setup(tmp_path)
    env = costctl_env(tmp_path / "data")
    first = subprocess.Popen(costctl_cmd("watch", "--config", str(cfg), "--on-exit", "leave", "--no-pty", "--resume",
                                         "--", *command),
                             env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert first.stdout is not None and first.stdout.readline() == b"ready\n"  # its job runs
        (run_id, _host, pid, ended), = _runs(tmp_path)
        assert pid == first.pid and ended is None

        second = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command, env=env)
        err = second.stderr.decode()
        assert second.returncode == 2, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert f"run {run_id[:8]}" in lines[0] and f"watch pid {first.pid}" in lines[0]
        assert "still being watched" in lines[0] and "wait for it to end, or stop it" in lines[0]
        assert len(_runs(tmp_path)) == 1 and len(_starts(tmp_path)) == 1  # nothing recorded, no job started

        first.send_signal(signal.SIGKILL)  # the watch dies outright; its lock dies with it
        first.wait(timeout=30)
        # its job runs on, unwatched (the relay keeps it): a resume would be a second copy beside it
        unwatched = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command,
                                env=env)
        err = unwatched.stderr.decode()
        assert unwatched.returncode == 2 and "Traceback" not in err, err
        assert f"run {run_id[:8]} still runs without a watch" in err and f"--attach {run_id[:8]}" in err
        assert len(_runs(tmp_path)) == 1 and len(_starts(tmp_path)) == 1
        (tmp_path / "stop").touch()  # its job (left running by the relay) ends
        import time

        from costctl.relay.protocol import job_running

        log_path = _log_path(tmp_path)
        for _ in range(500):  # the relay records the job's exit in its state file
            if not job_running(log_path):
                break
            time.sleep(0.02)
        third = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command, env=env)
        assert third.returncode == 0, third.stderr.decode()
        assert len(_starts(tmp_path)) == 2 and len(_runs(tmp_path)) == 2
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        (tmp_path / "stop").touch()


def test_a_run_of_the_chain_on_another_host_blocks_while_its_heartbeat_is_fresh(tmp_path):
    from costctl.ledger import Ledger

    cfg, command = _setup(tmp_path)
    (tmp_path / "stop").touch()  # a job that is let run ends at once
    env = costctl_env(tmp_path / "data")
    now = datetime.now(UTC)
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")
    try:
        pk = ledger.ensure_instance("manual", "other-box", gpu=None, gpu_count=1, billing="on-demand",
                                    price_per_hour=None, currency="USD")
        elsewhere = ledger.start_run(pk, started_at=now - timedelta(minutes=1), command=command, log_path=None,
                                     host="other-box", pid=4242)
    finally:
        ledger.close()

    refused = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command, env=env)
    err = refused.stderr.decode()
    assert refused.returncode == 2 and "Traceback" not in err, err
    assert f"run {elsewhere[:8]}" in err and "watch pid 4242" in err and "host other-box" in err
    assert len(_runs(tmp_path)) == 1 and _starts(tmp_path) == []

    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "costctl.db") as db:  # its watch went silent an hour ago
        stale = (now - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f")
        db.execute("UPDATE runs SET last_seen_at = ?", (stale,))
    allowed = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command, env=env)
    assert allowed.returncode == 0, allowed.stderr.decode()
    assert len(_starts(tmp_path)) == 1


def test_a_watch_guarding_after_its_job_ended_does_not_block_a_resume(tmp_path):
    cfg, command = _setup(tmp_path)
    (tmp_path / "stop").touch()  # every start of the job ends at once
    env = costctl_env(tmp_path / "data")
    guard = subprocess.Popen(costctl_cmd("watch", "--config", str(cfg), "--on-exit", "guard", "--no-pty", "--",
                                         *command),
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert guard.stderr is not None
        for raw in guard.stderr:  # until the job exited and the watch guards on
            if b"guarding the instance" in raw:
                break
        else:
            raise AssertionError("the first watch never said it guards")
        resumed = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *command,
                              env=env)
        assert resumed.returncode == 0, resumed.stderr.decode()
        assert len(_starts(tmp_path)) == 2
    finally:
        if guard.poll() is None:
            os.killpg(guard.pid, signal.SIGKILL)
            guard.wait(timeout=30)


def test_the_directory_lock_is_exclusive_across_processes_and_dies_with_its_holder(tmp_path):
    from costctl.watch.chainlock import ChainLock, lock_dir

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert lock_dir(f"{ckpt}/checkpoint-*") == ckpt and lock_dir(f"{ckpt}/last.pt") == ckpt
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from costctl.watch.chainlock import ChainLock; "
         f"lock = ChainLock(Path({str(ckpt)!r})); print(lock.acquire(), flush=True); sys.stdin.read()"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"True\n"
        mine = ChainLock(ckpt)
        assert mine.acquire() is False and not mine.held
        holder.kill()  # SIGKILL: the kernel lets the lock go
        holder.wait(timeout=30)
        assert mine.acquire() is True and mine.held
        assert list(ckpt.iterdir()) == []  # nothing left beside the checkpoints
        mine.release()
        mine.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
