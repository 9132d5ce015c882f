"""Rendering of ``costctl bill``: a rich table, JSON or CSV.

Rows come from :mod:`costctl.ledger.queries` (dataclasses, Decimal money, aware-UTC times).
Rounding happens here only:

* JSON and CSV: spend as decimal strings with :data:`EXPORT_MONEY_PLACES` places (half-even),
  prices exactly as recorded,
  times as ISO-8601 UTC, days as ``YYYY-MM-DD``, durations as seconds (numbers);
* table: money with 2 places (``<0.01`` for a non-zero amount that would show as 0.00),
  times in the report's time zone, durations as ``H:MM:SS``.

Totals are per currency and never added across currencies.

The rounding rule (why rows add up to the totals): a row's exported spend is its exact amount
(``rate x µs / 3.6e9``, which is not a finite decimal in general) rounded half-even to
:data:`EXPORT_MONEY_PLACES` places, the currency's micro-unit; a total is the exact sum of the
rounded amounts of every row it covers (:func:`row_totals`; by run with ``--limit``, the rounded
amounts of every run of the window, shown or not: see
:func:`costctl.ledger.queries.run_page`). So the ``spend`` strings of a complete JSON or CSV
bill add up, as decimals, to its ``totals`` exactly, in every grouping; the exact total differs
from the shown one by at most half a micro-unit per row. The table shows the same rows and
totals to the cent (each cell rounded half-even from the 6-place amount, the footer from the
6-place total).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal
from collections.abc import Callable, Sequence
from zoneinfo import ZoneInfo

from .cli.common import print_table
from .money import round_money

if TYPE_CHECKING:  # rich loads when a table is rendered: a JSON or CSV bill never imports it
    from rich.console import Console

GroupBy = Literal["run", "chain", "instance", "day", "gpu"]

#: Decimal places of money in JSON and CSV (micro-units: a 1 s charge at 0.10/h is 0.000028).
EXPORT_MONEY_PLACES = 6
#: Fields holding computed money (rounded on export); other Decimals are exact prices.
COMPUTED_MONEY = frozenset({"spend", "waste"})
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


def row_totals(rows: Sequence[Any]) -> dict[str, Decimal]:
    """Per-currency totals of bill rows under the module's rule: the exact sum of each row's
    exported (rounded) ``spend``, sorted by currency code. ``{}`` for no rows."""
    totals: dict[str, Decimal] = {}
    for r in rows:
        totals[r.currency] = totals.get(r.currency, Decimal(0)) + export_amount(r.spend)
    return dict(sorted(totals.items()))


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
                chains_not_shown: int | None = None, expanded: Sequence[Any] | None = None) -> str:
    """``{"by", "since", "until", "rows": [...], "totals": {"USD": "1.230000"}}`` as indented JSON
    (``totals``: the sums of the rows' rounded spend, see the module docstring; pass
    :func:`row_totals` of the rows, or run_page's rounded totals),
    plus ``"advice": [...]`` (underutilization advice per run) when there is any, and
    ``"runs_not_shown": N`` when ``--limit`` left N runs out of the rows (not of the totals)
    (``"chains_not_shown"`` by chain), and ``"runs": [...]`` (run rows) for ``--expand``."""
    doc: dict[str, Any] = {
        "by": by,
        "since": iso_utc(since),
        "until": iso_utc(until),
        "rows": records(rows),
        "totals": {cur: money_text(amount) for cur, amount in totals.items()},
    }
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


def money_cell(amount: Decimal | None, currency: str | None = None) -> str:
    """Money for the table: 2 places, ``<0.01`` for tiny non-zero amounts, currency appended."""
    if amount is None:
        return "-"
    text = money_text(amount, TABLE_MONEY_PLACES) or "-"
    if amount != 0 and Decimal(text) == 0:
        text = "<0.01" if amount > 0 else ">-0.01"
    return f"{text} {currency}" if currency else text


def price_range_cell(low: Decimal | None, high: Decimal | None, currency: str) -> str:
    """A rate, or a range of rates, in one currency: ``0.70 USD`` or ``0.70-0.80 USD``."""
    if low is None or high is None:
        return "-"
    if money_cell(low) == money_cell(high):
        return money_cell(high, currency)
    return f"{money_cell(low)}-{money_cell(high, currency)}"


def duration_cell(seconds: float) -> str:
    """``H:MM:SS`` (hours unbounded)."""
    total = int(round(seconds))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _time_cell(tz: ZoneInfo) -> Callable[[datetime | None], str]:
    def cell(value: datetime | None) -> str:
        return "-" if value is None else value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")

    return cell


def _gpu_cell(gpu: str | None, count: int | None = None) -> str:
    name = gpu or "-"
    return f"{count}x {name}" if count and count > 1 else name


def _status_cell(r: Any) -> str:
    return r.status if r.exit_code is None else f"{r.status} ({r.exit_code})"


#: Run statuses shown in red on a terminal: the instance may still be billing.
ALARM_STATUSES = frozenset({"stop failed", "unguarded"})

Column = tuple[str, Callable[[Any], str], str]  # header, cell text, justify

#: Columns hidden first, in this order, when the table does not fit a terminal.
DROPPABLE: dict[str, tuple[str, ...]] = {
    "run": ("STARTED", "WASTE", "INSTANCE"),
    "chain": ("STARTED", "INSTANCE", "WASTE", "PREEMPTED"),
    "instance": ("FIRST CHARGE", "LAST CHARGE", "RUNS", "BILLING"),
}


def _columns(by: GroupBy, tz: ZoneInfo) -> list[Column]:
    t = _time_cell(tz)
    if by == "run":
        return [
            ("RUN", lambda r: r.run_id[:12], "left"),
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left"),
            ("GPU", lambda r: _gpu_cell(r.gpu, r.gpu_count), "left"),
            ("STARTED", lambda r: t(r.started_at), "left"),
            ("DURATION", lambda r: duration_cell(r.duration_s), "right"),
            ("STATUS", _status_cell, "left"),
            ("PRICE/h", lambda r: money_cell(r.price_per_hour, r.currency) + (" spot" if r.billing == "spot" else ""),
             "right"),
            ("WASTE", lambda r: money_cell(r.waste) if r.waste else "-", "right"),
            ("SPEND", lambda r: money_cell(r.spend, r.currency), "right"),
        ]
    if by == "chain":
        return [
            ("CHAIN", lambda r: r.chain_id[:12], "left"),
            ("RUNS", lambda r: str(r.runs), "right"),
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left"),
            ("GPU", lambda r: r.gpu or "-", "left"),
            ("STARTED", lambda r: t(r.started_at), "left"),
            ("DURATION", lambda r: duration_cell(r.duration_s), "right"),
            ("STATUS", _status_cell, "left"),
            ("PREEMPTED", lambda r: str(r.preemptions) if r.preemptions else "-", "right"),
            ("WASTE", lambda r: money_cell(r.waste) if r.waste else "-", "right"),
            ("SPEND", lambda r: money_cell(r.spend, r.currency), "right"),
        ]
    if by == "instance":
        return [
            ("INSTANCE", lambda r: f"{r.provider}:{r.instance_id}", "left"),
            ("GPU", lambda r: _gpu_cell(r.gpu, r.gpu_count), "left"),
            ("BILLING", lambda r: r.billing, "left"),
            ("RUNS", lambda r: str(r.runs), "right"),
            ("FIRST CHARGE", lambda r: t(r.first_charge_at), "left"),
            ("LAST CHARGE", lambda r: t(r.last_charge_at), "left"),
            ("CHARGED", lambda r: duration_cell(r.duration_s), "right"),
            ("PRICE/h", lambda r: price_range_cell(r.min_price_per_hour, r.max_price_per_hour, r.currency), "right"),
            ("SPEND", lambda r: money_cell(r.spend, r.currency), "right"),
        ]
    if by == "day":
        return [
            ("DAY", lambda r: r.day.isoformat(), "left"),
            ("RUNS", lambda r: str(r.runs), "right"),
            ("INSTANCES", lambda r: str(r.instances), "right"),
            ("CHARGED", lambda r: duration_cell(r.duration_s), "right"),
            ("SPEND", lambda r: money_cell(r.spend, r.currency), "right"),
        ]
    return [
        ("GPU", lambda r: r.gpu or "-", "left"),
        ("RUNS", lambda r: str(r.runs), "right"),
        ("INSTANCES", lambda r: str(r.instances), "right"),
        ("CHARGED", lambda r: duration_cell(r.duration_s), "right"),
        ("GPU-HOURS", lambda r: f"{r.gpu_hours:.2f}", "right"),
        ("SPEND", lambda r: money_cell(r.spend, r.currency), "right"),
    ]


def render_table(console: Console, by: GroupBy, rows: Sequence[Any], totals: dict[str, Decimal],
                 tz: ZoneInfo, since: datetime | None = None, until: datetime | None = None,
                 title: str | None = None) -> None:
    """Print the bill as a rich table (no markup is interpreted in cells) with per-currency
    totals in the footer; times shown in ``tz``; ``title`` replaces "Spend by ..."."""
    from rich.table import Table
    from rich.text import Text

    window = ""
    if since or until:
        cell = _time_cell(tz)
        window = f" from {cell(since) if since else 'the start'} to {cell(until) if until else 'now'}"
    if not rows:
        console.print(Text(f"No charges recorded{window}."))
        return
    table = Table(title=Text(title or f"Spend by {by}{window} ({tz.key})"), show_footer=True, title_justify="left")
    columns = _columns(by, tz)
    total_text = "\n".join(money_cell(amount, cur) for cur, amount in totals.items()) or "-"
    for i, (header, _, justify) in enumerate(columns):
        footer = "TOTAL" if i == 0 else (total_text if i == len(columns) - 1 else "")
        table.add_column(header, justify=justify, footer=Text(footer), no_wrap=header in {"RUN", "CHAIN", "SPEND"})  # type: ignore[arg-type]
    for row in rows:
        alarm = getattr(row, "status", None) in ALARM_STATUSES
        table.add_row(*(Text(cell(row)) for _, cell, _ in columns), style="bold red" if alarm else None)
    # Piped or redirected, rows are never wrapped; on a narrow terminal the least useful
    # columns are hidden first and nothing is cut short.
    print_table(table, droppable=DROPPABLE.get(by, ()), console=console)


__all__ = [
    "GroupBy",
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
    "price_range_cell",
    "duration_cell",
]
