"""Sweeps on a schedule: ``costctl patrol --every 5m`` runs one sweep at once and then one
every interval, with APScheduler (a ``BlockingScheduler`` in UTC; the job ``coalesce``\\ s missed
runs into one, never runs twice at once, and a run late by up to one interval still runs), until
SIGINT or SIGTERM. A sweep under way when the signal comes is let finish (a stop it carries is
confirmed or recorded as failed, never abandoned half-way); a sweep that fails is said and the
next one runs on time.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


class Every:
    """Runs ``sweep`` now and then every ``interval`` until :meth:`stop` (or SIGINT/SIGTERM in
    the main thread, when ``handle_signals``).

    Args:
        interval: the time between the starts of two sweeps (positive).
        sweep: one sweep; what it raises is passed to ``on_error`` and the schedule goes on.
        on_error: told of a sweep's exception (default: nothing).
        handle_signals: install SIGINT/SIGTERM handlers that stop the schedule (main thread only).
    """

    def __init__(self, interval: timedelta, sweep: Callable[[], Any], *,
                 on_error: Callable[[BaseException], None] | None = None, handle_signals: bool = True) -> None:
        if interval <= timedelta(0):
            raise ValueError(f"interval must be positive, got {interval}")
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.blocking import BlockingScheduler

        self.interval = interval
        self._sweep = sweep
        self._on_error = on_error
        self._handle_signals = handle_signals
        self.runs = 0
        self.scheduler = BlockingScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(1)},
            job_defaults={"coalesce": True, "max_instances": 1,
                          "misfire_grace_time": max(1, int(interval.total_seconds()))})

    def _run(self) -> None:
        self.runs += 1
        try:
            self._sweep()
        except Exception as exc:  # noqa: BLE001 - one failed sweep never ends the schedule
            if self._on_error is not None:
                self._on_error(exc)

    def stop(self) -> None:
        """End the schedule after the sweep under way, if any (any thread)."""
        threading.Thread(target=self._shutdown, name="costctl-patrol-stop", daemon=True).start()

    def _shutdown(self) -> None:
        try:
            self.scheduler.shutdown(wait=True)
        except Exception:  # noqa: BLE001 - not started yet, or already shut down
            pass

    def run(self) -> None:
        """Start and block until stopped."""
        from apscheduler.triggers.interval import IntervalTrigger

        self.scheduler.add_job(self._run, IntervalTrigger(seconds=self.interval.total_seconds(), timezone=UTC),
                               id="patrol", next_run_time=datetime.now(UTC))
        previous: dict[int, Any] = {}
        if self._handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_a: self.stop())
        try:
            self.scheduler.start()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


__all__ = ["Every"]
