"""Output that cannot be written (a full disk under stdout, a reader that closed the pipe) is a
one-line error, never "internal error" with a traceback; an out-of-range --limit is a usage
error. Real processes: the real stdout."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import costctl_cmd, costctl_env, run_costctl


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_under_stdout_is_one_line_and_exit_1(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} loss: {1 / (i + 1):.4f}\n" for i in range(200)))
    for args in (["analyze", "--train-log", str(log)], ["bill", "--help"], ["bill", "--format", "json"]):
        with open("/dev/full", "wb") as full:
            res = subprocess.run(costctl_cmd(*args), env=costctl_env(tmp_path / "data"), stdout=full,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
        err = res.stderr.decode()
        assert res.returncode == 1, (args, err)
        assert err.strip().splitlines() == ["costctl: cannot write the output: No space left on device (errno 28)"]


def test_a_closed_pipe_ends_quietly(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} loss: {1 / (i + 1):.4f}\n" for i in range(20000)))
    proc = subprocess.Popen(costctl_cmd("analyze", "--train-log", str(log), "--format", "json"),
                            env=costctl_env(tmp_path / "data"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    proc.stdout.read(10)
    proc.stdout.close()  # as `| head -c 10` does
    err = proc.stderr.read().decode()
    proc.wait(60)
    assert "internal error" not in err and "Traceback" not in err and "Exception ignored" not in err


def test_an_out_of_range_limit_is_a_usage_error(tmp_path):
    for value in ("999999999999999999999", "9223372036854775808", "2147483648"):
        res = run_costctl("bill", "--limit", value, env=costctl_env(tmp_path / "data"))
        err = res.stderr.decode()
        assert res.returncode == 2 and "--limit" in err and "internal error" not in err, err
    assert run_costctl("bill", "--limit", "2147483647", env=costctl_env(tmp_path / "data")).returncode == 0


def test_an_empty_window_bound_is_an_error_not_no_bound(tmp_path):
    for option in ("--since", "--until"):
        res = run_costctl("bill", option, "", env=costctl_env(tmp_path / "data"))
        assert res.returncode == 2 and f"{option} ''" in res.stderr.decode()
