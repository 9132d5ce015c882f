"""``costctl db``: migrate the ledger database (Alembic, configured in code).

``costctl watch`` and ``costctl bill`` migrate to the newest schema by themselves; these
commands are for upgrading ahead of time, downgrading, and checking where a database is.
``compact`` applies ``[ledger] sample_retention`` (raw telemetry older than it becomes
per-minute rows; :mod:`costctl.ledger.sample_rollup`); ``--dry-run`` only says what it would do.
``downgrade`` drops tables and their data: it asks on a terminal and otherwise needs
``--yes``. ``current`` and ``downgrade`` never create a SQLite file that does not exist.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .translated import CostctlTyper

from ..errors import UsageError
from ..i18n import _, format_time
from .common import ConfigOption, DbOption, err_console, out_console, settings_from

db_app = CostctlTyper(
    name="db",
    help=_("Ledger database migrations (upgrade, downgrade, current), telemetry retention (compact) and "
           "fleet mode's send to the central ledger (sync)."),
    no_args_is_help=True,
    rich_markup_mode=None,
)

if TYPE_CHECKING:  # SQLAlchemy and the migrations load inside the commands, not for --help
    from sqlalchemy.engine import Engine


def _url(config: Path | None, db: str | None) -> tuple[str, bool]:
    """The ledger URL, and whether it was configured (--db, COSTCTL_DATABASE_URL or
    ``database_url``) rather than the default SQLite file in the data dir."""
    from ..ledger.engine import configured_url

    settings = settings_from(config, db)
    return configured_url(settings.database_url, settings.data_dir), settings.database_url is not None


def _engine(config: Path | None, db: str | None, *, create: bool = True) -> Engine:
    """The configured ledger's engine; ``create=False`` refuses a SQLite file that does not
    exist (:class:`MissingLedgerError`) instead of creating it."""
    from ..ledger.engine import make_engine

    return make_engine(_url(config, db)[0], create=create)


def _say(text: str) -> None:
    out_console.print(text, markup=False, highlight=False, soft_wrap=True)


@db_app.command("upgrade", help=_(
    "Migrate the database up to REVISION (creates the tables of a new database)."))
def upgrade(
    revision: Annotated[str, typer.Argument(help=_("Target revision (default: head, the newest)."))] = "head",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Migrate the database up to REVISION (creates the tables of a new database)."""
    from ..ledger import migrate
    from ..ledger.engine import redact

    engine = _engine(config, db)
    try:
        migrate.upgrade(engine, revision)
        _say(_("{url}: at revision {revision}").format(url=redact(engine.url),
                                                       revision=migrate.current_revision(engine)))
    finally:
        engine.dispose()


@db_app.command("downgrade", help=_(
    "Migrate the database down to REVISION, dropping the tables (and data) added after it.\n\n"
    "Asks for confirmation on a terminal; without one it refuses unless --yes (exit status 2)."))
def downgrade(
    revision: Annotated[str, typer.Argument(help=_("Target revision; 'base' drops every table (data is lost)."))],
    yes: Annotated[bool, typer.Option("--yes", "-y", help=_("Do not ask for confirmation."))] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Migrate the database down to REVISION, dropping the tables (and data) added after it.

    Asks for confirmation on a terminal; without one it refuses unless --yes (exit status 2).
    """
    from ..ledger import migrate
    from ..ledger.engine import redact

    engine = _engine(config, db, create=False)
    try:
        shown = redact(engine.url)
        current_rev = migrate.current_revision(engine)
        if current_rev is None:
            _say(_("{url}: at base already (no costctl tables); nothing done").format(url=shown))
            return
        if current_rev == revision:
            _say(_("{url}: at revision {revision} already; nothing done").format(url=shown, revision=revision))
            return
        if not yes:
            # the rows a downgrade to base deletes (every revision has both tables)
            counts = migrate.row_counts(engine) if revision == "base" else {}
            shape = {"url": shown, "current": current_rev, "revision": revision,
                     "runs": counts.get("runs", 0), "charges": counts.get("charges", 0)}
            if not sys.stdin.isatty():
                if revision == "base":
                    refused = _("downgrading {url} from {current} to {revision} drops every ledger table "
                                "({runs} runs and {charges} charges would be lost); pass --yes to confirm "
                                "(there is no terminal to ask on)")
                else:
                    refused = _("downgrading {url} from {current} to {revision} drops the tables and columns "
                                "added after {revision}, with their data; pass --yes to confirm "
                                "(there is no terminal to ask on)")
                raise UsageError(refused.format(**shape))
            if revision == "base":
                question = _("Downgrade {url} from {current} to {revision}? This drops every ledger table "
                             "({runs} runs and {charges} charges would be lost)")
            else:
                question = _("Downgrade {url} from {current} to {revision}? This drops the tables and columns "
                             "added after {revision}, with their data")
            if not typer.confirm(question.format(**shape), default=False):
                err_console.print(_("costctl: not downgraded"))
                raise typer.Exit(1)
        migrate.downgrade(engine, revision)
        now_at = migrate.current_revision(engine)
        if now_at is None:
            _say(_("{url}: at revision base (no tables)").format(url=shown))
        else:
            _say(_("{url}: at revision {revision}").format(url=shown, revision=now_at))
    finally:
        engine.dispose()


@db_app.command("current", help=_(
    "Print the database's revision ('none' before the first migration) and whether it is the newest.\n\n"
    "Creates nothing: a configured SQLite file that does not exist is an error (exit status 1); "
    "the default one, before anything was recorded, reads as 'none'."))
def current(config: ConfigOption = None, db: DbOption = None) -> None:
    """Print the database's revision ('none' before the first migration) and whether it is the newest.

    Creates nothing: a configured SQLite file that does not exist is an error (exit status 1);
    the default one, before anything was recorded, reads as 'none'.
    """
    from ..ledger import migrate
    from ..ledger.engine import MissingLedgerError, make_engine

    url, configured = _url(config, db)
    try:
        engine = make_engine(url, create=False)
    except MissingLedgerError as exc:
        if configured:
            raise
        _say(_("none (no ledger database at {path} yet; `costctl watch` or `costctl db upgrade` creates it)")
             .format(path=exc.path))
        return
    try:
        rev = migrate.current_revision(engine)
        head = migrate.head_revision()
        if rev == head:
            _say(_("{revision} (head)").format(revision=rev))
        elif rev is None:
            _say(_("none (newest is {head}; run `costctl db upgrade`)").format(head=head))
        else:
            _say(_("{revision} (newest is {head}; run `costctl db upgrade`)").format(revision=rev, head=head))
    finally:
        engine.dispose()


@db_app.command("compact", help=_(
    "Roll up raw telemetry older than [ledger] sample_retention into per-minute rows, deleting it.\n\n"
    "Works in short transactions of a few thousand rows (a running watch is not held up) until "
    "nothing older is left, then prints what it did. --dry-run reads only (and does not migrate)."))
def compact(
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Only say what would be done; write nothing."))] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Roll up raw telemetry older than [ledger] sample_retention into per-minute rows, deleting it.

    Works in short transactions of a few thousand rows (a running watch is not held up) until
    nothing older is left, then prints what it did. --dry-run reads only (and does not migrate).
    """
    from ..clock import utcnow
    from ..config import format_duration
    from ..ledger import Ledger
    from ..ledger.engine import MissingLedgerError, configured_url, parse_url

    settings = settings_from(config, db)
    retention = settings.ledger.sample_retention
    if retention is None:
        _say(_("[ledger] sample_retention is off: raw telemetry is kept; nothing done"))
        return
    url = configured_url(settings.database_url, settings.data_dir)
    central = settings.ledger.central_url
    # A watch's own ledger in fleet mode: raw samples not sent to the central ledger are kept.
    fleet = central is not None and parse_url(central).render_as_string() != parse_url(url).render_as_string()
    try:
        ledger = Ledger.open(url, migrate=not dry_run, create=False, outbox=fleet)
    except MissingLedgerError as exc:
        if settings.database_url is not None:
            raise
        _say(_("no ledger database at {path} yet; nothing to compact").format(path=exc.path))
        return
    now = utcnow()
    samples = rollups = 0
    runs: set[str] = set()
    first = last = None
    start = None
    with ledger:
        while True:
            result = ledger.compact(now, retention, dry_run=dry_run, start=start)
            samples += result.samples
            rollups += result.rollups
            runs |= result.run_ids
            if result.first_minute is not None:
                first = first or result.first_minute
                last = result.last_minute
            if result.done:
                break
            start = result.resume_at if dry_run else None
        shown = ledger.url
    tz = settings.watch.tz  # times are shown in [watch] timezone, to the second with its offset
    shape = {"url": shown, "cutoff": format_time(result.cutoff, tz), "retention": format_duration(retention),
             "samples": samples, "rollups": rollups, "runs": len(runs)}
    if not samples:
        _say(_("{url}: no raw samples before {cutoff} (sample_retention {retention}); nothing done").format(**shape))
        return
    if first is not None and last is not None:
        shape.update(first=format_time(first, tz), last=format_time(last, tz))
        if dry_run:
            done = _("{url}: would roll up {samples} raw samples before {cutoff} (sample_retention {retention}) "
                     "into {rollups} per-minute rows, {runs} run(s), minutes {first} to {last}; "
                     "dry run: nothing written")
        else:
            done = _("{url}: rolled up {samples} raw samples before {cutoff} (sample_retention {retention}) "
                     "into {rollups} per-minute rows, {runs} run(s), minutes {first} to {last}")
    elif dry_run:
        done = _("{url}: would roll up {samples} raw samples before {cutoff} (sample_retention {retention}) "
                 "into {rollups} per-minute rows, {runs} run(s); dry run: nothing written")
    else:
        done = _("{url}: rolled up {samples} raw samples before {cutoff} (sample_retention {retention}) "
                 "into {rollups} per-minute rows, {runs} run(s)")
    _say(done.format(**shape))


@db_app.command("sync", help=_(
    "Send what this machine's ledger holds for the team's central ledger ([ledger] central_url), now.\n\n"
    "A watch in fleet mode sends it by itself every [ledger] sync_interval; what it could not send (the "
    "central ledger was unreachable at its end) waits in this ledger until the next watch here, or this "
    "command. Sending twice changes nothing."))
def sync(
    central: Annotated[str | None, typer.Option("--central", metavar="URL", help=_(
        "The central ledger (default: [ledger] central_url)."))] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Send what this machine's ledger holds for the team's central ledger, now (see the help)."""
    from ..ledger import Ledger
    from ..ledger.engine import MissingLedgerError, configured_url, redact
    from ..ledger.sync import CentralSync, central_target, open_central

    settings = settings_from(config, db)
    url = configured_url(settings.database_url, settings.data_dir)
    target = central_target(central or settings.ledger.central_url, url)
    if target is None:
        raise UsageError(_("no central ledger: set [ledger] central_url or pass --central URL"))
    try:
        ledger = Ledger.open(url, create=False)
    except MissingLedgerError as exc:
        if settings.database_url is not None:
            raise
        open_central(target).dispose()  # reached and migrated all the same: an unreachable one is said
        _say(_("no ledger database at {path} yet; nothing to send").format(path=exc.path))
        return
    with ledger:
        sender = CentralSync(ledger, target, say=lambda text: err_console.print(text, markup=False, highlight=False))
        try:
            sender.check()  # reached and migrated even when nothing waits: an unreachable one is said
            sent = sender.drain()
            left = sender.pending()
        finally:
            sender.dispose()
        _say(_("{url}: sent {sent} changes to the central ledger {central}; {left} wait").format(
            url=ledger.url, sent=sent, central=redact(target), left=left))


def register(app: typer.Typer) -> None:
    """Add ``costctl db`` to ``app``."""
    app.add_typer(db_app, name="db")
