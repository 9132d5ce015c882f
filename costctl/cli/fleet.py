"""``costctl fleet``: every instance of every configured provider account, with the ledger's view.

One row per instance (the rows come from :mod:`costctl.fleet`, which a policy sweep reuses;
this module only renders them): provider, account, id, GPU and count, status, price per
instance-hour with its currency, uptime since the provider last started it, spend by the
provider's figures (price × uptime) and by this ledger's charges, what it costs per hour while
stopped (its disk) where the adapter can tell, whether a watch of this ledger guards it (a run
not ended, of a watch that stops, with a heartbeat within ``[fleet] guard_lag``) and the
provider's own GPU utilization reading (``-``: unreported, which never means idle).

An account that cannot be read is listed as unreadable with its one-line error, never left out.
Exit status: 0 when at least one account was read, even if others failed (the listing says
which, and stderr says how many: a fleet view is most wanted when part of it is down); 1 when
no account could be read at all (the listing with the errors is still written); 2 for a bad
config. A ledger that cannot be read leaves every guard unknown and is said on stderr (exit 0).

JSON (``--format json``): ``{"as_of", "guard_lag_s", "accounts": [{"provider", "account",
"ok", "instances", "error", "notes"}], "instances": [...], "ledger_error"}``; money as decimal
strings (prices exactly as the provider gives them, computed spend rounded half-even to 6
places), times ISO-8601 UTC to the second, durations in seconds.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..i18n import _, canonical_data, display_word, format_amount, format_time
from . import common
from .common import ConfigOption, DbOption, print_json, print_line, print_table, team_settings, unprefixed

if TYPE_CHECKING:  # the fleet stack (providers, config) loads in the command, not for --help
    from ..clock import Clock
    from ..fleet.model import AccountRead, FleetReport, FleetRow, Guard


class FleetFormat(str, Enum):
    """Output formats of ``costctl fleet``."""

    table = "table"
    json = "json"


def clock() -> Clock:
    """The clock the fleet is read with (real time; a test replaces this function)."""
    from ..clock import RealClock

    return RealClock()


# ----------------------------------------------------------------------------- JSON


def _iso(when: Any) -> str | None:
    from ..clock import ensure_utc

    return ensure_utc(when).isoformat(timespec="seconds") if when is not None else None


def _secs(value: Decimal | timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    return float(round(value, 3))


def guard_json(guard: Guard) -> dict[str, Any]:
    """A guard as JSON: ``state``, ``run_id``, ``heartbeat_age_s``, ``mode``, ``host``."""
    return {"state": guard.state.value, "run_id": guard.run_id, "heartbeat_age_s": _secs(guard.heartbeat_age),
            "mode": guard.mode, "host": guard.host}


def row_json(row: FleetRow) -> dict[str, Any]:
    """One fleet row as JSON (see the module docstring for the units)."""
    from ..report import money_text

    inst = row.instance
    return {
        "provider": row.provider,
        "account": row.account,
        "id": inst.id,
        "gpu": inst.gpu,
        "gpu_raw": inst.gpu_raw,
        "gpu_count": inst.gpu_count,
        "status": inst.status.value,
        "status_raw": inst.status_raw,
        "preempted": inst.preempted,
        "billing": inst.billing.value,
        "price_per_hour": str(inst.price_per_hour) if inst.price_per_hour is not None else None,
        "currency": inst.currency,
        "started_at": _iso(inst.started_at),
        "stopped_at": _iso(inst.stopped_at),
        "uptime_s": _secs(row.uptime_s),
        "provider_spend": money_text(row.provider_spend.amount) if row.provider_spend else None,
        "ledger_spend": {cur: money_text(amount) for cur, amount in row.ledger_spend.items()},
        "stopped_price_per_hour": str(inst.stopped_price_per_hour) if inst.stopped_price_per_hour is not None
        else None,
        "stopped_s": _secs(row.stopped_s),
        "stopped_spend": money_text(row.stopped_spend.amount) if row.stopped_spend else None,
        "guarded": row.guard.guarded,
        "guard": guard_json(row.guard),
        "gpu_utilization": inst.gpu_utilization,
        "cpu_utilization": inst.cpu_utilization,
        "region": inst.region,
        "duplicate": row.duplicate,
    }


def account_json(read: AccountRead) -> dict[str, Any]:
    """One account's outcome as JSON."""
    return {"provider": read.provider, "account": read.account, "ok": read.ok,
            "instances": len(read.instances), "error": read.error, "notes": list(read.notes),
            "skipped": read.skipped, "duplicates": list(read.duplicates)}


def report_json(report: FleetReport) -> dict[str, Any]:
    """The whole report as JSON (the shape in the module docstring); its text (errors, notes)
    in English whatever the language shown (machine output)."""
    return canonical_data({
        "as_of": _iso(report.now),
        "guard_lag_s": _secs(report.guard_lag),
        "accounts": [account_json(a) for a in report.accounts],
        "instances": [row_json(r) for r in report.rows],
        "ledger_error": report.ledger_error,
    })


# ----------------------------------------------------------------------------- table


def span(value: Decimal | timedelta | None) -> str:
    """``3d04h``, ``1h02m``, ``5m03s``, ``12s`` or ``-`` (whole seconds)."""
    if value is None:
        return "-"
    s = int(value.total_seconds()) if isinstance(value, timedelta) else int(value)
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def _money(amount: Decimal | None, currency: str) -> str:
    """A price or a spend as the current language writes money (:func:`costctl.i18n.format_amount`:
    ``$0.0123``, ``¥1,008.00``); ``-`` for None."""
    return "-" if amount is None else format_amount(amount, currency)


def guard_text(guard: Guard) -> str:
    """The GUARD cell: the state, with the heartbeat's age and the watch's mode when they say more."""
    from ..fleet.model import guard_words

    return guard_words(guard, span(guard.heartbeat_age))


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _account(account: str | None) -> str:
    return account if account is not None else _("default")


def render_table(report: FleetReport, *, tz: Any) -> None:
    """Print the fleet table on stdout, the unreadable accounts' errors under it, and a line
    saying what "guarded" meant (the lag) and when the fleet was read (in ``tz``)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header, justify in ((_("PROVIDER"), "left"), (_("ACCOUNT"), "left"), (_("ID"), "left"), (_("GPU"), "left"),
                            (_("STATUS"), "left"), (_("PRICE/H"), "right"), (_("UPTIME"), "right"),
                            (_("SPEND (PROVIDER)"), "right"), (_("SPEND (LEDGER)"), "right"),
                            (_("STOPPED/H"), "right"), (_("GUARD"), "left"), (_("GPU UTIL"), "right")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    by_account: dict[tuple[str, str | None], list[FleetRow]] = {}
    for row in report.rows:
        by_account.setdefault((row.provider, row.account), []).append(row)
    shown = 0
    for read in report.accounts:
        if not read.ok:
            table.add_row(read.provider, _account(read.account), "-", "-", _("unreadable"),
                          "-", "-", "-", "-", "-", "-", "-")
            continue
        for row in by_account.get((read.provider, read.account), []):
            inst = row.instance
            word = display_word(inst.status)
            status = _("{status} (preempted)").format(status=word) if inst.preempted else word
            if row.duplicate:
                status = _("{status} (listed more than once)").format(status=status)
            ledger = ", ".join(_money(amount, cur) for cur, amount in row.ledger_spend.items()) or "-"
            table.add_row(
                row.provider, _account(row.account), inst.id, f"{inst.gpu_count}× {inst.gpu or inst.gpu_raw or '?'}",
                status, _money(inst.price_per_hour, inst.currency), span(row.uptime_s),
                _money(row.provider_spend.amount if row.provider_spend else None, inst.currency), ledger,
                _money(inst.stopped_price_per_hour, inst.currency), guard_text(row.guard),
                _percent(inst.gpu_utilization))
            shown += 1
    if report.accounts:
        print_table(table, droppable=(_("STOPPED/H"), _("SPEND (PROVIDER)"), _("UPTIME")))
    if not shown:
        print_line(_("no instances"))
    for read in report.failed:
        if read.account is None:
            line = _("{provider}: cannot be read: {error}")
        else:
            line = _("{provider} account {account}: cannot be read: {error}")
        print_line(line.format(provider=read.provider, account=read.account,
                               error=unprefixed(read.error or "", read.provider)))
    guarded = sum(1 for r in report.rows if r.guard.guarded)
    print_line(_("{guarded} of {count} instances guarded (a watch that stops, heartbeat at most {lag} old in this "
                 "ledger); read at {when}").format(
        guarded=guarded, count=len(report.rows), lag=span(report.guard_lag),
        when=format_time(report.now, tz)))


# ----------------------------------------------------------------------------- command


def fleet(
    fmt: Annotated[FleetFormat, typer.Option("--format", "-f", help=_("table or json."))] = FleetFormat.table,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Every instance of every configured provider account: price, uptime, spend by the
    provider and by the ledger, stopped cost, guarded or not, GPU utilization."""
    from ..fleet.collect import collect

    settings = team_settings(config, db)
    report = collect(settings, clock=clock())
    if fmt is FleetFormat.json:
        print_json(report_json(report))
    else:
        render_table(report, tz=settings.watch.tz)
    for read in report.accounts:
        for note in read.notes:
            common.err_console.print(note, soft_wrap=True)
    if report.ledger_error is not None:
        common.err_console.print(_("costctl: the ledger cannot be read, so no instance shows as guarded: {error}").format(
            error=report.ledger_error), soft_wrap=True)
    if report.all_failed:
        common.err_console.print(_("costctl: no provider account could be read ({count} failed)").format(
            count=len(report.failed)), soft_wrap=True)
        raise typer.Exit(1)
    if report.failed:
        common.err_console.print(_("costctl: {failed} of {count} provider accounts could not be read; they are listed as "
                            "unreadable").format(failed=len(report.failed), count=len(report.accounts)),
                          soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``fleet`` to ``app``."""
    app.command("fleet", help=_(
        "Every instance of every configured provider account: price, uptime, spend by the provider and by the "
        "ledger, stopped cost, guarded or not, GPU utilization. Exit status 0 when some account was read (the "
        "unreadable ones are listed as such), 1 when none could be."))(fleet)


__all__ = ["FleetFormat", "account_json", "clock", "fleet", "guard_text", "register", "render_table",
           "report_json", "row_json", "span"]
