# --- ledger database fixtures -------------------------------------------------------------
# `db_url` runs a test on a real SQLite file and on a real PostgreSQL server. The server comes
# from $COSTCTL_TEST_POSTGRES_URL (default below); its database is created when missing. Each
# pytest session works in its own schema (search_path in the URL), so concurrent test runs
# against one server do not collide, and every test starts with that schema dropped and
# re-created (no tables, no alembic_version). Unreachable server: skip with the reason, or
# fail when CI=true.
import os as _os
import secrets as _secrets

import pytest as _pytest
import sqlalchemy as _sa

POSTGRES_URL_ENV = "COSTCTL_TEST_POSTGRES_URL"
DEFAULT_TEST_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/costctl_test"


def _postgres_unavailable(reason: str) -> None:
    if _os.environ.get("CI") == "true":
        _pytest.fail(f"{reason} (CI=true: the PostgreSQL leg must run)", pytrace=False)
    _pytest.skip(f"{reason}; set {POSTGRES_URL_ENV} or start PostgreSQL to run this leg")


@_pytest.fixture(scope="session")
def postgres_base_url() -> _sa.URL:
    """URL of the test database on the PostgreSQL server (created if missing)."""
    url = _sa.make_url(_os.environ.get(POSTGRES_URL_ENV) or DEFAULT_TEST_POSTGRES_URL)
    shown = url.render_as_string(hide_password=True)
    admin = _sa.create_engine(
        url.set(database="postgres"), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    try:
        with admin.connect() as conn:
            found = conn.scalar(_sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": url.database})
            if not found:
                try:
                    conn.exec_driver_sql(f'CREATE DATABASE "{url.database}"')
                except _sa.exc.ProgrammingError:
                    pass  # created meanwhile by a concurrent test run
    except (_sa.exc.OperationalError, _sa.exc.InterfaceError) as exc:
        first = next((ln for ln in str(exc.orig).splitlines() if ln.strip()), type(exc.orig).__name__)
        _postgres_unavailable(f"PostgreSQL at {shown} is unreachable: {first.strip()}")
    except ImportError as exc:
        _postgres_unavailable(f"the PostgreSQL driver is not installed ({exc})")
    finally:
        admin.dispose()
    return url


@_pytest.fixture(scope="session")
def postgres_schema(postgres_base_url: _sa.URL):
    """``(url with search_path set to a private schema, schema name, autocommit admin engine)``."""
    schema = f"costctl_test_{_os.getpid()}_{_secrets.token_hex(4)}"
    url = postgres_base_url.update_query_dict({"options": f"-csearch_path={schema}"})
    admin = _sa.create_engine(postgres_base_url, isolation_level="AUTOCOMMIT")
    try:
        yield url, schema, admin
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def reset_postgres_schema(admin: _sa.Engine, schema: str) -> None:
    """Drop everything in ``schema`` (tables, alembic_version) by re-creating it."""
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')


@_pytest.fixture(params=["sqlite", _pytest.param("postgres", marks=_pytest.mark.postgres)])
def db_url(request: _pytest.FixtureRequest, tmp_path) -> str:
    """A database URL with no tables: a fresh SQLite file, or an empty PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger' / 'costctl.db'}"
    url, schema, admin = request.getfixturevalue("postgres_schema")
    reset_postgres_schema(admin, schema)
    return url.render_as_string(hide_password=False)


@_pytest.fixture
def ledger(db_url: str):
    """An open, migrated :class:`costctl.ledger.Ledger` on ``db_url``; closed after the test."""
    from costctl.ledger import Ledger

    opened = Ledger.open(db_url)
    try:
        yield opened
    finally:
        opened.close()
