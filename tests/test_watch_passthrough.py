"""costctl watch: the child's output passes through byte for byte, and watch exits with its status."""

from __future__ import annotations

import subprocess
import sys
import time

from helpers import CHILDREN, costctl_cmd, costctl_env, run_costctl


def _expected(stream: str) -> bytes:
    if stream == "stdout":
        return (
            b"step 1\r step 2\r step 3\n"
            b"\x1b[31mred [bold]not markup[/bold]\x1b[0m [N/A] [Not Supported]\n"
            + "ünïcödé ✓ \xff\xfe raw".encode() + b"\xff\xfe"
            + b"no final newline on stdout"
        )
    return b"warn: \x1b[33myellow\x1b[0m\r\n" + b"no final newline on stderr"


def test_passthrough_is_byte_exact_and_exit_status_is_the_childs(tmp_path):
    env = costctl_env(tmp_path, EXIT_WITH="3")
    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, str(CHILDREN / "passthrough.py"), env=env
    )
    assert proc.stdout == _expected("stdout")
    assert proc.stderr == _expected("stderr")
    assert proc.returncode == 3
    # the per-run log holds both streams' bytes
    logs = list((tmp_path / "runs").glob("*.log"))
    assert len(logs) == 1
    data = logs[0].read_bytes()
    assert _expected("stdout").split(b"\n")[1] in data
    assert b"no final newline on stderr" in data


def test_exit_status_zero_and_messages_only_on_stderr(tmp_path):
    env = costctl_env(tmp_path, EXIT_WITH="0")
    proc = run_costctl("watch", "--on-exit", "leave", "--", sys.executable, str(CHILDREN / "passthrough.py"), env=env)
    assert proc.returncode == 0
    assert proc.stdout == _expected("stdout"), "costctl must never write its own text to stdout"
    assert b"costctl" in proc.stderr  # its own messages (summary) go to stderr


def test_one_megabyte_per_stream_without_newlines_finishes(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, str(CHILDREN / "bigwriter.py"),
        env=env, timeout=60,
    )
    assert proc.returncode == 0
    assert proc.stdout == b"x" * (4096 * 256)
    assert proc.stderr == b"y" * (4096 * 256)


def test_child_killed_by_signal_gives_128_plus_n(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", env=env,
    )
    assert proc.returncode == 128 + 9


def test_garbage_output_is_skipped(tmp_path):
    env = costctl_env(tmp_path)
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(bytes(range(256)) * 50 + b'\\n')\n"
        "print('loss: abc'); print('loss: ' + 'x' * 5000); print('loss=='); print('{\\'loss\\': }')\n"
        "print('loss: 0.5')\n"
    )
    proc = run_costctl("watch", "--on-exit", "leave", "--", sys.executable, "-c", code, env=env)
    assert proc.returncode == 0
    assert b"Traceback" not in proc.stderr
    assert b"0.5" in proc.stderr  # the summary saw the one real loss


def test_an_over_long_line_is_said_not_silently_skipped(tmp_path):
    """A line past MAX_LINE_CHARS (64 Ki characters) gives no point; the watch says how many
    such lines it skipped (found by the fresh-user trial: silently 0 points)."""
    env = costctl_env(tmp_path)
    code = ("import sys; w = sys.stdout.write; w('iter 1: loss 2.5, time 1ms\\n'); "
            "w('iter 2: loss 2.0 ' + 'x' * 10_000_000 + '\\n'); w('iter 3: loss 1.5, time 1ms\\n')")
    proc = run_costctl("watch", "--on-exit", "leave", "--", sys.executable, "-c", code, env=env, timeout=120)
    assert proc.returncode == 0
    assert b"1 line of the job's output longer than 65,536 characters was skipped for progress" in proc.stderr
    quiet = run_costctl("watch", "--on-exit", "leave", "--", sys.executable, "-c", code.replace("10_000_000", "10"),
                        env=env, timeout=120)
    assert b"longer than" not in quiet.stderr
