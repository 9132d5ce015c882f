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

from collections.abc import Iterable
from datetime import datetime, timedelta

from ..clock import ensure_utc
from ..config import Settings
from ..records import Decision
from .base import POLICIES, Policy
from .history import History

#: Evaluation order of the built-in policies (others follow in registration order).
DEFAULT_ORDER = ("idle", "stall", "budget", "plateau", "divergence")


class PolicyEngine:
    """Evaluate the enabled policies and deduplicate their decisions by ``Decision.key``.

    Args:
        settings: the whole configuration; each registered policy builds itself from its
            ``[policies.<name>]`` section and is left out when that section disables it
            (idle/stall window ``off``, no budget cap).
        only: restrict to these policy names (e.g. a replay of the idle policy alone).
        seen_keys: keys already recorded (e.g. read back from the ledger after a restart),
            which are never reported again.

    Raises:
        ValueError: if ``only`` names an unknown policy.
    """

    def __init__(self, settings: Settings, *, only: Iterable[str] | None = None,
                 seen_keys: Iterable[str] = ()) -> None:
        if only is None:
            names = [n for n in DEFAULT_ORDER if n in POLICIES] + [n for n in POLICIES if n not in DEFAULT_ORDER]
        else:
            names = list(only)
        unknown = [n for n in names if n not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
        self.settings = settings
        self.policies: list[Policy] = []
        for name in names:
            policy = POLICIES[name].from_settings(settings)
            if policy is not None:
                self.policies.append(policy)
        self._seen: set[str] = set(seen_keys)

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

        Raises:
            PolicyError: when a policy cannot be evaluated (e.g. a spend in another currency
                than the budget caps).
        """
        now = ensure_utc(now)
        history.keep_at_least(self.retention(history.sample_interval))
        new: list[Decision] = []
        for policy in self.policies:
            for decision in policy.decisions(history, now):
                if decision.key in self._seen:
                    continue
                self._seen.add(decision.key)
                new.append(decision)
        return new


__all__ = ["PolicyEngine"]
