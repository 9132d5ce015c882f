"""A ledger created at head without Alembic (costctl.ledger.migrate.create_at_head) has exactly
the schema the migrations build, on SQLite and PostgreSQL; it is used only for a database with
no tables at all, and concurrent openers of one fresh database queue."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import sqlalchemy as sa

from costctl.ledger import Ledger, migrate
from costctl.ledger.engine import make_engine


def schema_of(engine: sa.Engine) -> dict[str, Any]:
    """Every table's columns (name, type as the dialect writes it, nullability, server default),
    primary key, foreign keys, indexes, unique and check constraints, as reflected; plus the
    recorded revisions. Order-free where the order has no meaning (constraints, indexes)."""
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        insp = sa.inspect(conn)
        for name in sorted(insp.get_table_names()):
            pk = insp.get_pk_constraint(name)
            out[name] = {
                "columns": [(c["name"], str(c["type"].compile(dialect=conn.dialect)), c["nullable"],
                             str(c.get("default")) if c.get("default") is not None else None)
                            for c in insp.get_columns(name)],
                "pk": (pk.get("name"), tuple(pk["constrained_columns"])),
                "fks": sorted((fk.get("name"), tuple(fk["constrained_columns"]), fk["referred_table"],
                               tuple(fk["referred_columns"])) for fk in insp.get_foreign_keys(name)),
                "indexes": sorted((ix["name"], tuple(ix["column_names"]), bool(ix["unique"]))
                                  for ix in insp.get_indexes(name)),
                "uniques": sorted((u.get("name"), tuple(u["column_names"])) for u in insp.get_unique_constraints(name)),
                "checks": sorted((ck.get("name"), " ".join(ck["sqltext"].split())) for ck in insp.get_check_constraints(name)),
            }
        out["revisions"] = sorted(r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version"))
    return out


def test_a_fresh_ledger_created_at_head_equals_the_migrated_one(db_url):
    engine = make_engine(db_url)
    try:
        assert migrate.create_at_head(engine) is True
        created = schema_of(engine)
        assert created["revisions"] == [migrate.head_revision()]
        # Alembic takes a created ledger down (its downgrades run on it) and builds it up again.
        migrate.downgrade(engine, "base")
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE alembic_version")
        migrate.upgrade(engine)
        migrated = schema_of(engine)
    finally:
        engine.dispose()
    assert set(created) == set(migrated)
    for table in created:
        assert created[table] == migrated[table], table


def test_a_database_with_any_table_is_left_to_the_migrations(db_url):
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
        assert migrate.create_at_head(engine) is False
        assert sa.inspect(engine).get_table_names() == ["notes"]  # nothing created
        with Ledger.open(db_url) as ledger:  # the migrations build the ledger beside it
            assert ledger.revision() == migrate.head_revision()
        assert "notes" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_ledger_open_creates_a_fresh_ledger_without_alembic(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code = ("import sys\nfrom costctl.ledger import Ledger\n"
            f"ledger = Ledger.open({url!r}, isolated_migration=True)\n"
            "print(ledger.revision())\nledger.close()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako', 'costctl_alembic')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [migrate.head_revision(), "[]"]


def test_two_processes_opening_one_fresh_ledger_queue(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code = f"from costctl.ledger import Ledger\nLedger.open({url!r}).close()"
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")] == [
                migrate.head_revision()]
    finally:
        engine.dispose()
