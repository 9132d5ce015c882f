"""``costctl bill``: spend from the ledger per run, instance, day or GPU type.

Reads the ledger (``--db``, else ``database_url`` from the settings / ``COSTCTL_DATABASE_URL``,
else the SQLite file in the data dir); queries live in :mod:`costctl.ledger.queries`,
rendering in :mod:`costctl.report`. It never creates a ledger: a configured SQLite file that
does not exist is an error ("no ledger database at PATH", exit status 1); the default one,
before ``costctl watch`` first wrote it, gives an empty bill.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import datetime
from pathlib import Path
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any
from collections.abc import Sequence
from zoneinfo import ZoneInfo

import typer

from ..clock import utcnow
from ..errors import CostctlError, UsageError
from ..i18n import N_, _, ngettext
from ..money import Money
from ..report import EXPORT_MONEY_PLACES, NotShown, render_csv, render_json, render_table, row_totals
from . import common
from .common import ConfigOption, DbOption, FormatOption, OutputFormat, settings_from
from .when import parse_when_option

if TYPE_CHECKING:  # the ledger (SQLAlchemy Core, never the ORM) loads when a bill runs, not for --help
    from rich.console import Console

    from ..config import Settings
    from ..ledger import queries
    from ..ledger.lifecycle import GpuUse

WHEN_ALLOWED = N_(
    "expected a date (2026-01-31) or an ISO-8601 date-time (2026-01-31T08:00, 2026-01-31T08:00:00Z, "
    "2026-01-31T08:00+08:00); without an offset it is read in [watch] timezone"
)


class GroupBy(str, Enum):
    """Row grouping of the bill."""

    run = "run"
    chain = "chain"
    instance = "instance"
    day = "day"
    gpu = "gpu"


#: The row dataclass of each grouping (its fields are the JSON keys and CSV columns), by its
#: name in :mod:`costctl.ledger.queries` (imported when a bill runs).
ROW_TYPES = {
    GroupBy.run: "RunBill",
    GroupBy.chain: "ChainBill",
    GroupBy.instance: "InstanceBill",
    GroupBy.day: "DayBill",
    GroupBy.gpu: "GpuBill",
}


def __getattr__(name: str) -> Any:
    """``out_console``: the console a bill prints to, :data:`costctl.cli.common.out_console`
    unless a test set this module's own; looked up when something is printed, so a JSON or CSV
    bill never imports rich."""
    if name == "out_console":
        return common._console("out_console")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _out() -> Console:
    """This module's ``out_console`` (see :func:`__getattr__`)."""
    return globals()["out_console"] if "out_console" in globals() else __getattr__("out_console")


def parse_when(text: str, tz: ZoneInfo, option: str) -> datetime:
    """Parse a ``--since``/``--until`` value into aware UTC.

    A date means its midnight in ``tz``; a date-time without an offset is read in ``tz``.

    Raises:
        UsageError: one line naming the option, the value and what is allowed.
    """
    return parse_when_option(text, option=option, tz=tz, allowed=_(WHEN_ALLOWED))


#: The most runs / chains ``--limit`` may ask for (a 32-bit SQL integer bound).
MAX_LIMIT = 2**31 - 1

ByOption = Annotated[
    GroupBy, typer.Option("--by", help=_("Group rows by run, chain (a job's run and the runs that resumed it), "
                                         "instance, day (in [watch] timezone) or gpu (GPU type)."))
]
SinceOption = Annotated[str | None, typer.Option("--since",
                                                 help=_("Only spend from this date/date-time on (inclusive)."))]
UntilOption = Annotated[str | None, typer.Option("--until",
                                                 help=_("Only spend before this date/date-time (exclusive)."))]
LimitOption = Annotated[int, typer.Option("--limit", min=1, max=MAX_LIMIT,
                                          help=_("--by run / chain: show the newest N runs / chains "
                                                 "(totals cover every one)."))]
ExpandOption = Annotated[bool, typer.Option("--expand", help=_("--by chain: also list each chain's runs."))]
PlotOption = Annotated[Path | None, typer.Option(
    "--plot", help=_("Also write a PNG: cumulative spend per instance over the window, stops and advice marked, "
                     "and a run's utilization (needs matplotlib)."))]
RunOption = Annotated[str | None, typer.Option(
    "--run", help=_("--plot: the run whose utilization is drawn (its id or a unique prefix; default: the newest)."))]


def run_unguarded(run: Any) -> bool:
    """:func:`costctl.watch.watcher.run_unguarded`, imported only when an open run is asked about
    (the watch stack is heavy; a bill of closed runs never loads it)."""
    from ..watch.watcher import run_unguarded as unguarded

    return unguarded(run)


def underuse_advice_for(rows: Sequence[queries.RunBill], use: dict[str, GpuUse], settings: Settings) -> list[Any]:
    """Underutilization advice (:mod:`costctl.lifecycle.underuse`) for bill rows by run that have
    GPU telemetry, priced from the price table (no provider is contacted)."""
    from ..catalog import load_price_table
    from ..lifecycle.sizing import options_from_price_table
    from ..lifecycle.underuse import underuse_advice

    try:
        table = load_price_table(settings)
    except CostctlError:
        return []
    out = []
    for r in rows:
        u = use.get(r.run_id)
        if u is None or r.price_per_hour is None:
            continue
        options = options_from_price_table(table, provider=r.provider, gpu_count=r.gpu_count,
                                           billing="spot" if r.billing == "spot" else "on-demand", currency=r.currency)
        advice = underuse_advice(run_id=r.run_id, gpu=r.gpu, rate=Money(r.price_per_hour, r.currency),
                                 duration_s=r.duration_s, peak_memory_bytes=u.peak_memory_bytes,
                                 card_memory_bytes=u.memory_total_bytes, mean_utilization=u.mean_utilization,
                                 options=options, config=settings.downsize)
        if advice is not None:
            out.append(advice)
    return out


def bill(
    by: ByOption = GroupBy.run,
    since: SinceOption = None,
    until: UntilOption = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    db: DbOption = None,
    limit: LimitOption = 100,
    expand: ExpandOption = False,
    plot: PlotOption = None,
    run: RunOption = None,
) -> None:
    """Show recorded spend, waste and savings. Totals are per currency (never added across currencies).

    Charges are clipped to [--since, --until); a run's duration_s is its time inside that
    window. JSON: {"rows": [...], "totals": {"USD": "1.234567"}, "waste_totals": {...},
    "saved_totals": {...}, "saved_counterfactual": {...}} with money as decimal strings and
    times as ISO-8601 UTC; CSV: the rows only. Each row's amounts are rounded half-even to 6
    places and each total is the exact sum of those rounded amounts (every run of the window
    with --limit), so the rows of a complete bill add up to the totals exactly; the table's
    columns add up to its footers as shown (largest remainder to the cent). WASTE: paid time
    whose work was lost or never done (the idle stretch before a stop, work lost to a
    preemption); SAVED: what confirmed stops avoided, under the counterfactual said under the
    table ([bill] saved_horizon). Dry runs are marked. Runs whose GPU stayed underused get
    advice naming a cheaper card and what it would have saved (JSON: "advice"). --plot FILE.png
    also draws cumulative spend per instance with stops and advice, and a run's utilization.
    """
    # Core only: the bill reads through a plain connection (no sqlalchemy.orm, no ORM classes).
    from ..ledger import queries
    from ..ledger.engine import MissingLedgerError, configured_url
    from ..ledger.reader import LedgerReader

    settings = settings_from(config, db)
    tz = settings.watch.tz
    start = parse_when(since, tz, "--since") if since is not None else None  # "" is an error, not "no bound"
    end = parse_when(until, tz, "--until") if until is not None else None
    if start and end and start >= end:
        raise UsageError(_("--since {since!r} is not before --until {until!r}").format(since=since, until=until))
    if expand and by is not GroupBy.chain:
        raise UsageError(_("--expand goes with --by chain (it lists each chain's runs)"))
    if run is not None and plot is None:
        raise UsageError(_("--run goes with --plot (it names the run whose utilization is drawn)"))
    if plot is not None:
        from ..spend_plot import check_plot_path

        check_plot_path(plot)  # matplotlib present and the file writable, before anything is printed
    now = utcnow()
    horizon = settings.bill.saved_horizon

    use: dict[str, GpuUse] = {}
    rows: Sequence[Any] = []
    chain_runs: Sequence[Any] = []
    hidden = 0
    try:
        ledger = LedgerReader.open(configured_url(settings.database_url, settings.data_dir, create=False))
    except MissingLedgerError as exc:
        if settings.database_url is not None:  # --db, COSTCTL_DATABASE_URL or database_url: a typo?
            raise
        # The default ledger before anything was recorded: an empty bill, and nothing created.
        if plot is not None:
            raise UsageError(_("--plot {path}: nothing to draw (no ledger database at {ledger}; `costctl watch` "
                               "creates it)").format(path=plot, ledger=exc.path)) from None
        if fmt is OutputFormat.json:
            sys.stdout.write(render_json(by.value, rows, {}, start, end, saved_horizon=horizon, as_of=now))
        elif fmt is OutputFormat.csv:
            sys.stdout.write(render_csv(rows, [f.name for f in dataclasses.fields(getattr(queries, ROW_TYPES[by]))]))
        else:
            _out().print(_("Nothing recorded yet (no ledger database at {path}; `costctl watch` creates it).").format(
                path=exc.path), soft_wrap=True)
        return
    with ledger, ledger.connection() as session:
        totals = waste_totals = saved_totals = None
        story = {"now": now, "horizon": horizon}
        if by is GroupBy.run:
            page = queries.run_page(session, start, end, limit=limit, unguarded=run_unguarded,
                                    places=EXPORT_MONEY_PLACES, **story)
            rows, use, totals = page.rows, page.use, page.totals
            waste_totals, saved_totals = page.waste_totals, page.saved_totals
            hidden = page.runs_total - page.runs_shown
        elif by is GroupBy.chain:
            chains = queries.chain_page(session, start, end, limit=limit, unguarded=run_unguarded,
                                        places=EXPORT_MONEY_PLACES, **story)
            rows, totals, chain_runs = chains.rows, chains.totals, chains.runs
            waste_totals, saved_totals = chains.waste_totals, chains.saved_totals
            hidden = chains.chains_total - chains.chains_shown
        elif by is GroupBy.instance:
            rows = queries.bill_by_instance(session, start, end, **story)
        elif by is GroupBy.day:
            rows = queries.bill_by_day(session, tz, start, end, **story)
        else:
            rows = queries.bill_by_gpu(session, start, end, **story)
        if plot is not None:
            from ..ledger.timeline import plot_data

            drawing = plot_data(session, start, end, run=run)
    if totals is None:  # the rows' rounded amounts added: rows sum to the totals exactly
        totals, waste_totals, saved_totals = row_totals(rows), row_totals(rows, "waste"), row_totals(rows, "saved")
    advice = underuse_advice_for(rows, use, settings) if use else []
    what = "chain" if by is GroupBy.chain else "run"
    not_shown = _not_shown(hidden, what, limit) if hidden else None

    if fmt is OutputFormat.json:
        sys.stdout.write(render_json(by.value, rows, totals, start, end, [a.to_dict() for a in advice],
                                     runs_not_shown=hidden or None if by is not GroupBy.chain else None,
                                     chains_not_shown=hidden or None if by is GroupBy.chain else None,
                                     expanded=chain_runs if expand else None, waste_totals=waste_totals,
                                     saved_totals=saved_totals, saved_horizon=horizon, as_of=now))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(render_csv(rows, [f.name for f in dataclasses.fields(getattr(queries, ROW_TYPES[by]))]))
        if not_shown:
            print(_("costctl: {message}").format(message=not_shown), file=sys.stderr)
    else:
        render_table(_out(), by.value, rows, totals, tz, start, end, waste_totals=waste_totals,
                     saved_totals=saved_totals, not_shown=NotShown(hidden, what) if hidden else None,
                     saved_horizon=horizon)
        if expand and chain_runs:
            render_table(_out(), "run", chain_runs, row_totals(chain_runs), tz, start, end,
                         title=_("Runs of the chains above"))
        if not_shown:
            _out().print(not_shown, soft_wrap=True)
        for a in advice:
            _out().print(_("advice: {advice}").format(advice=a.text))
        for r in rows:
            if getattr(r, "status", None) == "unguarded":
                _out().print(
                    _("unguarded: run {run}'s watch is gone but its job still runs on {provider} instance "
                      "{instance}; `costctl watch --attach {run}` guards it again (its relay starts one when the "
                      "job ends), `costctl stop {instance}` stops it").format(
                        run=r.run_id[:8], provider=r.provider, instance=r.instance_id),
                    soft_wrap=True)
    if plot is not None:
        from ..spend_plot import plot_bill

        plot_bill(drawing, plot, tz)
        print(_("costctl: plot written to {path}").format(path=plot), file=sys.stderr)


def _not_shown(hidden: int, what: str, limit: int) -> str:
    """The line for the ``hidden`` runs (``what``: ``run``) or chains that ``--limit`` left out."""
    if what == "chain":
        text = ngettext("{count} older chain not shown (--limit {limit}); the totals include it",
                        "{count} older chains not shown (--limit {limit}); the totals include them", hidden)
    else:
        text = ngettext("{count} older run not shown (--limit {limit}); the totals include it",
                        "{count} older runs not shown (--limit {limit}); the totals include them", hidden)
    return text.format(count=hidden, limit=limit)


def register(app: typer.Typer) -> None:
    """Add ``costctl bill`` to ``app``."""
    app.command("bill", help=_(
        "Show recorded spend, waste and savings. Totals are per currency (never added across currencies).\n\n"
        "Charges are clipped to [--since, --until); a run's duration_s is its time inside that window. JSON: "
        "{\"rows\": [...], \"totals\": {\"USD\": \"1.234567\"}, \"waste_totals\": {...}, \"saved_totals\": {...}, "
        "\"saved_counterfactual\": {...}} with money as decimal strings and times as ISO-8601 UTC; CSV: the rows "
        "only. Each row's amounts are rounded half-even to 6 places and each total is the exact sum of those "
        "rounded amounts (every run of the window with --limit), so the rows of a complete bill add up to the "
        "totals exactly; the table's columns add up to its footers as shown (largest remainder to the cent). "
        "WASTE: paid time whose work was lost or never done (the idle stretch before a stop, work lost to a "
        "preemption); SAVED: what confirmed stops avoided, under the counterfactual said under the table "
        "([bill] saved_horizon). Dry runs are marked. Runs whose GPU stayed underused get advice naming a "
        "cheaper card and what it would have saved (JSON: \"advice\"). --plot FILE.png also draws cumulative "
        "spend per instance with stops and advice, and a run's utilization."))(bill)
