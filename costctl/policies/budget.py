"""The budget policy: ``total`` and ``daily`` caps in the instance's currency.

``total`` is compared with ``History.spend_total`` (everything recorded for the instance),
``daily`` with ``History.spend_today`` (the spend of the current day in ``[watch] timezone``;
the watch computes it). For each cap, the level reached is:

* ``warn`` when ``spend >= warn_at * cap`` (action ``"warn"``);
* ``act`` when ``spend >= cap`` (the configured action, ``"stop"`` by default).

Only the highest level reached is reported, so a spend that jumps past the cap gives one
``act`` decision and no stale warning. Keys: ``budget:total:<level>`` (once per run) and
``budget:daily:<level>:<YYYY-MM-DD>`` (once per day and level), with the day in the configured
time zone.

A spend in another currency than the caps' is an error (:class:`~costctl.errors.PolicyError`):
two currencies are never compared without an explicit exchange rate.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from decimal import Decimal
from typing import ClassVar
from zoneinfo import ZoneInfo

from pydantic import Field

from ..clock import ensure_utc
from ..config_types import Action, MoneyAmount
from ..errors import PolicyError
from ..i18n import N_, _
from ..money import Money, round_money
from ..records import Decision
from .base import Pending, Policy, PolicyConfig, PolicyContext, progress_texts, register
from .history import History


#: How far ahead a projected ``total`` cap counts as pending (a cap days away is no countdown).
TOTAL_HORIZON = timedelta(hours=24)


class BudgetConfig(PolicyConfig):
    """``[policies.budget]``: caps in the instance's currency.

    ``total`` caps the instance's whole recorded spend, ``daily`` the spend of the current day
    in ``[watch] timezone``. A warning is raised at ``warn_at`` (fraction, default 0.8) of a
    cap and the action at 1.0.
    """

    heading: ClassVar[str] = N_("caps in the instance's currency.")

    action: Action = Field(default="stop", description=N_("what to do at a cap: advise | stop"))
    total: MoneyAmount | None = Field(default=None, examples=["100"], description=N_("cap on the instance's whole recorded spend"))
    daily: MoneyAmount | None = Field(default=None, examples=["20"], description=N_("cap on the spend per day in [watch] timezone"))
    warn_at: float = Field(default=0.8, gt=0, le=1, description=N_("warn at this fraction of a cap"))


@register
class BudgetPolicy(Policy):
    """Warn at ``warn_at`` of a cap and act at the cap (``[policies.budget]``).

    Args:
        config: the ``[policies.budget]`` section (caps as Decimal).
        currency: ISO code the caps are stated in (``[instance] currency``).
        tz: where a day starts for the ``daily`` cap (``[watch] timezone``).
    """

    name = "budget"
    config_model: ClassVar[type[BudgetConfig]] = BudgetConfig
    order = 30

    def __init__(self, config: BudgetConfig, currency: str, tz: ZoneInfo | None = None) -> None:
        self.config = config
        self.action = config.action
        self.currency = currency.upper()
        self.tz = tz or ZoneInfo("UTC")

    @classmethod
    def from_config(cls, config: BudgetConfig, context: PolicyContext) -> BudgetPolicy | None:
        """None when neither ``total`` nor ``daily`` is set; caps in ``context.currency``, days
        in ``context.timezone``."""
        if config.total is None and config.daily is None:
            return None
        return cls(config, context.currency, context.timezone)

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        """One decision per cap that has reached its warn or act level (highest level only)."""
        now = ensure_utc(now)
        day = now.astimezone(self.tz).date().isoformat()
        found = []
        for cap_name, cap, spend in (("total", self.config.total, history.spend_total),
                                     ("daily", self.config.daily, history.spend_today)):
            if cap is None or spend is None:
                continue
            decision = self._check(cap_name, cap, spend, history, now, day)
            if decision is not None:
                found.append(decision)
        return found

    def pending(self, history: History, now: datetime) -> Pending | None:
        """The cap the spend reaches first at the current rate (``History.rate`` charged on),
        when it does so soon enough to matter: the ``daily`` cap before the day ends in
        ``[watch] timezone`` (it starts afresh then), the ``total`` cap within
        :data:`TOTAL_HORIZON`. Text ``"daily budget $18.20 of $20.00"`` (stored in English as
        ``"daily budget 18.20 of 20 USD"``). None without a rate,
        with a zero rate, with a spend or rate in another currency (:meth:`decisions` says so),
        or once a cap is reached."""
        now = ensure_utc(now)
        rate = history.rate
        if rate is None or rate.amount <= 0 or rate.currency != self.currency:
            return None
        local = now.astimezone(self.tz)
        midnight = datetime.combine(local.date() + timedelta(days=1), time(0), tzinfo=self.tz)
        best: Pending | None = None
        for cap_name, cap, spend, horizon in (
                ("total", self.config.total, history.spend_total, now + TOTAL_HORIZON),
                ("daily", self.config.daily, history.spend_today, ensure_utc(midnight))):
            if cap is None or spend is None or spend.currency != self.currency or spend.amount >= cap:
                continue
            seconds = (cap - spend.amount) / rate.amount * 3600
            if seconds > Decimal(repr((horizon - now).total_seconds())):  # past the horizon (a tiny rate: years)
                continue
            at = now + timedelta(seconds=float(seconds))
            if best is not None and best.at <= at:
                continue
            if cap_name == "daily":
                progress = N_("daily budget {spent} of {cap}")
            else:
                progress = N_("total budget {spent} of {cap}")
            stored = _STORED_PROGRESS[cap_name].format(spent=round_money(spend.amount, 2), cap=cap,
                                                       currency=self.currency)
            best = Pending(policy=self.name, action=self.action, at=at,
                           **progress_texts(progress, stored=stored, spent=spend.shown(),
                                            cap=Money(cap, self.currency).shown()))
        return best

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """The most severe decision of :meth:`decisions` (an ``act`` before a ``warn``)."""
        found = self.decisions(history, now)
        found.sort(key=lambda d: d.evidence["level"] != "act")
        return found[0] if found else None

    def _check(self, cap_name: str, cap: Decimal, spend: Money, history: History, now: datetime,
               day: str) -> Decision | None:
        if spend.currency != self.currency:
            if cap_name == "daily":
                mismatch = _("budget caps are in {currency} ([instance] currency) but the daily spend is in "
                             "{spent}; set [instance] currency to {spent} or convert the caps")
            else:
                mismatch = _("budget caps are in {currency} ([instance] currency) but the total spend is in "
                             "{spent}; set [instance] currency to {spent} or convert the caps")
            raise PolicyError(mismatch.format(currency=self.currency, spent=spend.currency))
        warn_level = cap * Decimal(repr(self.config.warn_at))
        if spend.amount >= cap:
            level, action = "act", self.action
        elif spend.amount >= warn_level:
            level, action = "warn", "warn"
        else:
            return None
        fraction = spend.amount / cap if cap > 0 else None
        key = f"budget:{cap_name}:{level}" + (f":{day}" if cap_name == "daily" else "")
        evidence = {
            "cap": cap_name,
            "level": level,
            "cap_amount": str(cap),
            "spend": str(spend.amount),
            "currency": self.currency,
            "warn_at": self.config.warn_at,
            "fraction": f"{fraction:.4f}" if fraction is not None else None,
            "day": day if cap_name == "daily" else None,
            "timezone": str(self.tz),
            "rate_per_hour": str(history.rate.amount) if history.rate is not None else None,
        }
        # money as people read it (Money.shown: a 0.003 cap is $0.003, not $0.00); the evidence is exact
        reason = _(_BUDGET_REASONS[(cap_name == "daily", level)]).format(
            spent=spend.shown(), cap=Money(cap, self.currency).shown(), warn_at=self.config.warn_at, day=day,
            tz=self.tz)
        return Decision(time=now, policy=self.name, action=action, reason=reason, evidence=evidence, key=key)


#: What a pending budget stop stores as its progress (English, exact: the spend to the cent and the
#: cap as configured, with the currency code), by cap; people read ``daily budget $18.20 of $20.00``.
_STORED_PROGRESS = {
    "daily": "daily budget {spent} of {cap} {currency}",
    "total": "total budget {spent} of {cap} {currency}",
}

#: The budget decision's reason, by (daily cap, level).
_BUDGET_REASONS = {
    (False, "act"): N_("total spend {spent} reached the total budget of {cap}"),
    (False, "warn"): N_("total spend {spent} passed {warn_at:.0%} of the total budget of {cap}"),
    (True, "act"): N_("daily spend {spent} reached the daily budget of {cap} on {day} ({tz})"),
    (True, "warn"): N_("daily spend {spent} passed {warn_at:.0%} of the daily budget of {cap} on {day} ({tz})"),
}


__all__ = ["BudgetConfig", "BudgetPolicy", "TOTAL_HORIZON"]
