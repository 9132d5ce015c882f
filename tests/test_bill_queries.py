"""Bill queries and rendering details: day splits across DST, run durations, rounding."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from costctl.ledger import queries
from costctl.report import duration_cell, money_cell, money_text

UTC = timezone.utc


def test_split_at_midnights_handles_dst_days():
    ny = ZoneInfo("America/New_York")
    # 2026-03-08 in New York has 23 hours (clocks jump 02:00 -> 03:00).
    start = datetime(2026, 3, 7, 23, 0, tzinfo=ny).astimezone(UTC)
    end = datetime(2026, 3, 9, 1, 0, tzinfo=ny).astimezone(UTC)
    parts = queries.split_at_midnights(start, end, ny)
    assert [(d, (hi - lo).total_seconds() / 3600) for d, lo, hi in parts] == [
        (date(2026, 3, 7), 1.0),
        (date(2026, 3, 8), 23.0),
        (date(2026, 3, 9), 1.0),
    ]
    assert parts[0][1] == start and parts[-1][2] == end
    assert all(a[2] == b[1] for a, b in zip(parts, parts[1:]))


def test_split_within_one_day_is_one_part():
    tz = ZoneInfo("Asia/Shanghai")
    start = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    assert queries.split_at_midnights(start, start + timedelta(hours=2), tz) == [
        (date(2026, 1, 1), start, start + timedelta(hours=2))
    ]


def test_run_duration_covers_charges_after_its_recorded_end(ledger):
    """A guard that keeps charging after the child exited: duration runs to the last charge."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    pk = ledger.ensure_instance("sim", "g", gpu=None, gpu_count=1, billing="on-demand",
                                price_per_hour=Decimal("3.6"), currency="USD")
    run = ledger.start_run(pk, started_at=t0, command=None, log_path=None, host=None)
    ledger.accrue(run, t0 + timedelta(seconds=100), Decimal("3.6"), "USD")
    ledger.finish_run(run, ended_at=t0 + timedelta(seconds=100), exit_code=0, status="succeeded")
    ledger.accrue(run, t0 + timedelta(seconds=250), Decimal("3.6"), "USD")
    zero = ledger.start_run(pk, started_at=t0 + timedelta(seconds=300), command=None, log_path=None, host=None)
    ledger.finish_run(zero, ended_at=t0 + timedelta(seconds=300), exit_code=127, status="failed-to-start")
    with ledger.session() as s:
        rows = {r.run_id: r for r in queries.bill_by_run(s)}
        assert rows[run].duration_s == 250 and rows[run].spend == Decimal("0.25")
        # A run that failed to start costs nothing and still shows.
        assert rows[zero].duration_s == 0 and rows[zero].spend == 0 and rows[zero].currency == "USD"
        assert rows[zero].price_per_hour == Decimal("3.6")
        assert [r.run_id for r in queries.bill_by_run(s, since=t0 + timedelta(seconds=260))] == [zero]


def test_rounding_is_for_display_only():
    assert money_text(Decimal("0.0000277777")) == "0.000028"
    assert money_text(Decimal("2.5"), 0) == "2"  # half-even
    assert money_cell(Decimal("0.004"), "USD") == "<$0.01"  # as the language writes money (format_money)
    assert money_cell(Decimal("0"), "USD") == "$0.00" and money_cell(Decimal("1234.565"), "CNY") == "CN¥1,234.56"
    assert money_cell(Decimal("3"), "JPY") == "¥3.00"  # to the cent in every currency: cells add up as shown
    assert money_cell(None) == "-"
    assert duration_cell(3661.4) == "1:01:01" and duration_cell(90000) == "25:00:00"
