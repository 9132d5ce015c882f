"""No output is lost at any volume: a job flooding its stdout under a real ``costctl watch``
(pipes, costctl's stdout to a file) leaves costctl's stdout byte for byte what the job wrote,
however far the watch fell behind the job (it catches up from the run log)."""

from __future__ import annotations

import subprocess
import sys

from helpers import CHILDREN, REPO, costctl_cmd, costctl_env

LINES = 1_200_000  # ~30 MB: more than a watch may queue in the relay (CLIENT_MAX_BYTES)


def _expected(n: int) -> bytes:
    return "".join(f"step {i} loss: {0.5 + (i * 7919 % 1000) / 10000:.4f}\n" for i in range(n)).encode()


def test_a_flood_of_output_reaches_costctls_stdout_file_byte_for_byte(tmp_path):
    env = costctl_env(tmp_path / "data")
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        code = subprocess.run(
            costctl_cmd("watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--",
                        sys.executable, str(CHILDREN / "flood.py"), str(LINES)),
            env=env, cwd=REPO, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, timeout=300,
        ).returncode
    assert code == 0, err.read_text()[-2000:]
    got, want = out.read_bytes(), _expected(LINES)
    assert len(got) == len(want), f"{len(want) - len(got)} bytes of the job's output lost"
    assert got == want
    log = next((tmp_path / "data" / "runs").glob("*.log"))
    assert log.read_bytes() == want
