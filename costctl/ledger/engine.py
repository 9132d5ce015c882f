"""Engines for the ledger: URL checks, SQLite set-up, and one-line errors.

SQLite files get their parent directory created (unless the engine is made with
``create=False``, for read-only commands: then a missing file is a
:class:`MissingLedgerError` and nothing is created), WAL journalling (readers do not block the
writer), a 30 s busy timeout and foreign keys on. SQLAlchemy, not the ``sqlite3`` module,
emits ``BEGIN`` (the recipe in SQLAlchemy's SQLite dialect docs), so transactions and
transactional DDL behave; a connection with the execution option ``immediate=True`` starts
with ``BEGIN IMMEDIATE``, taking SQLite's write lock before its first read — that is how
accruals on one instance are serialised on SQLite.

``postgresql://`` URLs use psycopg 3 when psycopg2 is not installed.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Engine

from ..errors import LedgerError
from ..i18n import _
from ..validation import shown_path

if TYPE_CHECKING:  # the ORM loads only where ORM objects are used (never for ``costctl bill``)
    from sqlalchemy.orm import Session

#: What the read-side queries (:mod:`costctl.ledger.queries`, :mod:`costctl.ledger.lifecycle`)
#: run on: a Core connection (``costctl bill``) or an ORM session (everything else); they use
#: only ``execute`` and ``scalar``, with Core statements.
Reader = Union[sa.Connection, "Session"]

#: Seconds a SQLite writer waits for another writer's lock before failing.
SQLITE_BUSY_TIMEOUT_S = 30
#: Seconds to wait for a PostgreSQL server before giving up.
PG_CONNECT_TIMEOUT_S = 10

URL_EXAMPLES = "sqlite:///path/to/costctl.db or postgresql+psycopg://user@host:5432/dbname"


class MissingLedgerError(LedgerError):
    """A SQLite ledger file that does not exist, opened with ``create=False`` (exit status 1).

    Attributes:
        path: the missing database file.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(_("no ledger database at {path}").format(path=path))
        self.path = path


def redact(url: URL | str) -> str:
    """The URL as text with any password replaced by ``***``."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return url


def first_line(error: BaseException) -> str:
    """The first non-empty line of a driver error (psycopg's messages span lines)."""
    orig = getattr(error, "orig", None) or error
    for line in str(orig).splitlines():
        if line.strip():
            return line.strip()
    return type(orig).__name__


def parse_url(url: str) -> URL:
    """Parse and normalise a database URL.

    ``~`` in a SQLite path is expanded; ``postgresql://`` gets the ``psycopg`` driver when
    psycopg2 is not installed.

    Raises:
        LedgerError: the text is not a SQLAlchemy URL.
    """
    try:
        parsed = sa.make_url(url)
    except exc.ArgumentError:
        raise LedgerError(_("database URL {url!r} is not valid (expected {examples})").format(
            url=url, examples=URL_EXAMPLES), exit_code=2) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        if not parsed.database.startswith("file:"):
            parsed = parsed.set(database=str(Path(parsed.database).expanduser()))
    if parsed.drivername == "postgresql" and importlib.util.find_spec("psycopg2") is None:
        if importlib.util.find_spec("psycopg") is not None:
            parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None (in-memory, other backends)."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def configured_url(database_url: str | None, data_dir: Path | None = None, *, create: bool = True) -> str:
    """The ledger URL to use: ``database_url`` (``--db``, ``COSTCTL_DATABASE_URL`` or the config's
    ``database_url``, already merged by the settings), else the SQLite file in the data dir
    (created unless ``create=False``: a read-only command creates nothing)."""
    from ..paths import default_database_url

    return database_url or default_database_url(data_dir, create=create)


def make_engine(url: str | URL, *, create: bool = True, pool_pre_ping: bool = False) -> Engine:
    """Create an engine for ``url`` (no connection is made yet).

    Args:
        url: any SQLAlchemy URL (see :func:`parse_url`).
        create: for a SQLite file: True creates its directory (SQLite creates the file on first
            connect); False (read-only commands such as ``costctl bill``) refuses a file that
            does not exist, so a typo in a URL never leaves a new empty ledger behind. Other
            backends ignore it (their database must exist anyway).
        pool_pre_ping: test a pooled connection before handing it out and replace it when the
            server dropped it (SQLAlchemy's ``pool_pre_ping``): for long-lived engines whose
            server may restart between two uses (the central ledger of fleet mode).

    Raises:
        MissingLedgerError: ``create=False`` and the SQLite file does not exist.
        LedgerError: invalid URL, unknown dialect, missing driver, or a SQLite file whose
            directory cannot be created — one line, password redacted.
    """
    text = url if isinstance(url, str) else (url.database or "")
    if not _encodes(text):  # a data dir, --db or HOME holding bytes that are not UTF-8
        raise LedgerError(_("database {url}: the path is not valid UTF-8, which the database cannot open; "
                            "use a data dir or --db path of UTF-8 text").format(url=shown_path(text)), exit_code=2)
    parsed = parse_url(url) if isinstance(url, str) else url
    shown = redact(parsed)
    path = sqlite_file(parsed)
    if path is not None and not create:
        if not path.is_file():
            raise MissingLedgerError(path)
    elif path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise LedgerError(
                _("cannot create the directory of database {path}: a file is in the way (not a directory)").format(
                    path=path)
            ) from None
        except OSError as err:
            raise LedgerError(
                _("cannot create the directory of database {path}: {error}").format(path=path,
                                                                                    error=err.strerror or err)
            ) from None
    kwargs: dict[str, Any] = {"pool_pre_ping": True} if pool_pre_ping else {}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    elif parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except exc.NoSuchModuleError:
        raise LedgerError(
            _("database URL {url}: unknown database kind {kind!r} (expected {examples})").format(
                url=shown, kind=parsed.drivername, examples=URL_EXAMPLES),
            exit_code=2,  # a configuration error (--db, database_url)
        ) from None
    except ImportError as err:
        raise LedgerError(
            _("database URL {url}: its driver is not installed ({error}); for PostgreSQL install "
              "costctl[postgres] and use postgresql+psycopg://").format(url=shown, error=err),
            exit_code=2,
        ) from None
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    event.listen(engine, "before_cursor_execute", _escape_parameters, retval=True)
    return engine


def _encodes(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates: ``surrogateescape``'d bytes)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(value: Any) -> Any:
    """A statement parameter the driver can encode: text holding a command argument or a path
    whose bytes are not UTF-8 (lone surrogates) gets them as ``\\xff`` escapes
    (:func:`costctl.validation.shown_path`); anything else as it is."""
    if isinstance(value, str) and not _encodes(value):
        return shown_path(value)
    return value


def _escape_parameters(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
                       executemany: bool) -> tuple[str, Any]:
    """The engine's ``before_cursor_execute`` hook: every text the ledger stores (argv, paths,
    hosts, messages) goes through :func:`_escaped`, so no write fails on bytes that are not
    UTF-8 — the one place for all tables."""
    def one(params: Any) -> Any:
        if isinstance(params, dict):
            if all(_encodes(v) for v in params.values() if isinstance(v, str)):
                return params
            return {k: _escaped(v) for k, v in params.items()}
        if isinstance(params, (list, tuple)):
            if all(_encodes(v) for v in params if isinstance(v, str)):
                return params
            return type(params)(_escaped(v) for v in params)
        return params

    if executemany and isinstance(parameters, (list, tuple)):
        return statement, type(parameters)(one(p) for p in parameters)
    return statement, one(parameters)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself
        cur = dbapi_connection.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.execute("PRAGMA journal_mode = WAL")
            # WAL's recommended durability (sqlite.org/pragma.html#pragma_synchronous): a commit
            # survives any crash of costctl (kill -9 included) and the file is never corrupted;
            # only a power loss or an OS crash may roll back the last commits, which FULL would
            # keep at the price of an fsync per commit (a watch commits every few seconds).
            cur.execute("PRAGMA synchronous = NORMAL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        immediate = conn.get_execution_options().get("immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def dialect_name(reader: Reader) -> str:
    """The dialect name (``sqlite``, ``postgresql``) of a connection's or a session's database."""
    if isinstance(reader, sa.Connection):
        return reader.dialect.name
    return reader.get_bind().dialect.name


@contextmanager
def translate_errors(doing: str, url: URL | str) -> Iterator[None]:
    """Turn SQLAlchemy/driver errors raised inside the block into one :class:`LedgerError` line:
    ``cannot <doing> (<url, redacted>): <first line of the driver's message>``.

    ``doing`` is a verb phrase already in the shown language (``_("read the ledger")``): the
    translated sentence places it (``cannot {doing} ({url}): {error}``)."""
    try:
        yield
    except exc.SQLAlchemyError as err:
        raise LedgerError(_("cannot {doing} ({url}): {error}").format(
            doing=doing, url=redact(url), error=first_line(err))) from err


__all__ = ["MissingLedgerError", "Reader", "configured_url", "dialect_name", "make_engine", "parse_url", "redact", "first_line", "sqlite_file", "translate_errors"]
