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
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .translated import CostctlTyper

from ..errors import UsageError
from .common import ConfigOption, DbOption, err_console, out_console, settings_from

db_app = CostctlTyper(
    name="db",
    help="Ledger database migrations (upgrade, downgrade, current) and telemetry retention (compact).",
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


def _lost(counts: dict[str, int]) -> str:
    """``"3 runs and 120 charges"`` from :func:`costctl.ledger.migrate.row_counts`."""
    return " and ".join(f"{n} {name}" for name, n in counts.items()) or "no runs or charges"


def _say(text: str) -> None:
    out_console.print(text, markup=False, highlight=False, soft_wrap=True)


@db_app.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision (default: head, the newest).")] = "head",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Migrate the database up to REVISION (creates the tables of a new database)."""
    from ..ledger import migrate
    from ..ledger.engine import redact

    engine = _engine(config, db)
    try:
        migrate.upgrade(engine, revision)
        _say(f"{redact(engine.url)}: at revision {migrate.current_revision(engine)}")
    finally:
        engine.dispose()


@db_app.command("downgrade")
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' drops every table (data is lost).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
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
            _say(f"{shown}: at base already (no costctl tables); nothing done")
            return
        if current_rev == revision:
            _say(f"{shown}: at revision {revision} already; nothing done")
            return
        if not yes:
            loses = (f"drops every ledger table ({_lost(migrate.row_counts(engine))} would be lost)"
                     if revision == "base"
                     else f"drops the tables and columns added after {revision}, with their data")
            if not sys.stdin.isatty():
                raise UsageError(
                    f"downgrading {shown} from {current_rev} to {revision} {loses}; pass --yes to confirm "
                    "(there is no terminal to ask on)"
                )
            if not typer.confirm(f"Downgrade {shown} from {current_rev} to {revision}? This {loses}", default=False):
                err_console.print("costctl: not downgraded")
                raise typer.Exit(1)
        migrate.downgrade(engine, revision)
        _say(f"{shown}: at revision {migrate.current_revision(engine) or 'base (no tables)'}")
    finally:
        engine.dispose()


@db_app.command("current")
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
        _say(f"none (no ledger database at {exc.path} yet; `costctl watch` or `costctl db upgrade` creates it)")
        return
    try:
        rev = migrate.current_revision(engine)
        head = migrate.head_revision()
        note = "head" if rev == head else f"newest is {head}; run `costctl db upgrade`"
        _say(f"{rev or 'none'} ({note})")
    finally:
        engine.dispose()


def _minute(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC")


@db_app.command("compact")
def compact(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be done; write nothing.")] = False,
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
    from ..ledger.engine import MissingLedgerError, configured_url

    settings = settings_from(config, db)
    retention = settings.ledger.sample_retention
    if retention is None:
        _say("[ledger] sample_retention is off: raw telemetry is kept; nothing done")
        return
    url = configured_url(settings.database_url, settings.data_dir)
    try:
        ledger = Ledger.open(url, migrate=not dry_run, create=False)
    except MissingLedgerError as exc:
        if settings.database_url is not None:
            raise
        _say(f"no ledger database at {exc.path} yet; nothing to compact")
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
    held = f"raw samples before {_minute(result.cutoff)} (sample_retention {format_duration(retention)})"
    if not samples:
        _say(f"{shown}: no {held}; nothing done")
        return
    verb = "would roll up" if dry_run else "rolled up"
    span = f"{_minute(first)} to {_minute(last)}" if first is not None and last is not None else ""
    _say(f"{shown}: {verb} {samples} {held} into {rollups} per-minute rows, {len(runs)} run(s), "
         f"minutes {span}" + ("; dry run: nothing written" if dry_run else ""))


def register(app: typer.Typer) -> None:
    """Add ``costctl db`` to ``app``."""
    app.add_typer(db_app, name="db")
