"""A real ``costctl watch`` (a child process on the simulated provider) guards its instance in
``costctl fleet`` (another child process, the same data dir and ledger) through the heartbeat its
per-tick ledger writes move; once the watch has ended its run, the instance is unwatched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from sqlalchemy import create_engine, text

from helpers import CHILDREN, REPO, costctl_cmd, costctl_env, run_costctl


def _heartbeats(data_dir: Path) -> int:
    """How many times the open run's heartbeat was seen to move past its start (0: none yet)."""
    db = data_dir / "costctl.db"
    if not db.exists():
        return 0
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT started_at, last_seen_at FROM runs WHERE ended_at IS NULL")).first()
    except Exception:  # noqa: BLE001 - the tables are not created yet
        return 0
    finally:
        engine.dispose()
    return int(row is not None and row[1] > row[0])


def _fleet(env: dict[str, str]) -> dict:
    proc = run_costctl("fleet", "--format", "json", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return next(r for r in json.loads(proc.stdout)["instances"] if r["id"] == "sim-local")


def test_a_running_watch_guards_and_an_ended_one_does_not(tmp_path):
    # the fleet process judges the heartbeat with a lag no loaded test machine reaches
    env = costctl_env(tmp_path, COSTCTL_FLEET__GUARD_LAG="10m")
    assert _fleet(env)["guard"]["state"] == "unwatched"
    watch = subprocess.Popen(costctl_cmd("watch", "--quiet", "--on-exit", "leave", "--", sys.executable,
                                         str(CHILDREN / "busy_forever.py")),
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _heartbeats(tmp_path):
            time.sleep(0.2)
        assert _heartbeats(tmp_path), "the watch never moved its run's heartbeat"
        row = _fleet(env)
        assert row["guarded"] is True and row["guard"]["state"] == "guarded"
        assert row["guard"]["mode"] is None and row["guard"]["run_id"]
        assert Decimal(row["ledger_spend"]["USD"]) > 0
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(60)
    row = _fleet(env)
    assert row["guarded"] is False and row["guard"]["state"] == "unwatched"

