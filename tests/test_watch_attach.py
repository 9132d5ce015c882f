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
