"""What a notification says: the events, and the message each recorded fact becomes.

The events (``[notify] events``, and per URL; :data:`costctl.config.NOTIFY_EVENTS`):

================ ==========================================================================
``stop_pending`` a stop will come ``[notify] warn_before`` ahead (the warning recorded by
                 :class:`~costctl.notify.pending.StopWarnings`), and a snooze given or lifted
``stop_done``    the provider confirmed the stop, or no longer knows the instance, or the
                 instance's self-stop was sent
``stop_failed``  the stop failed, or is not confirmed yet (a re-send, a failed request): the
                 loudest — never rate-limited
``budget``       the budget policy's warning and its cap
``advice``       the loss diagnoses (plateau, overfitting, not learning, unstable, divergence),
                 stall, the cheaper-card advice, a move to another card, an OOM retry
``preemption``   a preemption notice, and the checkpoint taken for it
``job_end``      the watched command finished, or failed (its exit status)
================ ==========================================================================

Every text is a whole sentence with named placeholders (:data:`TEMPLATES`), translated with
gettext (:mod:`costctl.i18n`) in the language in force when the message is made. Decisions carry their own reason, a sentence of the
policy's; the templates frame it. Pure functions: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from collections.abc import Callable
from typing import Any

from ..decisions import RecordedDecision
from ..i18n import N_, _, ngettext
from ..records import Action

#: Key prefix of the decisions :class:`~costctl.notify.pending.StopWarnings` records.
WARNING_KEY_PREFIX = "stop-warning:"
#: Key prefix of the decisions a snooze (or its end) records.
SNOOZE_KEY_PREFIX = "snooze:"


class Event(StrEnum):
    """A kind of notification (the values of ``[notify] events``)."""

    STOP_PENDING = "stop_pending"
    STOP_DONE = "stop_done"
    STOP_FAILED = "stop_failed"
    BUDGET = "budget"
    ADVICE = "advice"
    PREEMPTION = "preemption"
    JOB_END = "job_end"


#: Apprise's notification types (``info``, ``success``, ``warning``, ``failure``), per event.
LEVELS: dict[Event, str] = {
    Event.STOP_PENDING: "warning", Event.STOP_DONE: "success", Event.STOP_FAILED: "failure",
    Event.BUDGET: "warning", Event.ADVICE: "info", Event.PREEMPTION: "warning", Event.JOB_END: "info",
}

#: Events never held back by ``[notify] max_per_hour`` (there is at most one stop per watch).
LOUD: frozenset[Event] = frozenset({Event.STOP_DONE, Event.STOP_FAILED})

#: The texts, whole sentences with named placeholders (``{instance}``, ``{provider}``...), marked
#: for the catalogue (:func:`~costctl.i18n.N_`) and translated when a message is made
#: (:func:`text`), in the language in force.
TEMPLATES: dict[str, str | Callable[[int], str]] = {
    "where": N_("Run {run} on {provider} instance {instance} (host {host})."),
    "pending.title": N_("{instance} will be stopped at {at}"),
    "snooze.title": N_("The autostop of {instance} was snoozed until {until}"),
    "unsnooze.title": N_("The snooze of the autostop of {instance} was lifted"),
    "unsnooze_due.title": N_("The snooze of the autostop of {instance} was lifted: it is stopped now"),
    "snooze_still.title": N_("The idle autostop of {instance} was snoozed until {until}; the {policy} stop still "
                             "comes at {at}"),
    "stop_done.title": N_("{instance} is stopped"),
    "stop_done.body": lambda n: ngettext(
        "{provider} confirmed that instance {instance} is stopped after {attempts} stop request.",
        "{provider} confirmed that instance {instance} is stopped after {attempts} stop requests.", n),
    "stop_gone.title": N_("{instance} no longer exists"),
    "stop_gone.body": N_("{provider} no longer knows instance {instance}: it no longer bills. {detail}"),
    "self_stop.title": N_("{instance} is stopping itself"),
    "self_stop.body": N_("Instance {instance} runs its own stop command: {detail}"),
    "stop_reason": N_("It was stopped because: {reason}"),
    "stop_tried": N_("costctl tried to stop it because: {reason}"),
    "stop_failed.title": N_("STOP FAILED: {instance} may still be running and billing"),
    "stop_failed.body": N_("costctl could not stop {provider} instance {instance}: {detail}. Stop it yourself "
                           "(`costctl stop {instance}` or the provider's console)."),
    "stop_failed.body_no_api": N_("costctl could not stop {provider} instance {instance}: {detail}. Stop it "
                                  "yourself in {provider}'s console or with {provider}'s own tools: costctl has no "
                                  "working {provider} API credential here, so `costctl stop` cannot stop it either."),
    "stop_unconfirmed.title": N_("The stop of {instance} is not confirmed yet"),
    "stop_unconfirmed.body": N_("The stop of {provider} instance {instance} is not confirmed yet: {detail}. costctl "
                                "keeps trying until {deadline}; the instance may still be billing."),
    "stop_unconfirmed.body_no_deadline": N_("The stop of {provider} instance {instance} is not confirmed yet: "
                                            "{detail}. costctl keeps trying until its deadline; the instance may "
                                            "still be billing."),
    "budget.warn.title": N_("Budget warning on {instance}"),
    "budget.act.title": N_("Budget cap reached on {instance}"),
    "advice.title": N_("{policy} on run {run}"),
    "preemption.title": N_("Preemption notice for {instance}"),
    "checkpoint.title": N_("Checkpoint for the preemption of {instance}"),
    "job_done.title": N_("The job on {instance} finished"),
    "job_failed.title": N_("The job on {instance} failed with exit status {status}"),
    "job_end.body": N_("The command {command} exited with status {status}. {next}"),
    "job_end.body_no_command": N_("The command (none) exited with status {status}. {next}"),
    "job_end.guard": N_("costctl guards the instance until it is idle, then stops it."),
    "job_end.stop": N_("costctl stops the instance now (--on-exit stop)."),
    "job_end.leave": N_("The instance is left running (--on-exit leave)."),
    "snoozed": N_("The autostop was snoozed by {by} until {until}."),
}

#: Policies whose advice is the ``advice`` event.
ADVICE_POLICIES = frozenset({"plateau", "overfitting", "not_learning", "unstable", "divergence", "stall",
                             "underutilized", "downsize", "oom"})


def text(name: str, **values: Any) -> str:
    """:data:`TEMPLATES` ``[name]`` in the current language with its named placeholders filled."""
    return template_text(TEMPLATES[name], values)


def template_text(template: str | Callable[[int], str], values: dict[str, Any]) -> str:
    """A template (an N_-marked sentence, or a function of the count ``values["attempts"]`` that
    picks a plural form with :func:`~costctl.i18n.ngettext`) in the current language, filled."""
    said = template(int(values["attempts"])) if callable(template) else _(template)
    return said.format(**values)


@dataclass(frozen=True, slots=True)
class Context:
    """Where the watch runs, for the messages.

    Attributes:
        provider / instance: the provider's name and the instance's id.
        run: the ledger run id (shown by its first 8 characters).
        host: this machine's host name.
        command: the watched command as one shell line ("" when guarding the machine).
        snoozed: a sentence about the latest snooze (who, until when), or None; the next
            messages repeat it.
        api_route: costctl can stop the instance through the provider's API (the preflight
            found a credential that works): only then does a failed stop's advice name
            ``costctl stop``; otherwise it names the provider's console.
    """

    provider: str
    instance: str
    run: str
    host: str
    command: str = ""
    snoozed: str | None = None
    api_route: bool = True

    def values(self) -> dict[str, str]:
        """The placeholders every template may use."""
        return {"provider": self.provider, "instance": self.instance, "run": self.run[:8], "host": self.host}


@dataclass(frozen=True, slots=True)
class Message:
    """One notification.

    Attributes:
        event: its kind (which targets get it).
        key: identifies it: a message whose key was already sent is not sent again.
        title / body: the texts (the body ends with where the watch runs).
        level: Apprise's notification type (``info``, ``success``, ``warning``, ``failure``).
        time: aware UTC, on the watch's clock (the rate limit counts with it).
        name: a short name of the run (AutoDL's push shows it as the experiment's name).
    """

    event: Event
    key: str
    title: str
    body: str
    level: str
    time: datetime
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def loud(self) -> bool:
        """Never held back by the rate limit."""
        return self.event in LOUD


def _message(event: Event, key: str, title: str, body: str, when: datetime, ctx: Context) -> Message:
    parts = [body.strip()]
    if ctx.snoozed and event in (Event.STOP_PENDING, Event.STOP_DONE, Event.STOP_FAILED):
        parts.append(ctx.snoozed)
    parts.append(text("where", **ctx.values()))
    return Message(event=event, key=key, title=title, body="\n".join(p for p in parts if p), level=LEVELS[event],
                   time=when, name=_("costctl {instance} run {run}").format(instance=ctx.instance, run=ctx.run[:8]))


def decision_event(recorded: RecordedDecision) -> Event | None:
    """Which event a recorded decision is (None: not one people are told about, e.g. a stop
    request — its end is — or a periodic checkpoint)."""
    d = recorded.decision
    if d.key.startswith(WARNING_KEY_PREFIX) or d.key.startswith(SNOOZE_KEY_PREFIX):
        return Event.STOP_PENDING
    if d.policy == "budget" and d.action in (Action.WARN, Action.ADVISE):
        return Event.BUDGET
    if d.policy == "budget" and d.action is Action.STOP:
        return Event.BUDGET
    if d.policy == "preemption":
        return Event.PREEMPTION
    if d.policy == "checkpoint" and d.action is Action.CHECKPOINT and d.evidence.get("reason") == "preemption":
        return Event.PREEMPTION
    if d.policy in ADVICE_POLICIES and d.action in (Action.ADVISE, Action.WARN, Action.DOWNSIZE, Action.RETRY):
        return Event.ADVICE
    if d.action is Action.ADVISE and d.policy not in ("advise-only", "checkpoint", "snooze"):
        return Event.ADVICE  # a third-party policy's advice
    return None


def decision_message(recorded: RecordedDecision, ctx: Context) -> Message | None:
    """The message for a recorded decision, or None (see :func:`decision_event`). A dry-run
    decision is not sent."""
    event = decision_event(recorded)
    if event is None or recorded.dry_run:
        return None
    d = recorded.decision
    values = ctx.values()
    if d.key.startswith(SNOOZE_KEY_PREFIX):
        until = d.evidence.get("until_local")
        still = d.evidence.get("still_pending")
        if until and isinstance(still, dict):  # a budget cap is pending: the snooze does not hold it
            title = text("snooze_still.title", until=until, policy=still.get("policy", "?"),
                         at=still.get("at_local", "?"), **values)
        elif until:
            title = text("snooze.title", until=until, **values)
        elif d.evidence.get("due_now"):
            title = text("unsnooze_due.title", **values)
        else:
            title = text("unsnooze.title", **values)
    elif event is Event.STOP_PENDING:
        title = text("pending.title", at=d.evidence.get("at_local", "?"), **values)
    elif event is Event.BUDGET:
        title = text("budget.act.title" if d.evidence.get("level") == "act" else "budget.warn.title", **values)
    elif event is Event.PREEMPTION:
        title = text("checkpoint.title" if d.policy == "checkpoint" else "preemption.title", **values)
    else:
        title = text("advice.title", policy=d.policy, **values)
    key = f"decision:{d.key}" if d.key else f"decision:{d.policy}:{d.time.isoformat()}"
    return _message(event, key, title, d.reason, d.time, ctx)


def stop_message(state: str, *, detail: str, attempts: int, when: datetime, reason: str | None,
                 deadline: str | None, ctx: Context) -> Message | None:
    """The message for a stop that reached ``state`` (a :class:`~costctl.stopping.StopState`
    value): ``confirmed``/``gone``/``self-stop sent`` (stop_done), ``failed`` (stop_failed),
    ``unconfirmed`` (stop_failed: the first re-send or failed request); None otherwise.

    Args:
        reason: the stop decision's reason (said with a stop done).
        deadline: when the stop is given up on, shown with ``unconfirmed``.
    """
    values = dict(ctx.values(), detail=detail.rstrip("."), attempts=attempts)
    because = text("stop_reason", reason=reason) if reason else ""
    if state == "confirmed":
        return _message(Event.STOP_DONE, "stop:done", text("stop_done.title", **values),
                        text("stop_done.body", **values) + "\n" + because, when, ctx)
    if state == "gone":
        return _message(Event.STOP_DONE, "stop:done", text("stop_gone.title", **values),
                        text("stop_gone.body", **values) + "\n" + because, when, ctx)
    if state == "self-stop sent":
        return _message(Event.STOP_DONE, "stop:self-stop", text("self_stop.title", **values),
                        text("self_stop.body", **values) + "\n" + because, when, ctx)
    if state == "failed":
        tried = text("stop_tried", reason=reason) if reason else ""  # it was NOT stopped
        body = text("stop_failed.body" if ctx.api_route else "stop_failed.body_no_api", **values)
        return _message(Event.STOP_FAILED, "stop:failed", text("stop_failed.title", **values),
                        body + "\n" + tried, when, ctx)
    if state == "unconfirmed":
        body = (text("stop_unconfirmed.body", deadline=deadline, **values) if deadline
                else text("stop_unconfirmed.body_no_deadline", **values))
        return _message(Event.STOP_FAILED, "stop:unconfirmed", text("stop_unconfirmed.title", **values), body,
                        when, ctx)
    return None


def job_end_message(status: int, *, on_exit: str, when: datetime, ctx: Context) -> Message:
    """The message for the watched command's end (exit ``status``; 0 finished, else failed)."""
    values = ctx.values()
    title = text("job_done.title", **values) if status == 0 else text("job_failed.title", status=status, **values)
    follow = {"stop": "job_end.stop", "leave": "job_end.leave"}.get(on_exit, "job_end.guard")
    if ctx.command:
        body = text("job_end.body", command=ctx.command, status=status, next=text(follow))
    else:
        body = text("job_end.body_no_command", status=status, next=text(follow))
    return _message(Event.JOB_END, f"job_end:{when.isoformat()}", title, body, when, ctx)


__all__ = ["ADVICE_POLICIES", "Context", "Event", "LEVELS", "LOUD", "Message", "SNOOZE_KEY_PREFIX", "TEMPLATES",
           "WARNING_KEY_PREFIX", "decision_event", "decision_message", "job_end_message", "stop_message", "text"]
