"""Fleet mode end to end: watches whose central PostgreSQL ledger goes away.

* An in-process watch on a simulated clock, its central ledger behind a TCP proxy that drops
  every connection mid-run: the watch keeps guarding (its idle stop fires during the outage and
  the sim instance is stopped), says the outage once and its end once, and after reconnect the
  central ledger holds exactly the rows its own ledger recorded (charges with their intervals
  and Decimal amounts, rollups, runs, decisions, stop events), none twice.
* The same with the outage lasting past the watch's end: it ends on time, says what waits, and
  `costctl db sync` sends it later.
* A real `costctl watch` killed with SIGKILL while the central ledger is cut off: what it sent
  is in the central ledger as it was; a restarted watch sends the rest (the killed run, closed
  as lost, and its own), so the central ledger equals the local one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from conftest import reset_postgres_schema
from costctl.cli.main import main
from costctl.ledger import tables
from outbox_support import assert_no_second_twice, charges, dump
from helpers import CHILDREN, REPO, costctl_cmd, costctl_env, run_costctl
from lifecycle_support import T0, FixedGpu, SimClock, drive, settings, watcher
from pg_proxy import DroppingProxy

pytestmark = pytest.mark.postgres

UNREACHABLE = "the central ledger is unreachable"
BACK = "the central ledger is back"


@pytest.fixture
def central(postgres_schema):
    """``(proxy, URL through the proxy, engine straight to the server)`` on an empty schema."""
    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    proxy = DroppingProxy((url.host or "127.0.0.1", url.port or 5432))
    direct = sa.create_engine(url)
    try:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), direct
    finally:
        direct.dispose()
        proxy.close()


def fleet_settings(tmp_path: Path, central_url: str, flush: str = "20s"):
    return settings(tmp_path, f"""
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "60s"
[ledger]
central_url = "{central_url}"
sync_interval = "1h"            # the test says when to send (sync_now), besides the start and the end
central_flush_timeout = "{flush}"
""")


def local_engine(tmp_path: Path) -> sa.Engine:
    return sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")


def sim_status(tmp_path: Path) -> set[str]:
    state = json.loads((tmp_path / "data" / "sim" / "state.json").read_text())
    return {i["status"] for i in state["instances"].values()}


def test_a_watch_whose_central_ledger_goes_away_keeps_guarding_and_loses_nothing(tmp_path, central):
    proxy, url, direct = central
    clock = SimClock(T0)
    w = watcher(fleet_settings(tmp_path, url), [], clock,
                sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
    said: list[str] = []
    w.say = said.append
    seen: dict[str, object] = {}
    ticks: list[bool] = []  # per tick: was the central ledger away?
    tick = w.tick

    def counted_tick(now):
        ticks.append(proxy.blocked.is_set())
        return tick(now)
    w.tick = counted_tick

    def step(now):
        elapsed = (now - T0).total_seconds()
        sync = w.central
        if sync is None:
            return
        w.writer.flush(5)  # what the watch's writer holds back (it writes every 10 real seconds) is written now
        if elapsed == 10:
            assert sync.sync_now(30), said  # reachable: the run is in the central ledger
            with direct.connect() as conn:
                seen["run_sent"] = conn.scalar(sa.select(sa.func.count()).select_from(tables.runs))
            proxy.block()  # the partition
        elif 10 < elapsed <= 30:
            assert not sync.sync_now(30)  # every send fails while it lasts
        stop = w.executor.stop if w.executor is not None else None
        if stop is not None and "stopped_during_outage" not in seen:
            # the idle stop fired while the central ledger was away
            seen["stopped_during_outage"] = proxy.blocked.is_set()
            assert not sync.sync_now(30)
            proxy.unblock()  # reconnect: the watch's last send (at its end) flushes the rest

    code, status = drive(w, clock, step_s=5, max_real_s=90, on_step=step)
    assert (code, status) == (0, "stopped")
    assert seen["run_sent"] == 1 and seen["stopped_during_outage"] is True
    assert ticks.count(True) >= 8  # it kept ticking through the outage (60 s idle window, 5 s ticks)
    assert sim_status(tmp_path) == {"stopped"}
    assert sum(UNREACHABLE in line for line in said) == 1, said
    assert sum(BACK in line for line in said) == 1, said
    assert not any("were not sent" in line for line in said), said
    local = local_engine(tmp_path)
    try:
        with local.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(tables.outbox)) == 0
        mine, theirs = dump(local), dump(direct)
        assert theirs == mine
        assert mine["charges"] and mine["decisions"] and mine["stop_events"]
        assert_no_second_twice(direct)
        run = next(iter(mine["runs"].values()))
        assert charges(direct)[-1][3] == run["ended_at"]  # charged to the run's end, once
    finally:
        local.dispose()


def test_a_watch_that_ends_during_the_outage_ends_on_time_and_db_sync_sends_the_rest(tmp_path, central,
                                                                                    monkeypatch):
    proxy, url, direct = central
    clock = SimClock(T0)
    w = watcher(fleet_settings(tmp_path, url, flush="2s"), [], clock,
                sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
    said: list[str] = []
    w.say = said.append

    def step(now):
        if (now - T0).total_seconds() == 10 and w.central is not None:
            w.writer.flush(5)
            assert w.central.sync_now(30), said
            proxy.block()

    started = time.monotonic()
    code, status = drive(w, clock, step_s=5, max_real_s=90, on_step=step)
    assert (code, status) == (0, "stopped")
    assert time.monotonic() - started < 30  # the last send waited 2 s, not until the ledger came back
    assert sum(UNREACHABLE in line for line in said) == 1, said
    assert sum("were not sent to the central ledger" in line for line in said) == 1, said
    local = local_engine(tmp_path)
    try:
        assert dump(direct) != dump(local)
        proxy.unblock()
        monkeypatch.chdir(tmp_path)
        assert main(["db", "sync", "--config", str(tmp_path / "costctl.toml")]) == 0
        assert dump(direct) == dump(local)
        assert_no_second_twice(direct)
    finally:
        local.dispose()


def _central_charges(engine: sa.Engine) -> list:
    try:
        return charges(engine)
    except sa.exc.SQLAlchemyError:  # no tables yet
        return []


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_watch_killed_during_an_outage_keeps_what_it_sent_and_a_restart_sends_the_rest(tmp_path, central):
    proxy, url, direct = central
    env = costctl_env(tmp_path / "data", COSTCTL_LEDGER__CENTRAL_URL=url, COSTCTL_LEDGER__SYNC_INTERVAL="1s",
                      COSTCTL_POLICIES__IDLE__TIME_WINDOW="off")
    local = local_engine(tmp_path)
    watch = subprocess.Popen(costctl_cmd("watch", "--quiet", "--", sys.executable, str(CHILDREN / "busy_forever.py")),
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: bool(_central_charges(direct)), 60, "the first charge in the central ledger")
        proxy.block()
        cut_at = _central_charges(direct)[-1][3]

        def local_ahead() -> bool:
            mine = charges(local)
            return bool(mine) and mine[-1][3] > cut_at
        _wait(local_ahead, 60, "the local ledger to charge past what was sent")
        jobs = psutil.Process(watch.pid).children(recursive=True)
        watch.send_signal(signal.SIGKILL)
        watch.wait(10)
        for child in jobs:  # the job and its relay live on without the watch: end them as a reboot would
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    finally:
        if watch.poll() is None:
            watch.kill()
    try:
        sent = dump(direct)  # what the killed watch sent is in the central ledger: a prefix of its own
        [(run, _, start, end, *_)] = sent["charges"]
        [(local_run, _, local_start, local_end, *_)] = charges(local)
        assert (run, start) == (local_run, local_start) and end < local_end
        assert list(sent["runs"]) == [run]
        with local.connect() as conn:  # the rest waits in its outbox
            assert conn.scalar(sa.select(sa.func.count()).select_from(tables.outbox)) > 0
        proxy.unblock()
        proc = run_costctl("watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c",
                           "print('loss: 1')", env=env)
        assert proc.returncode == 0, proc.stderr
        mine = dump(local)
        assert len(mine["runs"]) == 2 and mine["runs"][run]["status"] == "lost"
        assert dump(direct) == mine
        assert_no_second_twice(direct)
        with local.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(tables.outbox)) == 0
    finally:
        local.dispose()
