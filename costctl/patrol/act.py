"""A patrol's action carried through the verified stop.

The patrol does not stop instances its own way: it hands the decision to the watch's
:class:`~costctl.executor.Executor`, whose :class:`~costctl.stopping.StopProcess` sends the
stop, re-sends it while the provider's status still reads running, retries transient errors
with backoff, and ends only when the provider's own status says stopped (``confirmed``) or it no
longer knows the instance (``gone``), or the ``[stop] deadline`` passes (``failed``). Every state
it reaches is stored as a stop event of the decision, and the decision's outcome says how it
ended. The objects here fit the patrol into the executor's small interfaces
(:mod:`costctl.protocols`):

* :class:`Target` — the "run" the executor acts for: the instance (no ledger run);
* :class:`NoJob` — no watched command to end first;
* :class:`ClaimedLog` — the decision was already recorded by the patrol's claim (the
  transaction that re-reads and records it, :func:`costctl.ledger.patrol_store.claim`): the
  executor's ``record`` only adds its evidence (the stop route) to it;
* :class:`PatrolStopLog` — stop events stored under the decision, with no run;
* :class:`Release` — a release carried through the same state machine: the "stop request" is the
  provider's release call, and it is confirmed when the provider's status reads terminated or it
  no longer knows the instance (a stopped instance not yet released is not confirmed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..clock import Clock
from ..config import HooksConfig, StopConfig
from ..errors import CostctlError
from ..executor import Executor
from ..i18n import _
from ..money import Money
from ..protocols import RunState, StopResult
from ..records import Action, BatchPlan, Decision
from ..stopping import StopEvent, StopProcess, StopRoute
from ..ledger.patrol_store import add_evidence

from costctl_providers.base import Capabilities, Instance, Offer, Provider, Status

if TYPE_CHECKING:
    from ..ledger.db import Ledger


class Target:
    """The instance a patrol acts on, as the executor's :class:`~costctl.protocols.RunControl`
    (its ``state.run_id`` is empty: the decision has no run)."""

    def __init__(self, inst: Instance, *, now: datetime) -> None:
        price = inst.price_per_hour if inst.price_per_hour is not None else Decimal(0)
        self._state = RunState(provider=inst.provider, instance_id=inst.id, instance=inst,
                               rate=Money(price, inst.currency), gpu_name=inst.gpu, gpu_count=inst.gpu_count,
                               billing=inst.billing.value, instance_pk=0, run_id="", run_started_at=now)
        self.stopped_at: datetime | None = None

    @property
    def state(self) -> RunState:
        """The instance (no run)."""
        return self._state

    def mark_stopped(self, when: datetime) -> None:
        """The stop ended at ``when``."""
        self.stopped_at = when

    def move_to(self, inst: Instance) -> None:
        """A patrol never moves a job."""
        raise CostctlError(_("costctl patrol does not move jobs"))


class NoJob:
    """No watched command: nothing to end before the stop."""

    exists = False
    running = False
    pid = None
    batch: BatchPlan | None = None
    resume_from: str | None = None

    def end(self) -> int | None:
        """Nothing to end."""
        return None

    def restart(self, *, batch: BatchPlan | None = None, resume_from: str | None = None) -> None:
        """Nothing to restart."""
        raise CostctlError(_("costctl patrol runs no job"))


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """What :meth:`ClaimedLog.record` returns: the claimed decision's id."""

    ledger_id: int


class ClaimedLog:
    """The executor's :class:`~costctl.protocols.DecisionLog` for a decision the patrol's claim
    recorded already (``decision_id``): ``record`` adds the executor's evidence to it (the stop
    route) and returns its id; it never records a second decision."""

    def __init__(self, ledger: Ledger, decision_id: int) -> None:
        self.ledger = ledger
        self.decision_id = decision_id

    def record(self, decision: Decision, outcome: str, *, dry_run: bool = False, say: bool | str = True) -> Any:
        """Add ``decision``'s ``stop_route`` evidence to the claimed decision; returns an object
        whose ``ledger_id`` is its id."""
        route = decision.evidence.get("stop_route")
        if route is not None:
            add_evidence(self.ledger, self.decision_id, {"stop_route": route})
        return Recorded(self.decision_id)


class PatrolStopLog:
    """Stores a patrol's stop events under its decision (``run_id`` NULL)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def record_stop_event(self, run_id: str, *, decision_id: Any, time: datetime, state: str, attempt: int,
                          detail: str | None = None) -> Any:
        """:meth:`costctl.ledger.db.Ledger.record_stop_event` without a run."""
        return self.ledger.record_stop_event(None, decision_id=decision_id, time=time, state=state,
                                             attempt=attempt, detail=detail)

    def set_decision_outcome(self, decision_id: Any, outcome: str, *, evidence: dict[str, Any] | None = None) -> None:
        """:meth:`costctl.ledger.db.Ledger.set_decision_outcome`."""
        self.ledger.set_decision_outcome(decision_id, outcome, evidence=evidence)


class Release:
    """A provider adapter seen by the stop's state machine as one whose "stop" is a release
    (see the module docstring). Its ``capabilities.stop`` is the adapter's ``release``."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.name = provider.name
        self.capabilities = Capabilities(**{**provider.capabilities.as_dict(), "stop": provider.capabilities.release})

    def get_instance(self, instance_id: str) -> Instance:
        """The instance as the provider reads it; a stopped one not released yet reads as
        ``unknown`` ("stopped, not released"), so the release is sent again and never confirmed by it."""
        inst = self.provider.get_instance(instance_id)
        if inst.status is Status.STOPPED:
            return dataclasses.replace(inst, status=Status.UNKNOWN,
                                       status_raw=_("{status} (not released yet)").format(
                                           status=inst.status_raw or inst.status.value))
        return inst

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """Send the release, then read the instance back (:meth:`get_instance`): the state
        machine confirms by what the provider says, not by the release call's own answer.

        Raises:
            NotFoundError: the provider no longer knows the instance (it is gone: released).
            ProviderError: the release or the read failed.
        """
        self.provider.release_instance(instance_id)
        return self.get_instance(instance_id)

    def create_instance(self, gpu: str, *, gpu_count: int, billing: str, currency: str) -> Instance:
        """A release never creates."""
        raise CostctlError(_("costctl patrol does not create instances"))

    def list_offers(self) -> list[Offer]:
        """Not used."""
        return []

    def self_stop_command(self, instance_id: str) -> Any:
        """No self-stop: a patrol acts from outside the instance."""
        return None


def route_for(provider: Provider, inst: Instance, *, release: bool) -> tuple[StopRoute | None, str | None]:
    """The preflight of a patrol's action: the API route when the adapter can stop (release)
    instances and the account's listing just answered for ``inst`` (its credential is accepted),
    else ``(None, why not)``. A patrol runs outside the instance: it has no self-stop route."""
    from ..stopping import api_problem

    cap = provider.capabilities.release
    if release and not cap:
        return None, _("{provider} cannot release instances through its API ({reason})").format(
            provider=provider.name, reason=cap.reason or _("not supported"))
    control: Any = Release(provider) if release else provider
    problem = api_problem(control, inst.id, inst, None)
    if problem is not None:
        return None, problem
    return StopRoute("api", _("credential accepted") if provider.credential_env else _("instance read")), None


def release_line(event: StopEvent, *, provider: str, instance: str) -> str | None:
    """The live line of one step of a release (the executor's lines speak of a stop); None for a
    step not said (the end is said by the sweep: released, confirmed)."""
    from ..stopping import StopState

    shape = {"provider": provider, "instance": instance, "attempt": event.attempt, "detail": event.detail}
    if event.state is StopState.SENT:
        return _("costctl patrol: release request {attempt} sent to {provider} for instance {instance}: "
                 "{detail}").format(**shape)
    if event.state is StopState.FAILED:
        return _("costctl patrol: RELEASE FAILED: instance {instance} on {provider} may still hold its disk: "
                 "{detail}").format(**shape)
    if not event.state.terminal and event.attempt:
        return _("costctl patrol: release: {detail}").format(**shape)
    return None


def begin_stop(*, ledger: Ledger, decision_id: int, decision: Decision, provider: Provider, inst: Instance,
               route: StopRoute, release: bool, clock: Clock, stop_config: StopConfig, say: Callable[[str], None],
               on_event: Callable[[StopEvent, StopProcess | None], None] | None = None) -> Executor:
    """Start a claimed stop (or release) decision through the executor's verified stop: returns
    the executor, whose ``stopping`` (a :class:`~costctl.stopping.StopProcess`) is to be stepped
    until it ends (:func:`costctl.patrol.drive.drive` steps a sweep's stops side by side) and
    whose ``stop`` is then the result. ``on_event`` hears each step of the stop, after it is
    stored (the patrol's notifications)."""
    control: Any = Release(provider) if release else provider
    # the executor's own lines speak of a stop: a release says its own (:func:`release_line`)
    executor = Executor(log=ClaimedLog(ledger, decision_id), clock=clock, hooks=HooksConfig(), job=NoJob(),
                        instances=control, run=Target(inst, now=clock.now()), say=(lambda line: None) if release
                        else say, route=route, stop_log=PatrolStopLog(ledger), stop_config=stop_config)
    if release:
        def relay(event: StopEvent, _proc: StopProcess | None) -> None:
            line = release_line(event, provider=provider.name, instance=inst.id)
            if line is not None:
                say(line)

        executor.on_stop_event(relay)
    if on_event is not None:
        executor.on_stop_event(on_event)
    executor.handle(dataclasses.replace(decision, action=Action.STOP))
    return executor


def carry_out(*, ledger: Ledger, decision_id: int, decision: Decision, provider: Provider, inst: Instance,
              route: StopRoute, release: bool, clock: Clock, stop_config: StopConfig, say: Callable[[str], None],
              on_event: Callable[[StopEvent, StopProcess | None], None] | None = None) -> StopResult | None:
    """Carry a claimed stop (or release) decision through the executor's verified stop, here and
    now (:func:`begin_stop`, then :meth:`~costctl.executor.Executor.run_stop`: on a simulated
    clock nothing waits; on the real clock it waits between the provider's reads). Returns the
    stop's result (its ``state``: ``confirmed``, ``gone`` or ``failed``)."""
    return begin_stop(ledger=ledger, decision_id=decision_id, decision=decision, provider=provider, inst=inst,
                      route=route, release=release, clock=clock, stop_config=stop_config, say=say,
                      on_event=on_event).run_stop()


__all__ = ["ClaimedLog", "Recorded", "NoJob", "PatrolStopLog", "Release", "Target", "begin_stop", "carry_out",
           "release_line", "route_for"]
