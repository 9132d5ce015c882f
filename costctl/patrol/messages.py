"""What the patrol's notifications say: whole sentences with named placeholders
(:data:`TEMPLATES`, marked for the catalogue and translated when a message is made), sent through
the watch's notifier (:class:`costctl.notify.dispatch.Notifier`: the sender child, Apprise) on the
``[notify]`` URLs that take their event:

================ ==========================================================================
``stop_pending`` a mark of a stop or release policy (the action follows after the grace
                 unless snoozed), and a provider's own release coming (AutoDL's 15 days)
``advice``       a mark of a notify policy
``stop_done``    a patrol's stop or release the provider confirmed (or the instance is gone)
``stop_failed``  a patrol's stop or release that failed, and one not confirmed yet (once, as a
                 watch's stop: a request re-sent after a failure, or ``[stop] unconfirmed_after``)
================ ==========================================================================

Each message's key names its decision, so one decision is told once. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from collections.abc import Callable
from typing import Any

from ..i18n import N_, _, ngettext
from ..notify.events import LEVELS, Event, Message, template_text

#: The texts (see the module docstring).
TEMPLATES: dict[str, str | Callable[[int], str]] = {
    "where": N_("Patrol on {host}: {provider} instance {instance} (account {account})."),
    "mark.stop.title": N_("{instance} will be stopped at {at} (patrol policy {policy})"),
    "mark.release_after_notice.title": N_("{instance} and its disk will be released {grace} after this notice "
                                          "(patrol policy {policy})"),
    "mark.notify.title": N_("{instance} matches patrol policy {policy}"),
    "mark.keep": N_("To keep it, run: costctl snooze --instance {provider}:{instance} 2h (or stop matching the "
                    "policy)."),
    "digest.stop_pending.title": lambda n: ngettext(
        "{count} instance marked by the patrol: it will be stopped or released unless snoozed",
        "{count} instances marked by the patrol: they will be stopped or released unless snoozed", n),
    "digest.advice.title": lambda n: ngettext("{count} instance matches a patrol policy",
                                              "{count} instances match a patrol policy", n),
    "digest.stop": N_("{provider} instance {instance} (account {account}): policy {policy}: stopped at {at}"),
    "digest.release": N_("{provider} instance {instance} (account {account}): policy {policy}: released {grace} "
                         "after this notice"),
    "digest.notify": N_("{provider} instance {instance} (account {account}): policy {policy}"),
    "digest.more": lambda n: ngettext("and {count} more", "and {count} more", n),
    "digest.keep": N_("To keep one, run: costctl snooze --instance PROVIDER:ID 2h (or stop matching the policy)."),
    "digest.host": N_("Patrol on {host}; decisions {first} to {last} in the ledger."),
    "warning.title": N_("{provider} will release {instance} and its data at {at}"),
    "warning.past.title": N_("{provider} was due to release {instance} and its data at {at}: it may be gone now"),
    "done.stop.title": N_("{instance} was stopped by patrol policy {policy}"),
    "done.release.title": N_("{instance} was released by patrol policy {policy}"),
    "done.stop.body": lambda n: ngettext(
        "{provider} confirmed it after {attempts} request: {detail}. It was stopped because: {reason}",
        "{provider} confirmed it after {attempts} requests: {detail}. It was stopped because: {reason}", n),
    "done.release.body": lambda n: ngettext(
        "{provider} confirmed it after {attempts} request: {detail}. It was released because: {reason}",
        "{provider} confirmed it after {attempts} requests: {detail}. It was released because: {reason}", n),
    "gone.title": N_("{instance} no longer exists (patrol policy {policy})"),
    "unconfirmed.stop.title": N_("The patrol's stop of {instance} is not confirmed yet (patrol policy {policy})"),
    "unconfirmed.release.title": N_("The patrol's release of {instance} is not confirmed yet (patrol policy "
                                    "{policy})"),
    "unconfirmed.stop.body": lambda n: ngettext(
        "{provider} does not confirm the stop of instance {instance} yet ({attempts} request sent): {detail}. "
        "costctl patrol keeps at it until {deadline}, then tells you whether it was stopped.",
        "{provider} does not confirm the stop of instance {instance} yet ({attempts} requests sent): {detail}. "
        "costctl patrol keeps at it until {deadline}, then tells you whether it was stopped.", n),
    "unconfirmed.release.body": lambda n: ngettext(
        "{provider} does not confirm the release of instance {instance} yet ({attempts} request sent): {detail}. "
        "costctl patrol keeps at it until {deadline}, then tells you whether it was released.",
        "{provider} does not confirm the release of instance {instance} yet ({attempts} requests sent): {detail}. "
        "costctl patrol keeps at it until {deadline}, then tells you whether it was released.", n),
    "failed.stop.title": N_("PATROL STOP FAILED: {instance} may still be running and billing"),
    "failed.release.title": N_("PATROL RELEASE FAILED: {instance} and its disk may still be billing"),
    "failed.stop.body": N_("costctl patrol could not stop {provider} instance {instance}: {detail}. Stop it "
                           "yourself (costctl stop {instance}, or the provider's console)."),
    "failed.release.body": N_("costctl patrol could not release {provider} instance {instance}: {detail}. "
                              "Release it yourself (costctl release {instance}, or the provider's console)."),
}


def text(name: str, **values: Any) -> str:
    """:data:`TEMPLATES` ``[name]`` in the current language with its placeholders filled."""
    return template_text(TEMPLATES[name], values)


def _where(provider: str, instance: str, account: str | None, host: str) -> str:
    return text("where", host=host, provider=provider, instance=instance, account=account or _("default"))


def _message(event: Event, key: str, title: str, body: str, when: datetime, *, policy: str) -> Message:
    return Message(event=event, key=key, title=title, body=body, level=LEVELS[event], time=when,
                   name=_("costctl patrol {policy}").format(policy=policy))


def mark_message(*, decision_id: int, policy: str, action: str, reason: str, provider: str, instance: str,
                 account: str | None, host: str, at: str, grace: str, when: datetime) -> Message:
    """The message of a mark: ``stop_pending`` for a stop or release (when it comes, and how to
    keep the instance), ``advice`` for a notify policy.

    Args:
        at: when the action is due, as shown (a release is due ``grace`` after the notice).
        grace: the grace period, as shown.
    """
    values = {"policy": policy, "provider": provider, "instance": instance, "at": at, "grace": grace}
    where = _where(provider, instance, account, host)
    if action == "notify":
        return _message(Event.ADVICE, f"patrol:mark:{decision_id}", text("mark.notify.title", **values),
                        f"{reason}\n{where}", when, policy=policy)
    title = text("mark.stop.title", **values) if action == "stop" else text("mark.release_after_notice.title", **values)
    body = "\n".join([reason, text("mark.keep", **values), where])
    return _message(Event.STOP_PENDING, f"patrol:mark:{decision_id}", title, body, when, policy=policy)


#: How many instances a digest lists by name (the rest are counted).
DIGEST_LINES = 15


@dataclass(frozen=True, slots=True)
class DigestLine:
    """One mark in a digest: its decision, policy, action (``stop``, ``release``, ``notify``),
    instance, and when its action comes (``at``: a stop's time; ``grace``: a release's), as shown."""

    decision_id: int
    policy: str
    action: str
    provider: str
    instance: str
    account: str | None
    at: str
    grace: str


def digest_message(lines: list[DigestLine], *, advice: bool, host: str, when: datetime) -> Message:
    """One message telling of a sweep's marks (``stop_pending``; ``advice`` for notify policies'):
    a line per instance (its policy, the action and when), the first :data:`DIGEST_LINES`, then
    "and N more". Its key names the decisions, so it is told once."""
    count = len(lines)
    shown = ["- " + text(f"digest.{line.action}", policy=line.policy, provider=line.provider,
                         instance=line.instance, account=line.account or _("default"), at=line.at, grace=line.grace)
             for line in lines[:DIGEST_LINES]]
    if count > DIGEST_LINES:
        shown.append(text("digest.more", count=count - DIGEST_LINES, attempts=count - DIGEST_LINES))
    ids = sorted(line.decision_id for line in lines)
    tail = [] if advice else [text("digest.keep")]
    body = "\n".join([*shown, *tail, text("digest.host", host=host, first=ids[0], last=ids[-1])])
    event = Event.ADVICE if advice else Event.STOP_PENDING
    return _message(event, f"patrol:marks:{ids[0]}-{ids[-1]}:{count}",
                    text(f"digest.{event.value}.title", count=count, attempts=count), body, when, policy="patrol")


def warning_message(*, decision_id: int, reason: str, provider: str, instance: str, account: str | None,
                    host: str, at: str, when: datetime, past: bool = False) -> Message:
    """The ``stop_pending`` message of a provider's own release coming (AutoDL's 15 days);
    ``past``: the release date is reached already (the title says it may be gone)."""
    title = text("warning.past.title" if past else "warning.title", provider=provider, instance=instance, at=at)
    return _message(Event.STOP_PENDING, f"patrol:warning:{decision_id}", title,
                    f"{reason}\n{_where(provider, instance, account, host)}", when, policy="patrol")


def unconfirmed_message(*, decision_id: int, policy: str, action: str, detail: str, attempts: int, provider: str,
                        instance: str, account: str | None, host: str, deadline: str, when: datetime) -> Message:
    """The ``stop_failed`` message of a patrol action not confirmed yet (a request re-sent after
    a failure, or ``[stop] unconfirmed_after`` passed), told once per decision, as a watch's
    "not confirmed yet" is.

    Args:
        action: ``stop`` or ``release``.
        attempts: requests sent so far.
        deadline: when the action is given up on, as shown.
    """
    kind = "stop" if action == "stop" else "release"
    values = {"policy": policy, "provider": provider, "instance": instance, "attempts": attempts,
              "detail": detail.rstrip("."), "deadline": deadline}
    return _message(Event.STOP_FAILED, f"patrol:unconfirmed:{decision_id}", text(f"unconfirmed.{kind}.title", **values),
                    f"{text(f'unconfirmed.{kind}.body', **values)}\n{_where(provider, instance, account, host)}", when,
                    policy=policy)


def result_message(*, decision_id: int, state: str, policy: str, action: str, reason: str, detail: str,
                   attempts: int, provider: str, instance: str, account: str | None, host: str,
                   when: datetime) -> Message | None:
    """The message of a patrol action's end: ``stop_done`` (``confirmed`` / ``gone``) or
    ``stop_failed`` (``failed``); None for another state.

    Args:
        state: the :class:`~costctl.stopping.StopState` value reached.
        action: ``stop`` or ``release``.
    """
    values = {"policy": policy, "provider": provider, "instance": instance, "attempts": attempts,
              "detail": detail.rstrip("."), "reason": reason}
    where = _where(provider, instance, account, host)
    kind = "stop" if action == "stop" else "release"
    if state == "confirmed":
        return _message(Event.STOP_DONE, f"patrol:result:{decision_id}", text(f"done.{kind}.title", **values),
                        f"{text(f'done.{kind}.body', **values)}\n{where}", when, policy=policy)
    if state == "gone":
        return _message(Event.STOP_DONE, f"patrol:result:{decision_id}", text("gone.title", **values),
                        f"{detail}\n{where}", when, policy=policy)
    if state == "failed":
        return _message(Event.STOP_FAILED, f"patrol:result:{decision_id}", text(f"failed.{kind}.title", **values),
                        f"{text(f'failed.{kind}.body', **values)}\n{reason}\n{where}", when, policy=policy)
    return None


__all__ = ["DIGEST_LINES", "DigestLine", "TEMPLATES", "digest_message", "mark_message", "result_message", "text",
           "unconfirmed_message", "warning_message"]
