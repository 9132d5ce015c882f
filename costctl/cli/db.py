"""``costctl db``: migrate the ledger database (Alembic, configured in code).

``costctl watch`` and ``costctl bill`` migrate to the newest schema by themselves; these
commands are for upgrading ahead of time, downgrading, and checking where a database is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.engine import Engine

from ..ledger import migrate
from ..ledger.engine import configured_url, make_engine, redact
from .common import ConfigOption, DbOption, out_console, settings_from

db_app = typer.Typer(
    name="db",
    help="Ledger database migrations: upgrade, downgrade, current.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _engine(config: Path | None, db: str | None) -> Engine:
    settings = settings_from(config, db)
    return make_engine(configured_url(settings.database_url, settings.data_dir))


def _say(text: str) -> None:
    out_console.print(text, markup=False, highlight=False)


@db_app.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision (default: head, the newest).")] = "head",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Migrate the database up to REVISION (creates the tables of a new database)."""
    engine = _engine(config, db)
    try:
        migrate.upgrade(engine, revision)
        _say(f"{redact(engine.url)}: at revision {migrate.current_revision(engine)}")
    finally:
        engine.dispose()


@db_app.command("downgrade")
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' drops every table (data is lost).")],
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Migrate the database down to REVISION."""
    engine = _engine(config, db)
    try:
        migrate.downgrade(engine, revision)
        _say(f"{redact(engine.url)}: at revision {migrate.current_revision(engine) or 'base (no tables)'}")
    finally:
        engine.dispose()


@db_app.command("current")
def current(config: ConfigOption = None, db: DbOption = None) -> None:
    """Print the database's revision ('none' before the first migration) and whether it is the newest."""
    engine = _engine(config, db)
    try:
        rev = migrate.current_revision(engine)
        head = migrate.head_revision()
        note = "head" if rev == head else f"newest is {head}; run `costctl db upgrade`"
        _say(f"{rev or 'none'} ({note})")
    finally:
        engine.dispose()


def register(app: typer.Typer) -> None:
    """Add ``costctl db`` to ``app``."""
    app.add_typer(db_app, name="db")
