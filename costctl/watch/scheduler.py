"""APScheduler with the watch's main loop as its timer: :class:`LoopScheduler`.

The watch's periodic work (the tick every ``[watch] sample_interval``, a policy deadline's
one-off tick, the preemption-notice poll) is scheduled with APScheduler: its triggers,
``coalesce``, ``misfire_grace_time`` and ``max_instances`` as documented. What runs the jobs
is the watch's main loop, which sleeps anyway between events (:mod:`.wakeup`): it asks
:meth:`LoopScheduler.wait_s` how long it may sleep and calls :meth:`LoopScheduler.run_due`
when woken. So a tick costs one thread's wake-up, where a ``BackgroundScheduler`` costs three
(its own thread's timer, a pool worker to run the tick, the main loop woken after it): on a
steady job at 1 s sampling those wake-ups, not the tick's work (~0.1 ms warm), were most of the
watcher's CPU.

Jobs of the ``default`` executor (:class:`DeferredExecutor`) run in the loop's thread, after
APScheduler has updated its job store and released its locks: a job may add, replace or remove
jobs, its own included (a deadline tick that queues the next deadline under the same id), and a
thread that adds a job while one runs never waits on it. A job that may block for long (an
HTTP poll of a cloud's metadata service) goes to another executor (a ``ThreadPoolExecutor``,
given by alias in ``add_job(executor=...)``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.schedulers.base import STATE_STOPPED, BaseScheduler


class DeferredExecutor(BaseExecutor):
    """An APScheduler executor that queues each submitted run for :meth:`run_pending`
    (called by :class:`LoopScheduler` in its loop's thread, outside the scheduler's locks).

    ``max_instances``, misfires and the job events work as with APScheduler's own executors
    (``run_job``, ``_run_job_success``/``_run_job_error`` of ``apscheduler.executors.base``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[tuple[Any, list[Any]]] = []
        self._pending_lock = threading.Lock()

    def _do_submit_job(self, job: Any, run_times: list[Any]) -> None:
        with self._pending_lock:
            self._pending.append((job, run_times))

    def run_pending(self) -> int:
        """Run the queued runs in the calling thread, in submission order; returns how many.
        A job that raises is reported as APScheduler reports it (``EVENT_JOB_ERROR``, logged);
        the others still run."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for job, run_times in pending:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException:  # noqa: BLE001 - as APScheduler's DebugExecutor
                self._run_job_error(job.id, *sys.exc_info()[1:])
            else:
                self._run_job_success(job.id, events)
        return len(pending)

    def shutdown(self, wait: bool = True) -> None:
        """Drop the runs not started (a shut-down scheduler runs nothing more)."""
        with self._pending_lock:
            self._pending = []


class LoopScheduler(BaseScheduler):
    """An APScheduler scheduler driven by the caller's own loop (see the module docstring).

    Args:
        wake: called (any thread) when the schedule changed, so that the loop, if asleep,
            wakes and calls :meth:`run_due` (the watch's :meth:`~.wakeup.Wakeup.wake`).
        **options: APScheduler's scheduler options (``timezone``, ``executors``, ...). The
            ``default`` executor, unless given, is a :class:`DeferredExecutor`.

    Thread-safety: :meth:`add_job` and the other APScheduler calls from any thread;
    :meth:`run_due` and :meth:`wait_s` from the loop's thread only.
    """

    def __init__(self, wake: Callable[[], None], **options: Any) -> None:
        self._wake = wake
        self._changed = True  # run_due must look (a job was added, the scheduler started)
        self._due_at: float | None = None  # time.monotonic() of the next job, None: none scheduled
        super().__init__(**options)

    def _create_default_executor(self) -> BaseExecutor:
        return DeferredExecutor()

    def wakeup(self) -> None:
        """APScheduler's hook: the job store changed (any thread)."""
        self._changed = True
        self._wake()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the scheduler and its executors (``wait``: let a thread executor's running jobs
        end); later :meth:`run_due` calls run nothing. (Abstract in ``BaseScheduler``: each
        scheduler says how its own loop ends; this one has no thread of its own to stop.)"""
        super().shutdown(wait)

    def wait_s(self) -> float | None:
        """Seconds the loop may sleep before it must call :meth:`run_due` (0: now; None: no job
        is scheduled and nothing changed)."""
        if self.state == STATE_STOPPED:
            return None
        if self._changed:
            return 0.0
        if self._due_at is None:
            return None
        return max(0.0, self._due_at - time.monotonic())

    def run_due(self) -> int:
        """Run the jobs that are due (the loop's thread): APScheduler's ``_process_jobs``,
        then the runs it queued on the :class:`DeferredExecutor` ``default``. Returns how many
        ran. Cheap when nothing is due (a look at the job store)."""
        if self.state == STATE_STOPPED:
            return 0
        self._changed = False  # a change while the jobs run sets it again
        wait = self._process_jobs()
        self._due_at = None if wait is None else time.monotonic() + wait
        executor = self._lookup_executor("default")
        return executor.run_pending() if isinstance(executor, DeferredExecutor) else 0


__all__ = ["DeferredExecutor", "LoopScheduler"]
