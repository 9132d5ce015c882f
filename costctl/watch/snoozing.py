"""A watch's answer to ``costctl snooze``: :class:`SnoozeControl`.

The watch serves its control socket (:class:`costctl.snooze.ControlServer`); each request from
a process of the same user comes here, in the socket's thread, and is handled under the watch's
lock:

* ``snooze`` for N seconds: the idle autostop (every :attr:`~costctl.policies.base.Policy.snoozable`
  policy's stop) waits until now + N, N capped at ``[snooze] max``
  (:meth:`costctl.policies.engine.PolicyEngine.snooze`); recorded as a ``snooze`` decision naming
  who (user, uid, pid from the kernel) and when; the status line's countdown and the next
  notifications say so. A stop already under way is not snoozed, nor is a budget cap or a failed
  stop (those are not snoozable).
* ``off``: the snooze is lifted (recorded too); a stop it held comes at the next tick.
* ``status``: what is pending, nothing changed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..clock import Clock
from ..config import SnoozeConfig
from ..decisions import DecisionRecorder
from ..i18n import N_, _, format_time
from ..notify.events import SNOOZE_KEY_PREFIX
from ..policies.base import Pending, iso
from ..policies.engine import PolicyEngine, Snooze
from ..policies.idle import fmt_duration
from ..records import Action, Decision
from ..snooze import Peer
from ..statusline import countdown
from ..stopping import STATE_WORDS

#: The texts (whole sentences, named placeholders; translated where they are used).
SNOOZED = N_("{by} snoozed the idle autostop of {provider} instance {instance} until {until} ({granted}). Budget "
             "caps and a failed stop are never snoozed.")
SNOOZED_CAPPED = N_("{by} snoozed the idle autostop of {provider} instance {instance} until {until} ({granted}). "
                    "{requested} was asked; [snooze] max allows {max}. Budget caps and a failed stop are never "
                    "snoozed.")
LIFTED = N_("{by} lifted the snooze of the idle autostop of {provider} instance {instance}.")
LIFTED_DUE = N_("{by} lifted the snooze of the idle autostop of {provider} instance {instance}: the {policy} stop "
                "it held is due now, and the instance is stopped within moments.")
LIFTED_PENDING = N_("{by} lifted the snooze of the idle autostop of {provider} instance {instance}. Pending: "
                    "{countdown}.")
NO_SNOOZE_DUE = N_("{watch}: no snooze was in force; the {policy} stop is due now, and the instance is stopped "
                   "within moments.")
DUE_NOW = N_("{watch}: {reason}")
STILL_COMES = N_("{by} snoozed the idle autostop of {provider} instance {instance} until {until} ({granted}), but "
                 "the {policy} stop still comes at {at}: a snooze never postpones a budget cap or a failed-stop "
                 "alarm.")
PENDING_NOW = N_("{watch}: {reason} Pending: {countdown}.")
NOTHING_PENDING = N_("{watch}: {reason} No stop is pending now.")
STATUS_PENDING = N_("{watch}: Pending: {countdown}.")
STATUS_NOTHING = N_("{watch}: No stop is pending now.")
NO_SNOOZE = N_("{watch}: no snooze was in force. Pending: {countdown}.")
NO_SNOOZE_NOTHING = N_("{watch}: no snooze was in force. No stop is pending now.")
IN_FLIGHT = N_("{watch}: {provider} instance {instance} is already being stopped ({state}): a stop under way is "
               "not snoozed.")
WATCH = N_("watch {pid} (run {run}, {provider} instance {instance})")
NOTE = N_("The autostop was snoozed by {by} until {until}.")


class SnoozeControl:
    """Handles the requests of the watch's control socket (see the module docstring).

    Args:
        engine: the watch's policy engine (holds the snoozable stops).
        recorder: records the snooze decisions (ledger, console, notifications).
        clock: the watch's clock.
        config: ``[snooze]`` (its ``max`` is not None: a watch with ``off`` serves no socket).
        lock: the watch's lock (the tick holds it too).
        pending: the nearest pending stop now (the status line's), or None.
        stopping: the state of a stop under way (``"sent"``...), or None.
        where: ``{"provider", "instance", "run"}`` of the watch now.
        tz: the zone times are shown in.
        on_change: told the sentence the next notifications carry (None once lifted).
        unsnoozable: the nearest pending stop that no snooze postpones (a budget cap), or None;
            a snooze given while one is pending says that this stop still comes.
    """

    def __init__(self, *, engine: PolicyEngine, recorder: DecisionRecorder, clock: Clock, config: SnoozeConfig,
                 lock: Any, pending: Callable[[datetime], Pending | None], stopping: Callable[[], str | None],
                 where: Callable[[], dict[str, str]], tz: tzinfo,
                 on_change: Callable[[str | None], None] | None = None,
                 unsnoozable: Callable[[datetime], Pending | None] | None = None) -> None:
        self.engine = engine
        self.recorder = recorder
        self.clock = clock
        self.config = config
        self.lock = lock
        self.pending = pending
        self.stopping = stopping
        self.where = where
        self.tz = tz
        self.on_change = on_change
        self.unsnoozable = unsnoozable

    def _local(self, when: datetime) -> str:
        return format_time(when, self.tz)

    def _pending_text(self, now: datetime, head: str, *, pending: str, nothing: str, **values: str) -> str:
        """One answer line: ``pending`` (a sentence with ``{countdown}``) with the nearest pending
        stop, else ``nothing``; both get ``{watch}`` (``head``) and ``values``."""
        found = self.pending(now)
        if found is None:
            return _(nothing).format(watch=head, **values)
        return _(pending).format(watch=head, countdown=countdown(found.progress, found.at, now, self.tz), **values)

    def handle(self, request: dict[str, Any], peer: Peer) -> dict[str, Any]:
        """Answer one request (``{"op": "snooze", "seconds": N}``, ``{"op": "off"}``,
        ``{"op": "status"}``) of ``peer``; see :mod:`costctl.snooze` for the answer's form."""
        op = request.get("op")
        with self.lock:
            where = self.where()
            head = _(WATCH).format(pid=os.getpid(), **where)
            now = self.clock.now()
            if op == "status":
                return {"ok": True, "watch": head,
                        "message": self._pending_text(now, head, pending=STATUS_PENDING, nothing=STATUS_NOTHING),
                        "snoozed_until": iso(self.engine.snoozed.until) if self.engine.snoozed else None}
            if op == "off":
                return self._off(now, peer, head, where)
            if op != "snooze":
                return {"ok": False, "error": _("unknown request {op!r} (snooze, off or status)").format(op=op)}
            try:
                seconds = float(request.get("seconds"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return {"ok": False, "error": _("a snooze needs a number of seconds")}
            if not seconds > 0:
                return {"ok": False, "error": _("a snooze needs a positive number of seconds")}
            state = self.stopping()
            if state is not None:
                word = _(STATE_WORDS[state]) if state in STATE_WORDS else state
                return {"ok": False, "watch": head, "error": _(IN_FLIGHT).format(watch=head, state=word, **where)}
            return self._snooze(now, seconds, peer, head, where)

    def _snooze(self, now: datetime, seconds: float, peer: Peer, head: str, where: dict[str, str]) -> dict[str, Any]:
        assert self.config.max is not None
        requested = timedelta(seconds=seconds)
        granted = min(requested, self.config.max)
        until = now + granted
        by = peer.describe()
        self.engine.snooze(Snooze(until=until, by=by, at=now))
        shape = {"by": by, "until": self._local(until), "granted": fmt_duration(granted),
                 "requested": fmt_duration(requested), "max": fmt_duration(self.config.max), **where}
        reason = _(SNOOZED_CAPPED if granted < requested else SNOOZED).format(**shape)
        evidence: dict[str, Any] = {
            "by": {"user": peer.user, "uid": peer.uid, "pid": peer.pid, "host": socket.gethostname()},
            "requested_s": seconds, "granted_s": granted.total_seconds(), "max_s": self.config.max.total_seconds(),
            "until": iso(until), "until_local": self._local(until)}
        still = self.unsnoozable(now) if self.unsnoozable is not None else None
        if still is not None:  # a budget cap is pending: the snooze does not hold it, and says so
            reason = _(STILL_COMES).format(policy=still.policy, at=self._local(still.at), **shape)
            evidence["still_pending"] = {"policy": still.policy, "at": iso(still.at),
                                         "at_local": self._local(still.at)}
        self.recorder.record(Decision(time=now, policy="snooze", action=Action.SNOOZE, reason=reason,
                                      evidence=evidence, key=f"{SNOOZE_KEY_PREFIX}{iso(now)}:{peer.pid}"), "snoozed",
                             say=_("costctl: {message}").format(message=reason))
        if self.on_change is not None:
            self.on_change(_(NOTE).format(by=by, until=self._local(until)))
        return {"ok": True, "watch": head, "snoozed_until": iso(until), "granted_s": granted.total_seconds(),
                "message": self._pending_text(now, head, pending=PENDING_NOW, nothing=NOTHING_PENDING, reason=reason)}

    def _off(self, now: datetime, peer: Peer, head: str, where: dict[str, str]) -> dict[str, Any]:
        """Lift the snooze. A stop it held (due while it lasted) comes at the next tick: the
        answer and the notification say it is due now, never that nothing is pending."""
        by = peer.describe()
        was = self.engine.snoozed
        held = self.engine.held_stops()  # due, waiting for the snooze's end: they come now
        self.engine.snooze(None)
        if self.on_change is not None:
            self.on_change(None)
        if was is None or was.until <= now:
            if held:
                message = _(NO_SNOOZE_DUE).format(watch=head, policy=held[0].policy)
            else:
                message = self._pending_text(now, head, pending=NO_SNOOZE, nothing=NO_SNOOZE_NOTHING)
            return {"ok": True, "watch": head, "snoozed_until": None, "message": message}
        evidence: dict[str, Any] = {"by": {"user": peer.user, "uid": peer.uid, "pid": peer.pid},
                                    "lifted": iso(was.until)}
        found = self.pending(now)
        if held:
            reason = _(LIFTED_DUE).format(by=by, policy=held[0].policy, **where)
            evidence["due_now"] = held[0].policy
        elif found is not None:
            reason = _(LIFTED_PENDING).format(by=by, countdown=countdown(found.progress, found.at, now, self.tz),
                                              **where)
            evidence["pending_stop"] = {"policy": found.policy, "at": iso(found.at)}
        else:
            reason = _(LIFTED).format(by=by, **where)
        self.recorder.record(Decision(time=now, policy="snooze", action=Action.SNOOZE, reason=reason,
                                      evidence=evidence, key=f"{SNOOZE_KEY_PREFIX}off:{iso(now)}:{peer.pid}"),
                             "snooze lifted", say=_("costctl: {message}").format(message=reason))
        if held or found is not None:  # the reason says what is pending
            message = _(DUE_NOW).format(watch=head, reason=reason)
        else:
            message = _(NOTHING_PENDING).format(watch=head, reason=reason)
        return {"ok": True, "watch": head, "snoozed_until": None, "message": message}


__all__ = ["SnoozeControl"]
