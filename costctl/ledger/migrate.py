"""Alembic migrations, configured programmatically (no alembic.ini needed).

The migration scripts live in the repository's ``alembic/`` folder, installed as the
package ``costctl_alembic`` (never as ``alembic``, which would shadow the Alembic library).
Each command runs on one connection inside one transaction that costctl opens and commits:
on SQLite that transaction starts with ``BEGIN IMMEDIATE`` and on PostgreSQL ``env.py`` takes
an advisory lock, so two processes migrating the same database at once run one after the
other.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

if TYPE_CHECKING:  # Alembic (and Mako under it) is imported by the functions that use it
    from alembic.config import Config

from ..errors import LedgerError
from ..i18n import _
from .engine import redact, translate_errors

MIGRATIONS_PACKAGE = "costctl_alembic"

#: Arbitrary 64-bit key of the advisory lock that serialises migrations on PostgreSQL (taken by
#: ``env.py`` and by :func:`create_at_head`).
PG_MIGRATION_LOCK_KEY = 0x636F737463746C  # "costctl"

# Alembic's command API keeps its context in module globals: one command at a time per process.
_alembic_lock = threading.RLock()


def script_location() -> str:
    """Directory of the installed migration scripts (the one holding ``env.py``).

    Raises:
        LedgerError: the ``costctl_alembic`` package is not installed.
    """
    spec = importlib.util.find_spec(MIGRATIONS_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "env.py").is_file():
            return str(location)
    raise LedgerError(_("costctl's migration scripts ({package}) are not installed; reinstall costctl").format(
        package=MIGRATIONS_PACKAGE))


def alembic_config(engine: Engine | None = None) -> Config:
    """An Alembic :class:`Config` pointing at costctl's scripts.

    ``sqlalchemy.url`` is set from ``engine`` (password included: env.py may need to
    connect when no connection is passed in ``config.attributes["connection"]``).
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    if engine is not None:
        url = engine.url.render_as_string(hide_password=False)
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


_REVISION_RE = re.compile(r"""^revision\s*(?::[^=]*)?=\s*["']([^"']+)["']""", re.MULTILINE)
_DOWN_RE = re.compile(r"""^down_revision\s*(?::[^=]*)?=\s*(None|["']([^"']*)["'])""", re.MULTILINE)


def script_revisions(versions: Path | None = None) -> dict[str, str | None]:
    """``{revision: down_revision}`` of every migration script, read from the version files'
    ``revision = "..."`` and ``down_revision = "..."`` lines (no Alembic import: opening a
    ledger that is already at the newest schema loads neither Alembic nor Mako).

    Args:
        versions: the ``versions`` folder (default: the installed ``costctl_alembic`` package's).

    Raises:
        LedgerError: the package is missing, or a script names no revision.
    """
    folder = Path(script_location()) / "versions" if versions is None else Path(versions)
    out: dict[str, str | None] = {}
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        rev, down = _REVISION_RE.search(text), _DOWN_RE.search(text)
        if rev is None or down is None:
            raise LedgerError(_("migration script {path} names no revision/down_revision").format(path=path))
        out[rev.group(1)] = None if down.group(1) == "None" else down.group(2)
    return out


def head_revision(versions: Path | None = None) -> str:
    """The newest revision id among costctl's migration scripts: the one no other script
    follows (read by :func:`script_revisions`, without Alembic).

    Raises:
        LedgerError: no scripts, or not exactly one head (a branched history).
    """
    revisions = script_revisions(versions)
    heads = set(revisions) - {down for down in revisions.values() if down is not None}
    if len(heads) != 1:
        if heads:
            message = _("costctl's migrations have {count} heads ({heads}); expected exactly one")
        else:
            message = _("costctl's migrations have {count} heads (none); expected exactly one")
        raise LedgerError(message.format(count=len(heads), heads=", ".join(sorted(heads))))
    return heads.pop()


def _run(engine: Engine, doing: str, fn: str, revision: str) -> None:
    """Run an Alembic command in one transaction.

    On SQLite, foreign-key enforcement is off for the migration: batch mode rebuilds a table by
    copy, drop and rename, which a referencing table would otherwise block (the procedure
    Alembic's batch documentation and SQLite's ALTER TABLE page give). ``PRAGMA foreign_keys``
    only takes effect outside a transaction, so it is set on the connection before BEGIN, and
    ``PRAGMA foreign_key_check`` must come back empty before the transaction commits.
    """
    from alembic import command
    from alembic.util import CommandError

    cfg = alembic_config(engine)
    sqlite = engine.dialect.name == "sqlite"
    with _alembic_lock, translate_errors(doing, engine.url):
        with engine.execution_options(immediate=True).connect() as connection:
            raw = connection.connection.driver_connection
            if sqlite:
                raw.execute("PRAGMA foreign_keys=OFF")
            try:
                with connection.begin():
                    cfg.attributes["connection"] = connection
                    try:
                        getattr(command, fn)(cfg, revision)
                    except CommandError as err:
                        raise LedgerError(_("cannot {doing} ({url}): {error}").format(
                            doing=doing, url=redact(engine.url), error=err)) from None
                    if sqlite:
                        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                        if broken:
                            raise LedgerError(
                                _("cannot {doing} ({url}): {count} rows would break foreign keys; nothing was "
                                  "changed").format(doing=doing, url=redact(engine.url), count=len(broken))
                            )
            finally:
                if sqlite:
                    raw.execute("PRAGMA foreign_keys=ON")


def upgrade(engine: Engine, revision: str = "head", *, isolated: bool = False) -> None:
    """Migrate the database up to ``revision`` (default: the newest).

    A database already at the newest revision is left alone without taking a write lock.

    Args:
        isolated: run the migration in a short-lived child process (this interpreter,
            :func:`_upgrade_child`), so that Alembic, Mako and the migration scripts are never
            imported into this one (a long-running watch keeps ~9 MB less resident). An
            in-memory SQLite database is always migrated here (a child could not see it).

    Raises:
        LedgerError: unknown revision, unreachable database, or a failed migration — one line.
    """
    if revision == "head" and current_revision(engine) == head_revision():
        return
    doing = _("upgrade the database to {revision}").format(revision=revision)
    in_memory = engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:")
    if not isolated or in_memory:
        _run(engine, doing, "upgrade", revision)
        return
    import subprocess
    import sys

    from ..i18n import language

    # The URL (password included) goes through stdin, never the command line (visible in ps); the
    # language too, so that the child's one line is in the language this process shows.
    url = engine.url.render_as_string(hide_password=False)
    try:
        proc = subprocess.run([sys.executable, "-c", "from costctl.ledger.migrate import _upgrade_child; "
                               "_upgrade_child()"], input=f"{url}\n{revision}\n{language()}\n",
                              capture_output=True, text=True, timeout=MIGRATE_CHILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LedgerError(_("cannot {doing} ({url}): the migration process failed: {error}").format(
            doing=doing, url=redact(engine.url), error=exc)) from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        detail = lines[-1] if lines else _("exit status {status}").format(status=proc.returncode)
        if proc.returncode == _CHILD_LEDGER_ERROR:
            raise LedgerError(detail)
        raise LedgerError(_("cannot {doing} ({url}): the migration process failed: {error}").format(
            doing=doing, url=redact(engine.url), error=detail))


#: Seconds a migration child process may take (a big ledger's first migration included).
MIGRATE_CHILD_TIMEOUT_S = 3600.0
_CHILD_LEDGER_ERROR = 3  # the child's exit status for a LedgerError (its message: stderr's last line)


def _upgrade_child() -> None:
    """The child process of :func:`upgrade` (``isolated=True``): reads the URL, the revision and
    the language of messages (:func:`costctl.i18n.language`) from stdin (one line each),
    migrates, exits 0; a :class:`LedgerError` prints its one line to stderr and exits
    :data:`_CHILD_LEDGER_ERROR`."""
    import sys

    from ..i18n import set_language
    from .engine import make_engine, parse_url

    url, revision, *rest = sys.stdin.read().splitlines()[:3]
    set_language(rest[0] if rest and rest[0] else None)
    engine = make_engine(parse_url(url), create=True)
    try:
        _run(engine, _("upgrade the database to {revision}").format(revision=revision), "upgrade", revision)
    except LedgerError as exc:
        print(exc.message if hasattr(exc, "message") else str(exc), file=sys.stderr)
        sys.exit(_CHILD_LEDGER_ERROR)
    finally:
        engine.dispose()


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database down to ``revision`` (``base`` drops every table).

    Raises:
        LedgerError: unknown revision, unreachable database, or a failed migration — one line.
    """
    _run(engine, _("downgrade the database to {revision}").format(revision=revision), "downgrade", revision)


def row_counts(engine: Engine, table_names: tuple[str, ...] = ("runs", "charges")) -> dict[str, int]:
    """Rows in each of ``table_names`` that exists (missing tables are left out), e.g.
    ``{"runs": 3, "charges": 120}``: what a downgrade to ``base`` would delete.

    Raises:
        LedgerError: the database cannot be read.
    """
    with translate_errors(_("count the ledger's rows"), engine.url):
        with engine.connect() as connection:
            present = set(sa.inspect(connection).get_table_names())
            return {
                name: connection.execute(sa.select(sa.func.count()).select_from(sa.table(name))).scalar_one()
                for name in table_names if name in present
            }


def _version_table() -> sa.Table:
    """Alembic's ``alembic_version`` table, as Alembic itself defines it (``version_num``
    VARCHAR(32) NOT NULL, primary key ``alembic_version_pkc``)."""
    return sa.Table("alembic_version", sa.MetaData(),
                    sa.Column("version_num", sa.String(32), nullable=False),
                    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))


def create_at_head(engine: Engine) -> bool:
    """Create costctl's schema at the newest revision in a database that has no tables at all:
    the tables of :data:`costctl.ledger.tables.metadata` (what the migrations build, checked
    by the tests) and the ``alembic_version`` row of the head revision, in one transaction,
    without importing Alembic or running the migration scripts (a fresh ledger costs a few
    CREATE statements, not six migrations in a child process).

    Two processes creating the same database at once queue as migrations do (``BEGIN
    IMMEDIATE`` on SQLite, the migration advisory lock on PostgreSQL); the second finds the
    tables there and does nothing.

    Returns:
        True when it created the schema; False, with nothing changed, when the database has
        any table (then :func:`upgrade` is the way: its migrations keep the data).

    Raises:
        LedgerError: the database cannot be reached or written — one line.
    """
    from .tables import metadata

    head = head_revision()
    with _alembic_lock, translate_errors(_("create the ledger's tables"), engine.url):
        with engine.execution_options(immediate=True).connect() as connection, connection.begin():
            if connection.dialect.name == "postgresql":
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK_KEY})")
            if sa.inspect(connection).get_table_names():
                return False
            metadata.create_all(connection)
            version = _version_table()
            version.create(connection)
            connection.execute(version.insert().values(version_num=head))
    return True


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (its ``alembic_version`` table, read with SQLAlchemy:
    no Alembic import), or None for a database without costctl's tables.

    Raises:
        LedgerError: the database cannot be reached, or it records several revisions.
    """
    with translate_errors(_("read the database revision"), engine.url):
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("alembic_version"):
                return None
            rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
    if len(rows) > 1:
        raise LedgerError(_("the database records {count} schema revisions; expected one").format(count=len(rows)))
    return rows[0][0] if rows else None


__all__ = ["PG_MIGRATION_LOCK_KEY", "create_at_head", "script_revisions", "script_location", "alembic_config", "head_revision", "upgrade", "downgrade", "current_revision", "row_counts"]
