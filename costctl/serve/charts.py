"""Spend charts for the dashboard: the geometry of an inline SVG line chart, computed on the server.

One chart per currency (two currencies never share an axis): cumulative spend per series
(:class:`costctl.ledger.timeline.SpendSeries`) against time, the y axis from 0 to a round
amount above the largest, the x axis over the series' span with times in the shown time zone,
as many x labels as fit without overlapping at the page's tick font on a wide screen and on a
phone (two sets; the page's CSS shows one), shorter labels for shorter spans (:func:`time_ticks`).
This module only computes coordinates and labels (:class:`Chart`); the template draws them
(``templates/dashboard.html``), so every text is escaped by Jinja2. No script, no external
resource: the page shows the same thing with JavaScript off and offline.

Coordinates are floats (SVG user units), computed from the Decimal amounts; the amounts shown
as tick labels are Decimals (round steps of 1, 2 or 5 times a power of ten).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ledger.timeline import SpendSeries

#: The chart's drawing size (SVG user units; the page scales it to its width) and margins.
WIDTH, HEIGHT = 640.0, 260.0
LEFT, RIGHT, TOP, BOTTOM = 64.0, 12.0, 12.0, 30.0
#: Ticks on the y axis, about; intervals between x ticks at most (fewer when the labels would
#: not fit: :func:`time_ticks`).
Y_TICKS, X_TICKS = 4, 6
#: The x tick labels' font size (SVG user units) as the page's CSS sets it: on a wide screen, and
#: on a narrow one (``max-width: 600px``; there the 640-unit chart is drawn about 360 px wide,
#: so 18 units are about 10 px). Each chart carries a tick set for each (:attr:`Chart.x_ticks`,
#: :attr:`Chart.x_ticks_narrow`); the CSS shows the one for the screen.
TICK_FONT, TICK_FONT_NARROW = 12.0, 18.0
#: A label's width per character (em; digits, ``-`` and ``:`` of a system sans-serif are about
#: 0.55, so this errs wide) and the least gap kept between two labels (em).
CHAR_EM, TICK_GAP_EM = 0.62, 0.8
#: Series colours, in order (Tableau 10: distinct for the common colour-vision deficiencies).
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


@dataclass(frozen=True, slots=True)
class Line:
    """One series drawn: its label, colour, SVG ``points`` (``"x,y x,y ..."``) and final amount."""

    label: str
    colour: str
    points: str
    total: Decimal


@dataclass(frozen=True, slots=True)
class Tick:
    """An axis tick: its position (SVG units along the axis), its label, and how the label is
    anchored at it (SVG ``text-anchor``: ``start``, ``middle`` or ``end``; x ticks only)."""

    at: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart of one currency, ready to draw (see the module docstring): ``dom_id`` is unique in
    the page (``spend-by-instance-USD``)."""

    dom_id: str
    currency: str
    lines: list[Line]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    x_ticks_narrow: list[Tick] = ()  # type: ignore[assignment]
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    top: float = TOP
    bottom: float = HEIGHT - BOTTOM


def nice_step(top: Decimal, ticks: int = Y_TICKS) -> Decimal:
    """A round step (1, 2 or 5 times a power of ten) that splits ``[0, top]`` into about ``ticks``
    parts; ``top`` > 0."""
    raw = top / ticks
    exponent = raw.adjusted()
    for mantissa in (1, 2, 5, 10):
        step = Decimal(mantissa).scaleb(exponent)
        if step >= raw:
            return step
    return Decimal(10).scaleb(exponent)  # pragma: no cover - 10 * 10^e is always >= raw


def _amount_label(value: Decimal, step: Decimal) -> str:
    """A tick amount with as many decimals as its step needs (``0.25``, ``10``)."""
    places = max(0, -step.normalize().as_tuple().exponent)  # type: ignore[operator]
    return f"{value:.{places}f}"


def time_format(span_s: float) -> str:
    """The x labels' ``strftime`` format for evenly spaced ticks over ``span_s`` seconds:
    ``HH:MM:SS`` within ten minutes, ``HH:MM`` within a day, ``MM-DD HH:MM`` within three days,
    ``MM-DD`` within a year, ``YYYY-MM-DD`` beyond."""
    if span_s < 600:
        return "%H:%M:%S"
    if span_s < 86400:
        return "%H:%M"
    if span_s < 3 * 86400:
        return "%m-%d %H:%M"
    return "%m-%d" if span_s < 365 * 86400 else "%Y-%m-%d"


def label_box(tick: Tick, font: float) -> tuple[float, float]:
    """The x extent (SVG units) a tick's label takes at ``font`` units, anchored at the tick as
    :attr:`Tick.anchor` says (the template draws it so)."""
    width = len(tick.label) * CHAR_EM * font
    if tick.anchor == "start":
        return tick.at, tick.at + width
    if tick.anchor == "end":
        return tick.at - width, tick.at
    return tick.at - width / 2, tick.at + width / 2


def ticks_fit(ticks: Sequence[Tick], font: float) -> bool:
    """Whether the labels of ``ticks`` (in order) stay inside the chart, differ from their
    neighbours and keep :data:`TICK_GAP_EM` between their boxes at ``font`` units."""
    boxes = [label_box(t, font) for t in ticks]
    if any(x0 < 0 or x1 > WIDTH for x0, x1 in boxes):
        return False
    gap = TICK_GAP_EM * font
    return all(a[1] + gap <= b[0] and s.label != t.label
               for a, b, s, t in zip(boxes, boxes[1:], ticks, ticks[1:]))


#: Round steps between x ticks: within a day (seconds, from local midnight), in days (1, 2 and
#: 14 by day number, 7 from Mondays) and in months (from January). The smallest whose labels fit
#: is taken, so a chart gets as many round times as it can show.
SUBDAY_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
DAY_STEPS = (1, 2, 7, 14)
MONTH_STEPS = (1, 2, 3, 6, 12, 24, 60, 120)


def _inside(t0: datetime, t1: datetime, times: Iterator[datetime], limit: int) -> list[datetime] | None:
    """The aware ``times`` (ascending) within ``[t0, t1]``; None when more than ``limit``."""
    out: list[datetime] = []
    for when in times:
        if when > t1:
            break
        if when >= t0:
            out.append(when)
            if len(out) > limit:
                return None
    return out


def _round_times(t0: datetime, t1: datetime, tz: tzinfo, unit: str, step: int) -> Iterator[datetime]:
    """Round local times from the local day of ``t0`` on, every ``step`` of ``unit`` (``s``:
    seconds from midnight, ``d``: days, ``m``: months), as aware datetimes, ascending."""
    day = t0.astimezone(tz).date()
    end = t1.astimezone(tz).date()
    if unit == "s":
        while day <= end:
            midnight = datetime.combine(day, time(0))
            for k in range(0, 86400, step):
                yield (midnight + timedelta(seconds=k)).replace(tzinfo=tz)
            day += timedelta(days=1)
    elif unit == "d":
        while day <= end:
            if (day.weekday() == 0) if step == 7 else day.toordinal() % step == 0:
                yield datetime.combine(day, time(0)).replace(tzinfo=tz)
            day += timedelta(days=1)
    else:
        month = day.year * 12 + day.month - 1
        while True:
            first = date(month // 12, month % 12 + 1, 1)
            if first > end:
                return
            if month % step == 0 and first >= day.replace(day=1):
                yield datetime.combine(first, time(0)).replace(tzinfo=tz)
            month += 1


def _even_ticks(t0: datetime, t1: datetime, tz: tzinfo, font: float) -> list[Tick]:
    """Evenly spaced ticks from ``t0`` to ``t1`` (the first label starts at the left end, the
    last ends at the right one), as many as fit: for a span too short for round times."""
    fmt = time_format(max((t1 - t0).total_seconds(), 1.0))
    plot_w = WIDTH - LEFT - RIGHT
    for parts in range(X_TICKS, 0, -1):
        ticks = [Tick(LEFT + plot_w * k / parts, (t0 + (t1 - t0) * k / parts).astimezone(tz).strftime(fmt),
                      "start" if k == 0 else "end" if k == parts else "middle")
                 for k in range(parts + 1)]
        if ticks_fit(ticks, font):
            return ticks
    return [Tick(LEFT, t0.astimezone(tz).strftime(fmt), "start")]


def time_ticks(t0: datetime, t1: datetime, tz: tzinfo, font: float) -> list[Tick]:
    """The x ticks of a chart from ``t0`` to ``t1`` (aware): at round local times in ``tz``
    (whole minutes, hours, days, Mondays, months: :data:`SUBDAY_STEPS`, :data:`DAY_STEPS`,
    :data:`MONTH_STEPS`), the smallest step whose labels at ``font`` units fit without
    overlapping (:func:`ticks_fit`), at least two and at most :data:`X_TICKS` + 1 of them;
    labelled ``HH:MM`` within a day, ``MM-DD HH:MM`` for hours over longer spans, ``MM-DD`` for
    days, ``YYYY-MM`` for months and ``YYYY`` for years. A label centred on its tick that would leave the chart is
    anchored at its end (or start) instead. Too short a span for two round times: evenly spaced
    ticks from ``t0`` to ``t1``."""
    span = max((t1 - t0).total_seconds(), 1.0)
    plot_w = WIDTH - LEFT - RIGHT
    candidates = ([("s", step, "%H:%M" if span < 86400 else "%m-%d %H:%M") for step in SUBDAY_STEPS]
                  + [("d", step, "%m-%d") for step in DAY_STEPS] + [("m", step, "%Y-%m" if step < 12 else "%Y") for step in MONTH_STEPS])
    for unit, step, fmt in candidates:
        seconds = step * (1 if unit == "s" else 86400 if unit == "d" else 28 * 86400)
        if span / seconds > 4 * (X_TICKS + 1):  # far too many: not worth listing
            continue
        times = _inside(t0, t1, _round_times(t0, t1, tz, unit, step), X_TICKS + 1)
        if not times or len(times) < 2:
            continue
        ticks = []
        for when in times:
            tick = Tick(LEFT + plot_w * (when - t0).total_seconds() / span, when.astimezone(tz).strftime(fmt))
            x0, x1 = label_box(tick, font)
            if x1 > WIDTH:
                tick = Tick(tick.at, tick.label, "end")
            elif x0 < 0:
                tick = Tick(tick.at, tick.label, "start")
            ticks.append(tick)
        if ticks_fit(ticks, font):
            return ticks
    return _even_ticks(t0, t1, tz, font)


def build(series: Sequence[SpendSeries], currency: str, tz: tzinfo, dom_id: str) -> Chart:
    """The chart of the ``currency`` series among ``series`` (see :class:`Chart`); series of other
    currencies are left out. An empty chart (no such series) has no lines and no ticks."""
    mine = [s for s in series if s.currency == currency and s.times]
    if not mine:
        return Chart(dom_id, currency, [], [], [], [])
    t0 = min(s.times[0] for s in mine)
    t1 = max(s.times[-1] for s in mine)
    span = max((t1 - t0).total_seconds(), 1.0)
    top_amount = max((s.amounts[-1] for s in mine), default=Decimal(0))
    step = nice_step(top_amount) if top_amount > 0 else Decimal(1)
    y_max = step * ((top_amount / step).to_integral_value(rounding="ROUND_CEILING") or 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(when: datetime) -> float:
        return LEFT + plot_w * (when - t0).total_seconds() / span

    def y(amount: Decimal) -> float:
        return TOP + plot_h * (1.0 - float(amount / y_max))

    lines = [Line(s.label, PALETTE[i % len(PALETTE)],
                  " ".join(f"{x(t):.1f},{y(a):.1f}" for t, a in zip(s.times, s.amounts)), s.amounts[-1])
             for i, s in enumerate(mine)]
    y_ticks = []
    value = Decimal(0)
    while value <= y_max:
        y_ticks.append(Tick(y(value), _amount_label(value, step)))
        value += step
    return Chart(dom_id, currency, lines, y_ticks, time_ticks(t0, t1, tz, TICK_FONT),
                 time_ticks(t0, t1, tz, TICK_FONT_NARROW))


def charts(series: Sequence[SpendSeries], tz: tzinfo, prefix: str) -> list[Chart]:
    """One :func:`build` chart per currency of ``series``, by currency code; ids ``<prefix>-<CUR>``."""
    return [build(series, currency, tz, f"{prefix}-{currency}")
            for currency in sorted({s.currency for s in series})]


__all__ = ["Chart", "Line", "PALETTE", "TICK_FONT", "TICK_FONT_NARROW", "Tick", "build", "charts", "label_box", "nice_step",
           "ticks_fit", "time_format", "time_ticks"]
