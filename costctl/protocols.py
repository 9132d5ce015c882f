"""The small interfaces the executor and the lifecycle controller act through.

Neither :class:`costctl.executor.Executor` nor :class:`costctl.lifecycle.controller.Lifecycle`
knows the :class:`~costctl.watch.Watcher`: each gets the objects below, and the watcher is the
one that builds and wires them (see ``docs/architecture.md``):

* :class:`RunState` — where the job runs now (instance, price, ledger run); one immutable
  record, replaced whole when the job moves to another instance;
* :class:`RunControl` — that state, whether the watch has stopped, and moving the run;
* :class:`JobControl` — the watched command: running?, its pid, end it, start it again;
* :class:`InstanceControl` — the provider adapter (a :class:`costctl_providers.base.Provider`
  satisfies it);
* :class:`DecisionLog` — :class:`costctl.decisions.DecisionRecorder`, the one way to record;
* :class:`Stopper` — the executor's stop, for the lifecycle's preemption stop;
* :class:`StopLog` — where each stop's history (its states) is stored;
* :class:`LifecycleLedger` — the checkpoint and waste rows of the ledger;
* the clock is :class:`costctl.clock.Clock`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from .money import Money
from .records import BatchPlan, Decision

if TYPE_CHECKING:
    from costctl_providers.base import Capabilities, Instance, Offer


@dataclass(frozen=True, slots=True)
class RunState:
    """Where the watched job runs now: immutable, replaced whole (``dataclasses.replace``) when
    the job moves to another instance.

    Attributes:
        provider: the provider's name (``"sim"``, ``"vastai"``...).
        instance_id: the provider's id of the instance.
        instance: what the provider reported about it (None when it could not be read).
        rate: price per hour of the whole instance.
        gpu_name / gpu_count / billing: the card, how many, ``on-demand``/``spot``/...
        instance_pk: the ledger's key of the instance.
        run_id: the ledger run (a move starts a new one).
        run_started_at: when that ledger run started (aware UTC).
    """

    provider: str
    instance_id: str
    instance: Instance | None
    rate: Money
    gpu_name: str | None
    gpu_count: int
    billing: str
    instance_pk: int
    run_id: str
    run_started_at: datetime


@dataclass
class StopResult:
    """What a stop did, as far as it got.

    Attributes:
        time: when the stop was decided (aware UTC).
        outcome: the outcome text recorded with the decision (``"stop requested"`` until the
            stop ends; then what the before_stop hook, the job and the provider did).
        hook: the before_stop hook's result (empty when none ran).
        state: the :class:`~costctl.stopping.StopState` value reached (``requested``,
            ``sent``, ``confirmed``, ``gone``, ``self-stop sent``, ``failed``).
        ended_at: when it reached its end (None while it goes on).
        attempts: stop requests sent.
        detail: the last event's detail (why it failed, what the provider reported).
        closed: the stop's end is recorded and everything waiting on it ran (the watch ends
            on this, not on ``ended_at``, which is set first).
    """

    time: datetime
    outcome: str
    hook: dict[str, Any] = field(default_factory=dict)
    state: str = "requested"
    ended_at: datetime | None = None
    attempts: int = 0
    detail: str = ""
    closed: bool = False

    @property
    def done(self) -> bool:
        """The stop ended (confirmed, gone or failed) and its end is recorded."""
        return self.closed

    @property
    def stopped(self) -> bool:
        """The provider reported the instance stopped, or no longer knows it."""
        return self.state in ("confirmed", "gone")

    @property
    def failed(self) -> bool:
        """The stop ended without a confirmed stop."""
        return self.state == "failed"


class RunControl(Protocol):
    """The watch's run, as the executor and lifecycle see it."""

    @property
    def state(self) -> RunState:
        """Where the job runs now."""
        ...

    @property
    def stopped_at(self) -> datetime | None:
        """When a stop ended the watch (None while it runs)."""
        ...

    def mark_stopped(self, when: datetime) -> None:
        """A stop ended the watch at ``when``."""
        ...

    def move_to(self, inst: Instance) -> None:
        """The job moves to ``inst``: close this ledger run (``downsized``), start one there.

        Raises:
            ConfigError: the provider reports no price for ``inst``.
        """
        ...


class JobControl(Protocol):
    """The watched command (absent when the watch guards the whole machine)."""

    @property
    def exists(self) -> bool:
        """A command is watched (it may have exited)."""
        ...

    @property
    def running(self) -> bool:
        """The command runs now."""
        ...

    @property
    def pid(self) -> int | None:
        """Pid of its root process (None when there is none)."""
        ...

    @property
    def batch(self) -> BatchPlan | None:
        """The batch plan it runs with (None when unknown)."""
        ...

    @property
    def resume_from(self) -> str | None:
        """The checkpoint it resumed from."""
        ...

    def end(self) -> int | None:
        """SIGTERM to its process group, SIGKILL after the grace period; its exit status
        (None when there is no command)."""
        ...

    def restart(self, *, batch: BatchPlan | None = None, resume_from: str | None = None) -> None:
        """Start it again, with a new batch plan and/or resume checkpoint (None keeps the old)."""
        ...


class InstanceControl(Protocol):
    """The provider adapter (see :class:`costctl_providers.base.Provider`)."""

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def get_instance(self, instance_id: str) -> Instance: ...

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance: ...

    def create_instance(self, gpu: str, *, gpu_count: int, billing: str, currency: str) -> Instance: ...

    def list_offers(self) -> list[Offer]: ...


class StopLog(Protocol):
    """Where a stop's history is stored (the ledger; :meth:`costctl.ledger.db.Ledger.record_stop_event`)."""

    def record_stop_event(self, run_id: str, *, decision_id: Any, time: datetime, state: str, attempt: int,
                          detail: str | None = None) -> Any: ...

    def set_decision_outcome(self, decision_id: Any, outcome: str, *,
                             evidence: dict[str, Any] | None = None) -> None: ...


class DecisionLog(Protocol):
    """Records decisions (:class:`costctl.decisions.DecisionRecorder`)."""

    def record(self, decision: Decision, outcome: str, *, dry_run: bool = False,
               say: bool | str = True) -> Any: ...


class Stopper(Protocol):
    """Carries out decisions; a stop is remembered (:class:`costctl.executor.Executor`): its
    :attr:`stop` is set when the stop is decided and goes on (off the tick) until it ends."""

    stop: StopResult | None

    def handle(self, decision: Decision) -> str: ...

    def after_stop(self, callback: Callable[[StopResult], None]) -> None:
        """Call ``callback`` with the stop once it ended (at once when it already has)."""
        ...


class LifecycleLedger(Protocol):
    """The ledger rows the lifecycle controller writes besides decisions: the
    :class:`costctl.ledger.writer.LedgerWriter` in a watch (a request's id is then a ticket,
    passed back as is to :meth:`complete_checkpoint`)."""

    def record_checkpoint_request(self, run_id: str, *, reason: str, requested_at: datetime,
                                  deadline: datetime, signal: str | None = None) -> Any: ...

    def complete_checkpoint(self, checkpoint_id: Any, *, outcome: str, completed_at: datetime,
                            reason: str | None = None, deadline: datetime | None = None,
                            saved_at: datetime | None = None, save_s: float | None = None,
                            path: str | None = None, size_bytes: int | None = None,
                            save_duration_s: float | None = None) -> None: ...

    def record_waste(self, run_id: str, *, start_at: datetime, end_at: datetime, rate_per_hour: Decimal,
                     currency: str, reason: str, detail: str | None = None) -> Any: ...


__all__ = ["DecisionLog", "InstanceControl", "JobControl", "LifecycleLedger", "RunControl", "RunState",
           "StopLog", "Stopper", "StopResult"]
