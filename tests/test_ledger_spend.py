"""Spend from memory (costctl.ledger.spend.SpendTracker) agrees with the ledger's own sums."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from costctl.clock import SimClock
from costctl.ledger import Ledger
from costctl.ledger.spend import SpendTracker, day_start

SHANGHAI = ZoneInfo("Asia/Shanghai")
RATE = Decimal("2.40")


@pytest.fixture
def sqlite_ledger(tmp_path):
    opened = Ledger.open(f"sqlite:///{tmp_path / 'costctl.db'}")
    yield opened
    opened.close()


def _instance(ledger: Ledger) -> int:
    return ledger.ensure_instance("sim", "sim-1", gpu="A100", gpu_count=1, billing="on-demand",
                                  price_per_hour=RATE, currency="USD")


def _ledger_view(ledger: Ledger, pk: int, run_id: str, now: datetime, tz) -> tuple[Decimal, Decimal, Decimal]:
    total = ledger.spend(instance_pk=pk).get("USD", Decimal(0))
    today = ledger.spend(instance_pk=pk, since=day_start(now, tz)).get("USD", Decimal(0))
    run = ledger.spend(run_id=run_id).get("USD", Decimal(0))
    return total, today, run


def test_day_start_in_shanghai():
    # 15:59 UTC is 23:59 in Shanghai; 16:00 UTC is midnight there
    assert day_start(datetime(2026, 3, 1, 15, 59, tzinfo=timezone.utc), SHANGHAI) == \
        datetime(2026, 2, 28, 16, 0, tzinfo=timezone.utc)
    assert day_start(datetime(2026, 3, 1, 16, 0, tzinfo=timezone.utc), SHANGHAI) == \
        datetime(2026, 3, 1, 16, 0, tzinfo=timezone.utc)


def test_tracker_matches_the_ledger_across_midnight_in_shanghai(sqlite_ledger):
    ledger = sqlite_ledger
    pk = _instance(ledger)
    clock = SimClock(datetime(2026, 3, 1, 14, 0, tzinfo=timezone.utc))  # 22:00 in Shanghai
    earlier = ledger.start_run(pk, started_at=clock.now(), command=None, log_path=None, host="h")
    ledger.accrue(earlier, clock.advance(3600), RATE, "USD")  # 22:00-23:00 Shanghai
    ledger.finish_run(earlier, ended_at=clock.now(), exit_code=0, status="completed")

    clock.advance(600)  # 23:10 Shanghai: a new watch
    run = ledger.start_run(pk, started_at=clock.now(), command=None, log_path=None, host="h")
    tracker = SpendTracker.read(ledger, instance_pk=pk, run_started_at=clock.now(), rate_per_hour=RATE,
                                currency="usd", tz=SHANGHAI, now=clock.now())
    assert tracker.prior_total == tracker.prior_today == Decimal("2.40")
    for _ in range(16):  # past midnight Shanghai (16:00 UTC), to 01:50
        now = clock.advance(600)
        ledger.accrue(run, now, RATE, "USD")
        assert (tracker.total(now), tracker.today(now), tracker.run_spend(now)) == \
            _ledger_view(ledger, pk, run, now, SHANGHAI), now
    now = clock.now()
    assert tracker.today(now) == RATE * Decimal("110") / 60  # 00:00-01:50 only
    assert tracker.total(now) == Decimal("2.40") + RATE * Decimal(160) / 60


def test_charging_starts_where_the_instances_newest_charge_ends(sqlite_ledger):
    """A run started before another run's last charge end starts charging at that end."""
    ledger = sqlite_ledger
    pk = _instance(ledger)
    clock = SimClock(datetime(2026, 3, 1, 8, 0, tzinfo=timezone.utc))
    other = ledger.start_run(pk, started_at=clock.now(), command=None, log_path=None, host="h")
    started = clock.advance(60)
    run = ledger.start_run(pk, started_at=started, command=None, log_path=None, host="h")
    ledger.accrue(other, clock.advance(600), RATE, "USD")  # the other watch charged to 08:11
    tracker = SpendTracker.read(ledger, instance_pk=pk, run_started_at=started, rate_per_hour=RATE,
                                currency="USD", tz=timezone.utc, now=clock.now())
    assert tracker.charge_from == datetime(2026, 3, 1, 8, 11, tzinfo=timezone.utc)
    assert tracker.run_spend(clock.now()) == 0
    now = clock.advance(900)
    ledger.accrue(run, now, RATE, "USD")
    assert (tracker.total(now), tracker.today(now), tracker.run_spend(now)) == \
        _ledger_view(ledger, pk, run, now, timezone.utc)


def test_a_move_is_a_new_tracker_at_the_new_rate(sqlite_ledger):
    ledger = sqlite_ledger
    pk = _instance(ledger)
    pk2 = ledger.ensure_instance("sim", "sim-2", gpu="L4", gpu_count=1, billing="on-demand",
                                 price_per_hour=Decimal("0.80"), currency="USD")
    clock = SimClock(datetime(2026, 3, 1, 8, 0, tzinfo=timezone.utc))
    run = ledger.start_run(pk, started_at=clock.now(), command=None, log_path=None, host="h")
    first = SpendTracker.read(ledger, instance_pk=pk, run_started_at=clock.now(), rate_per_hour=RATE,
                              currency="USD", tz=SHANGHAI, now=clock.now())
    moved = clock.advance(1800)
    ledger.accrue(run, moved, RATE, "USD")
    run2 = ledger.start_run(pk2, started_at=moved, command=None, log_path=None, host="h")
    second = SpendTracker.read(ledger, instance_pk=pk2, run_started_at=moved, rate_per_hour=Decimal("0.80"),
                               currency="USD", tz=SHANGHAI, now=moved)
    now = clock.advance(1800)
    ledger.accrue(run2, now, Decimal("0.80"), "USD")
    assert first.run_spend(moved) == Decimal("1.20")
    assert second.total(now) == second.run_spend(now) == Decimal("0.40") == \
        ledger.spend(instance_pk=pk2)["USD"]


def test_figures_are_the_three_amounts_of_total_today_and_run_spend():
    from datetime import datetime, timedelta, timezone
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from costctl.ledger.spend import SpendTracker, day_start

    tz = ZoneInfo("Asia/Shanghai")
    start = datetime(2026, 6, 1, 15, 30, tzinfo=timezone.utc)  # 23:30 in Shanghai
    tracker = SpendTracker(currency="USD", rate_per_hour=Decimal("2.37"), charge_from=start,
                           prior_total=Decimal("10.5"), prior_today=Decimal("1.25"),
                           prior_day=day_start(start, tz), tz=tz)
    for minutes in (0, 1, 29, 30, 31, 90, 24 * 60 + 45):  # before and after the local midnight
        now = start + timedelta(minutes=minutes, seconds=7)
        assert tracker.figures(now) == (tracker.total(now), tracker.today(now), tracker.run_spend(now))
    assert tracker.figures(start + timedelta(minutes=31))[1] < tracker.total(start + timedelta(minutes=31))
