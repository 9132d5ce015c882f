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
from datetime import datetime, timedelta
from typing import Any

from ..clock import ensure_utc
from ..errors import ConfigError
from ..records import Decision
from .base import Pending, Policy, PolicyContext
from .history import History
from .registry import known_policies, load_builtin_policies, registrations


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
            raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(known_policies())}")
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
                raise ConfigError(f"policy {name!r} cannot be built from [policies.{name}]: "
                                  f"{type(exc).__name__}: {exc}") from None
            if policy is not None:
                self.policies.append(policy)
        self._seen: set[str] = set(seen_keys)
        self._on_error = on_error
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
        return nearest

    def next_stop(self, history: History, now: datetime) -> Pending | None:
        """The nearest pending ``stop`` of the enabled policies (:meth:`Policy.pending`), or None.

        Call it after :meth:`evaluate` at the same ``now``: the policies then read nothing new,
        so it costs a few comparisons. A policy whose ``pending`` raises is left out (its
        evaluation failures are reported by :meth:`evaluate`)."""
        now = ensure_utc(now)
        nearest: Pending | None = None
        for policy in self.policies:
            if policy.name in self.failures:
                continue
            try:
                found = policy.pending(history, now)
            except Exception:  # noqa: BLE001 - a countdown is never worth breaking a tick for
                continue
            if found is None or found.action != "stop" or found.at <= now:
                continue
            if nearest is None or found.at < nearest.at:
                nearest = found
        return nearest


__all__ = ["PolicyEngine"]
