"""The warning before a stop: ``[notify] warn_before`` ahead of a pending stop, one decision.

The policies already say when they would stop if nothing changes
(:meth:`~costctl.policies.base.Policy.pending`, gathered by
:meth:`~costctl.policies.engine.PolicyEngine.next_stop`: the status line's countdown). When that
time comes within ``warn_before``, :class:`StopWarnings` gives one ``warn`` decision for it; the
watch records it (ledger, console, the ``stop_pending`` notification). One warning per pending
stop: the same stop (same policy, same time) is not warned again; a stop that went away (the
instance got busy) and came back, or that moved later past the warning (a snooze), is.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from ..i18n import N_, _, format_time
from ..policies.base import Pending, iso
from ..policies.idle import fmt_span
from ..records import Action, Decision
from .events import WARNING_KEY_PREFIX

#: The warning's reason: a whole sentence with named placeholders (translated where it is used).
WARNING = N_("{provider} instance {instance} will be stopped at {at} ({left} from now) by the {policy} policy "
             "unless that changes: {progress}. Run `costctl snooze 1h` on {host} to postpone an idle autostop.")
#: The same for a stop no snooze postpones (a budget cap): no snooze hint.
WARNING_NOT_SNOOZABLE = N_("{provider} instance {instance} will be stopped at {at} ({left} from now) by the {policy} "
                           "policy unless that changes: {progress}. A snooze does not postpone this stop.")


#: How much later a warned stop may come and still be the same stop (a budget cap's projected
#: time moves with the rate); one that moved further (a snooze) is warned about again.
DRIFT = timedelta(seconds=60)


class StopWarnings:
    """Decides when a pending stop is warned about.

    Args:
        warn_before: how long ahead (``[notify] warn_before``); None: never.
        tz: the zone the stop's time is shown in (``[watch] timezone``).
    """

    def __init__(self, warn_before: timedelta | None, tz: tzinfo) -> None:
        self.warn_before = warn_before
        self.tz = tz
        self._warned: dict[str, datetime] = {}  # policy -> the stop time warned about

    def check(self, pending: Pending | None, now: datetime, *, provider: str, instance: str,
              host: str, snoozable: bool = True) -> Decision | None:
        """The warning to record at ``now`` (aware UTC) for ``pending`` (the nearest pending
        stop, :meth:`~costctl.policies.engine.PolicyEngine.next_stop`), or None: none pending,
        not within ``warn_before`` yet, or already warned about. ``snoozable``: ``costctl snooze``
        can postpone that stop (an idle autostop; never a budget cap): only then is the snooze
        suggested."""
        if self.warn_before is None:
            return None
        if pending is None:
            self._warned.clear()  # the stop went away: a later one is warned about again
            return None
        if pending.at - now > self.warn_before or pending.at <= now:
            return None
        warned = self._warned.get(pending.policy)
        if warned is not None and pending.at - warned <= DRIFT:
            return None  # the same stop (a projection may drift by a tick): warned already
        self._warned[pending.policy] = pending.at
        at = format_time(pending.at, self.tz)  # the one format of times shown (costctl.i18n)
        reason = _(WARNING if snoozable else WARNING_NOT_SNOOZABLE).format(provider=provider, instance=instance, at=at, left=fmt_span(pending.at - now),
                                policy=pending.policy, progress=pending.progress, host=host)
        return Decision(time=now, policy=pending.policy, action=Action.WARN, reason=reason,
                        evidence={"pending_stop": {"policy": pending.policy, "at": iso(pending.at),
                                                   "progress": pending.progress_stored},
                                  "warn_before_s": self.warn_before.total_seconds(), "at_local": at},
                        key=f"{WARNING_KEY_PREFIX}{pending.policy}:{iso(pending.at)}")


__all__ = ["DRIFT", "StopWarnings", "WARNING", "WARNING_NOT_SNOOZABLE"]
