"""``costctl patrol``: sweep every configured provider account with the ``[[patrol.policies]]``.

A dry run by default: it names exactly the instances each policy matches, with the evidence of
every filter, and what it would do (mark and notify, stop or release after the grace, clear a
mark that no longer matches, warn before a provider's own release), and changes nothing but
storing its observations (one reading per listed instance, which the idle filter needs over
time). ``--execute`` acts: marks and notifies now, and acts on the marks whose grace has passed
through the verified stop, each action a decision with its evidence. ``--every 5m`` sweeps at
once and then every interval until Ctrl-C or SIGTERM.

Exit status: 0; 1 when no provider account could be read or the ledger cannot be used; 2 for a
bad config or option; 69 (:data:`costctl.stopping.EXIT_STOP_FAILED`) when a stop or release
this run carried failed.

JSON (``--format json``), one object per sweep: ``{"as_of", "mode", "instances",
"observations", "accounts", "policies": [{"name", "action", "grace_s", "matches": [{"provider",
"account", "id", "label", "status", "step", "done", "reason", "evidence", "mark", "due_at",
"decision", "state"}], "cleared": [{"provider", "id", "mark", "why", "reason", "done"}]}], "warnings":
[...], "notes": [...], "ledger_error"}``.
"""

from __future__ import annotations

from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..i18n import _
from . import common
from .common import ConfigOption, DbOption, print_json, print_line, print_table, team_settings

if TYPE_CHECKING:
    from ..clock import Clock
    from ..patrol.sweep import Outcome, SweepReport

#: The shortest and longest ``--every``.
EVERY_MIN, EVERY_MAX = timedelta(seconds=10), timedelta(hours=24)


class PatrolFormat(str, Enum):
    """Output formats of ``costctl patrol``."""

    table = "table"
    json = "json"


def clock() -> Clock:
    """The clock the patrol reads and acts with (real time; a test replaces this function)."""
    from ..clock import RealClock

    return RealClock()


# ----------------------------------------------------------------------------- JSON


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """One match of a policy as JSON."""
    from ..patrol.model import iso

    p = outcome.plan
    row = p.match.seen.row
    return {"provider": row.provider, "account": row.account, "id": row.instance.id, "label": row.instance.label,
            "status": row.instance.status.value, "step": p.step.value, "done": outcome.done, "why": p.why,
            "reason": p.match.reason, "evidence": p.match.evidence, "mark": p.mark.id if p.mark else None,
            "due_at": iso(p.due), "decision": outcome.decision_id, "state": outcome.state}


def report_json(report: SweepReport) -> dict[str, Any]:
    """A sweep as JSON (the shape in the module docstring)."""
    from ..patrol.model import iso
    from .fleet import account_json

    return {
        "as_of": iso(report.now),
        "mode": "execute" if report.execute else "dry-run",
        "instances": len(report.fleet.rows),
        "observations": report.observations,
        "accounts": [account_json(a) for a in report.fleet.accounts],
        "policies": [{"name": r.policy.name, "action": r.policy.action, "grace_s": r.policy.grace.total_seconds(),
                      "matches": [outcome_json(o) for o in r.outcomes],
                      "cleared": [{"provider": c.key[0], "id": c.key[1], "mark": c.mark.id, "why": c.why,
                                   "reason": c.line, "done": done} for c, done in r.cleared]}
                     for r in report.policies],
        "warnings": [{"provider": w.warning.seen.row.provider, "id": w.warning.seen.row.instance.id,
                      "stopped_since": iso(w.warning.stopped_since), "source": w.warning.source,
                      "release_at": iso(w.warning.release_at), "reason": w.warning.reason, "done": w.done,
                      "decision": w.decision_id} for w in report.warnings],
        "notes": report.notes,
        "ledger_error": report.fleet.ledger_error,
    }


# ----------------------------------------------------------------------------- table


def render(report: SweepReport) -> None:
    """Print one sweep: per policy its matches (what each filter saw, what was done), the marks
    cleared, the warnings, the accounts that could not be read, the notes, and a closing line."""
    from rich import box
    from rich.table import Table

    from ..policies.idle import fmt_duration
    from .common import unprefixed

    for result in report.policies:
        policy = result.policy
        print_line(_("policy {name} ({action}, grace {grace}): {count} matching instance(s)").format(
            name=policy.name, action=policy.action, grace=fmt_duration(policy.grace), count=len(result.outcomes)))
        if result.outcomes:
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for header in (_("PROVIDER"), _("ACCOUNT"), _("ID"), _("STATUS"), _("WHY"), _("DONE")):
                table.add_column(header)
            for outcome in result.outcomes:
                row = outcome.plan.match.seen.row
                table.add_row(row.provider, row.account or _("default"), row.instance.id, row.instance.status.value,
                              _("; ").join(outcome.plan.match.clauses), outcome.done)
            print_table(table)
        for c, done in result.cleared:
            print_line(_("  {provider} {instance}: {done}").format(provider=c.key[0], instance=c.key[1], done=done))
    for warning in report.warnings:
        print_line(_("warning: {reason} ({done})").format(reason=warning.warning.reason, done=warning.done))
    for read in report.fleet.failed:
        line = _("{provider}: cannot be read: {error}") if read.account is None else \
            _("{provider} account {account}: cannot be read: {error}")
        print_line(line.format(provider=read.provider, account=read.account,
                               error=unprefixed(read.error or "", read.provider)))
    for note in report.notes:
        print_line(_("note: {note}").format(note=note))
    count = len(report.fleet.rows)
    if report.execute:
        print_line(_("executed: {count} instance(s) read, {observations} observation(s) stored").format(
            count=count, observations=report.observations))
    else:
        print_line(_("dry run: nothing was changed but the {observations} observation(s) stored ({count} "
                     "instance(s) read); pass --execute to act").format(count=count,
                                                                       observations=report.observations))


# ----------------------------------------------------------------------------- command


def _every(text: str | None) -> timedelta | None:
    from ..config_types import duration_allowed, parse_duration
    from ..errors import UsageError

    if text is None:
        return None
    try:
        return parse_duration(text, minimum=EVERY_MIN, maximum=EVERY_MAX)
    except ValueError:
        raise UsageError(_("--every {text!r}: expected {allowed}").format(
            text=text, allowed=duration_allowed(EVERY_MIN, EVERY_MAX, noun=_("an interval")))) from None


def patrol(
    execute: Annotated[bool, typer.Option("--execute", help=_("Act: mark and notify, then stop or release after "
                                                              "the grace."))] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Name what each policy matches and would do; "
                                                              "change nothing (the default)."))] = False,
    every: Annotated[str | None, typer.Option("--every", metavar="DURATION",
                                              help=_("Sweep now and then every DURATION (10s to 24h) until "
                                                     "Ctrl-C."))] = None,
    fmt: Annotated[PatrolFormat, typer.Option("--format", "-f", help=_("table or json."))] = PatrolFormat.table,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Sweep every configured provider account with the [[patrol.policies]]: a dry run unless
    --execute."""
    from ..errors import CostctlError, UsageError
    from ..ledger import Ledger
    from ..ledger.engine import configured_url
    from ..patrol.sweep import Sweeper
    from ..stopping import EXIT_STOP_FAILED

    if execute and dry_run:
        raise UsageError(_("--execute and --dry-run contradict each other: give one (a dry run is the default)"))
    interval = _every(every)
    settings = team_settings(config, db)
    if not settings.patrol.policies:
        common.err_console.print(_("costctl: no [[patrol.policies]] configured: the patrol only observes and warns "
                                   "(see docs/patrol.md)"), soft_wrap=True)
    ledger = Ledger.open(configured_url(settings.database_url, settings.data_dir))

    def say(line: str) -> None:
        common.err_console.print(line, soft_wrap=True, markup=False, highlight=False)

    sweeper = Sweeper(settings, ledger, clock=clock(), execute=execute, interval=interval, say=say)
    status = {"code": 0}

    def one() -> None:
        report = sweeper.sweep()
        if fmt is PatrolFormat.json:
            print_json(report_json(report))
        else:
            render(report)
        for read in report.fleet.accounts:
            for note in read.notes:
                say(note)
        if report.fleet.ledger_error is not None:
            say(_("costctl: the ledger cannot be read, so no instance shows as guarded: {error}").format(
                error=report.fleet.ledger_error))
        if report.fleet.all_failed:
            say(_("costctl: no provider account could be read ({count} failed)").format(count=len(report.fleet.failed)))
            status["code"] = max(status["code"], 1)
        if report.failed:
            status["code"] = EXIT_STOP_FAILED

    try:
        if interval is None:
            one()
        else:
            from ..patrol.schedule import Every

            def failed(exc: BaseException) -> None:
                text = exc.message if isinstance(exc, CostctlError) else f"{type(exc).__name__}: {exc}"
                say(_("costctl patrol: this sweep failed: {error}; the next one runs on schedule").format(error=text))

            Every(interval, one, on_error=failed).run()
    finally:
        ledger.close()
    if status["code"]:
        raise typer.Exit(status["code"])


def register(app: typer.Typer) -> None:
    """Add ``patrol`` to ``app``."""
    app.command("patrol", help=_(
        "Sweep every configured provider account with the [[patrol.policies]] (filters: provider, account, label, "
        "status, age, guarded, idle, spend, stopped for; actions: notify, stop, release). A dry run unless "
        "--execute: it names the instances each policy matches with the evidence and changes nothing but its "
        "stored observations. With --execute it marks and notifies first and acts after the grace, through the "
        "verified stop. Exit status 69 when a stop failed."))(patrol)


__all__ = ["PatrolFormat", "clock", "outcome_json", "patrol", "register", "render", "report_json"]
