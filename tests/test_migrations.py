"""Alembic migrations on SQLite and PostgreSQL: upgrade, downgrade, models == migrations, CLI."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from costctl.cli.main import main
from costctl.errors import LedgerError
from costctl.ledger import Ledger, migrate
from costctl.ledger.engine import make_engine
from costctl.ledger.schema import Base

LEDGER_TABLES = {"instances", "runs", "samples", "progress", "charges", "decisions"}


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_alembic_is_the_library_and_scripts_are_costctl_alembic():
    import alembic

    assert Path(alembic.__file__).parent.name == "alembic"
    assert (Path(alembic.__file__).parent / "__init__.py").is_file()
    assert hasattr(alembic, "command"), "`import alembic` must give the Alembic library"
    spec = importlib.util.find_spec("costctl_alembic")
    assert spec is not None
    location = Path(migrate.script_location())
    assert (location / "env.py").is_file() and (location / "versions" / "0001_initial.py").is_file()
    assert not (location / "__init__.py").exists()


def test_upgrade_downgrade_upgrade(db_url):
    engine = make_engine(db_url)
    try:
        assert migrate.current_revision(engine) is None
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        assert LEDGER_TABLES <= tables(engine)
        migrate.upgrade(engine)  # at head already: a no-op
        migrate.downgrade(engine, "base")
        assert migrate.current_revision(engine) is None
        assert tables(engine) <= {"alembic_version"}
        migrate.upgrade(engine, "head")
        assert LEDGER_TABLES <= tables(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()


def test_models_match_migrations(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True, "target_metadata": Base.metadata})
            diff = compare_metadata(ctx, Base.metadata)
        assert diff == [], f"schema.py and alembic/versions differ: {diff}"
    finally:
        engine.dispose()


def test_env_py_connects_by_itself_from_the_config_url(db_url):
    """The path developers use (`alembic -c alembic.ini ...`): no connection passed in."""
    engine = make_engine(db_url)
    try:
        cfg = migrate.alembic_config(engine)
        command.upgrade(cfg, "head")
        assert LEDGER_TABLES <= tables(engine)
        command.downgrade(cfg, "base")
        assert not LEDGER_TABLES & tables(engine)
    finally:
        engine.dispose()


def test_offline_sql(db_url):
    buf = io.StringIO()
    cfg = Config(output_buffer=buf)
    cfg.set_main_option("script_location", migrate.script_location())
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.upgrade(cfg, "head", sql=True)
    sql = buf.getvalue()
    assert "CREATE TABLE charges" in sql and "CREATE TABLE alembic_version" in sql


def test_ledger_open_migrates_again_after_downgrade(db_url):
    Ledger.open(db_url).close()
    engine = make_engine(db_url)
    try:
        migrate.downgrade(engine, "base")
        with Ledger.open(db_url) as ledger:
            assert ledger.revision() == migrate.head_revision()
        with Ledger.open(db_url, migrate=False) as ledger:
            assert ledger.revision() == migrate.head_revision()
    finally:
        engine.dispose()


def test_unknown_revision_is_one_line(db_url):
    engine = make_engine(db_url)
    try:
        with pytest.raises(LedgerError) as info:
            migrate.upgrade(engine, "nope")
        assert "nope" in info.value.message and "\n" not in info.value.message
    finally:
        engine.dispose()


def test_db_cli(db_url, capsys):
    engine = make_engine(db_url)  # an existing database without tables (a SQLite file is created)
    engine.connect().close()
    engine.dispose()
    assert main(["db", "current", "--db", db_url]) == 0
    assert capsys.readouterr().out.startswith("none")
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert main(["db", "current", "--db", db_url]) == 0
    head = migrate.head_revision()
    assert capsys.readouterr().out.splitlines()[-1] == f"{head} (head)"
    assert main(["db", "downgrade", "base", "--yes", "--db", db_url]) == 0
    assert main(["db", "current", "--db", db_url]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("none")
    assert main(["db", "downgrade", "--db", db_url]) == 2  # REV is required
    assert main(["db", "upgrade", "zzz", "--db", db_url]) == 1
    err = capsys.readouterr().err
    assert "costctl: cannot upgrade the database to zzz" in err and "Traceback" not in err
