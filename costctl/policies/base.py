"""The policy interface and the small registry the engine builds from.

A policy is a class built from its config section (``[policies.<name>]``) that looks at a
:class:`~costctl.policies.history.History` at a given ``now`` and concludes a
:class:`~costctl.records.Decision` or nothing. Policies never read the wall clock and never
act: the executor does. Modelled on Cloud Custodian's registry of small filter classes.

Example::

    @register
    class MyPolicy(Policy):
        name = "mine"

        @classmethod
        def from_settings(cls, settings):
            return cls()

        def evaluate(self, history, now):
            return None
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from ..clock import ensure_utc
from ..records import Decision

if TYPE_CHECKING:
    from ..config import Settings
    from .history import History


class Policy:
    """Base class of the policies.

    Subclasses set ``name`` and implement :meth:`from_settings` and either :meth:`evaluate`
    (at most one decision per call) or :meth:`decisions` (several, e.g. when a replay added
    many progress points at once).
    """

    name: ClassVar[str] = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy | None:
        """Build the policy from the settings; None when the configuration disables it."""
        raise NotImplementedError

    def retention(self, sample_interval: timedelta) -> timedelta:
        """How much telemetry (behind the newest sample) this policy needs kept in History."""
        return timedelta(0)

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """The decision this policy reaches at ``now`` (aware UTC), or None.

        The same event yields a decision with the same ``key`` on every call while it lasts;
        the engine reports it once. Policies that process new records incrementally return
        only the latest of the decisions :meth:`decisions` would give.
        """
        found = self.decisions(history, now)
        return found[-1] if found else None

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        """All decisions reached at ``now`` (what the engine calls)."""
        if type(self).evaluate is Policy.evaluate:
            raise NotImplementedError(f"{type(self).__name__} implements neither evaluate nor decisions")
        found = self.evaluate(history, now)
        return [found] if found is not None else []


POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: add a policy class to :data:`POLICIES` under ``cls.name``.

    Raises:
        ValueError: if the name is empty or already taken.
    """
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no policy name")
    if cls.name in POLICIES and POLICIES[cls.name] is not cls:
        raise ValueError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls
    return cls


def iso(when: datetime) -> str:
    """An aware datetime as ISO 8601 UTC with a ``Z`` (for keys and evidence)."""
    return ensure_utc(when).isoformat().replace("+00:00", "Z")


__all__ = ["Policy", "POLICIES", "register", "iso"]
