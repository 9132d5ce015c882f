"""The job outlives its watcher (issue 12, the relay): for each way a watch can die or lose its
terminal — SIGKILL, SIGHUP, its pty master closed, an exception in the code that handles the
job's output — a job printing a heartbeat every 0.2 s is still alive and writing 10 s later,
and every heartbeat it wrote is in the run log (the relay owns the job's pipes)."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import CHILDREN, REPO, costctl_cmd, costctl_env

pytestmark = pytest.mark.realtime

HEARTBEAT = [sys.executable, str(CHILDREN / "heartbeat.py")]
WATCH_ARGS = ["watch", "--quiet", "--no-status", "--on-exit", "leave", "--", *HEARTBEAT]
SURVIVE_S = 10.0


def _wait_for(pred, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _state(data: Path) -> dict | None:
    files = sorted((data / "runs").glob("*.relay.json"))  # the first watch's first
    if not files:
        return None
    state = json.loads(files[0].read_text())
    return state if state.get("job_pid") else None


def _log_beats(data: Path) -> list[int]:
    (log,) = list((data / "runs").glob("*.log"))
    return [int(n) for n in re.findall(rb"^heartbeat (\d+) loss", log.read_bytes(), re.M)]


def _written(record: Path) -> list[int]:
    return [int(x) for x in record.read_text().split()] if record.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _env(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    data, record = tmp_path / "data", tmp_path / "written.txt"
    return costctl_env(data, HEARTBEAT_FILE=str(record), HEARTBEAT_S="60"), data, record


def _check_survived(data: Path, record: Path, job_pid: int) -> None:
    """The watch just died or lost its terminal: 10 s later the job still runs and writes, and
    every heartbeat it wrote is in the run log, in order."""
    at_death = len(_written(record))
    time.sleep(SURVIVE_S)
    assert _alive(job_pid), "the job died with its watcher"
    written = _written(record)
    assert len(written) >= at_death + int(SURVIVE_S / 0.2 / 2), "the job stopped writing"
    before = len(written)
    _wait_for(lambda: len(_written(record)) > before, 5, "one more heartbeat")  # still writing now
    written = _written(record)
    logged = _log_beats(data)
    assert logged[: len(written)] == written == list(range(len(written))), "a heartbeat is missing from the run log"


def _end_job(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_kill_9_of_the_watch_leaves_the_job_running_and_logged(tmp_path):
    env, data, record = _env(tmp_path)
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        watch = subprocess.Popen(costctl_cmd(*WATCH_ARGS), env=env, cwd=REPO, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 3, what="heartbeats")
        watch.kill()
        watch.wait(10)
        _check_survived(data, record, state["job_pid"])
    finally:
        _end_job(state["job_pgid"])
        watch.kill()
    # the relay records the job's end for whoever comes next
    final = _wait_for(lambda: (s := _state(data)) and s.get("ended") and s, 15, "the relay's final state")
    assert final["exit_status"] == 128 + signal.SIGKILL
    (log,) = list((data / "runs").glob("*.log"))
    assert final["log_bytes"] == log.stat().st_size and final["run_id"]


def test_sighup_to_the_watch_ends_neither_the_watch_nor_the_job(tmp_path):
    env, data, record = _env(tmp_path)
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        watch = subprocess.Popen(costctl_cmd(*WATCH_ARGS), env=env, cwd=REPO, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 3, what="heartbeats")
        watch.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        size_after_hup = (tmp_path / "out").stat().st_size
        _check_survived(data, record, state["job_pid"])
        assert watch.poll() is None, "SIGHUP ended the watch"
        # stdout is a file, not the terminal that went away: it goes on getting the job's output
        assert (tmp_path / "out").stat().st_size > size_after_hup, "output to a file stopped after SIGHUP"
        # SIGTERM still passes to the job's group, and the exit status is the job's
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(30) == 128 + signal.SIGTERM
        assert not _alive(state["job_pid"])
    finally:
        _end_job(state["job_pgid"])
        watch.kill()


def test_closing_the_watchs_pty_master_leaves_the_job_running_and_logged(tmp_path):
    env, data, record = _env(tmp_path)
    argv = costctl_cmd("watch", "--on-exit", "leave", "--", *HEARTBEAT)  # status line and messages on
    pid, master = pty.fork()
    if pid == 0:  # the watch, on the pty (its controlling terminal)
        os.chdir(REPO)
        os.execvpe(argv[0], argv, env)
    state = None
    try:
        state = _wait_for(lambda: _state(data), what="the relay's state file")
        # read the terminal for a while (the watch writes to it), then hang up
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                os.read(master, 65536)
            except OSError:
                break
        os.close(master)
        _check_survived(data, record, state["job_pid"])
        alive = os.waitpid(pid, os.WNOHANG) == (0, 0)
        assert alive, "the watch ended when its terminal went away"
        # SIGTERM still ends it the usual way, with the job's exit status
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 128 + signal.SIGTERM
        assert not _alive(state["job_pid"])
    finally:
        if state is not None:
            _end_job(state["job_pgid"])
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


_RAISING_WATCH = """
import sys
import costctl.child as child

def boom(self, stream, data):
    raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

child.OutputMux.write = boom
from costctl.cli.main import run
sys.argv = ["costctl", *sys.argv[1:]]
run()
"""


def test_an_exception_in_the_output_handling_leaves_the_job_running_and_logged(tmp_path):
    env, data, record = _env(tmp_path)
    err_path = tmp_path / "err"
    with open(tmp_path / "out", "wb") as out, open(err_path, "wb") as err:
        args = [a for a in WATCH_ARGS if a != "--quiet"]  # its message is the point
        watch = subprocess.Popen([sys.executable, "-c", _RAISING_WATCH, *args], env=env, cwd=REPO,
                                 stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 3, what="heartbeats")
        _check_survived(data, record, state["job_pid"])
        assert watch.poll() is None, "the exception ended the watch"
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(30) == 128 + signal.SIGTERM
    finally:
        _end_job(state["job_pgid"])
        watch.kill()
    assert b"error while handling the job's output: ValueError" in err_path.read_bytes()


def test_a_run_whose_watch_was_killed_reads_unguarded_not_lost_while_its_job_runs(tmp_path):
    env, data, record = _env(tmp_path)
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        watch = subprocess.Popen(costctl_cmd(*WATCH_ARGS), env=env, cwd=REPO, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 3, what="heartbeats")
        watch.kill()
        watch.wait(10)
        bill = subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO, capture_output=True,
                              timeout=60)
        (row,) = json.loads(bill.stdout)["rows"]
        assert row["status"] == "unguarded" and row["ended_at"] is None
        table = subprocess.run(costctl_cmd("bill"), env={**env, "COLUMNS": "200"}, cwd=REPO, capture_output=True,
                               timeout=60)
        assert b"unguarded" in table.stdout and b"its job still runs" in table.stdout
        # a second watch on the same instance does not close it as lost while the job runs
        second = subprocess.run(costctl_cmd("watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c",
                                            "print('loss: 1')"), env=env, cwd=REPO, capture_output=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        assert second.returncode == 0, second.stderr.decode()
        rows = json.loads(subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO,
                                         capture_output=True, timeout=60).stdout)["rows"]
        first = next(r for r in rows if r["run_id"] == row["run_id"])
        assert first["status"] == "unguarded" and first["ended_at"] is None
        assert _alive(state["job_pid"])
    finally:
        _end_job(state["job_pgid"])
        watch.kill()
    # once the job ended (killed: 137), the watch the relay starts (--attach, the dead watch's
    # --on-exit leave) closes the run: failed (137), not lost
    def closed():
        rows = json.loads(subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO,
                                         capture_output=True, timeout=60).stdout)["rows"]
        first = next(r for r in rows if r["run_id"] == row["run_id"])
        return first if first["ended_at"] else None

    assert _wait_for(closed, 60, "the on-exit watch to close the run")["status"] == "failed"
    assert _exit_code(data, row["run_id"]) == 128 + signal.SIGKILL


def _charges(data: Path, run_id: str) -> list[tuple[str, str]]:
    import sqlite3

    (db,) = list(data.rglob("*.db"))
    with sqlite3.connect(db) as conn:
        return [(a, b) for a, b in conn.execute(
            "SELECT start_at, end_at FROM charges WHERE run_id = ? ORDER BY start_at", (run_id,))]


def _exit_code(data: Path, run_id: str) -> int | None:
    import sqlite3

    (db,) = list(data.rglob("*.db"))
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT exit_code FROM runs WHERE id = ?", (run_id,)).fetchone()[0]


def _run_pid(data: Path, run_id: str) -> int | None:
    import sqlite3

    (db,) = list(data.rglob("*.db"))
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT pid FROM runs WHERE id = ?", (run_id,)).fetchone()[0]


def test_attach_takes_over_an_unguarded_run_and_closes_it_at_the_jobs_end(tmp_path):
    """kill -9 of the watch, the run reads unguarded; `costctl watch --attach RUN` follows the job
    to its end: the same run closed completed with the job's exit status, its charges continuous
    (none overlapping, their sum the run's charged span), every heartbeat in the run log."""
    from datetime import datetime

    data, record, until = tmp_path / "data", tmp_path / "written.txt", tmp_path / "end-now"
    env = costctl_env(data, HEARTBEAT_FILE=str(record), HEARTBEAT_S="60", HEARTBEAT_UNTIL=str(until))
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        watch = subprocess.Popen(costctl_cmd(*WATCH_ARGS), env=env, cwd=REPO,
                                 stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 8, what="heartbeats")
        watch.kill()
        watch.wait(10)
        beats_at_death = len(_written(record))
        bill = subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO, capture_output=True,
                              timeout=60)
        (row,) = json.loads(bill.stdout)["rows"]
        assert row["status"] == "unguarded"
        time.sleep(1.0)  # unwatched for a while
        with open(tmp_path / "out2", "wb") as out, open(tmp_path / "err2", "wb") as err:
            attach = subprocess.Popen(costctl_cmd("watch", "--quiet", "--no-status", "--on-exit", "leave",
                                                  "--attach", row["run_id"][:8]),
                                      env=env, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _wait_for(lambda: _run_pid(data, row["run_id"]) == attach.pid or attach.poll() is not None, 60,
                  "the attached watch to take the run over")
        time.sleep(1.0)  # followed for a while
        until.touch()  # the job ends (exit status 0)
        attach.wait(60)
    finally:
        _end_job(state["job_pgid"])
        watch.kill()
    attach.stdout = (tmp_path / "out2").read_bytes()
    attach.stderr = (tmp_path / "err2").read_bytes()
    assert attach.returncode == 0, attach.stderr.decode()
    # it followed from where the dead watch was, not from the start
    assert b"heartbeat 0 loss" not in attach.stdout
    assert b"heartbeat %d loss" % (len(_written(record)) - 1) in attach.stdout
    rows = json.loads(subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO,
                                     capture_output=True, timeout=60).stdout)["rows"]
    (closed,) = rows
    assert closed["run_id"] == row["run_id"] and closed["status"] == "completed" and closed["ended_at"]
    assert _exit_code(data, row["run_id"]) == 0
    written = _written(record)
    assert len(written) > beats_at_death
    assert _log_beats(data)[: len(written)] == written == list(range(len(written)))
    charges = [(datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in _charges(data, row["run_id"])]
    assert charges
    for (_, end), (start, _) in zip(charges, charges[1:]):
        assert start >= end, "two charges overlap"
    total = sum((b - a).total_seconds() for a, b in charges)
    span = (charges[-1][1] - charges[0][0]).total_seconds()
    assert abs(total - span) < 1e-6, "a gap in the charges"



def test_with_no_reattach_the_jobs_end_still_stops_the_sim_instance(tmp_path):
    """--on-exit stop, the watch killed with SIGKILL, nothing re-attaches: at the job's end its
    relay starts `costctl watch --attach RUN --on-exit stop`, which closes the run and stops the
    instance."""
    data, record = tmp_path / "data", tmp_path / "written.txt"
    env = costctl_env(data, HEARTBEAT_FILE=str(record), HEARTBEAT_S="3")
    args = ["watch", "--quiet", "--no-status", "--on-exit", "stop", "--", *HEARTBEAT]
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        watch = subprocess.Popen(costctl_cmd(*args), env=env, cwd=REPO, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL)
    state = _wait_for(lambda: _state(data), what="the relay's state file")
    try:
        _wait_for(lambda: len(_written(record)) >= 3, what="heartbeats")
        watch.kill()
        watch.wait(10)
        final = _wait_for(lambda: (s := _state(data)) and s.get("on_exit_pid") and s, 30, "the on-exit watch")
        assert "--attach" in final["on_exit_argv"] and final["run_id"] in final["on_exit_argv"]

        def closed():
            rows = json.loads(subprocess.run(costctl_cmd("bill", "--format", "json"), env=env, cwd=REPO,
                                             capture_output=True, timeout=60).stdout)["rows"]
            return rows[0] if rows and rows[0]["ended_at"] else None

        row = _wait_for(closed, 60, "the on-exit watch to close the run")
    finally:
        _end_job(state["job_pgid"])
        watch.kill()
    on_exit_log = next((data / "runs").glob("*.on-exit.out")).read_text()
    assert row["status"] == "stopped", on_exit_log
    # the on-exit watch passes none of the job's output on again: the run log has it all
    assert "--no-passthrough" in final["on_exit_argv"] and "heartbeat" not in on_exit_log, on_exit_log[:500]
    assert _exit_code(data, row["run_id"]) == 0
    (inst,) = json.loads((data / "sim" / "state.json").read_text())["instances"].values()
    assert inst["status"] in ("stopping", "stopped")
    written = _written(record)
    assert _log_beats(data)[: len(written)] == written == list(range(len(written)))
