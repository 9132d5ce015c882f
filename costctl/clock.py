"""Clocks: every policy and the spend accrual read time through a :class:`Clock`.

The live watch uses :class:`RealClock`; tests and ``costctl analyze`` use :class:`SimClock`
so a recorded trace replays deterministically without sleeping. All times are
timezone-aware UTC ``datetime`` objects.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Protocol


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def ensure_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime.

    A naive datetime is taken to be UTC already (databases such as SQLite drop the zone).
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


class Clock(Protocol):
    """Source of the current time (aware UTC)."""

    def now(self) -> datetime:  # pragma: no cover - protocol
        """The current time, aware UTC."""
        ...


class RealClock:
    """Wall-clock time."""

    def now(self) -> datetime:
        """The current wall-clock time, aware UTC."""
        return utcnow()


class SimClock:
    """A clock that moves only when told to.

    Args:
        start: initial time (aware; converted to UTC). Defaults to 2026-01-01T00:00:00Z.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = ensure_utc(start) if start else datetime(2026, 1, 1, tzinfo=timezone.utc)

    def now(self) -> datetime:
        """The simulated current time, aware UTC."""
        return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move the clock forward by ``seconds`` (>= 0) and return the new time.

        Raises:
            ValueError: if asked to move backwards.
        """
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ValueError("SimClock cannot move backwards")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (must not be earlier than now)."""
        when = ensure_utc(when)
        if when < self._now:
            raise ValueError("SimClock cannot move backwards")
        self._now = when
