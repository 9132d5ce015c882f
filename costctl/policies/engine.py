"""The policy engine: builds the enabled policies and reports each new decision once.

Usage (live watch and replay alike; ``now`` comes from the caller's clock)::

    engine = PolicyEngine(settings)
    history = History(sample_interval=settings.watch.sample_interval, started_at=start)
    ...
    history.add_sample(sample)
    for decision in engine.evaluate(history, clock.now()):
        executor.handle(decision)
"""

from __future__ import annotations

import dataclasses

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ..clock import ensure_utc
from ..errors import ConfigError
from ..i18n import N_, _, format_time
from ..records import Decision
from ..records import Action
from .base import Pending, Policy, PolicyContext, iso, progress_texts
from .history import History
from .registry import known_policies, load_builtin_policies, registrations

#: The countdown's text while a due stop waits for the end of a snooze (named placeholders;
#: translated where used).
SNOOZED_PROGRESS = N_("{progress}, snoozed by {by}")
#: The countdown's text of a stop that is due and waits for the end of a snooze.
SNOOZED_DUE = N_("{policy} stop due, snoozed by {by}")
#: A stop that waited for a snooze says so in its reason.
SNOOZED_REASON = N_("{reason} (the stop waited for a snooze by {by} until {until})")


@dataclass(frozen=True, slots=True)
class Snooze:
    """``costctl snooze``: the stops of the snoozable policies (:attr:`Policy.snoozable`, the
    idle autostop) wait until ``until``.

    Attributes:
        until: aware UTC; a stop due before it is decided at the first evaluation at or after it,
            if its policy still reaches it then.
        by: who asked, one short clause (``"alice (uid 1000, pid 4242)"``).
        at: when it was asked (aware UTC).
    """

    until: datetime
    by: str
    at: datetime


class PolicyEngine:
    """Evaluate the enabled policies and deduplicate their decisions by ``Decision.key``.

    Args:
        settings: a :class:`~costctl.config.Settings` (its ``policies`` sections and the
            :class:`~costctl.policies.base.PolicyContext` taken from it); or None with
            ``policies`` and ``context`` given instead.
        policies: the ``[policies]`` section (an object with one attribute per policy name;
            a policy it lacks gets its config model's defaults).
        context: what policies need beyond their sections (default: :class:`PolicyContext`'s
            defaults).
        only: restrict to these policy names (e.g. a replay of the idle policy alone).
        seen_keys: keys already recorded (e.g. read back from the ledger after a restart),
            which are never reported again.

    Each registered policy builds itself with ``from_config(section, context)`` and is left out
    when that returns None (idle/stall window ``off``, no budget cap). Policies run in the
    registry's evaluation order (:mod:`costctl.policies.base`).

    Raises:
        ValueError: if ``only`` names an unknown policy, or neither settings nor policies is given.
    """

    def __init__(self, settings: Any = None, *, policies: Any = None, context: PolicyContext | None = None,
                 only: Iterable[str] | None = None, seen_keys: Iterable[str] = (),
                 on_error: Callable[[str, BaseException], None] | None = None) -> None:
        load_builtin_policies()
        if settings is not None:
            policies = settings.policies if policies is None else policies
            context = PolicyContext.from_settings(settings) if context is None else context
        if policies is None:
            raise ValueError("PolicyEngine needs the settings or the [policies] sections")
        context = context or PolicyContext()
        if context.policies is None:
            context = dataclasses.replace(context, policies=policies)
        specs = {s.name: s for s in registrations()}
        names = list(specs) if only is None else list(only)
        unknown = [n for n in names if n not in specs]
        if unknown:
            raise ValueError(_("unknown policy {name!r}; known: {known}").format(
                name=unknown[0], known=", ".join(known_policies())))
        self.settings = settings
        self.context = context
        self.policies: list[Policy] = []
        for name in names:
            spec = specs[name]
            section = getattr(policies, name, None)
            if section is None:
                section = spec.config()
            try:
                policy = spec.cls.from_config(section, context)
            except Exception as exc:  # noqa: BLE001 - a plugin's bug is a one-line configuration error
                raise ConfigError(_("policy {name!r} cannot be built from [policies.{name}]: {error}: {detail}").format(
                    name=name, error=type(exc).__name__, detail=exc)) from None
            if policy is not None:
                policy.tz = context.timezone  # the zone its reasons show times in
                self.policies.append(policy)
        self._seen: set[str] = set(seen_keys)
        self._on_error = on_error
        #: The snooze in force, if any (:meth:`snooze`).
        self.snoozed: Snooze | None = None
        self._holding: dict[str, Decision] = {}  # stops due that wait for the snooze's end, by key
        self._snoozable = {p.name for p in self.policies if getattr(p, "snoozable", False)}
        #: Policies whose evaluation raised, with the last exception (they are still tried).
        self.failures: dict[str, BaseException] = {}
        #: per policy name, the enabled policies that supersede it (:attr:`Policy.superseded_by`)
        by_name = {p.name: p for p in self.policies}
        self._supersede: dict[str, list[Policy]] = {}
        for p in self.policies:
            others = [by_name[n] for n in p.superseded_by if n in by_name]
            if others:
                self._supersede[p.name] = others
        #: per policy name, decisions dropped because another policy's diagnosis covered them
        self.superseded: dict[str, int] = {}

    @property
    def names(self) -> list[str]:
        """Names of the enabled policies, in evaluation order."""
        return [p.name for p in self.policies]

    def retention(self, sample_interval: timedelta) -> timedelta:
        """Telemetry the enabled policies need kept behind the newest sample."""
        return max((p.retention(sample_interval) for p in self.policies), default=timedelta(0))

    def snooze(self, snooze: Snooze | None) -> None:
        """Hold the snoozable policies' stops until ``snooze.until`` (None: lift the snooze; a
        stop it held is decided at the next evaluation). Budget caps and every policy that is
        not :attr:`~costctl.policies.base.Policy.snoozable` are never held. A snoozable policy
        returns its stop decision at every evaluation while its reason lasts (the idle policy
        does, for one idle stretch), so a held stop is decided when the snooze ends only if it
        is still due then, with the snooze in its reason and evidence."""
        self.snoozed = snooze

    def snoozable(self, policy: str) -> bool:
        """Whether ``costctl snooze`` postpones ``policy``'s stop (an enabled
        :attr:`~costctl.policies.base.Policy.snoozable` policy: the idle autostop, never a budget cap)."""
        return policy in self._snoozable

    def held_stops(self) -> list[Decision]:
        """The stop decisions that are due and wait for the snooze's end (from the last
        :meth:`evaluate`); lifting the snooze lets them come at the next evaluation."""
        return list(self._holding.values())

    def _held(self, decision: Decision, now: datetime) -> bool:
        """``decision`` waits for the snooze's end."""
        snooze = self.snoozed
        return (snooze is not None and now < snooze.until and decision.action is Action.STOP
                and decision.policy in self._snoozable)

    def mark_seen(self, keys: Iterable[str]) -> None:
        """Treat ``keys`` as already reported."""
        self._seen.update(keys)

    def evaluate(self, history: History, now: datetime) -> list[Decision]:
        """Run every enabled policy at ``now`` (aware UTC) and return only NEW decisions.

        Also raises ``history.retention`` to what the policies need, so History stays bounded
        but never drops a sample a window still needs.

        A policy that raises (a :class:`~costctl.errors.PolicyError` such as a spend in another
        currency than the budget caps, or a plugin's bug) is skipped for this evaluation and the
        others still run — one broken rule never silences the autostop. The first failure of each
        policy goes to ``on_error(name, exception)``; :attr:`failures` keeps the latest.
        """
        now = ensure_utc(now)
        history.keep_at_least(self.retention(history.sample_interval))
        new: list[Decision] = []
        # Held stops are held afresh at each evaluation (a snoozable policy returns its stop on
        # every evaluation while it holds): one whose reason went away is dropped.
        held_before, self._holding = self._holding, {}
        for policy in self.policies:
            try:
                found = list(policy.decisions(history, now))
            except Exception as exc:  # noqa: BLE001 - see the docstring
                first = policy.name not in self.failures
                self.failures[policy.name] = exc
                if first and self._on_error is not None:
                    self._on_error(policy.name, exc)
                continue
            for decision in found:
                if decision.key in self._seen:
                    continue
                if self._held(decision, now):
                    self._holding[decision.key] = decision
                    continue
                if decision.key in held_before and self.snoozed is not None:
                    snooze = self.snoozed
                    decision = replace(decision, time=now, reason=_(SNOOZED_REASON).format(
                        reason=decision.reason, by=snooze.by,
                        until=format_time(snooze.until, self.context.timezone)), evidence={
                        **decision.evidence, "snoozed": {"by": snooze.by, "at": iso(snooze.at),
                                                         "until": iso(snooze.until)}})
                self._seen.add(decision.key)
                new.append(decision)
        return self.drop_superseded(new)

    def drop_superseded(self, decisions: list[Decision]) -> list[Decision]:
        """``decisions`` less those another enabled policy's diagnosis covers
        (:attr:`Policy.superseded_by`, :meth:`Policy.covers`). :meth:`evaluate` applies it to each
        evaluation's decisions; a replay that feeds one kind of point before another (``costctl
        analyze``: train, then eval) applies it again to all its decisions at the end."""
        if not self._supersede:
            return decisions
        return [d for d in decisions if not self._superseded(d)]

    def _superseded(self, decision: Decision) -> bool:
        """True when a policy that supersedes ``decision``'s covers it (checked after every
        policy has read the new progress, so the order of evaluation does not matter); counted
        in :attr:`superseded`."""
        for other in self._supersede.get(decision.policy, ()):
            try:
                covered = other.covers(decision)
            except Exception:  # noqa: BLE001 - a broken rule never hides another's decision
                covered = False
            if covered:
                self.superseded[decision.policy] = self.superseded.get(decision.policy, 0) + 1
                return True
        return False

    def updates(self, now: datetime) -> list[tuple[str, dict[str, Any]]]:
        """Evidence the policies add to decisions they already made, as ``(key, evidence)``
        (e.g. a plateau episode's repeat count); policies without ``updates`` give none."""
        out: list[tuple[str, dict[str, Any]]] = []
        for policy in self.policies:
            get = getattr(policy, "updates", None)
            if get is None:
                continue
            try:
                out.extend(get(now))
            except Exception:  # noqa: BLE001 - evidence updates are best effort
                continue
        return out

    def next_due(self, history: History, now: datetime) -> datetime | None:
        """The earliest deadline after ``now`` (aware UTC) of the enabled policies
        (:meth:`Policy.due_at`), or None. Call it after :meth:`evaluate` at the same ``now``; a
        policy whose ``due_at`` raises, or that fails, is left out."""
        now = ensure_utc(now)
        nearest: datetime | None = None
        for policy in self.policies:
            if policy.name in self.failures:
                continue
            try:
                at = policy.due_at(history, now)
            except Exception:  # noqa: BLE001 - a wakeup is never worth breaking a tick for
                continue
            if at is not None and at > now and (nearest is None or at < nearest):
                nearest = at
        snooze = self.snoozed
        if snooze is not None and self._holding and snooze.until > now and (nearest is None or snooze.until < nearest):
            nearest = snooze.until  # a held stop is decided when the snooze ends
        return nearest

    def next_stop(self, history: History, now: datetime, *, snoozable: bool | None = None) -> Pending | None:
        """The nearest pending ``stop`` of the enabled policies (:meth:`Policy.pending`), or None.

        Call it after :meth:`evaluate` at the same ``now``: the policies then read nothing new,
        so it costs a few comparisons. A policy whose ``pending`` raises is left out (its
        evaluation failures are reported by :meth:`evaluate`). ``snoozable``: only the stops a
        snooze postpones (True), only those it never does (False: a budget cap), or all (None)."""
        now = ensure_utc(now)
        nearest: Pending | None = None
        snooze = self.snoozed if self.snoozed is not None and self.snoozed.until > now else None
        for policy in self.policies:
            if policy.name in self.failures:
                continue
            try:
                found = policy.pending(history, now)
            except Exception:  # noqa: BLE001 - a countdown is never worth breaking a tick for
                continue
            if found is None or found.action != "stop" or found.at <= now:
                continue
            if snoozable is not None and (policy.name in self._snoozable) != snoozable:
                continue
            if snooze is not None and policy.name in self._snoozable and found.at < snooze.until:
                found = replace(found, at=snooze.until,
                                progress=_(SNOOZED_PROGRESS).format(progress=found.progress, by=snooze.by),
                                progress_en=SNOOZED_PROGRESS.format(progress=found.progress_stored, by=snooze.by))
            if nearest is None or found.at < nearest.at:
                nearest = found
        if snooze is not None and snoozable is not False:
            for decision in self._holding.values():  # due, waiting for the snooze's end
                held = Pending(policy=decision.policy, action="stop", at=snooze.until,
                               **progress_texts(SNOOZED_DUE, policy=decision.policy, by=snooze.by))
                if nearest is None or held.at < nearest.at:
                    nearest = held
        return nearest


__all__ = ["PolicyEngine", "SNOOZED_DUE", "SNOOZED_PROGRESS", "SNOOZED_REASON", "Snooze"]
