"""Pending actions (the status line's countdown): each policy's ``pending``, the engine's
nearest pending stop, and how the countdown reads in ``[watch] timezone``."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from costctl.clock import SimClock
from costctl.config import BudgetConfig, IdleConfig, StallConfig, load_settings
from costctl.money import Money
from costctl.policies import BudgetPolicy, History, IdlePolicy, Pending, PolicyEngine, StallPolicy
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample
from costctl.statusline import countdown

SHANGHAI = ZoneInfo("Asia/Shanghai")
IDLE_START = datetime(2026, 6, 1, 5, 35, tzinfo=timezone.utc)  # 13:35 in Shanghai


def gpu_sample(t: datetime, util: float) -> TelemetrySample:
    return TelemetrySample(time=t, gpus=(GpuReading(index=0, utilization=util),), gpu_status=SignalStatus.OK)


def idle_history(clock: SimClock, minutes: int, *, util: float = 0.0) -> History:
    """Samples every minute from ``clock.now()`` for ``minutes`` minutes (the clock ends there)."""
    history = History(sample_interval=timedelta(minutes=1), started_at=clock.now(), retention=timedelta(hours=2))
    for _ in range(minutes):
        history.add_sample(gpu_sample(clock.now(), util))
        clock.advance(60)
    history.add_sample(gpu_sample(clock.now(), util))
    return history


def test_idle_pending_counts_down_to_idle_start_plus_the_window() -> None:
    clock = SimClock(IDLE_START)
    policy = IdlePolicy(IdleConfig(time_window="30m"))
    history = idle_history(clock, 25)
    assert policy.evaluate(history, clock.now()) is None
    pending = policy.pending(history, clock.now())
    assert pending == Pending(policy="idle", action="stop", at=IDLE_START + timedelta(minutes=30),
                              progress="idle 25m of 30m")
    assert countdown(pending.progress, pending.at, clock.now(), SHANGHAI) == \
        "idle 25m of 30m — stopping at 14:05"


def test_idle_pending_is_gone_while_busy_and_once_due() -> None:
    clock = SimClock(IDLE_START)
    policy = IdlePolicy(IdleConfig(time_window="30m"))
    busy = idle_history(clock, 10, util=80.0)
    assert policy.pending(busy, clock.now()) is None
    clock = SimClock(IDLE_START)
    policy = IdlePolicy(IdleConfig(time_window="30m"))
    history = idle_history(clock, 30)
    assert policy.pending(history, clock.now()) is None  # due: evaluate reports it
    assert policy.evaluate(history, clock.now()) is not None


def test_budget_pending_projects_the_cap_at_the_current_rate() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    policy = BudgetPolicy(BudgetConfig(total="10"), "CNY")
    history = History(rate=Money(Decimal("2.50"), "CNY"), spend_total=Money(Decimal("8"), "CNY"))
    pending = policy.pending(history, now)
    assert pending is not None and pending.action == "stop"
    assert pending.at == now + timedelta(minutes=48)  # 2 CNY at 2.50/h
    # people read the money as the language writes it; the stored English keeps the exact figures
    assert pending.progress == "total budget CN¥8.00 of CN¥10.00"
    assert pending.progress_stored == "total budget 8.00 of 10 CNY"
    # a cap more than a day away is no countdown; nor is a spent cap, or no rate
    assert policy.pending(History(rate=history.rate, spend_total=Money(Decimal("-60"), "CNY")), now) is None
    assert policy.pending(History(rate=history.rate, spend_total=Money(Decimal("10"), "CNY")), now) is None
    assert policy.pending(History(spend_total=history.spend_total), now) is None


def test_the_daily_cap_counts_only_before_the_day_ends_and_the_nearer_cap_wins() -> None:
    policy = BudgetPolicy(BudgetConfig(total="100", daily="20"), "USD", SHANGHAI)
    rate = Money(Decimal("2.50"), "USD")
    history = History(rate=rate, spend_total=Money(Decimal("95"), "USD"), spend_today=Money(Decimal("19"), "USD"))
    noon = datetime(2026, 1, 1, 4, tzinfo=timezone.utc)  # 12:00 in Shanghai
    pending = policy.pending(history, noon)
    assert pending is not None and pending.progress == "daily budget $19.00 of $20.00"
    assert pending.progress_stored == "daily budget 19.00 of 20 USD"
    assert pending.at == noon + timedelta(minutes=24)
    late = datetime(2026, 1, 1, 15, 50, tzinfo=timezone.utc)  # 23:50: the day ends before 1 USD is spent
    pending = policy.pending(history, late)
    assert pending is not None and pending.progress == "total budget $95.00 of $100.00"
    assert pending.progress_stored == "total budget 95.00 of 100 USD"
    assert pending.at == late + timedelta(hours=2)


def test_stall_pending_shows_once_half_the_window_passed() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    policy = StallPolicy(StallConfig(stall_window="30m", action="stop"))
    history = History(child_running=True)
    history.add_progress(ProgressPoint(time=now - timedelta(minutes=10), value=1.0))
    assert policy.pending(history, now) is None
    pending = policy.pending(history, now + timedelta(minutes=6))
    assert pending == Pending(policy="stall", action="stop", at=now + timedelta(minutes=20),
                              progress="no progress for 16m of 30m")
    history.child_running = False
    assert policy.pending(history, now + timedelta(minutes=6)) is None


@pytest.fixture
def clean_env(tmp_path, monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in os.environ if k.upper().startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_the_engine_gives_the_nearest_pending_stop_and_never_an_advice(clean_env) -> None:
    s = load_settings(overrides={"policies": {"idle": {"time_window": "30m"},
                                              "stall": {"stall_window": "38m", "action": "advise"},
                                              "budget": {"total": "10"}}})
    engine = PolicyEngine(s)
    clock = SimClock(IDLE_START)
    history = idle_history(clock, 25)
    history.child_running = True
    history.add_progress(ProgressPoint(time=IDLE_START - timedelta(minutes=10), value=1.0))  # stall advises in 3m
    history.rate = Money(Decimal("1"), "USD")
    history.spend_total = Money(Decimal("9.5"), "USD")  # the cap in 30 minutes
    assert [d.action for d in engine.evaluate(history, clock.now())] == ["warn"]  # the budget's, at 80 %
    stall = next(p for p in engine.policies if p.name == "stall")
    assert stall.pending(history, clock.now()).action == "advise"
    nearest = engine.next_stop(history, clock.now())
    assert nearest is not None and nearest.policy == "idle" and nearest.progress == "idle 25m of 30m"
    history.spend_total = Money(Decimal("9.95"), "USD")  # the cap in 3 minutes: nearer than idle
    nearest = engine.next_stop(history, clock.now())
    assert nearest is not None and nearest.policy == "budget"
    assert nearest.at == clock.now() + timedelta(minutes=3)


def test_the_countdown_reads_in_the_zone_with_the_date_when_not_today() -> None:
    now = datetime(2026, 6, 1, 15, 50, tzinfo=timezone.utc)  # 23:50 in Shanghai
    at = now + timedelta(minutes=15, seconds=42, microseconds=7)
    assert countdown("idle 15m of 30m", at, now, SHANGHAI) == "idle 15m of 30m — stopping at 2026-06-02 00:05"
    assert countdown("x", at, now, timezone.utc) == "x — stopping at 16:05"
    assert countdown("x", at, now, timezone.utc, would=True) == "x — would stop at 16:05"
