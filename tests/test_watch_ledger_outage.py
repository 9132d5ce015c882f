"""A ledger outage spanning the job's exit: the instance is still stopped (``--on-exit stop``) and,
once the ledger returns, the outage's charges are in it, covering the whole run with no gap.

Two outages: a TCP proxy in front of PostgreSQL that drops every connection for a while, and a
SQLite write lock held 45 s by another process (past the 30 s busy timeout; real time).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import select
from sqlalchemy.orm import Session

from conftest import reset_postgres_schema
from costctl.ledger.schema import Charge, DecisionRow, Run
from helpers import REPO, costctl_cmd, costctl_env
from pg_proxy import DroppingProxy

JOB = "import time; print('loss: 1', flush=True); time.sleep(4); print('loss: 0.5', flush=True)"


def _sim_status(data_dir: Path) -> str:
    state = json.loads((data_dir / "sim" / "state.json").read_text())
    return state["instances"]["sim-local"]["status"]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - not there yet (no tables, no file)
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _charged(engine: sa.Engine) -> bool:
    with Session(engine) as s:
        return s.scalar(select(sa.func.count()).select_from(Charge)) > 0


def _assert_run_stopped_and_fully_charged(engine: sa.Engine, stderr: str) -> None:
    with Session(engine) as s:
        run = s.scalars(select(Run)).one()
        charges = s.scalars(select(Charge).order_by(Charge.start_at)).all()
        decisions = s.scalars(select(DecisionRow).where(DecisionRow.policy == "on-exit")).all()
    assert run.status == "stopped" and run.ended_at is not None, (run.status, stderr)
    assert charges and charges[0].start_at == run.started_at
    for a, b in zip(charges, charges[1:]):
        assert a.end_at == b.start_at, f"a gap in the charges: {a.end_at} .. {b.start_at}"
    assert charges[-1].end_at == run.ended_at, "the outage's charges are missing"
    assert (run.ended_at - run.started_at).total_seconds() > 4
    assert len(decisions) == 1 and "stopped" in (decisions[0].outcome or "")
    assert stderr.count("the ledger is unreachable") == 1, stderr
    assert stderr.count("the ledger is back, ") == 1, stderr


@pytest.mark.postgres
def test_postgres_dropping_connections_across_the_exit_still_stops_and_charges(tmp_path, postgres_schema):
    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    proxy = DroppingProxy((url.host or "127.0.0.1", url.port or 5432))
    direct = sa.create_engine(url)
    try:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        env = costctl_env(tmp_path, COSTCTL_DATABASE_URL=proxied, COSTCTL_WATCH__LEDGER_RETRY_MAX="1s")
        watch = subprocess.Popen(costctl_cmd("watch", "--on-exit", "stop", "--", sys.executable, "-c", JOB),
                                 env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait(lambda: _charged(direct), 30, "the first charge")
            proxy.block()
            # the job exits during the outage: the stop does not wait for the ledger
            _wait(lambda: _sim_status(tmp_path) == "stopped", 30, "the sim instance to be stopped")
            assert watch.poll() is None, "the watch ended before the ledger came back"
            time.sleep(2)
            proxy.unblock()
            _, err = watch.communicate(timeout=60)
        finally:
            if watch.poll() is None:
                watch.kill()
        stderr = err.decode()
        assert watch.returncode == 0, stderr
        _assert_run_stopped_and_fully_charged(direct, stderr)
    finally:
        direct.dispose()
        proxy.close()


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@pytest.mark.realtime  # holds a SQLite write lock for 45 real seconds
def test_sqlite_locked_45s_across_the_exit_still_stops_and_charges(tmp_path):
    db = tmp_path / "costctl.db"
    direct = sa.create_engine(f"sqlite:///{db}")
    env = costctl_env(tmp_path, COSTCTL_WATCH__LEDGER_RETRY_MAX="2s")
    watch = subprocess.Popen(costctl_cmd("watch", "--on-exit", "stop", "--", sys.executable, "-c", JOB),
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    locker = None
    try:
        _wait(lambda: _charged(direct), 30, "the first charge")
        locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), "45"], stdout=subprocess.PIPE)
        assert locker.stdout.readline().strip() == b"locked"
        _wait(lambda: _sim_status(tmp_path) == "stopped", 20, "the sim instance to be stopped")
        assert locker.poll() is None, "the lock was released before the stop"
        assert watch.poll() is None, "the watch ended before the ledger came back"
        assert locker.wait(60) == 0
        _, err = watch.communicate(timeout=90)
    finally:
        for p in (watch, locker):
            if p is not None and p.poll() is None:
                p.kill()
    stderr = err.decode()
    assert watch.returncode == 0, stderr
    _assert_run_stopped_and_fully_charged(direct, stderr)
    direct.dispose()
