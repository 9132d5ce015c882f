"""One tick of the watch: sample → progress → ledger → accrual → spend → policies → executor.

:class:`TickMixin` is part of :class:`~costctl.watch.Watcher`. Progress points arrive from the
child's output (:meth:`~TickMixin._on_text`, on the output threads) through a queue, or from a
metrics file; each tick drains them. Spend is accrued from stored timestamps, so a skipped
tick loses nothing. In real time an APScheduler job calls :meth:`~TickMixin._safe_tick`
(an error is reported once, its traceback written to the crash-log directory, and the watch
keeps guarding); under a simulated clock tests call :meth:`~TickMixin.tick` directly.
"""

from __future__ import annotations

import queue
import traceback
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from .. import paths
from ..errors import CostctlError
from ..money import Money
from ..records import Decision, ProgressPoint


class TickMixin:
    """Progress intake and the per-tick evaluation of the :class:`~costctl.watch.Watcher`."""

    # ------------------------------------------------------------------ progress
    def _on_text(self, stream: str, text: str) -> None:
        if self.lifecycle is not None:
            self.lifecycle.on_text(stream, text)
        if self._metrics is not None:
            return
        points = self._parsers[stream].feed(text, self.clock.now())
        for p in points:
            self._progress_q.put(p)

    def _drain_progress(self, now: datetime) -> list[ProgressPoint]:
        points: list[ProgressPoint] = []
        while True:
            try:
                points.append(self._progress_q.get_nowait())
            except queue.Empty:
                break
        if self._metrics is not None:
            try:
                points.extend(self._metrics.poll(now))
            except CostctlError as exc:
                self.say(f"costctl: metrics file: {exc.message}")
        return points

    # ------------------------------------------------------------------ tick
    def tick(self, now: datetime | None = None) -> list[Decision]:
        """One evaluation: sample, accrue, evaluate policies, act. Returns the new decisions.

        A second tick at the same instant (a simulated clock that did not move) takes no new
        sample; it still drains progress, accrues and evaluates."""
        with self._lock:
            now = now or self.clock.now()
            if self._stopped_at is not None:
                return []
            assert self.ledger is not None and self.run_id is not None and self._sampler is not None
            if self.child is not None:
                self.history.child_running = self.child.running
            sample = None
            if not self.history.samples or now > self.history.samples[-1].time:
                sample = self._sampler.sample(now)
                self.history.add_sample(sample)
            points = self._drain_progress(now)
            for point in points:
                self.history.add_progress(point)
            self.summary.add_progress(points)
            if sample is not None:
                self.ledger.record_samples(self.run_id, [sample])
            if points:
                self.ledger.record_progress(self.run_id, points)
            self.ledger.accrue(self.run_id, now, self.rate.amount, self.rate.currency)
            self._update_spend(now)
            decisions = self.engine.evaluate(self.history, now)
            for decision in decisions:
                self.executor.handle(decision)
                self.summary.add_decision(self.executor.decisions[-1][0])
            if self.executor.stop is not None:
                self._stopped_at = self.executor.stop.time
                self._done.set()
            if sample is not None:
                self.summary.add_sample(sample)
                self._status(now, sample)
            return decisions

    def _update_spend(self, now: datetime) -> None:
        assert self.ledger is not None
        tz = self.settings.watch.tz
        local = now.astimezone(tz)
        day_start = local.replace(hour=0, minute=0, second=0, microsecond=0).astimezone(timezone.utc)
        cur = self.rate.currency
        total = self.ledger.spend(instance_pk=self.instance_pk).get(cur, Decimal(0))
        today = self.ledger.spend(instance_pk=self.instance_pk, since=day_start).get(cur, Decimal(0))
        run = self.ledger.spend(run_id=self.run_id).get(cur, Decimal(0))
        self.history.spend_total = Money(total, cur)
        self.history.spend_today = Money(today, cur)
        self.history.rate = self.rate
        self.summary.spend = Money(run + self._spend_before, cur)

    def _status(self, now: datetime, sample: Any) -> None:
        if not self.status.enabled:
            return
        elapsed = now - self.started_at
        util = ", ".join(
            f"GPU{g.index} {g.utilization:.0f}%" if g.utilization is not None else f"GPU{g.index} ?"
            for g in sample.gpus
        ) or (f"CPU {sample.cpu_percent:.0f}%" if sample.cpu_percent is not None else "CPU ?")
        loss = self.summary.last_loss
        loss_txt = f"loss {loss:.4g}" if loss is not None else "no loss yet"
        spend = self.summary.spend
        self.status.update(
            f" costctl | {str(elapsed).split('.')[0]} | {spend.rounded(4) if spend else 0} {self.rate.currency} "
            f"| {util} | {loss_txt} "
        )

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - keep guarding; the traceback goes to a log file
            if not self._tick_error_reported:
                self._tick_error_reported = True
                try:
                    path = paths.crash_log_dir() / f"tick-{self.run_id}.log"
                    path.write_text("".join(traceback.format_exception(exc)))
                except (OSError, CostctlError):
                    path = None
                where = f" (traceback in {path})" if path else ""
                self.say(f"costctl: error during a tick: {type(exc).__name__}: {exc}{where}")
