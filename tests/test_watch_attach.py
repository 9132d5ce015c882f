"""`costctl watch --attach` errors: one line, exit status 2, nothing recorded (the realtime
follow-to-the-end test is in test_relay_survival.py)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO, costctl_cmd, costctl_env


def test_attach_to_an_unknown_run_is_one_error_line(tmp_path):
    env = costctl_env(tmp_path / "data")
    result = subprocess.run(costctl_cmd("watch", "--quiet", "--attach", "deadbeef"), env=env, cwd=REPO,
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no open run" in lines[0], lines


def test_attach_with_a_command_is_a_usage_error(tmp_path):
    env = costctl_env(tmp_path / "data")
    result = subprocess.run(costctl_cmd("watch", "--quiet", "--attach", "deadbeef", "--", sys.executable, "-c", "1"),
                            env=env, cwd=REPO, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert "--attach takes no command" in result.stderr.decode()


def _run(tmp_path, run_id: str, *, relay_pid: int, job_pid: int = 4242, watch_offset=None, log_bytes: int = 100):
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from costctl.relay import protocol

    log = tmp_path / f"{run_id}.log"
    log.write_bytes(b"x" * log_bytes)
    protocol.write_state(protocol.state_path(log), {"run_id": run_id, "relay_pid": relay_pid, "job_pid": job_pid,
                                                    "exit_status": None, "watch_offset": watch_offset})
    return SimpleNamespace(id=run_id, instance_pk=1, started_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                           command=["train"], log_path=str(log), pid=999999)


def test_find_target_by_prefix_or_job_pid_resumes_at_the_dead_watchs_offset(tmp_path):
    import os

    import pytest

    from costctl.errors import UsageError
    from costctl.watch.attach import find_target

    a = _run(tmp_path, "ab" * 16, relay_pid=os.getpid(), job_pid=4242, watch_offset=40)
    b = _run(tmp_path, "ac" * 16, relay_pid=os.getpid(), job_pid=4343)
    dead = _run(tmp_path, "ff" * 16, relay_pid=2 ** 22 + 7)  # no such process: the relay is gone
    runs = [a, b, dead]
    assert find_target(runs, "abab", alive=lambda pid: False).since == 40
    by_pid = find_target(runs, "4343", alive=lambda pid: False)
    assert by_pid.run_id == b.id and by_pid.since == 100  # offset unknown: the log's end
    with pytest.raises(UsageError, match="2 open runs match"):
        find_target(runs, "a", alive=lambda pid: False)
    with pytest.raises(UsageError, match="still watched"):
        find_target(runs, "abab", alive=lambda pid: True)
    with pytest.raises(UsageError, match="relay of run ffffffff is gone"):
        find_target(runs, "ffff", alive=lambda pid: False)
