"""What the lifecycle controller may ask of the watch (:class:`LifecycleHostMixin`).

:class:`costctl.lifecycle.controller.Lifecycle` drives multi-step actions (checkpoint
requests, preemption, OOM retries, moving to a cheaper card) through these methods of the
:class:`~costctl.watch.Watcher`, which owns the child process, the ledger run, the executor
and the summary.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from decimal import Decimal

from ..errors import ConfigError
from ..lifecycle.oom_retry import BatchPlan
from ..money import Money
from ..records import Decision

from costctl_providers.base import Instance


class LifecycleHostMixin:
    """The :class:`~costctl.watch.Watcher`'s interface for the lifecycle controller."""

    @property
    def stopped_at(self) -> datetime | None:
        """When a stop decision ended the watch (None while it runs)."""
        return self._stopped_at

    @property
    def job_running(self) -> bool:
        """True while the watched command runs."""
        return self.child is not None and self.child.running

    def job_pid(self) -> int | None:
        """The pid of the command's root process (None when there is none)."""
        return self.child.pid if self.child is not None else None

    def record(self, decision: Decision, outcome: str, *, say: bool = True) -> None:
        """Record a lifecycle decision in the ledger and the summary (and print it)."""
        assert self.ledger is not None and self.run_id is not None
        self.ledger.record_decision(self.run_id, decision, outcome=outcome)
        self.summary.add_decision(decision)
        if self.executor is not None:
            self.executor.decisions.append((decision, outcome))
        if say:
            self.say(f"costctl {decision.policy}: {decision.reason}")

    def mark_stopped(self, when: datetime) -> None:
        """A lifecycle stop ended the watch at ``when``."""
        self._stopped_at = when
        self._done.set()

    def add_waste(self, money: Money, seconds: float) -> None:
        """Add to the summary's waste (paid time whose work was lost)."""
        self.summary.add_waste(money, seconds)

    def end_job(self) -> int | None:
        """End the command (SIGTERM to its group, SIGKILL after the grace period) without
        ending the watch; returns its exit status."""
        if self.child is None:
            return None
        status = self.child.terminate(self.settings.watch.grace_period.total_seconds())
        self.child_status = status
        return status

    def restart_job(self, *, batch: BatchPlan | None = None, resume_from: str | None = None) -> None:
        """Start the command again (after an OOM or a move), with a new batch plan and/or checkpoint."""
        if batch is not None:
            self.batch = batch
        if resume_from is not None:
            self.resume_from = resume_from
        self._spawn()

    def move_to(self, inst: Instance) -> None:
        """The job moves to instance ``inst``: close this ledger run (status ``downsized``) and
        start a new one there, charged at ``inst``'s price."""
        assert self.ledger is not None and self.run_id is not None
        now = self.clock.now()
        self.ledger.accrue(self.run_id, now, self.rate.amount, self.rate.currency)
        spent = self.ledger.spend(run_id=self.run_id).get(self.rate.currency, Decimal(0))
        self.ledger.finish_run(self.run_id, ended_at=now, exit_code=self.child_status, status="downsized")
        if inst.price_per_hour is None:
            raise ConfigError(f"{self.provider.name} reported no price for instance {inst.id}")
        if inst.currency == self.rate.currency:
            self._spend_before += spent
        self.instance, self.instance_id = inst, inst.id
        self.rate = Money(inst.price_per_hour, inst.currency)
        self.gpu_name, self.gpu_count, self.billing = inst.gpu, inst.gpu_count, inst.billing.value
        self.instance_pk = self.ledger.ensure_instance(
            self.provider.name, inst.id, gpu=inst.gpu, gpu_count=inst.gpu_count, billing=inst.billing.value,
            price_per_hour=inst.price_per_hour, currency=inst.currency, region=inst.region,
        )
        self.run_id = self.ledger.start_run(self.instance_pk, started_at=now, command=self.options.command,
                                            log_path=str(self.log_path), host=socket.gethostname(),
                                            pid=os.getpid())
        self.run_started_at = now
        self.executor.run_id = self.run_id
        self.history.rate = self.rate
        self.summary.run_ids.append(self.run_id)
