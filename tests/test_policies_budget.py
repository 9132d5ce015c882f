"""The budget policy: total and daily caps, warn at warn_at, act at the cap."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from costctl.config import BudgetConfig
from costctl.errors import PolicyError
from costctl.money import Money, cost_of
from costctl.policies import BudgetPolicy, History

T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
RATE = Decimal("2.50")


def cny(amount: str | Decimal) -> Money:
    return Money(Decimal(amount), "CNY")


def test_total_cap_warns_then_acts_once_each() -> None:
    policy = BudgetPolicy(BudgetConfig(total="10", warn_at=0.8), "CNY")
    history = History(rate=cny(RATE))
    seen: dict[str, tuple[int, str]] = {}
    for minute in range(0, 6 * 60):
        history.spend_total = cny(cost_of(RATE, minute * 60))
        for d in policy.decisions(history, T0 + timedelta(minutes=minute)):
            seen.setdefault(d.key, (minute, d.action))
    # 8 CNY at 2.50/h after 192 min, 10 CNY after 240 min
    assert seen == {"budget:total:warn": (192, "warn"), "budget:total:act": (240, "stop")}


def test_a_jump_past_the_cap_gives_only_the_act() -> None:
    policy = BudgetPolicy(BudgetConfig(total="10"), "CNY")
    history = History(spend_total=cny("12.3"))
    (decision,) = policy.decisions(history, T0)
    assert decision.evidence["level"] == "act" and decision.action == "stop"
    assert decision.evidence["spend"] == "12.3" and decision.evidence["cap_amount"] == "10"


def test_daily_cap_once_per_day_in_the_configured_zone() -> None:
    tz = ZoneInfo("Asia/Shanghai")  # UTC+8: the local day starts at 16:00 UTC
    policy = BudgetPolicy(BudgetConfig(daily="5", action="advise"), "CNY", tz)
    history = History(spend_today=cny("5.01"))
    (d1,) = policy.decisions(history, datetime(2026, 1, 1, 15, 59, tzinfo=timezone.utc))
    (d2,) = policy.decisions(history, datetime(2026, 1, 1, 16, 0, tzinfo=timezone.utc))
    assert d1.key == "budget:daily:act:2026-01-01" and d2.key == "budget:daily:act:2026-01-02"
    assert d1.action == "advise" and "Asia/Shanghai" in d1.reason


def test_below_warn_level_nothing() -> None:
    policy = BudgetPolicy(BudgetConfig(total="10", daily="5"), "CNY")
    history = History(spend_total=cny("7.99"), spend_today=cny("3.99"))
    assert policy.decisions(history, T0) == []
    assert policy.evaluate(history, T0) is None


def test_evaluate_returns_the_most_severe() -> None:
    policy = BudgetPolicy(BudgetConfig(total="10", daily="5"), "CNY")
    history = History(spend_total=cny("8.5"), spend_today=cny("5"))
    assert {d.key for d in policy.decisions(history, T0)} == {"budget:total:warn", "budget:daily:act:2026-01-01"}
    assert policy.evaluate(history, T0).evidence["cap"] == "daily"


def test_spend_in_another_currency_is_an_error() -> None:
    policy = BudgetPolicy(BudgetConfig(total="10"), "USD")
    with pytest.raises(PolicyError, match="CNY"):
        policy.decisions(History(spend_total=cny("1")), T0)


def test_a_sub_cent_cap_is_said_with_its_own_decimals() -> None:
    policy = BudgetPolicy(BudgetConfig(total="0.003"), "USD")
    (decision,) = policy.decisions(History(spend_total=Money(Decimal("0.0031"), "USD")), T0)
    # money as people read it (costctl.i18n.format_amount): under 1, up to 4 decimals; the evidence is exact
    assert decision.reason == "total spend $0.0031 reached the total budget of $0.003"
    assert (decision.evidence["spend"], decision.evidence["cap_amount"]) == ("0.0031", "0.003")
    (big,) = BudgetPolicy(BudgetConfig(total="10"), "CNY").decisions(History(spend_total=cny("12.345")), T0)
    assert big.reason == "total spend CN¥12.34 reached the total budget of CN¥10.00"
