"""Suite-wide fixtures: isolation from the user's data, and the ledger databases.

Isolation (autouse, every test): the suite never reads or writes a user's costctl data,
whatever is exported. At start-up every ``COSTCTL_*`` variable except the suite's own
(:data:`SUITE_ENV`) is removed from the environment, and so are the providers' credential
variables; each test then gets its own platform directories (``XDG_DATA_HOME``,
``XDG_STATE_HOME``, ``XDG_CONFIG_HOME``, ``XDG_RUNTIME_DIR`` under its ``tmp_path``), so the
default data dir, the default SQLite ledger, the simulated provider's state, the crash logs and
the watches' control sockets (``costctl snooze``) and the Jupyter runtime dir
(``JUPYTER_*`` variables removed) all live in a temporary directory. A ``costctl.toml`` in the directory pytest runs from is the user's config: tests
then read an empty config file instead. tests/test_isolation.py proves it with a sentinel ledger
on SQLite and on PostgreSQL.
"""

import os as _os
import secrets as _secrets
from pathlib import Path as _Path

import pytest as _pytest
import sqlalchemy as _sa

# --- isolation from the user's data -------------------------------------------------------

#: The suite's own variables, kept: where the test PostgreSQL server and the corpus are.
SUITE_ENV = frozenset({"COSTCTL_TEST_POSTGRES_URL", "COSTCTL_CORPUS"})


def _provider_secret_env() -> frozenset[str]:
    """Every credential variable an installed adapter declares (``Provider.credential_env``)."""
    from costctl_providers.registry import available_providers, credential_env

    return frozenset(var for name in available_providers() for var in credential_env(name))


#: Provider credentials a user may have exported (the adapters' own declarations).
PROVIDER_SECRET_ENV = _provider_secret_env()
#: Where a user's Jupyter servers are found (and their token): the per-test XDG_DATA_HOME holds the
#: runtime dir instead (costctl.telemetry.jupyter.runtime_dir).
JUPYTER_ENV = ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_TOKEN", "JUPYTER_PLATFORM_DIRS")
#: What was removed at start-up (names only), for the report header.
REMOVED_ENV: list[str] = []


def _strip_user_environment() -> None:
    for key in list(_os.environ):
        if (key.upper().startswith("COSTCTL_") and key.upper() not in SUITE_ENV) or key in PROVIDER_SECRET_ENV:
            REMOVED_ENV.append(key)
            del _os.environ[key]


_strip_user_environment()  # at import, before any test module reads the environment

#: The locale variables costctl.i18n reads (gettext's order) besides ``[ui] language``.
LOCALE_ENV = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def _english_messages() -> None:
    """The suite runs in English whatever the user's shell says (tests assert English messages;
    the i18n tests choose their language themselves: ``costctl.i18n.set_language``, or ``LANG``
    in a child's own environment). Under a shell that would choose another language, the
    locale variables are removed and ``LANG=C.UTF-8`` is set, before costctl reads them."""
    from costctl.i18n import choose_language

    if choose_language(None, _os.environ) == "en":
        return
    for var in LOCALE_ENV:
        if _os.environ.pop(var, None) is not None:
            REMOVED_ENV.append(var)
    _os.environ["LANG"] = "C.UTF-8"


_english_messages()

# --- Hypothesis ----------------------------------------------------------------------------
# Property tests run derandomized (the same examples on every run: a failure reproduces, CI never
# flakes), with no deadline (a loaded 2-core machine is slow, not wrong) and a fixed example count;
# a test that is costly per example asks for fewer with @settings(max_examples=N), inheriting the
# rest. Profiles: "ci" (selected when CI=true), "dev" (the default elsewhere: the same examples),
# and "explore" (HYPOTHESIS_PROFILE=explore: random and many, to look for new cases by hand).
from hypothesis import HealthCheck as _HealthCheck
from hypothesis import settings as _hypothesis_settings

#: Examples per property test in the "ci" and "dev" profiles (unless the test asks for fewer).
HYPOTHESIS_EXAMPLES = 100
_hypothesis_settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=HYPOTHESIS_EXAMPLES, database=None, print_blob=True,
    suppress_health_check=[_HealthCheck.too_slow])
_hypothesis_settings.register_profile("dev", _hypothesis_settings.get_profile("ci"))
_hypothesis_settings.register_profile(
    "explore", derandomize=False, deadline=None, max_examples=2_000, database=None, print_blob=True,
    suppress_health_check=[_HealthCheck.too_slow])
_hypothesis_settings.load_profile(
    _os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _os.environ.get("CI") == "true" else "dev"))
#: A costctl.toml where pytest runs, or in the checkout (where the CLI children run), is the
#: user's own config: while one exists, every test reads an empty config file instead.
_USER_CONFIGS = [p for p in dict.fromkeys((_Path.cwd() / "costctl.toml",
                                           _Path(__file__).resolve().parents[1] / "costctl.toml")) if p.is_file()]


def pytest_report_header(config):
    lines = []
    if REMOVED_ENV:
        lines.append("costctl: ignoring the exported " + ", ".join(sorted(REMOVED_ENV))
                     + " (tests never touch a user's data)")
    for path in _USER_CONFIGS:
        lines.append(f"costctl: ignoring {path} (tests read an empty config instead)")
    from helpers import CORPUS

    if not CORPUS.is_dir():
        lines.append(f"costctl: the corpus of real logs is not at {CORPUS}: its tests skip "
                     "(set COSTCTL_CORPUS=DIR; under CI=true they fail)")
    return lines


@_pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Per test: platform dirs in a fresh temporary directory; no user COSTCTL_* or credentials."""
    _strip_user_environment()  # a test that exported something never leaks it into the next
    base = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"),
                     ("XDG_RUNTIME_DIR", "run")):
        (base / sub).mkdir(mode=0o700)
        monkeypatch.setenv(var, str(base / sub))
    for var in JUPYTER_ENV:  # the Jupyter runtime dir (a watch looks for servers there) is the test's own
        monkeypatch.delenv(var, raising=False)
    if _USER_CONFIGS:
        empty = base / "costctl.toml"
        empty.write_text("")
        monkeypatch.setenv("COSTCTL_CONFIG", str(empty))
    yield base


# --- ledger database fixtures -------------------------------------------------------------
# `db_url` runs a test on a real SQLite file and on a real PostgreSQL server. The server comes
# from $COSTCTL_TEST_POSTGRES_URL (default below); its database is created when missing. Each
# pytest session works in its own schema (search_path in the URL), so concurrent test runs
# against one server do not collide, and every test starts with that schema dropped and
# re-created (no tables, no alembic_version). Unreachable server: skip with the reason, or
# fail when CI=true.

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
