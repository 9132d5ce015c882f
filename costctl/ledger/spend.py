"""Spend from memory: :class:`SpendTracker`, what the policies see each tick without a ledger read.

The ledger is read once, when a ledger run starts (:meth:`SpendTracker.read`): the instance's
spend so far, its spend since the start of that day in the watch's time zone, and where this
run's charging starts — the later of the run's start and the end of the instance's newest
charge (the rule of :mod:`costctl.ledger.accrual`). From then on this run's charges are known
without asking: ``rate x (now - charge start)``, the same amounts the writer's accruals record.
A move to another instance is a new ledger run at another rate: a new tracker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any

from ..clock import ensure_utc
from ..money import cost_of


def day_start(when: datetime, tz: tzinfo) -> datetime:
    """The start (aware UTC) of the day in ``tz`` that ``when`` falls in."""
    local = when.astimezone(tz)
    return local.replace(hour=0, minute=0, second=0, microsecond=0).astimezone(timezone.utc)


@dataclass
class SpendTracker:
    """One ledger run's spend, kept in memory (see the module docstring).

    Attributes:
        currency: of every amount (the run's rate's).
        rate_per_hour: the run's price per instance-hour (Decimal).
        charge_from: where this run's charging starts (aware UTC).
        prior_total: the instance's spend before this run charged.
        prior_today: its spend since :attr:`prior_day` began, before this run charged.
        prior_day: the start (UTC) of the day ``prior_today`` covers.
        tz: the zone days are counted in (``[watch] timezone``).
    """

    currency: str
    rate_per_hour: Decimal
    charge_from: datetime
    prior_total: Decimal
    prior_today: Decimal
    prior_day: datetime
    tz: tzinfo

    @classmethod
    def read(cls, ledger: Any, *, instance_pk: int, run_started_at: datetime, rate_per_hour: Decimal,
             currency: str, tz: tzinfo, now: datetime) -> SpendTracker:
        """Read the instance's prior spend from ``ledger`` once (three reads), before the run charges.

        Raises:
            LedgerError: the ledger cannot be read.
        """
        cur = currency.upper()
        newest = ledger.last_charge_end(instance_pk)
        started = ensure_utc(run_started_at)
        charge_from = max(started, ensure_utc(newest)) if newest is not None else started
        day = day_start(now, tz)
        total = ledger.spend(instance_pk=instance_pk).get(cur, Decimal(0))
        today = ledger.spend(instance_pk=instance_pk, since=day).get(cur, Decimal(0))
        return cls(currency=cur, rate_per_hour=Decimal(rate_per_hour), charge_from=charge_from,
                   prior_total=total, prior_today=today, prior_day=day, tz=tz)

    def run_spend(self, now: datetime) -> Decimal:
        """This run's charges up to ``now`` (unrounded)."""
        return self._charged(self.charge_from, now)

    def total(self, now: datetime) -> Decimal:
        """The instance's spend up to ``now``: before this run, plus this run's."""
        return self.prior_total + self.run_spend(now)

    def today(self, now: datetime) -> Decimal:
        """The instance's spend since the start of ``now``'s day in :attr:`tz`.

        On the day the tracker was read that is the prior spend of that day plus this run's since
        the day began; on a later day only this run's since that day began (the charges before
        this run ended before it started)."""
        day = day_start(now, self.tz)
        prior = self.prior_today if day <= self.prior_day else Decimal(0)
        return prior + self._charged(max(self.charge_from, day), now)

    def figures(self, now: datetime) -> tuple[Decimal, Decimal, Decimal]:
        """``(total(now), today(now), run_spend(now))`` at once (a tick's figures): this run's
        charges are computed once, and once more only when the day began after its charging
        did. The same amounts as the three methods (unrounded Decimal)."""
        spent = self._charged(self.charge_from, now)
        day = day_start(now, self.tz)
        prior = self.prior_today if day <= self.prior_day else Decimal(0)
        since_day = spent if day <= self.charge_from else self._charged(day, now)
        return self.prior_total + spent, prior + since_day, spent

    def _charged(self, start: datetime, now: datetime) -> Decimal:
        span = ensure_utc(now) - start
        return cost_of(self.rate_per_hour, span) if span > timedelta(0) else Decimal(0)


__all__ = ["SpendTracker", "day_start"]
