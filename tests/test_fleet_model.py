"""The fleet's rows and the guard rule (costctl.fleet.model): pure functions of what the
accounts and the ledger said, the time and the lag."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costctl.fleet.model import AccountRead, GuardState, build_report, guard_of
from costctl.ledger.instance_view import Heartbeat, InstanceRecord
from costctl.money import Money
from costctl_providers.base import BillingMode, Instance, Status

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
LAG = timedelta(seconds=30)


def beat(run: str, age_s: float, mode: str | None = None) -> Heartbeat:
    return Heartbeat(run, "gpu-box", 4242, NOW - timedelta(seconds=age_s), mode)


def record(*beats: Heartbeat, spend: dict[str, Decimal] | None = None) -> InstanceRecord:
    return InstanceRecord("vastai", "312", spend or {}, tuple(beats))


def test_no_record_or_no_open_run_is_unwatched():
    assert guard_of(None, now=NOW, lag=LAG).state is GuardState.UNWATCHED
    assert guard_of(record(), now=NOW, lag=LAG).state is GuardState.UNWATCHED


def test_a_fresh_heartbeat_of_a_watch_that_stops_guards():
    g = guard_of(record(beat("old", 500), beat("new", 4)), now=NOW, lag=LAG)
    assert (g.state, g.guarded, g.run_id, g.heartbeat_age, g.host) == (
        GuardState.GUARDED, True, "new", timedelta(seconds=4), "gpu-box")


def test_the_lag_is_inclusive_and_one_microsecond_past_it_is_stale():
    assert guard_of(record(beat("r", 30)), now=NOW, lag=LAG).guarded
    late = guard_of(record(beat("r", 30.000001)), now=NOW, lag=LAG)
    assert late.state is GuardState.STALE and not late.guarded and late.run_id == "r"


def test_advise_only_and_dry_run_watches_never_guard():
    for mode in ("advise-only", "dry-run"):
        g = guard_of(record(beat("a", 2, mode)), now=NOW, lag=LAG)
        assert (g.state, g.guarded, g.mode) == (GuardState.NOT_STOPPING, False, mode)


def test_a_stopping_watch_guards_even_beside_a_newer_advise_only_one():
    g = guard_of(record(beat("advise", 1, "advise-only"), beat("stop", 20)), now=NOW, lag=LAG)
    assert (g.state, g.run_id) == (GuardState.GUARDED, "stop")
    # ... but not once its heartbeat is stale: the advise-only watch is all there is
    g = guard_of(record(beat("advise", 1, "advise-only"), beat("stop", 31)), now=NOW, lag=LAG)
    assert (g.state, g.run_id) == (GuardState.NOT_STOPPING, "advise")


def test_a_heartbeat_from_a_clock_ahead_counts_as_just_seen():
    g = guard_of(record(beat("r", -5)), now=NOW, lag=LAG)
    assert g.guarded and g.heartbeat_age == timedelta(0)


@given(ages=st.lists(st.tuples(st.floats(min_value=-60, max_value=1e6, allow_nan=False),
                               st.sampled_from([None, "dry-run", "advise-only"])), max_size=6),
       lag_s=st.floats(min_value=1, max_value=86400), more_s=st.floats(min_value=0, max_value=86400))
def test_a_longer_lag_never_unguards(ages, lag_s, more_s):
    rec = record(*(beat(f"r{i}", age, mode) for i, (age, mode) in enumerate(ages)))
    short = guard_of(rec, now=NOW, lag=timedelta(seconds=lag_s))
    longer = guard_of(rec, now=NOW, lag=timedelta(seconds=lag_s + more_s))
    assert not short.guarded or longer.guarded
    # guarded exactly when some stopping watch's heartbeat is within the lag
    lag = timedelta(seconds=lag_s)
    assert short.guarded == any(mode is None and max(NOW - b.last_seen_at, timedelta(0)) <= lag
                                for b, (_age, mode) in zip(rec.open_runs, ages))


# ----------------------------------------------------------------------------- rows


def inst(iid: str, status: Status = Status.RUNNING, *, price: str | None = "0.50", currency: str = "USD",
         started: datetime | None = NOW - timedelta(hours=2), stopped: datetime | None = None,
         stopped_price: str | None = None, gpu_util: float | None = None) -> Instance:
    return Instance("vastai", iid, "RTX 4090", "RTX 4090", 2, BillingMode.ON_DEMAND,
                    Decimal(price) if price else None, currency, status, started_at=started, stopped_at=stopped,
                    stopped_price_per_hour=Decimal(stopped_price) if stopped_price else None,
                    gpu_utilization=gpu_util)


def test_rows_carry_both_views_of_spend_and_the_stopped_cost():
    reads = [
        AccountRead("vastai", None, (inst("312", gpu_util=0.0),
                                     inst("313", Status.STOPPED, started=NOW - timedelta(days=3),
                                          stopped=NOW - timedelta(days=2), stopped_price="0.0021"))),
        AccountRead("vastai", "team", (inst("900", price=None),)),
    ]
    records = {("vastai", "312"): record(beat("r", 3), spend={"EUR": Decimal("1"), "USD": Decimal("0.25")})}
    report = build_report(reads, records, now=NOW, guard_lag=LAG)
    a, b, c = report.rows
    assert (a.account, a.instance.id, b.instance.id, c.account, c.instance.id) == (None, "312", "313", "team", "900")
    assert a.uptime_s == 7200 and a.provider_spend == Money(Decimal("1.00"), "USD")  # 0.50/h x 2 h
    assert a.ledger_spend == {"EUR": Decimal("1"), "USD": Decimal("0.25")}          # never added together
    assert a.guard.guarded and a.price == Money(Decimal("0.50"), "USD") and a.instance.gpu_utilization == 0.0
    assert b.uptime_s is None and b.provider_spend is None and b.stopped_s == 2 * 86400  # Vast: not its session
    assert b.stopped_price == Money(Decimal("0.0021"), "USD")
    assert b.stopped_spend == Money(Decimal("0.0021") * 48, "USD")
    assert b.guard.state is GuardState.UNWATCHED and b.ledger_spend == {}
    assert c.price is None and c.provider_spend is None  # no price: no provider spend, never 0
    assert not report.failed and not report.all_failed


@pytest.mark.parametrize("provider, uptime", [("autodl", None), ("vastai", None), ("sim", 86400)])
def test_a_stopped_instance_s_uptime_is_its_last_session_only_where_the_provider_says_so(provider, uptime):
    """Issue 18: AutoDL's started_at of a shut-down Pro instance is months before its last start:
    price x (stopped_at - started_at) showed 265 days of spend."""
    stopped = inst("pro-1", Status.STOPPED, started=NOW - timedelta(days=279), stopped=NOW - timedelta(days=14))
    if provider == "sim":
        stopped = inst("pro-1", Status.STOPPED, started=NOW - timedelta(days=15), stopped=NOW - timedelta(days=14))
    row = build_report([AccountRead(provider, None, (stopped,))], {}, now=NOW, guard_lag=LAG).rows[0]
    assert row.uptime_s == uptime
    assert (row.provider_spend is None) is (uptime is None)
    assert row.stopped_s == 14 * 86400


def test_failed_accounts_are_kept_in_order_and_all_failed_says_so():
    reads = [AccountRead("vastai", None, error="vastai: HTTP 500"), AccountRead("runpod", None, (inst("p"),))]
    report = build_report(reads, {}, now=NOW, guard_lag=LAG)
    assert [a.ok for a in report.accounts] == [False, True] and report.failed[0].error == "vastai: HTTP 500"
    assert not report.all_failed and len(report.rows) == 1
    assert build_report(reads[:1], {}, now=NOW, guard_lag=LAG).all_failed
    assert not build_report([], {}, now=NOW, guard_lag=LAG).all_failed


def test_an_unreadable_ledger_makes_every_guard_unknown():
    records = {("vastai", "312"): record(beat("r", 3), spend={"USD": Decimal("1")})}
    report = build_report([AccountRead("vastai", None, (inst("312"),))], records, now=NOW, guard_lag=LAG,
                          ledger_error="cannot connect")
    row = report.rows[0]
    assert row.guard.state is GuardState.UNKNOWN and not row.guard.guarded and row.ledger_spend == {}
    assert report.ledger_error == "cannot connect"


def test_the_lag_must_be_positive():
    with pytest.raises(ValueError):
        build_report([], {}, now=NOW, guard_lag=timedelta(0))
