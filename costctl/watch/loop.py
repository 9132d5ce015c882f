"""The real-time loop of a watch: APScheduler jobs, SIGINT/SIGTERM, and :meth:`LoopMixin.step`.

:class:`LoopMixin` is part of :class:`~costctl.watch.Watcher`. :meth:`~LoopMixin.run` installs
the signal handlers, starts the watch, schedules the tick (every ``[watch] sample_interval``)
and, on spot instances, the preemption-notice poll (every ``[preemption] poll_interval``) on a
background scheduler, then calls :meth:`~LoopMixin.step` every 0.1 s on the main thread until
the watch ends, and finishes it. The signal handler only sets a flag (see its comment).
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from ..errors import CostctlError
from ..records import Decision


class LoopMixin:
    """The main loop of the :class:`~costctl.watch.Watcher`."""

    def _handle_signal(self, signum: int, frame: Any) -> None:
        # Only a plain assignment: the handler runs between two bytecodes of the main thread,
        # which may hold a lock (Event.wait holds its Condition's) that set() would wait on
        # forever. The loop sees the flag within 0.1 s.
        self._signal = signum

    def run(self) -> int:
        """Start everything, loop in real time until done, clean up; returns the exit status."""
        # SIGINT/SIGTERM are ours from before the child starts: one arriving while start() is
        # still running is passed to the job by the loop instead of killing costctl unrecorded.
        old = {s: signal.signal(s, self._handle_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
        except BaseException:
            for s, h in old.items():
                signal.signal(s, h)
            raise
        interval = self.settings.watch.sample_interval.total_seconds()
        scheduler = BackgroundScheduler(timezone=timezone.utc)
        scheduler.add_job(
            self._safe_tick, "interval", seconds=interval, next_run_time=datetime.now(timezone.utc),
            max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)), id="tick",
        )
        if self.billing == "spot":
            poll = self.settings.preemption.poll_interval.total_seconds()
            scheduler.add_job(
                self._safe_poll_notices, "interval", seconds=poll, next_run_time=datetime.now(timezone.utc),
                max_instances=1, coalesce=True, misfire_grace_time=max(1, int(poll)), id="notices",
            )
        scheduler.start()
        exit_code = 0
        status = "running"
        try:
            exit_code, status = self._loop()
        finally:
            scheduler.shutdown(wait=True)
            for s, h in old.items():
                signal.signal(s, h)
            exit_code, status = self._finish(exit_code, status)
        return exit_code

    def _loop(self) -> tuple[int, str]:
        while True:
            self._done.wait(0.1)
            result = self.step()
            if result is not None:
                return result

    def step(self) -> tuple[int, str] | None:
        """One turn of the main loop: signals, stops, lifecycle, the command's exit.

        Returns ``(exit status, run status)`` when the watch should end, else None. The real
        loop calls it every 0.1 s; a simulated-clock driver calls it between clock advances.
        """
        if self._signal is not None:
            return self._on_signal()
        if self._stopped_at is None and self.lifecycle is not None:
            with self._lock:
                try:
                    self.lifecycle.poll()
                except CostctlError as exc:  # e.g. the ledger is unwritable: keep guarding
                    self.say(f"costctl: lifecycle step failed: {exc.message}")
        if self._stopped_at is not None:
            if self.child is not None and self.child_status is None:
                self.child_status = self.child.terminate(self.settings.watch.grace_period.total_seconds())
            code = self.child_status if self.child_status is not None else 0
            return code, "preempted" if self.lifecycle is not None and self.lifecycle.preempted else "stopped"
        if not self._child_done and self.child is not None and not self.child.running:
            self._child_done = True
            self.child_status = self.child.wait()
            with self._lock:
                self.history.child_running = False
                self.history.child_exited_at = self.clock.now()
            self.tick()  # record the last output and spend up to the exit
            if self._stopped_at is not None:
                return None
            with self._lock:
                assert self.lifecycle is not None
                if self.lifecycle.requester.pending is not None:
                    self.lifecycle.poll()  # the job exited during a checkpoint request
                if self._stopped_at is not None:
                    return None
                if self.lifecycle.child_exited(self.child_status):
                    return None  # restarted (OOM retry)
            on_exit = self.options.on_exit
            if on_exit == "leave":
                return self.child_status, "completed" if self.child_status == 0 else "failed"
            if on_exit == "stop":
                with self._lock:
                    decision = Decision(
                        time=self.clock.now(), policy="on-exit", action="stop",
                        reason=f"the command exited with status {self.child_status} and --on-exit stop is set",
                        evidence={"exit_status": self.child_status}, key="on-exit",
                    )
                    self.executor.handle(decision)
                    self.summary.add_decision(decision)
                    if self.executor.stop is not None:
                        self._stopped_at = self.executor.stop.time
                if self._stopped_at is None:  # dry run
                    return self.child_status, "completed" if self.child_status == 0 else "failed"
                return None
            self.say(
                f"costctl: the command exited with status {self.child_status}; guarding the instance "
                "until the idle policy stops it (Ctrl-C leaves it running)"
            )
        return None

    def _on_signal(self) -> tuple[int, str]:
        sig = self._signal or signal.SIGTERM
        if self.child is not None and self.child.running:
            self.say(f"costctl: {signal.Signals(sig).name}: passing it to the job")
            self.child_status = self.child.terminate(self.settings.watch.grace_period.total_seconds(), sig)
            return self.child_status, "interrupted"
        self.say("costctl: interrupted; the instance is left running")
        return (self.child_status if self.child_status is not None else 128 + sig), "interrupted"
