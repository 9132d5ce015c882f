"""costctl watch end to end against a real SQLite ledger: progress timing, charges, SIGKILL, idle stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import Charge, DecisionRow, Progress, Run
from helpers import CHILDREN, REPO, costctl_cmd, costctl_env, run_costctl


def _session(data_dir: Path) -> Session:
    engine = create_engine(f"sqlite:///{data_dir / 'costctl.db'}")
    return Session(engine)


@pytest.mark.realtime  # a latency bound in real seconds
def test_unflushed_loss_lines_are_seen_within_a_second(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, str(CHILDREN / "slow_loss.py"), "4", env=env
    )
    assert proc.returncode == 0
    printed = {}
    for line in proc.stdout.decode().splitlines():
        m = re.match(r"iter (\d+): loss ([\d.]+) t=([\d.]+)", line)
        assert m, line
        printed[int(m.group(1))] = float(m.group(3))
    assert len(printed) == 4
    with _session(tmp_path) as s:
        rows = s.scalars(select(Progress).order_by(Progress.id)).all()
    assert [r.step for r in rows] == [0, 1, 2, 3]
    for r in rows:
        seen = r.time.timestamp()
        assert 0 <= seen - printed[r.step] < 1.0, (r.step, seen - printed[r.step])


def test_run_is_charged_for_its_duration_and_billed(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c",
        "import time\nfor i in range(3):\n    print(f'loss: {1/(i+1)}'); time.sleep(0.7)", env=env,
    )
    assert proc.returncode == 0, proc.stderr
    bill = run_costctl("bill", "--format", "json", env=env)
    assert bill.returncode == 0, bill.stderr
    data = json.loads(bill.stdout)
    assert len(data["rows"]) == 1
    row = data["rows"][0]
    expected = Decimal(str(row["duration_s"])) * Decimal(row["price_per_hour"]) / 3600
    assert Decimal(row["spend"]) > 0
    assert abs(Decimal(row["spend"]) - expected) <= expected * Decimal("0.01")
    assert row["provider"] == "sim" and row["currency"] == "USD"


def _sim_status(data_dir: Path) -> str:
    state = json.loads((data_dir / "sim" / "state.json").read_text())
    return state["instances"]["sim-local"]["status"]


def _charges(data_dir: Path) -> list[Charge]:
    with _session(data_dir) as s:
        return list(s.scalars(select(Charge).order_by(Charge.start_at)).all())


def _charged_some(data_dir: Path) -> bool:
    if not (data_dir / "costctl.db").exists():
        return False
    try:
        charges = _charges(data_dir)
    except Exception:  # noqa: BLE001 - tables not migrated yet
        return False
    return bool(charges) and charges[-1].end_at > charges[0].start_at


def test_sigkilled_watch_then_restart_never_charges_a_second_twice(tmp_path):
    env = costctl_env(tmp_path)
    watch = subprocess.Popen(
        costctl_cmd("watch", "--quiet", "--", sys.executable, str(CHILDREN / "busy_forever.py")),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
    )
    deadline = time.time() + 30
    while time.time() < deadline and not _charged_some(tmp_path):
        time.sleep(0.3)
    time.sleep(2.2)  # a few more ticks
    children = psutil.Process(watch.pid).children(recursive=True)
    watch.send_signal(signal.SIGKILL)
    watch.wait(10)
    for child in children:  # the job lives in its own process group: end it like a reboot would
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    with _session(tmp_path) as s:
        killed = s.scalars(select(Run)).one()
        killed_last_seen = killed.last_seen_at
        assert killed.ended_at is None
    before = _charges(tmp_path)
    assert before, "the killed watch charged nothing"
    assert max(c.end_at for c in before) == killed_last_seen, "charges must reach the last tick"

    proc = run_costctl(
        "watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c",
        "import time; print('loss: 1'); time.sleep(1.5)", env=env,
    )
    assert proc.returncode == 0
    after = _charges(tmp_path)
    # the killed run's charges are untouched
    assert [(c.start_at, c.end_at) for c in after if c.run_id == killed.id] == [
        (c.start_at, c.end_at) for c in before
    ]
    intervals = sorted((c.start_at, c.end_at) for c in after)
    for (s1, e1), (s2, e2) in zip(intervals, intervals[1:]):
        assert e1 <= s2, f"overlapping charges {s1}-{e1} and {s2}-{e2}"
    assert len({c.run_id for c in after}) == 2
    # the new watch closed the killed one's run: status lost, ended where its charges end
    with _session(tmp_path) as s:
        lost = s.get(Run, killed.id)
        assert (lost.status, lost.ended_at) == ("lost", killed_last_seen)
    bill = json.loads(run_costctl("bill", "--format", "json", env=env).stdout)
    row = next(r for r in bill["rows"] if r["run_id"] == killed.id)
    assert row["status"] == "lost" and row["ended_at"] is not None


def test_idle_policy_stops_the_sim_instance_after_the_job_exits(tmp_path):
    env = costctl_env(tmp_path, COSTCTL_POLICIES__IDLE__TIME_WINDOW="2s")
    start = time.monotonic()
    proc = run_costctl(
        "watch", "--on-exit", "guard", "--", sys.executable, "-c", "print('loss: 0.25')", env=env, timeout=60
    )
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert took < 30
    with _session(tmp_path) as s:
        decisions = s.scalars(select(DecisionRow)).all()
        run = s.scalars(select(Run)).one()
    idle = [d for d in decisions if d.policy == "idle"]
    assert len(idle) == 1 and idle[0].action == "stop"
    assert "stopped" in (idle[0].outcome or "")
    assert run.status == "stopped"
    assert _sim_status(tmp_path) == "stopped"


def test_on_exit_stop_dry_run_stops_nothing(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl(
        "watch", "--dry-run", "--on-exit", "stop", "--", sys.executable, "-c", "print('loss: 1')", env=env
    )
    assert proc.returncode == 0, proc.stderr
    with _session(tmp_path) as s:
        d = s.scalars(select(DecisionRow)).one()
    assert d.dry_run and d.action == "stop" and "would" in d.outcome
    assert _sim_status(tmp_path) == "running"


def test_sigterm_goes_to_the_job_and_the_run_is_closed(tmp_path):
    env = costctl_env(tmp_path)
    watch = subprocess.Popen(
        costctl_cmd("watch", "--quiet", "--", sys.executable, str(CHILDREN / "busy_forever.py")),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO,
    )
    first = watch.stdout.readline()
    assert first.startswith(b"loss:")
    watch.send_signal(signal.SIGTERM)
    rc = watch.wait(30)
    assert rc == 128 + signal.SIGTERM
    with _session(tmp_path) as s:
        run = s.scalars(select(Run)).one()
    assert run.ended_at is not None and run.status == "interrupted"
