"""A job that exits while processes it started in the background still hold its output: the
watch ends within one sample interval of the job's exit (it does not wait for them: billed
time), says once that what they write from then on goes only to the run log, and the exit
status is the job's. Real children, real time (generous bounds): the realtime group."""

from __future__ import annotations

import sys

import pytest

from helpers import costctl_env, run_costctl

# The job prints a loss line and exits 4; its background child holds the output, prints at
# 3.5 s (the relay still reads: the run log gets it) and again at 30 s (after the relay's
# drain: nowhere). A watch that waited for the end of the output would end after 5 s and show
# the 3.5 s line.
JOB = ("import subprocess, sys; "
       "subprocess.Popen([sys.executable, '-c', "
       "'import time; time.sleep(3.5); print(\"loss: 2\", flush=True); time.sleep(30); print(\"late\", flush=True)']); "
       "print('loss: 1', flush=True); sys.exit(4)")


@pytest.mark.realtime
def test_a_background_child_holding_the_output_does_not_keep_the_watch(tmp_path):
    data = tmp_path / "data"
    res = run_costctl("watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--", sys.executable, "-c", JOB,
                      env=costctl_env(data), timeout=60)
    err = res.stderr.decode()
    assert res.returncode == 4, err
    assert res.stdout.decode() == "loss: 1\n"  # the watch was gone before the child's 3.5 s line
    assert err.count("processes the job left behind still hold its output") == 1
    assert "Traceback" not in err
    import time

    time.sleep(5)  # the relay reads the child until 5 s after the job's exit
    (log,) = (data / "runs").glob("*.log")
    assert log.read_text() == "loss: 1\nloss: 2\n"
