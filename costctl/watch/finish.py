"""Ending a watch: the final accrual, closing the ledger run, underuse advice, the summary.

:class:`FinishMixin` is part of :class:`~costctl.watch.Watcher`; :meth:`~FinishMixin.finish`
is called by :meth:`~costctl.watch.loop.LoopMixin.run` and by simulated-clock drivers.
"""

from __future__ import annotations

import sys
from datetime import datetime

from ..errors import CostctlError, LedgerError
from ..lifecycle.underuse import underuse_advice
from ..records import Decision


class FinishMixin:
    """Closing the run of the :class:`~costctl.watch.Watcher`."""

    def finish(self, exit_code: int, status: str) -> tuple[int, str]:
        """Close the run in the ledger, print the summary and release everything; returns
        ``(exit status, run status)``. :meth:`run` calls it; simulated-clock drivers too."""
        return self._finish(exit_code, status)

    def _advise_underuse(self, end: datetime) -> None:
        """End-of-run advice when a cheaper card would have done this run (GPU telemetry only)."""
        summ = self.summary
        if summ.peak_gpu_memory_bytes is None or summ.mean_gpu_utilization is None or self.lifecycle is None:
            return
        try:
            options = self.lifecycle.price_options()
        except CostctlError:
            return
        advice = underuse_advice(
            run_id=self.run_id or "", gpu=self.gpu_name, rate=self.rate,
            duration_s=(end - self.run_started_at).total_seconds(), peak_memory_bytes=summ.peak_gpu_memory_bytes,
            card_memory_bytes=summ.gpu_memory_total_bytes, mean_utilization=summ.mean_gpu_utilization,
            options=options, config=self.settings.downsize,
        )
        if advice is not None:
            self.record(Decision(time=end, policy="underutilized", action="advise", reason=advice.text,
                                 evidence=advice.to_dict(), key="underutilized"), "advised", say=False)
            summ.advice.append(advice.text)

    def _finish(self, exit_code: int, status: str) -> tuple[int, str]:
        if self.ledger is None or self.run_id is None:
            return exit_code, status
        end = self._stopped_at or self.clock.now()
        try:
            if self._stopped_at is None:
                self.tick(end)
            else:  # stopped between ticks (e.g. a preemption): keep the progress seen since the last one
                with self._lock:
                    points = self._drain_progress(end)
                    if points:
                        self.ledger.record_progress(self.run_id, points)
                        self.summary.add_progress(points)
            with self._lock:
                if self.lifecycle is not None and self.lifecycle.requester.pending is not None:
                    self.lifecycle.requester.withdraw()
                self._advise_underuse(end)
                self.ledger.accrue(self.run_id, end, self.rate.amount, self.rate.currency)
                self._update_spend(end)
                if status == "running":
                    status = "completed"
                self.ledger.finish_run(self.run_id, ended_at=end, exit_code=self.child_status, status=status)
        except LedgerError as exc:
            self.say(f"costctl: could not close the run in the ledger: {exc.message}")
        finally:
            self.status.close()
            if self._log_fh is not None:
                self._log_fh.close()
        self.summary.duration = end - self.started_at
        if not self.options.quiet:
            self.summary.print(self.run_id, self.rate.currency, sys.stderr)
        self.ledger.close()
        return exit_code, status
