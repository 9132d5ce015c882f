"""Alembic environment for costctl's ledger.

costctl runs migrations programmatically (:mod:`costctl.ledger.migrate`): it passes an open
connection inside its own transaction in ``config.attributes["connection"]``. Run by hand
(``alembic -c alembic.ini ...`` from the repository root), the URL comes from the Config's
``sqlalchemy.url``, else from costctl's settings (``COSTCTL_DATABASE_URL``, ``costctl.toml``),
else the default SQLite file in the data dir.

SQLite gets ``render_as_batch`` (ALTER TABLE there is limited; batch mode copies the table)
and transactional DDL; PostgreSQL takes an advisory lock so concurrent migrations queue.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any, Literal

from alembic import context
from sqlalchemy import Connection

# The advisory lock that serialises migrations on PostgreSQL (costctl's creation of a fresh
# ledger at head, costctl.ledger.migrate.create_at_head, takes it too).
from costctl.ledger.migrate import PG_MIGRATION_LOCK_KEY
from costctl.ledger.schema import Base
from costctl.ledger.types import DecimalText, JSONText, UTCDateTime

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and "connection" not in config.attributes:
    # Run by hand with alembic.ini: use its logging setup (costctl itself stays quiet).
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from costctl.config import load_settings
    from costctl.paths import default_database_url

    settings = load_settings()
    return settings.database_url or default_database_url(settings.data_dir)


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Render costctl's column types as the plain SQLAlchemy types they store, so migration
    scripts never import costctl (a later change to costctl cannot alter an old migration)."""
    if type_ == "type":
        if isinstance(obj, UTCDateTime):
            return "sa.DateTime(timezone=True)"
        if isinstance(obj, DecimalText):
            return "sa.String(length=64)"
        if isinstance(obj, JSONText):
            return "sa.Text()"
    return False


def _configure(connection: Connection) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=is_sqlite,
        transactional_ddl=True,
        compare_type=True,
        render_item=render_item,
    )


def _lock(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK_KEY})")


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade --sql``) without connecting."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate over costctl's connection, or over a new engine built from the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        _lock(connection)
        with context.begin_transaction():
            context.run_migrations()
        return

    from costctl.ledger.engine import make_engine

    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                _lock(connection)
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
