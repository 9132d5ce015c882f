"""Fast start: each command imports only what it uses (issue 13, item 5).

Each case runs the CLI's ``main`` in a fresh interpreter (a child process: this process has
imported everything already) and reads its ``sys.modules`` afterwards. No timing here: the
figures are benchmarks/bench_start.py's. On a failure the message names, for each module that
should not be there, the costctl lines that imported it first.
"""

from __future__ import annotations

import json

import pytest
import subprocess
import sys
from pathlib import Path


from helpers import REPO, costctl_env

#: The heavy stacks no start-up may load unless its command uses them.
DATABASE = ("sqlalchemy", "alembic", "mako")
MIGRATIONS = ("alembic", "mako")
NETWORK_AND_PROCESSES = ("requests", "psutil", "apscheduler", "costctl_providers")
#: The ORM stack: the bill reads with SQLAlchemy Core only (costctl.ledger.tables, a Connection).
ORM = ("sqlalchemy.orm", "costctl.ledger.schema", "costctl.ledger.db", "costctl.ledger.accrual")
COSTCTL_STACKS = ("costctl.config", "costctl.ledger", "costctl.watch", "costctl.replay", "costctl.cloud")

_CHILD = r"""
import contextlib, io, json, sys, traceback

watched = set(sys.argv[1].split(","))
first = {}


class Spy:
    '''Records, for each watched module, the costctl lines on the stack when it is first imported.'''

    def find_spec(self, name, path=None, target=None):
        key = next((w for w in watched if name == w or name.startswith(w + ".")), None)
        if key is not None and key not in first:
            stack = traceback.extract_stack()[:-1]
            first[key] = [f"{f.filename.rsplit('/costctl/', 1)[-1]}:{f.lineno} {f.line}" for f in stack
                          if "/costctl/" in f.filename][-4:]
        return None


sys.meta_path.insert(0, Spy())
from costctl.cli.main import main

out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(sys.argv[2:])
loaded = sorted(w for w in watched if w in sys.modules)
print(json.dumps({"code": code, "loaded": loaded, "first": first, "out": out.getvalue(), "err": err.getvalue()}))
"""


def _start(tmp_path: Path, *argv: str, watched: tuple[str, ...]) -> dict:
    """Run ``costctl ARGV`` through ``main`` in a fresh interpreter, data dir ``tmp_path``;
    returns its exit code, output and which of ``watched`` it had imported."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, ",".join(watched), *argv], cwd=REPO,
                          env=costctl_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _none_of(result: dict, modules: tuple[str, ...]) -> None:
    unwanted = [m for m in result["loaded"] if m in modules]
    assert not unwanted, "imported: " + "; ".join(f"{m} via {result['first'].get(m)}" for m in unwanted)


def test_help_loads_no_database_network_or_command_stack(tmp_path):
    result = _start(tmp_path, "--help", watched=DATABASE + NETWORK_AND_PROCESSES + COSTCTL_STACKS)
    assert result["code"] == 0 and "bill" in result["out"] and "gpus" in result["out"]
    _none_of(result, DATABASE + NETWORK_AND_PROCESSES + COSTCTL_STACKS)


def test_gpus_loads_the_catalog_and_no_database_or_providers(tmp_path):
    watched = DATABASE + NETWORK_AND_PROCESSES + COSTCTL_STACKS + ("costctl.catalog",)
    result = _start(tmp_path, "gpus", "--format", "json", watched=watched)
    assert result["code"] == 0 and json.loads(result["out"])
    assert "costctl.catalog" in result["loaded"]
    _none_of(result, DATABASE + NETWORK_AND_PROCESSES + ("costctl.ledger", "costctl.watch", "costctl.replay"))


def test_bill_before_any_ledger_loads_sqlalchemy_but_no_migrations(tmp_path):
    watched = DATABASE + NETWORK_AND_PROCESSES + ("costctl.watch", "costctl.replay")
    result = _start(tmp_path, "bill", watched=watched)
    assert result["code"] == 0, result["err"]
    assert "sqlalchemy" in result["loaded"]  # it did look for the ledger
    _none_of(result, MIGRATIONS + NETWORK_AND_PROCESSES + ("costctl.watch", "costctl.replay"))


def test_bill_on_an_empty_ledger_at_head_runs_no_migration_code(tmp_path):
    from costctl.ledger import Ledger

    Ledger.open(f"sqlite:///{tmp_path / 'costctl.db'}").close()  # the default ledger, migrated to head
    watched = DATABASE + NETWORK_AND_PROCESSES + ("costctl.watch", "costctl.replay", "rich") + ORM
    result = _start(tmp_path, "bill", "--format", "json", watched=watched)
    assert result["code"] == 0 and json.loads(result["out"]), result["err"]
    # Nor rich (nothing is rendered as a table), nor the ORM (the bill reads with Core).
    _none_of(result, MIGRATIONS + NETWORK_AND_PROCESSES + ("costctl.watch", "costctl.replay", "rich") + ORM)


@pytest.mark.parametrize("argv", [("bill",), ("bill", "--format", "json", "--by", "gpu"),
                                  ("bill", "--by", "day", "--since", "2026-01-01T00:05"),
                                  ("bill", "--by", "instance", "--format", "csv")])
def test_bill_of_recorded_runs_reads_without_the_orm(tmp_path, argv):
    """A bill of a ledger with a closed run (charged across a 15-minute edge) loads neither
    sqlalchemy.orm nor the ORM classes, and still shows the run and its spend. (An open run
    loads the watch stack, which asks whether its watch is gone: not a start-up case.)"""
    from datetime import datetime, timedelta, timezone
    from decimal import Decimal

    from costctl.ledger import Ledger

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with Ledger.open(f"sqlite:///{tmp_path / 'costctl.db'}") as ledger:
        pk = ledger.ensure_instance("sim", "box-1", gpu="A10", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("3.6"), currency="USD")
        done = ledger.start_run(pk, started_at=t0, command=["train"], log_path=None, host="elsewhere")
        ledger.accrue(done, t0 + timedelta(seconds=1000), Decimal("3.6"), "USD")
        ledger.finish_run(done, ended_at=t0 + timedelta(seconds=1000), exit_code=0, status="succeeded")
    result = _start(tmp_path, *argv, watched=ORM + MIGRATIONS)
    assert result["code"] == 0, result["err"]
    _none_of(result, ORM + MIGRATIONS)
    if argv == ("bill",):
        assert done[:8] in result["out"] and "1.00" in result["out"]
    elif "json" in argv:
        assert json.loads(result["out"])["totals"] == {"USD": "1.000000"}
    elif "csv" in argv:
        assert "box-1" in result["out"] and "1.000000" in result["out"]
    else:  # 00:05 cuts the first bucket: 1000 s - 300 s charged after it
        assert "0.70" in result["out"]


def test_a_watch_on_a_fresh_ledger_migrates_it_in_a_child_and_keeps_no_alembic(tmp_path):
    """The first watch creates and migrates the ledger; Alembic and Mako run in a short-lived
    child process (costctl.ledger.migrate.upgrade(isolated=True)), never in the watch."""
    import sqlalchemy as sa

    result = _start(tmp_path, "watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--quiet", "--",
                    sys.executable, "-c", "print('loss: 1.0')", watched=MIGRATIONS + ("costctl_alembic",))
    assert result["code"] == 0, result["err"]
    _none_of(result, MIGRATIONS + ("costctl_alembic",))
    from costctl.ledger.migrate import head_revision

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")
    with engine.connect() as conn:  # migrated to head, and the run recorded
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == head_revision()
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar_one() == 1
    engine.dispose()


def test_an_isolated_migration_reports_a_failure_in_one_line(tmp_path):
    import sqlalchemy as sa

    from costctl.errors import LedgerError
    from costctl.ledger import migrate

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(LedgerError) as info:
        migrate.upgrade(engine, "nosuchrevision", isolated=True)
    assert "nosuchrevision" in info.value.message and "\n" not in info.value.message
    engine.dispose()
