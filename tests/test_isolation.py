"""The suite never reads or writes a user's costctl data, whatever the user exported.

A user who follows the README exports ``COSTCTL_DATA_DIR`` / ``COSTCTL_DATABASE_URL`` /
``COSTCTL_CONFIG`` (a team's PostgreSQL ledger, say) and then runs ``pytest``. These tests set
up such a user — a real ledger with a run in it — export their variables, run tests that write
ledgers (in-process watches, CLI children, bills) in a child pytest, and check that the user's
ledger is byte-for-byte (SQLite) or row-for-row (PostgreSQL) what it was. .ci/run does the same
for the whole suite with a sentinel SQLite ledger.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import PROVIDER_SECRET_ENV, SUITE_ENV
from helpers import REPO
from sentinel_ledger import make as make_user_data
from sentinel_ledger import populate as populate_user_ledger

#: Tests that write ledgers, data dirs and sim state in every way the suite does: an in-process
#: watch built from a TOML config (the kind that wrote 23 runs into a user's ledger), the CLI in
#: child processes, the bill, and provider state. All deterministic (no real-time bounds), so a
#: loaded machine cannot fail them.
WRITERS = [
    "tests/test_watch_inprocess.py",
    "tests/test_watch_ledger.py::test_run_is_charged_for_its_duration_and_billed",
    "tests/test_bill_cli.py::test_bill_json_by_run",
    "tests/test_bill_cli.py::test_console_script_uses_the_data_dir_database",
    "tests/test_watch_provider.py::test_idle_policy_stops_the_autodl_instance_and_charges_its_reported_price",
    "tests/test_cli_instances.py::test_stop_dry_run_changes_nothing_then_stop_is_idempotent",
]


def _run_writers(env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-m", "", *WRITERS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_each_test_starts_with_no_user_environment_and_temporary_dirs(tmp_path):
    from costctl import paths

    leaked = [k for k in os.environ if k.upper().startswith("COSTCTL_") and k.upper() not in SUITE_ENV]
    if os.environ.get("COSTCTL_CONFIG"):  # the shield: only while a costctl.toml lies where tests run
        assert Path(os.environ["COSTCTL_CONFIG"]).read_text() == "" and leaked == ["COSTCTL_CONFIG"]
    else:
        assert leaked == []
    assert PROVIDER_SECRET_ENV >= {"AUTODL_TOKEN", "VAST_API_KEY", "RUNPOD_API_KEY"}
    assert not PROVIDER_SECRET_ENV & set(os.environ)
    data = paths.data_dir()
    assert Path(os.environ["XDG_DATA_HOME"]) in data.parents
    assert str(data).startswith(str(tmp_path.parents[1]))  # pytest's basetemp, not ~/.local/share
    assert paths.default_database_url().startswith(f"sqlite:///{data}")
    assert Path(os.environ["XDG_STATE_HOME"]) in paths.crash_log_dir().parents


def test_exported_sqlite_ledger_data_dir_and_config_are_left_alone(tmp_path):
    user = tmp_path / "user-data"
    make_user_data(user)
    url = f"sqlite:///{user / 'costctl.db'}"
    before = _tree(user)
    proc = _run_writers({"COSTCTL_DATA_DIR": str(user), "COSTCTL_DATABASE_URL": url,
                         "COSTCTL_CONFIG": str(user / "costctl.toml"),
                         "COSTCTL_POLICIES__IDLE__TIME_WINDOW": "off", "AUTODL_TOKEN": "users-real-token",
                         "VAST_API_KEY": "users-real-key"}, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ignoring the exported" in proc.stdout  # the report header says so
    assert _tree(user) == before


@pytest.mark.postgres
def test_exported_postgresql_ledger_keeps_its_sentinel_rows(tmp_path, postgres_base_url):
    schema = f"costctl_user_sentinel_{os.getpid()}"
    admin = sa.create_engine(postgres_base_url, isolation_level="AUTOCOMMIT")
    url = postgres_base_url.update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        shown = url.render_as_string(hide_password=False)
        populate_user_ledger(shown)

        def snapshot() -> dict[str, list[tuple]]:
            engine = sa.create_engine(url)
            try:
                meta = sa.MetaData()
                meta.reflect(engine)
                with engine.connect() as conn:
                    return {name: sorted(map(tuple, conn.execute(sa.select(table)).all()), key=repr)
                            for name, table in meta.tables.items()}
            finally:
                engine.dispose()

        before = snapshot()
        assert before["runs"] and before["charges"]
        proc = _run_writers({"COSTCTL_DATABASE_URL": shown}, tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert snapshot() == before
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def test_a_costctl_toml_where_pytest_runs_is_not_read(tmp_path):
    (tmp_path / "costctl.toml").write_text("this is = not [valid toml\n")
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--rootdir", str(REPO),
         "-c", str(REPO / "pyproject.toml"), str(REPO / "tests" / "test_bill_cli.py::test_bill_json_by_run"),
         str(REPO / "tests" / "test_bill_cli.py::test_bill_empty_ledger")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ignoring" in proc.stdout and "costctl.toml" in proc.stdout


@pytest.mark.parametrize("ci, outcome", [("", " skipped"), ("true", "1 failed")])
def test_corpus_tests_say_why_they_skip_and_fail_under_ci(tmp_path, ci, outcome):
    env = dict(os.environ, COSTCTL_CORPUS=str(tmp_path / "no-corpus"), CI=ci)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-rsf",
         "tests/test_progress_corpus.py::test_keras_nan", "-x"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    out = proc.stdout
    assert outcome in out.splitlines()[-1] and "passed" not in out.splitlines()[-1], out[-3000:]
    assert "the corpus of real logs is not at" in out  # said once, in the header
    assert "../shared/corpus beside the checkout" in out and "COSTCTL_CORPUS" in out


def test_a_costctl_toml_in_the_checkout_is_not_read_by_the_cli_children(tmp_path):
    """A user who ran `costctl init` in their checkout: the CLI children (run with cwd = the
    checkout) and in-process tests must read an empty config, never that file's ledger."""
    copy = tmp_path / "checkout"
    for part in ("costctl", "tests", "examples"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    user = tmp_path / "user-data"
    make_user_data(user)
    (copy / "costctl.toml").write_text(f'database_url = "sqlite:///{user / "costctl.db"}"\n')
    before = _tree(user)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-m", "", *WRITERS],
                          cwd=copy, env=dict(os.environ, PYTHONPATH=str(copy)), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"ignoring {copy / 'costctl.toml'}" in proc.stdout
    assert _tree(user) == before
