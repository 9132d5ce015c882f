"""Opening the ledger, and :class:`LedgerReader`: read-only access with SQLAlchemy Core only.

:func:`open_engine` is how every ledger is opened (:meth:`costctl.ledger.db.Ledger.open` too):
an engine, one round trip to check the database answers, and the migration to the newest
schema when it is behind (a database without any table is created at the newest revision
instead, without Alembic). :class:`LedgerReader` wraps such an engine for commands that only
read (``costctl bill``): its :meth:`~LedgerReader.connection` is a plain Core connection, which
the queries of :mod:`costctl.ledger.queries` accept, so such a command never imports
``sqlalchemy.orm`` or the ORM classes of :mod:`costctl.ledger.schema`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..i18n import _
from . import migrate as migrations
from .engine import make_engine, parse_url, redact, translate_errors


def open_engine(url: str, *, migrate: bool = True, create: bool = True, isolated_migration: bool = False,
                pool_pre_ping: bool = False) -> Engine:
    """An engine for the ledger at ``url`` (any SQLAlchemy URL), checked to answer and migrated
    to the newest schema (see :meth:`costctl.ledger.db.Ledger.open` for ``create`` and
    ``isolated_migration``; ``pool_pre_ping``: check a pooled connection before each use). A ledger already at the newest revision is only read (no Alembic
    import, no write lock); a database with no tables at all is created at the newest revision
    in this process, also without Alembic (:func:`costctl.ledger.migrate.create_at_head`).

    Raises:
        MissingLedgerError: ``create=False`` and the SQLite file does not exist.
        LedgerError: one line for a bad URL, a missing driver, an unwritable path, an
            unreachable server or a failed migration (password redacted).
    """
    engine = make_engine(parse_url(url), create=create, pool_pre_ping=pool_pre_ping)
    try:
        with translate_errors(_("open the database"), engine.url):
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        if migrate:
            # A database without any table (a new ledger) is created at head in place, without
            # Alembic; one with costctl's tables (or any other) is migrated.
            fresh = migrations.current_revision(engine) is None and migrations.create_at_head(engine)
            if not fresh:
                migrations.upgrade(engine, "head", isolated=isolated_migration)
    except BaseException:
        engine.dispose()
        raise
    return engine


class LedgerReader:
    """Read-only access to a ledger through Core connections (no ORM).

    Build it with :meth:`open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine made by :func:`open_engine` (tables must exist)."""
        self.engine = engine
        self.url = redact(engine.url)

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> LedgerReader:
        """Open the existing ledger at ``url`` and migrate it to the newest schema when it is
        behind (as ``costctl bill`` always has); nothing is created.

        Raises:
            MissingLedgerError: the SQLite file does not exist.
            LedgerError: as :func:`open_engine`.
        """
        return cls(open_engine(url, migrate=migrate, create=False))

    @contextmanager
    def connection(self) -> Iterator[sa.Connection]:
        """A read connection (one transaction, so every query inside sees one snapshot), rolled
        back at exit; driver errors inside become one :class:`~costctl.errors.LedgerError` line.

        Raises:
            LedgerError: the database cannot be read.
        """
        with translate_errors(_("read the ledger"), self.engine.url), self.engine.connect() as conn:
            yield conn

    def close(self) -> None:
        """Release the database connections. Safe to call twice."""
        self.engine.dispose()

    def __enter__(self) -> LedgerReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["LedgerReader", "open_engine"]
