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
    return [label_box(t, font, first=i == 0, last=i == len(ticks) - 1 and i > 0) for i, t in enumerate(ticks)]


@pytest.mark.parametrize("span", [timedelta(minutes=2), timedelta(hours=1), timedelta(days=1),
                                  timedelta(days=2), timedelta(days=30), timedelta(days=400)])
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
    assert two_days_wide[0].label == "12-05 14:30"
    assert 2 <= len(two_days_phone) < len(two_days_wide)
    assert [t.label for t in time_ticks(T0, T0 + timedelta(days=30), TZ, TICK_FONT)][:2] == ["12-05", "12-10"]


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
