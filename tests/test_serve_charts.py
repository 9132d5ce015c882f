"""The spend charts' x ticks: as many as fit, their labels never overlapping at the page's tick
font on a wide screen or on a phone (390 CSS px: the 18-unit font), shorter labels for shorter
spans."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from costctl.ledger.timeline import SpendSeries
from costctl.serve import charts
from costctl.serve.charts import TICK_FONT, TICK_FONT_NARROW, WIDTH, label_box, time_ticks

T0 = datetime(2026, 12, 5, 6, 30, tzinfo=timezone.utc)
TZ = ZoneInfo("Asia/Shanghai")


def _boxes(ticks, font):
    return [label_box(t, font) for t in ticks]


@pytest.mark.parametrize("span", [timedelta(seconds=1), timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=7), timedelta(hours=1), timedelta(days=1),
                                  timedelta(days=2), timedelta(days=30), timedelta(days=400), timedelta(days=3000), timedelta(days=36500)])
@pytest.mark.parametrize("font", [TICK_FONT, TICK_FONT_NARROW])
def test_x_tick_labels_never_intersect_and_stay_in_the_chart(span, font):
    ticks = time_ticks(T0, T0 + span, TZ, font)
    assert len(ticks) >= 2
    boxes = _boxes(ticks, font)
    assert all(0 <= x0 and x1 <= WIDTH for x0, x1 in boxes)
    assert all(a[1] < b[0] for a, b in zip(boxes, boxes[1:])), (span, [t.label for t in ticks])
    assert len({t.label for t in ticks}) == len(ticks)


def test_labels_are_short_within_a_day_and_the_phone_gets_fewer():
    hour = time_ticks(T0, T0 + timedelta(hours=1), TZ, TICK_FONT_NARROW)
    assert hour[0].label == "14:30" and all(len(t.label) == 5 for t in hour)
    two_days_wide = time_ticks(T0, T0 + timedelta(days=2), TZ, TICK_FONT)
    two_days_phone = time_ticks(T0, T0 + timedelta(days=2), TZ, TICK_FONT_NARROW)
    assert two_days_wide[0].label == "12-06 00:00"
    assert 2 <= len(two_days_phone) < len(two_days_wide)
    assert [t.label for t in time_ticks(T0, T0 + timedelta(days=30), TZ, TICK_FONT)][:2] == ["12-07", "12-14"]


@pytest.mark.parametrize("span, labels", [
    (timedelta(hours=1), ["14:30", "14:40", "14:50", "15:00", "15:10", "15:20", "15:30"]),
    (timedelta(days=1), ["12-05 18:00", "12-06 00:00", "12-06 06:00", "12-06 12:00"]),
    (timedelta(days=30), ["12-07", "12-14", "12-21", "12-28", "01-04"]),   # Mondays
    (timedelta(days=400), ["2027-01", "2027-04", "2027-07", "2027-10", "2028-01"]),
    (timedelta(days=3000), ["2028", "2030", "2032", "2034"]),
])
def test_x_ticks_fall_on_round_local_times_evenly_apart(span, labels):
    """Ticks at whole ten minutes, six hours, Mondays, quarters, even years in the shown time
    zone (Shanghai: T0 is 14:30 there), placed where their times fall."""
    ticks = time_ticks(T0, T0 + span, TZ, TICK_FONT)
    assert [t.label for t in ticks] == labels
    gaps = [round(b.at - a.at, 6) for a, b in zip(ticks, ticks[1:])]
    if span <= timedelta(days=30):  # equal steps (months and years differ in length)
        assert len(set(gaps)) == 1


def test_a_span_too_short_for_round_times_shows_seconds():
    ticks = time_ticks(T0, T0 + timedelta(seconds=30), TZ, TICK_FONT_NARROW)
    assert [t.label for t in ticks] == ["14:30:00", "14:30:10", "14:30:20", "14:30:30"]
    assert (ticks[0].anchor, ticks[-1].anchor) == ("start", "end")


def test_a_chart_carries_both_tick_sets_and_the_page_draws_both(tmp_path):
    from tests.serve_support import populate, request, serving

    series = [SpendSeries(1, "vastai:1", "USD", [T0, T0 + timedelta(days=2)], [Decimal(0), Decimal("3.5")])]
    chart = charts.build(series, "USD", TZ, "spend-by-instance-USD")
    assert chart.x_ticks and chart.x_ticks_narrow and len(chart.x_ticks_narrow) < len(chart.x_ticks)
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url) as base:
        html = request(base, "/").text
    assert 'class="x-ticks x-ticks-wide"' in html and 'class="x-ticks x-ticks-narrow"' in html
    assert ".spend-chart .x-ticks-wide { display: none; }" in html   # inside the narrow-screen rule
