"""Rendering of ``costctl bill``: a rich table, JSON or CSV.

Rows come from :mod:`costctl.ledger.queries` (dataclasses, Decimal money, aware-UTC times).
Rounding happens here only:

* JSON and CSV: spend as decimal strings with :data:`EXPORT_MONEY_PLACES` places (half-even),
  prices exactly as recorded,
  times as ISO-8601 UTC, days as ``YYYY-MM-DD``, durations as seconds (numbers);
* table: money with 2 places as the current language writes it (:func:`costctl.i18n.format_money`:
  ``$1,234.57`` / ``CN¥2.50`` in English, ``US$1,234.57`` / ``¥2.50`` in Chinese; ``<$0.01`` for a
  non-zero amount that would show as 0.00), prices per hour as every command writes them
  (:func:`costctl.i18n.format_amount`: ``$0.0123``, ``$0.45``, ``¥1.98``), times in the report's time zone
  (:func:`costctl.i18n.format_time`, to the second, with the offset), durations as ``H:MM:SS``;
  headers, statuses and notes in the current language (:mod:`costctl.i18n`). JSON and CSV stay
  exact, in English, whatever the language.

Totals are per currency and never added across currencies.

The rounding rule (why rows add up to the totals): a row's exported spend is its exact amount
(``rate x µs / 3.6e9``, which is not a finite decimal in general) rounded half-even to
:data:`EXPORT_MONEY_PLACES` places, the currency's micro-unit; a total is the exact sum of the
rounded amounts of every row it covers (:func:`row_totals`; by run with ``--limit``, the rounded
amounts of every run of the window, shown or not: see
:func:`costctl.ledger.queries.run_page`). So the ``spend`` strings of a complete JSON or CSV
bill add up, as decimals, to its ``totals`` exactly, in every grouping; the exact total differs
from the shown one by at most half a micro-unit per row. Waste and savings (``waste``,
``idle_waste``, ``saved``) follow the same rule, with their own totals (``waste_totals``,
``saved_totals``).

The table shows the same rows and totals to the cent, and its money columns add up to their
footers as shown, in every grouping: each footer is the 6-place total rounded half-even to the
cent, and the column's cells are the rows' 6-place amounts apportioned to it by the largest
remainder method per currency (:func:`apportion`), so a cell may differ from its own amount
rounded by up to a cent. With ``--limit``, the runs (chains) not shown are one row of their own,
so the rows still add up to the footer that covers them.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from collections.abc import Callable, Sequence
from zoneinfo import ZoneInfo

from .cli.common import print_table
from .i18n import N_, _, display_word, format_amount, format_money, format_number, format_time, ngettext
from .money import round_money

if TYPE_CHECKING:  # rich loads when a table is rendered: a JSON or CSV bill never imports it
    from rich.console import Console

GroupBy = Literal["run", "chain", "instance", "day", "gpu"]

#: Decimal places of money in JSON and CSV (micro-units: a 1 s charge at 0.10/h is 0.000028).
EXPORT_MONEY_PLACES = 6
#: Fields holding computed money (rounded on export); other Decimals are exact prices.
COMPUTED_MONEY = frozenset({"spend", "waste", "idle_waste", "saved"})
#: The money columns of the table (each with a per-currency footer), by row field.
MONEY_FIELDS = ("waste", "saved", "spend")
#: Decimal places of money in the table.
TABLE_MONEY_PLACES = 2


def money_text(amount: Decimal | None, places: int = EXPORT_MONEY_PLACES) -> str | None:
    """``amount`` rounded half-even to ``places`` decimals, as a string (None stays None)."""
    if amount is None:
        return None
    return str(round_money(amount, places))


def export_amount(amount: Decimal) -> Decimal:
    """``amount`` as a bill row exports it: rounded half-even to :data:`EXPORT_MONEY_PLACES` places."""
    return round_money(amount, EXPORT_MONEY_PLACES)


def row_totals(rows: Sequence[Any], name: str = "spend") -> dict[str, Decimal]:
    """Per-currency totals of bill rows under the module's rule: the exact sum of each row's
    exported (rounded) ``name`` (``spend``, ``waste``, ``saved``), sorted by currency code; a
    currency whose amounts are all zero is left out for waste and savings. ``{}`` for no rows."""
    totals: dict[str, Decimal] = {}
    for r in rows:
        amount = export_amount(getattr(r, name))
        if amount or name == "spend":
            totals[r.currency] = totals.get(r.currency, Decimal(0)) + amount
    return dict(sorted(totals.items()))


def apportion(amounts: Sequence[Decimal], places: int = 2) -> tuple[list[Decimal], Decimal]:
    """Round ``amounts`` to ``places`` decimals so that they add up to their sum rounded
    half-even: the largest remainder method (Hamilton's apportionment, as used to make rounded
    percentages add up to 100 %). Each amount is first rounded down; the units still missing
    go, one each, to the amounts with the largest remainders (ties: the larger amount, then the
    earlier one).

    Args:
        amounts: Decimals of one currency (any sign; the bill's are 6-place amounts >= 0).
        places: decimals of the result (2: cents).

    Returns:
        ``(cells, total)``: one Decimal per amount, in order, each within one unit of
        ``places`` of its amount, and ``total`` = ``sum(amounts)`` rounded half-even, which
        ``sum(cells)`` equals exactly.
    """
    quantum = Decimal(1).scaleb(-places)
    total = sum(amounts, Decimal(0)).quantize(quantum, rounding=ROUND_HALF_EVEN)
    cells = [a.quantize(quantum, rounding=ROUND_FLOOR) for a in amounts]
    missing = int((total - sum(cells, Decimal(0))) / quantum)
    # sum(floors) <= sum < sum(floors) + n units, and the rounded sum lies on the same grid: 0 <= missing <= n.
    order = sorted(range(len(amounts)), key=lambda i: (-(amounts[i] - cells[i]), -amounts[i], i))
    for i in order[:missing]:
        cells[i] += quantum
    return cells, total


def counterfactual_text(horizon: timedelta, *, translated: bool = False) -> str:
    """The statement behind the SAVED column (:data:`costctl.ledger.outcomes.COUNTERFACTUAL`)
    with ``[bill] saved_horizon`` written like ``24h``: in English (the JSON bill's), or in the
    current language when ``translated`` (the table's)."""
    from .config_types import format_duration
    from .ledger.outcomes import COUNTERFACTUAL

    return (_(COUNTERFACTUAL) if translated else COUNTERFACTUAL).format(horizon=format_duration(horizon))


def iso_utc(value: datetime | None) -> str | None:
    """ISO-8601 in UTC with an explicit ``+00:00`` offset (None stays None)."""
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def _export_value(name: str, value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_export_value(name, v) for v in value]
    if isinstance(value, dict):
        return {k: _export_value(k, v) for k, v in value.items()}
    if isinstance(value, Decimal):
        # Spend and waste are computed (rate x seconds / 3600): rounded. Prices are stored exactly: as is.
        return money_text(value) if name in COMPUTED_MONEY else str(value)
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    return value


def records(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Bill rows (dataclasses) as JSON-ready dicts, fields in declaration order."""
    return [{f.name: _export_value(f.name, getattr(r, f.name)) for f in dataclasses.fields(r)} for r in rows]


def render_json(by: GroupBy, rows: Sequence[Any], totals: dict[str, Decimal],
                since: datetime | None, until: datetime | None,
                advice: Sequence[dict[str, Any]] = (), runs_not_shown: int | None = None,
                chains_not_shown: int | None = None, expanded: Sequence[Any] | None = None, *,
                waste_totals: dict[str, Decimal] | None = None, saved_totals: dict[str, Decimal] | None = None,
                saved_horizon: timedelta | None = None, as_of: datetime | None = None) -> str:
    """``{"by", "since", "until", "rows": [...], "totals": {"USD": "1.230000"}, "waste_totals":
    {...}, "saved_totals": {...}}`` as indented JSON (``totals``: the sums of the rows' rounded
    spend, see the module docstring; pass :func:`row_totals` of the rows, or run_page's rounded
    totals; ``waste_totals`` / ``saved_totals`` likewise for waste and savings), plus
    ``"saved_counterfactual": {"text", "horizon_s", "as_of"}`` when ``saved_horizon`` is given
    (the statement behind "saved", its horizon in seconds and the present it was counted at),
    ``"advice": [...]`` (underutilization advice per run) when there is any, and
    ``"runs_not_shown": N`` when ``--limit`` left N runs out of the rows (not of the totals)
    (``"chains_not_shown"`` by chain), and ``"runs": [...]`` (run rows) for ``--expand``."""
    doc: dict[str, Any] = {
        "by": by,
        "since": iso_utc(since),
        "until": iso_utc(until),
        "rows": records(rows),
        "totals": {cur: money_text(amount) for cur, amount in totals.items()},
        "waste_totals": {cur: money_text(amount) for cur, amount in (waste_totals or {}).items()},
        "saved_totals": {cur: money_text(amount) for cur, amount in (saved_totals or {}).items()},
    }
    if saved_horizon is not None:
        doc["saved_counterfactual"] = {"text": counterfactual_text(saved_horizon),
                                       "horizon_s": saved_horizon.total_seconds(), "as_of": iso_utc(as_of)}
    if advice:
        doc["advice"] = list(advice)
    if runs_not_shown:
        doc["runs_not_shown"] = runs_not_shown
    if chains_not_shown:
        doc["chains_not_shown"] = chains_not_shown
    if expanded is not None:
        doc["runs"] = records(expanded)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def render_csv(rows: Sequence[Any], columns: Sequence[str]) -> str:
    """Rows as CSV with a header (``columns``: the row dataclass's field names). No totals row,
    so every line has the same shape; use JSON for totals."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in records(rows):  # nested values (a stop's history) as JSON text in their cell
        writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
                         for k, v in row.items()})
    return buf.getvalue()


# --------------------------------------------------------------------------- table


def _money(amount: Decimal, currency: str) -> str:
    """``amount`` (already rounded to :data:`TABLE_MONEY_PLACES`) in ``currency`` as the language
    writes money, always with :data:`TABLE_MONEY_PLACES` decimals (so cells add up as shown)."""
    return format_money(amount, currency, places=TABLE_MONEY_PLACES, currency_digits=False)


def money_cell(amount: Decimal | None, currency: str | None = None) -> str:
    """Money for the table, 2 places: ``$1,234.57`` / ``¥2.50`` as the current language writes
    ``currency`` (:func:`costctl.i18n.format_money`), ``<$0.01`` for a tiny non-zero amount;
    without ``currency`` the number alone (``1,234.57``, ``<0.01``); ``-`` for None."""
    if amount is None:
        return "-"
    rounded = round_money(amount, TABLE_MONEY_PLACES)
    if amount != 0 and rounded == 0:
        cent = Decimal(1).scaleb(-TABLE_MONEY_PLACES) * (1 if amount > 0 else -1)
        edge = _money(cent, currency) if currency else format_number(cent, places=TABLE_MONEY_PLACES)
        return ("<" if amount > 0 else ">") + edge
    return _money(rounded, currency) if currency else format_number(rounded, places=TABLE_MONEY_PLACES)


def price_cell(amount: Decimal | None, currency: str) -> str:
    """A price per hour as every command writes one (:func:`costctl.i18n.format_amount`: ``$0.0123``,
    ``$0.45``, ``¥1.98``): not rounded to the cent, since no column of prices adds up; ``-`` for None."""
    return "-" if amount is None else format_amount(amount, currency)


def price_range_cell(low: Decimal | None, high: Decimal | None, currency: str) -> str:
    """A rate, or a range of rates, in one currency, as :func:`price_cell` writes them: ``$0.70``,
    ``$0.70-0.80`` (``US$0.70-0.80`` in Chinese), ``$0.0123-0.015``."""
    if low is None or high is None:
        return "-"
    low_number, number = format_amount(low, None), format_amount(high, None)
    if low_number == number:
        return price_cell(high, currency)
    shown = price_cell(high, currency)
    if number in shown and not low_number.startswith("<"):
        return shown.replace(number, f"{low_number}-{number}", 1)  # the symbol where the language puts it
    return f"{price_cell(low, currency)}-{shown}"


def duration_cell(seconds: float) -> str:
    """``H:MM:SS`` (hours unbounded)."""
    total = int(round(seconds))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _time_cell(tz: ZoneInfo) -> Callable[[datetime | None], str]:
    def cell(value: datetime | None) -> str:
        return "-" if value is None else format_time(value, tz)

    return cell


def _gpu_cell(gpu: str | None, count: int | None = None) -> str:
    name = gpu or "-"
    return f"{count}x {name}" if count and count > 1 else name


def status_text(status: str) -> str:
    """A run's ``status`` in the current language (:func:`costctl.i18n.display_word`, the one
    mapping of machine values to the words shown)."""
    return display_word(status)


def _status_cell(r: Any) -> str:
    status = status_text(r.status)
    if r.exit_code is not None:
        status = _("{status} ({code})").format(status=status, code=r.exit_code)
    if getattr(r, "dry_run", False):
        return _("{status}, dry run").format(status=status)
    if getattr(r, "advise_only", False):
        return _("{status}, advise-only").format(status=status)
    if getattr(r, "dry_runs", 0):
        return _("{status}, dry runs: {count}").format(status=status, count=r.dry_runs)
    return status


def _billing_cell(billing: str) -> str:
    return display_word(billing)


def _price_cell(r: Any) -> str:
    price = price_cell(r.price_per_hour, r.currency)
    return _("{price} spot").format(price=price) if r.billing == "spot" else price


#: Run statuses shown in red on a terminal: the instance may still be billing.
ALARM_STATUSES = frozenset({"stop failed", "unguarded"})

#: A column: header (its English message id, translated when shown: :data:`HEADERS`), cell text
#: (None for a money column, whose cells are apportioned), justification, and the row field of a
#: money column (None for the others).
Column = tuple[str, Callable[[Any], str] | None, str, str | None]

#: Every column header, marked for the catalogue (the table shows ``_(header)``; the English ids
#: name the columns in :data:`DROPPABLE` and in code).
HEADERS = (N_("RUN"), N_("CHAIN"), N_("RUNS"), N_("INSTANCE"), N_("INSTANCES"), N_("GPU"), N_("STARTED"),
           N_("DURATION"), N_("STATUS"), N_("PRICE/h"), N_("PREEMPTED"), N_("BILLING"), N_("FIRST CHARGE"),
           N_("LAST CHARGE"), N_("CHARGED"), N_("DAY"), N_("GPU-HOURS"), N_("WASTE"), N_("SAVED"), N_("SPEND"))
#: The table's title by grouping (the window and the time zone are added by :func:`_title`).
TITLES = {"run": N_("Spend by run"), "chain": N_("Spend by chain"), "instance": N_("Spend by instance"),
          "day": N_("Spend by day"), "gpu": N_("Spend by GPU type")}

#: Columns hidden first, in this order, when the table does not fit a terminal.
DROPPABLE: dict[str, tuple[str, ...]] = {
    "run": ("STARTED", "WASTE", "INSTANCE", "SAVED"),
    "chain": ("STARTED", "INSTANCE", "WASTE", "PREEMPTED", "SAVED"),
    "instance": ("FIRST CHARGE", "LAST CHARGE", "RUNS", "BILLING", "WASTE", "SAVED"),
    "day": ("INSTANCES", "WASTE", "SAVED"),
    "gpu": ("INSTANCES", "WASTE", "SAVED"),
}

_MONEY_COLUMNS: list[Column] = [("WASTE", None, "right", "waste"), ("SAVED", None, "right", "saved"),
                                ("SPEND", None, "right", "spend")]


def _columns(by: GroupBy, tz: ZoneInfo) -> list[Column]:
    t = _time_cell(tz)
    if by == "run":
        return [
            ("RUN", lambda r: r.run_id[:12], "left", None),
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left", None),
            ("GPU", lambda r: _gpu_cell(r.gpu, r.gpu_count), "left", None),
            ("STARTED", lambda r: t(r.started_at), "left", None),
            ("DURATION", lambda r: duration_cell(r.duration_s), "right", None),
            ("STATUS", _status_cell, "left", None),
            ("PRICE/h", _price_cell, "right", None),
            *_MONEY_COLUMNS,
        ]
    if by == "chain":
        return [
            ("CHAIN", lambda r: r.chain_id[:12], "left", None),
            ("RUNS", lambda r: str(r.runs), "right", None),
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left", None),
            ("GPU", lambda r: r.gpu or "-", "left", None),
            ("STARTED", lambda r: t(r.started_at), "left", None),
            ("DURATION", lambda r: duration_cell(r.duration_s), "right", None),
            ("STATUS", _status_cell, "left", None),
            ("PREEMPTED", lambda r: str(r.preemptions) if r.preemptions else "-", "right", None),
            *_MONEY_COLUMNS,
        ]
    if by == "instance":
        return [
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left", None),
            ("GPU", lambda r: _gpu_cell(r.gpu, r.gpu_count), "left", None),
            ("BILLING", lambda r: _billing_cell(r.billing), "left", None),
            ("RUNS", lambda r: str(r.runs), "right", None),
            ("FIRST CHARGE", lambda r: t(r.first_charge_at), "left", None),
            ("LAST CHARGE", lambda r: t(r.last_charge_at), "left", None),
            ("CHARGED", lambda r: duration_cell(r.duration_s), "right", None),
            ("PRICE/h", lambda r: price_range_cell(r.min_price_per_hour, r.max_price_per_hour, r.currency), "right",
             None),
            *_MONEY_COLUMNS,
        ]
    if by == "day":
        return [
            ("DAY", lambda r: r.day.isoformat(), "left", None),
            ("RUNS", lambda r: str(r.runs), "right", None),
            ("INSTANCES", lambda r: str(r.instances), "right", None),
            ("CHARGED", lambda r: duration_cell(r.duration_s), "right", None),
            *_MONEY_COLUMNS,
        ]
    return [
        ("GPU", lambda r: r.gpu or "-", "left", None),
        ("RUNS", lambda r: str(r.runs), "right", None),
        ("INSTANCES", lambda r: str(r.instances), "right", None),
        ("CHARGED", lambda r: duration_cell(r.duration_s), "right", None),
        ("GPU-HOURS", lambda r: format_number(r.gpu_hours, places=2), "right", None),
        *_MONEY_COLUMNS,
    ]


@dataclass(frozen=True, slots=True)
class NotShown:
    """The rows ``--limit`` left out: ``count`` runs (or chains: ``what``). The table shows them
    as one row per currency whose amounts are the totals less the shown rows' exported
    amounts, so it still adds up."""

    count: int
    what: str = "run"

    def label(self) -> str:
        """``3 older runs`` / ``1 older chain``, in the current language."""
        if self.what == "chain":
            return ngettext("{count} older chain", "{count} older chains", self.count).format(count=self.count)
        return ngettext("{count} older run", "{count} older runs", self.count).format(count=self.count)


@dataclass(frozen=True, slots=True)
class RestRow:
    """The rows not shown, in one currency: their spend, waste and savings (6-place amounts)."""

    label: str
    currency: str
    spend: Decimal
    waste: Decimal
    saved: Decimal


def rest_rows(rows: Sequence[Any], totals: dict[str, dict[str, Decimal]], not_shown: NotShown) -> list[RestRow]:
    """The :class:`RestRow` of each currency in which the rows not shown have any amount:
    ``totals[field][currency]`` (6-place, every row of the window) less the shown ``rows``'
    exported amounts."""
    currencies = sorted({c for t in totals.values() for c in t})
    out = []
    for cur in currencies:
        rest = {name: totals.get(name, {}).get(cur, Decimal(0))
                - sum((export_amount(getattr(r, name)) for r in rows if r.currency == cur), Decimal(0))
                for name in MONEY_FIELDS}
        if any(rest.values()):
            out.append(RestRow(not_shown.label(), cur, rest["spend"], rest["waste"], rest["saved"]))
    return out


@dataclass(frozen=True, slots=True)
class TableMoney:
    """The money cells of a table, as shown: per money field (``spend``, ``waste``, ``saved``),
    the cell of each row and the footer per currency (the cells of each currency add up to
    its footer exactly); ``currencies`` in footer order."""

    cells: dict[str, list[Decimal]]
    footers: dict[str, dict[str, Decimal]]
    currencies: list[str]


def table_money(rows: Sequence[Any]) -> TableMoney:
    """The money the table shows: for each field of :data:`MONEY_FIELDS` and each currency,
    the rows' exported (6-place) amounts apportioned to the cent with :func:`apportion`, the
    footer being their sum rounded half-even. ``rows``: bill rows (and :class:`RestRow`), each
    with ``currency`` and the money fields."""
    currencies = sorted({r.currency for r in rows})
    cells: dict[str, list[Decimal]] = {}
    footers: dict[str, dict[str, Decimal]] = {}
    for name in MONEY_FIELDS:
        amounts = [export_amount(getattr(r, name)) for r in rows]
        out = [Decimal(0)] * len(rows)
        footers[name] = {}
        for cur in currencies:
            idx = [i for i, r in enumerate(rows) if r.currency == cur]
            rounded, footers[name][cur] = apportion([amounts[i] for i in idx])
            for i, value in zip(idx, rounded):
                out[i] = value
        cells[name] = out
    return TableMoney(cells, footers, currencies)


def _money_table_cell(value: Decimal, exact: Decimal, currency: str, name: str) -> str:
    """A money cell as apportioned, as the language writes money (``$1.23``, ``¥1.23``), and ``-``
    for a waste or saving that is exactly nothing."""
    if name != "spend" and not exact:
        return "-"
    return _money(value, currency)


def _title(by: GroupBy, tz: ZoneInfo, since: datetime | None, until: datetime | None) -> str:
    """``Spend by run from 2026-03-01 00:00:00+08:00 to now (Asia/Shanghai)``, in the current language."""
    what = _(TITLES[by])
    window = _window(tz, since, until)
    if window is None:
        return _("{title} ({zone})").format(title=what, zone=tz.key)
    return _("{title} {window} ({zone})").format(title=what, window=window, zone=tz.key)


def _window(tz: ZoneInfo, since: datetime | None, until: datetime | None) -> str | None:
    """The bill's window as said in the table's title (None: no --since, no --until)."""
    if since is not None and until is not None:
        return _("from {start} to {end}").format(start=format_time(since, tz), end=format_time(until, tz))
    if since is not None:
        return _("from {start} to now").format(start=format_time(since, tz))
    if until is not None:
        return _("from the start to {end}").format(end=format_time(until, tz))
    return None


def render_table(console: Console, by: GroupBy, rows: Sequence[Any], totals: dict[str, Decimal],
                 tz: ZoneInfo, since: datetime | None = None, until: datetime | None = None,
                 title: str | None = None, *, waste_totals: dict[str, Decimal] | None = None,
                 saved_totals: dict[str, Decimal] | None = None, not_shown: NotShown | None = None,
                 saved_horizon: timedelta | None = None) -> None:
    """Print the bill as a rich table (no markup is interpreted in cells) with per-currency
    footers under WASTE, SAVED and SPEND; times shown in ``tz``; ``title`` replaces "Spend by ...".

    Every money column adds up to its footer as shown (:func:`table_money`). ``totals`` /
    ``waste_totals`` / ``saved_totals`` (6-place, per currency) matter only with ``not_shown``
    (``--limit`` left rows out): the rest of each total is then shown as rows of their own
    (:func:`rest_rows`); otherwise the footers are the rows' own sums, which those totals are.
    With ``saved_horizon`` the counterfactual behind SAVED is said under the table."""
    from rich.table import Table
    from rich.text import Text

    window = _window(tz, since, until)
    if not rows:
        console.print(Text(_("No charges recorded {window}.").format(window=window) if window is not None
                           else _("No charges recorded.")))
        return
    rest = rest_rows(rows, {"spend": totals, "waste": waste_totals or {}, "saved": saved_totals or {}},
                     not_shown) if not_shown is not None else []
    every: list[Any] = [*rows, *rest]
    money = table_money(every)
    table = Table(title=Text(title or _title(by, tz, since, until)), show_footer=True, title_justify="left")
    columns = _columns(by, tz)
    for i, (header, _cell, justify, name) in enumerate(columns):
        if name is not None:
            footer = "\n".join("-" if name != "spend" and not money.footers[name][cur]
                               else money_cell(money.footers[name][cur], cur) for cur in money.currencies) or "-"
        else:
            footer = _("TOTAL") if i == 0 else ""
        table.add_column(_(header), justify=justify, footer=Text(footer),  # type: ignore[arg-type]
                         no_wrap=header in {"RUN", "CHAIN", "SPEND"})
    for k, row in enumerate(every):
        cells = []
        for i, (_header, cell, _justify, name) in enumerate(columns):
            if name is not None:
                cells.append(Text(_money_table_cell(money.cells[name][k], getattr(row, name), row.currency, name)))
            elif isinstance(row, RestRow):
                cells.append(Text(row.label if i == 0 else ""))
            else:
                cells.append(Text(cell(row)))  # type: ignore[misc]
        alarm = getattr(row, "status", None) in ALARM_STATUSES
        table.add_row(*cells, style="bold red" if alarm else ("dim" if isinstance(row, RestRow) else None))
    # Piped or redirected, rows are never wrapped; on a narrow terminal the least useful
    # columns are hidden first and nothing is cut short.
    print_table(table, droppable=DROPPABLE.get(by, ()), console=console)
    if saved_horizon is not None:
        console.print(Text(counterfactual_text(saved_horizon, translated=True)))  # wrapped at the console's width


__all__ = [
    "GroupBy",
    "MONEY_FIELDS",
    "NotShown",
    "RestRow",
    "apportion",
    "counterfactual_text",
    "rest_rows",
    "table_money",
    "EXPORT_MONEY_PLACES",
    "money_text",
    "export_amount",
    "row_totals",
    "iso_utc",
    "records",
    "render_json",
    "render_csv",
    "render_table",
    "money_cell",
    "price_cell",
    "price_range_cell",
    "status_text",
    "duration_cell",
]
