"""The job started before the watch's heavy parts and the ledger (costctl.watch.launch): the
preflight first, the run recorded under the id the job was given, a ledger that fails after
the job started ends the job, and what cannot start early does not."""

from __future__ import annotations

import signal
import sqlite3
import sys
import time
from types import SimpleNamespace

import pytest

from costctl.errors import LedgerError
from costctl.watch import launch
from costctl.watch.options import WatchOptions
from helpers import costctl_env, run_costctl
from lifecycle_support import settings


def test_the_job_gets_the_run_id_the_ledger_records_and_its_charges_start_before_it(tmp_path):
    env = costctl_env(tmp_path)
    job = "import os, time; print('RUN', os.environ['COSTCTL_RUN_ID'], time.time())"
    proc = run_costctl("watch", "--quiet", "--dry-run", "--on-exit", "leave", "--", sys.executable, "-c", job, env=env)
    assert proc.returncode == 0, proc.stderr
    _, run_id, printed = proc.stdout.decode().split()
    db = sqlite3.connect(tmp_path / "costctl.db")
    (started,), = db.execute("select started_at from runs where id = ?", (run_id,)).fetchall()
    (status,), = db.execute("select status from runs where id = ?", (run_id,)).fetchall()
    db.close()
    from datetime import datetime, timezone

    start = datetime.fromisoformat(str(started))
    start = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
    assert start.timestamp() <= float(printed)  # the run (and its charges) start before the job
    assert status == "completed"


def test_a_ledger_that_fails_after_the_early_start_ends_the_job_and_says_so(tmp_path, monkeypatch):
    """The job runs; then the ledger cannot be opened: nothing was recorded (so nothing to
    lose), the job is ended (not left running unrecorded and unguarded), the error raised."""
    from costctl.ledger.db import Ledger
    from costctl.watch.watcher import Watcher

    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\ngrace_period = "2s"\n')
    opts = WatchOptions(command=[sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                        quiet=True, status_line=False, on_exit="leave", dry_run=True, pty=False)
    early = launch.launch_early(s, opts)
    assert early is not None and early.job is not None and early.job.running
    try:
        def broken(url, **kwargs):
            raise LedgerError("the database is locked")

        monkeypatch.setattr(Ledger, "open", broken)
        w = Watcher(early.settings, opts, early=early)
        with pytest.raises(LedgerError):
            w.start()
        assert not early.job.running and early.job.status is not None
        assert (tmp_path / "data").exists() and not (tmp_path / "data" / "costctl.db").exists()
    finally:
        early.restore_signals()
        if early.job.running:
            early.job.kill()


def test_a_signal_before_the_watch_runs_is_kept_for_it(tmp_path):
    """SIGINT/SIGTERM between the job's start and the watch's own handlers is kept (never a
    KeyboardInterrupt leaving the job unrecorded); the watch's loop passes it to the job."""
    early = SimpleNamespace(signals=[])
    old = signal.signal(signal.SIGTERM, lambda signum, frame: launch.EarlyStart._on_signal(early, signum, frame))
    try:
        signal.raise_signal(signal.SIGTERM)
        time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert early.signals == [signal.SIGTERM]


def test_what_must_be_recorded_first_does_not_start_early(tmp_path):
    from costctl_providers.base import Status

    opts = WatchOptions(command=["true"])
    running = SimpleNamespace(instance=SimpleNamespace(status=Status.RUNNING))
    stopped = SimpleNamespace(instance=SimpleNamespace(status=Status.STOPPED))
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    assert launch.can_start_early(opts, running, url)
    assert not launch.can_start_early(opts, stopped, url)  # bring_up starts it and records that first
    assert not launch.can_start_early(WatchOptions(command=None), running, url)
    assert not launch.can_start_early(WatchOptions(command=None, attach="abc"), running, url)
    assert not launch.can_start_early(opts, running, "postgresql+psycopg://u@h/db")  # a server: ledger first
    with pytest.raises(LedgerError, match="cannot create the directory"):
        launch.can_start_early(opts, running, "sqlite:////proc/costctl-no/costctl.db")


def test_early_output_is_reduced_for_the_oom_scan_and_replayed_in_order(tmp_path):
    """Output before the watch binds: the OOM scan's input is kept as the watch would reduce
    it (a chunk with an OOM message whole, else its last partial line), bounded, in order."""
    pending = launch._Pending(None)
    flood = "".join(f"step {i} loss: 0.5\n" for i in range(2000))
    for _ in range(500):
        pending.on_text("stdout", flood + "partial")
    pending.on_text("stderr", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    kept = pending.oom_texts
    assert sum(len(t) for _, t in kept) < 10_000 and len(kept) <= 66
    assert kept[-1] == ("stderr", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert kept[0] == ("stdout", "\npartial")
