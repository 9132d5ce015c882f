"""The checkpoint protocol: request file, new-checkpoint detection, outcomes, storage warnings,
signals only to worker processes, and a job with no handler surviving a request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl import job
from costctl.checkpoint_integrity import marker_path
from costctl.checkpoint import (
    ACK_GRACE_S,
    CheckpointRequester,
    Outcome,
    ephemeral_storage_warning,
    newest_checkpoint,
    resolve_pattern,
    send_to_workers,
    worker_processes,
)
from costctl.ledger.schema import CheckpointRow
from checkpoint_files import write_hf_checkpoint, write_torch_zip
from lifecycle_support import PY, T0, SimClock, drive, log_text, settings, watcher

REPO_SRC = str(Path(__file__).resolve().parents[1])


def _touch(path: Path, mtime: float, data: bytes = b"x") -> None:
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def _requester(tmp_path: Path, clock: SimClock, pattern: str | None) -> CheckpointRequester:
    return CheckpointRequester(tmp_path / "req" / "checkpoint-request", pattern, clock)


def _zip_at(path: Path, mtime: float, payload: int = 512) -> Path:
    write_torch_zip(path, payload)
    os.utime(path, (mtime, mtime))
    return path


def test_the_newest_checkpoint_by_mtime_wins_whatever_its_name(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    old = time.time() - 3600
    _zip_at(d / "last.ckpt", old)
    _zip_at(d / "last-v1.ckpt", old - 10)  # sorts after last.ckpt by name, older by time
    _touch(d / ".last.ckpt.tmp", time.time() + 5)  # an atomic write in progress: never a checkpoint
    pattern = resolve_pattern(str(d))
    assert pattern == str(d / "*")
    assert newest_checkpoint(pattern).path == d / "last.ckpt"

    clock = SimClock(T0)
    req = _requester(tmp_path, clock, pattern)
    attempt = req.request("periodic", T0 + timedelta(seconds=60))
    assert req.request_path.exists() and '"reason": "periodic"' in req.request_path.read_text()
    assert req.poll() is None  # old files do not count
    _zip_at(d / "last.ckpt", time.time() + 1, 2048)  # Lightning overwrote last.ckpt (a whole zip)
    clock.advance(1)
    assert req.poll() is None  # whole, but one more look lets the job's record arrive first
    clock.advance(1)
    done = req.poll()
    assert done is attempt and done.outcome is Outcome.SAVED and done.checkpoint.path == d / "last.ckpt"
    assert done.complete_by == "format check" and "zip archive" in done.check
    assert not req.request_path.exists()  # withdrawn: the job never acknowledged
    # next time the job writes last-v1.ckpt beside the older last.ckpt: that one is the new checkpoint
    req.request("periodic", T0 + timedelta(seconds=120))
    _zip_at(d / "last-v1.ckpt", time.time() + 2, 1024)
    os.remove(req.request_path)  # a script that deletes the request by hand: no second look needed
    clock.advance(1)
    done = req.poll()
    assert done.outcome is Outcome.SAVED and done.checkpoint.path == d / "last-v1.ckpt"
    assert newest_checkpoint(pattern).path == d / "last-v1.ckpt"


def test_a_checkpoint_is_not_taken_while_cut_short_however_long_it_stays_unchanged(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    clock = SimClock(T0)
    req = _requester(tmp_path, clock, str(d / "*"))
    req.request("downsize", T0 + timedelta(minutes=10))
    whole = write_torch_zip(tmp_path / "whole.pt", 5000).read_bytes()
    (d / "model.pt").write_bytes(whole[: len(whole) // 2])  # the writer paused half-way
    for _ in range(5):  # unchanged size and mtime on every look: still not a checkpoint
        clock.advance(1)
        assert req.poll() is None
    assert "truncated" in req.pending.check
    (d / "model.pt").write_bytes(whole)
    clock.advance(1)
    assert req.poll() is None
    clock.advance(1)
    done = req.poll()
    assert done.outcome is Outcome.SAVED and done.checkpoint.size == len(whole)
    # a format costctl cannot check is never complete by itself: the deadline passes, nothing saved
    req = _requester(tmp_path, clock, str(d / "*.npz"))
    req.request("periodic", clock.now() + timedelta(seconds=10))
    (d / "state.npz").write_bytes(b"arrays")
    for _ in range(9):
        clock.advance(1)
        assert req.poll() is None
    clock.advance(1)
    done = req.poll()
    assert done.outcome is Outcome.TIMED_OUT and done.checkpoint is None and "no format check" in done.check
    # ... unless the job marks it complete
    req.request("periodic", clock.now() + timedelta(seconds=10))
    (d / "state2.npz").write_bytes(b"arrays")
    marker_path(d / "state2.npz").write_text("")
    req.poll()
    clock.advance(1)
    assert req.poll().checkpoint.path == d / "state2.npz"


def test_a_new_file_with_a_coarse_mtime_equal_to_the_request_still_counts(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    clock = SimClock(T0)
    req = _requester(tmp_path, clock, str(d / "*"))
    req.request("periodic", T0 + timedelta(minutes=1))
    mtime = req.request_path.stat().st_mtime_ns
    write_torch_zip(d / "a.pt")
    os.utime(d / "a.pt", ns=(mtime, mtime))  # same timestamp as the request (coarse file system clock)
    req.poll()
    clock.advance(1)
    assert req.poll().outcome is Outcome.SAVED


def test_the_record_for_this_request_ends_it_at_once_and_a_stale_one_is_ignored(tmp_path, monkeypatch):
    d = tmp_path / "out"
    d.mkdir()
    clock = SimClock(T0)
    req = _requester(tmp_path, clock, str(d / "checkpoint-*"))
    req.request("preemption", T0 + timedelta(seconds=60))
    monkeypatch.setenv("COSTCTL_CHECKPOINT_REQUEST", str(req.request_path))
    # a record left from an earlier request: not an answer to this one
    req.ack_path.write_text(json.dumps({"version": 1, "request": (T0 - timedelta(hours=1)).isoformat(),
                                        "checkpoint": str(d / "checkpoint-1"), "step": 1}))
    clock.advance(1)
    assert req.poll() is None and req.pending.record is None
    cp = write_hf_checkpoint(d, 30, state=False)  # no trainer_state.json yet: the format check says no
    clock.advance(1)
    assert req.poll() is None
    wall = time.time()
    record = job.acknowledge_checkpoint(checkpoint=cp, step=30, started_at=wall - 0.5, ended_at=wall)
    assert record == req.ack_path and not req.request_path.exists()
    body = json.loads(record.read_text())
    assert body["request"] == T0.isoformat() and body["checkpoint"] == str(cp) and body["step"] == 30
    assert datetime.fromisoformat(body["save_ended_at"]).tzinfo is not None
    done = req.poll()  # no second look: the job said so
    assert done.outcome is Outcome.SAVED and done.complete_by == "acknowledgement" and done.checkpoint.path == cp
    assert done.step == 30 and done.save_ended_at - done.save_started_at == timedelta(seconds=0.5)
    assert not req.ack_path.exists()  # consumed
    # another rank acknowledging the same, already answered request writes no second record
    assert job.acknowledge_checkpoint(checkpoint=cp, step=30) is None and not req.ack_path.exists()
    ev = done.evidence()
    assert ev["complete_by"] == "acknowledgement" and ev["step"] == 30
    # a record without a path: the newest new match of the pattern is the checkpoint
    req.request("periodic", clock.now() + timedelta(seconds=60))
    cp2 = write_hf_checkpoint(d, 40, weights=False, state=False)
    os.utime(cp2 / "config.json")
    job.acknowledge_checkpoint()
    done = req.poll()
    assert done.outcome is Outcome.SAVED and done.checkpoint.path == cp2


def test_timeout_acknowledgement_and_job_exit(tmp_path):
    clock = SimClock(T0)
    # nobody answers: timed out at the deadline, request withdrawn
    req = _requester(tmp_path, clock, str(tmp_path / "none" / "*"))
    req.request("periodic", T0 + timedelta(seconds=30))
    clock.advance(29)
    assert req.poll() is None
    clock.advance(1)
    done = req.poll()
    assert done.outcome is Outcome.TIMED_OUT and done.save_s is None and not req.request_path.exists()
    # no path configured: the job's acknowledgement is the answer
    req = _requester(tmp_path, clock, None)
    req.request("periodic", clock.now() + timedelta(seconds=30))
    clock.advance(4)
    req.request_path.unlink()
    done = req.poll()
    assert done.outcome is Outcome.ACKNOWLEDGED and done.save_s == 4
    # a path that the job's checkpoints do not match: acknowledged after a short grace
    req = _requester(tmp_path, clock, str(tmp_path / "elsewhere" / "*"))
    start = clock.now()
    req.request("periodic", start + timedelta(seconds=300))
    req.request_path.unlink()
    assert req.poll() is None
    clock.advance(ACK_GRACE_S)
    assert req.poll().outcome is Outcome.ACKNOWLEDGED
    # the job exits while asked
    req = _requester(tmp_path, clock, str(tmp_path / "none" / "*"))
    req.request("preemption", clock.now() + timedelta(seconds=100))
    assert req.poll(job_running=False).outcome is Outcome.JOB_EXITED
    # a second request while one is pending keeps the earlier deadline and both reasons
    req.request("periodic", clock.now() + timedelta(seconds=100))
    merged = req.request("preemption", clock.now() + timedelta(seconds=20))
    assert merged.deadline == clock.now() + timedelta(seconds=20) and merged.reason == "periodic+preemption"


Part = namedtuple("Part", "device mountpoint fstype opts")


def test_storage_that_does_not_survive_a_stop_is_warned_about():
    parts = [Part("/dev/sda1", "/", "ext4", ""), Part("tmpfs", "/dev/shm", "tmpfs", ""),
             Part("/dev/sdb1", "/data", "xfs", "")]
    env: dict[str, str] = {}
    warn = ephemeral_storage_warning("/dev/shm/ckpt/*.pt", hostname="box", env=env, partitions=parts)
    assert warn and "tmpfs" in warn and "/dev/shm" in warn
    assert ephemeral_storage_warning("/data/ckpt/*.pt", hostname="box", env=env, partitions=parts) is None
    autodl = "autodl-container-6f1c4b"
    warn = ephemeral_storage_warning("/root/ckpt/*.pt", hostname=autodl, env=env, partitions=parts)
    assert warn and "/root/autodl-tmp" in warn
    assert ephemeral_storage_warning("/root/autodl-tmp/ckpt/*.pt", hostname=autodl, env=env, partitions=parts) is None
    warn = ephemeral_storage_warning("/root/ckpt", hostname="x", env={"RUNPOD_POD_ID": "abc"}, partitions=parts)
    assert warn and "/workspace" in warn
    assert ephemeral_storage_warning("/workspace/ckpt", hostname="x", env={"RUNPOD_POD_ID": "abc"},
                                     partitions=parts) is None


WORKER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    sys.path.insert(0, {src!r})
    from costctl import job
    job.request_checkpoint_on_signal(signal.SIGUSR1)
    out = sys.argv[1]
    loader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # inherits the env
    open(os.path.join(out, f"ready-{{os.getpid()}}-{{loader.pid}}"), "w").close()
    while not job.checkpoint_requested():
        time.sleep(0.02)
    open(os.path.join(out, f"saved-{{os.getpid()}}"), "w").close()
    job.acknowledge_checkpoint()
    loader.kill()
""")
AGENT = textwrap.dedent("""
    import os, subprocess, sys
    procs = [subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]],
                              env={**os.environ, "LOCAL_RANK": str(i), "RANK": str(i)}) for i in range(2)]
    sys.exit(max(p.wait() for p in procs))
""")


def _wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_a_configured_signal_goes_to_the_workers_never_to_the_launcher(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER.format(src=REPO_SRC))
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID")}
    agent = subprocess.Popen([PY, str(agent_py), str(worker), str(tmp_path)], start_new_session=True, env=env)
    try:
        assert _wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 2)
        ready = [p.name.split("-") for p in tmp_path.glob("ready-*")]
        workers = {int(r[1]) for r in ready}
        loaders = {int(r[2]) for r in ready}
        found = {p.pid for p in worker_processes(agent.pid)}
        assert found == workers  # not the agent, not the workers' DataLoader-like children
        assert set(send_to_workers(agent.pid, signal.SIGUSR1)) == workers
        assert agent.wait(20) == 0  # the agent (no handler) was not signalled; the workers saved and exited
        assert {int(p.name.split("-")[1]) for p in tmp_path.glob("saved-*")} == workers
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pid in loaders)
    finally:
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_shell_wrapper_passes_the_signal_to_the_job(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER.format(src=REPO_SRC))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID")}
    shell = subprocess.Popen(["sh", "-c", f'"{PY}" "{worker}" "{tmp_path}"; echo finished'],
                             start_new_session=True, env=env, stdout=subprocess.PIPE)
    try:
        assert _wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 1)
        (target,) = worker_processes(shell.pid)
        assert target.pid != shell.pid and "python" in target.name()
        send_to_workers(shell.pid, signal.SIGUSR1)
        out, _ = shell.communicate(timeout=20)
        assert shell.returncode == 0 and out == b"finished\n"  # the shell survived: it was not signalled
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


PLAIN = "import time\nfor i in range(40):\n    print(f'loss: {1/(i+1)}', flush=True)\n    time.sleep(0.1)\nprint('done')\n"


@pytest.mark.realtime  # a real child against a simulated clock
@pytest.mark.parametrize("signal_conf, survives", [(None, True), ("SIGUSR1", False)])
def test_a_plain_python_job_survives_a_request_under_the_default_config(tmp_path, signal_conf, survives):
    """Default: only the request file, no signal, so a job with no handler keeps running. The
    SIGUSR1 case shows why: an unhandled SIGUSR1 ends a Python process."""
    sig = f'signal = "{signal_conf}"\n' if signal_conf else ""
    s = settings(tmp_path, f"""
[instance]
provider = "sim"
[watch]
sample_interval = "5s"
[checkpoint]
path = "{tmp_path / 'ckpt'}"
periodic = "on"
min_interval = "60s"
max_interval = "60s"
deadline = "30s"
{sig}""")
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", PLAIN], clock, on_exit="leave")
    code, status = drive(w, clock, max_real_s=30)
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        rows = db.scalars(select(CheckpointRow)).all()
    assert rows and rows[0].reason == "periodic" and rows[0].signal == signal_conf
    assert rows[0].requested_at == T0 + timedelta(seconds=60)
    if survives:
        assert (code, status) == (0, "completed") and "done" in log_text(w)
        assert rows[0].outcome == "timed-out" and rows[0].completed_at == rows[0].requested_at + timedelta(seconds=30)
        assert {r.outcome for r in rows} <= {"timed-out", "job-exited"}  # the last one may meet the job's end
    else:
        assert code == 128 + signal.SIGUSR1 and "done" not in log_text(w)
