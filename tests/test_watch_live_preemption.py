"""A preemption notice in a live watch (real clock, its stop in the stop thread): the job is
ended before the deadline, the instance is stopped and confirmed, the run reads preempted.
(The lifecycle's preemption hands its stop straight to the executor, not through a policy
decision: the live watch must still start the stop's thread. A real child, real time: the
realtime group.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import costctl_cmd, costctl_env, run_costctl

JOB = "import time\nfor i in range(10**6):\n    print(f'step {i} loss: {1 / (i + 1):.5f}', flush=True)\n    time.sleep(0.1)\n"


@pytest.mark.realtime
def test_a_notice_in_a_live_watch_ends_the_job_and_stops_the_instance(tmp_path):
    data = tmp_path / "data"
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[instance]\nprovider = "sim"\ngpu = "RTX 4090"\nbilling = "spot"\n'
                   '[watch]\nsample_interval = "1s"\ngrace_period = "2s"\n[preemption]\nmargin = "1s"\n'
                   'poll_interval = "1s"\n')
    env = costctl_env(data)
    proc = subprocess.Popen(costctl_cmd("watch", "--config", str(cfg), "--on-exit", "leave", "--no-pty", "--",
                                        sys.executable, "-c", JOB),
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (data / "sim").exists():
            time.sleep(0.2)
        time.sleep(2)  # the job trains a little
        inject = ("import sys; from pathlib import Path; from costctl_providers.sim import SimProvider; "
                  "p = SimProvider({'gpu': 'RTX 4090', 'billing': 'spot'}, data_dir=Path(sys.argv[1])); "
                  "p.inject_preemption('sim-local', 8)")
        subprocess.run([sys.executable, "-c", inject, str(data)], check=True, env=env, timeout=60)
        code = proc.wait(60)  # ends before the 8 s deadline, not never
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode()
    assert code == 143, err[-3000:]  # the job, ended with SIGTERM
    assert "is stopped (confirmed by sim" in err, err[-3000:]
    bill = run_costctl("bill", "--format", "json", env=env)
    (row,) = json.loads(bill.stdout)["rows"]
    assert row["status"] == "preempted" and row["stop_state"] == "confirmed"
