"""Trial fixes for the ledger CLI: `costctl db downgrade` asks before dropping data, and the
read-only commands (`bill`, `db current`) never create a ledger from a typo."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from costctl.cli.main import main
from costctl.ledger import Ledger, MissingLedgerError, migrate
from costctl.ledger.engine import make_engine
from helpers import SHIELD

T0 = datetime(2026, 3, 1, 14, 0, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No costctl.toml from the caller's directory, no database URL from the caller's env."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL",):
        monkeypatch.delenv(name, raising=False)


def record(url: str) -> None:
    """One instance, two runs, three charges."""
    with Ledger.open(url) as ledger:
        inst = ledger.ensure_instance("vastai", "1", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                      price_per_hour=Decimal("0.40"), currency="USD")
        for start in (0, 7200):
            run = ledger.start_run(inst, started_at=T0 + timedelta(seconds=start), command=None, log_path=None,
                                   host=None)
            ledger.accrue(run, T0 + timedelta(seconds=start + 600), Decimal("0.40"), "USD")
            if start:
                ledger.accrue(run, T0 + timedelta(seconds=start + 1200), Decimal("0.50"), "USD")


def counts(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            runs = conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one()
            charges = conn.execute(sa.text("SELECT count(*) FROM charges")).scalar_one()
        return runs, charges
    finally:
        engine.dispose()


def revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- downgrade


def test_downgrade_without_a_terminal_is_refused_and_names_what_would_be_lost(db_url, capsys):
    record(db_url)
    runs, charges = counts(db_url)
    assert (runs, charges) == (2, 3)
    code = main(["db", "downgrade", "base", "--db", db_url])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("costctl: downgrading ") and err.count("\n") == 1
    assert "2 runs and 3 charges would be lost" in err and "pass --yes" in err and "no terminal" in err
    assert revision(db_url) == migrate.head_revision() and counts(db_url) == (2, 3)  # nothing lost

    assert main(["db", "downgrade", "base", "--yes", "--db", db_url]) == 0
    assert revision(db_url) is None
    assert main(["db", "downgrade", "base", "--db", db_url]) == 0  # already at base: nothing to ask
    assert "nothing done" in capsys.readouterr().out


def test_downgrade_to_an_intermediate_revision_also_asks(db_url, capsys):
    record(db_url)
    assert main(["db", "downgrade", "0001", "--db", db_url]) == 2
    assert "drops the tables and columns added after 0001" in capsys.readouterr().err
    assert revision(db_url) == migrate.head_revision()
    assert main(["db", "downgrade", "0001", "-y", "--db", db_url]) == 0
    assert revision(db_url) == "0001" and counts(db_url) == (2, 3)


def _downgrade_on_a_terminal(tmp_path: Path, url: str, answer: bytes) -> tuple[int, str]:
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["COSTCTL_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "costctl", "db", "downgrade", "base", "--db", url],
                            cwd=tmp_path, env=env, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(slave)
    os.write(master, answer)
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    return proc.returncode, out.decode()


def test_downgrade_asks_on_a_terminal(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    record(url)
    code, out = _downgrade_on_a_terminal(tmp_path, url, b"n\n")
    assert code == 1 and "Downgrade " in out and "2 runs and 3 charges" in out and "not downgraded" in out
    assert revision(url) == migrate.head_revision() and counts(url) == (2, 3)
    code, out = _downgrade_on_a_terminal(tmp_path, url, b"y\n")
    assert code == 0 and "at revision base" in out
    assert revision(url) is None


# --------------------------------------------------------------------------- read-only: nothing created


def test_ledger_open_with_create_false_refuses_a_missing_sqlite_file(tmp_path):
    path = tmp_path / "nonexistent" / "dir" / "x.db"
    with pytest.raises(MissingLedgerError) as info:
        Ledger.open(f"sqlite:///{path}", create=False)
    assert info.value.message == f"no ledger database at {path}" and info.value.path == path
    assert info.value.exit_code == 1
    assert not (tmp_path / "nonexistent").exists()
    # The watch loop's default still creates the file and its directory.
    Ledger.open(f"sqlite:///{path}").close()
    assert path.is_file()
    with Ledger.open(f"sqlite:///{path}", create=False) as ledger:
        assert ledger.revision() == migrate.head_revision()


def test_ledger_open_create_false_works_on_an_existing_database(db_url):
    Ledger.open(db_url).close()
    with Ledger.open(db_url, create=False) as ledger:
        assert ledger.revision() == migrate.head_revision()


def test_bill_with_a_typo_in_db_creates_nothing(tmp_path, capsys):
    path = tmp_path / "nonexistent" / "dir" / "x.db"
    for fmt in ("table", "json"):
        code = main(["bill", "--db", f"sqlite:///{path}", "--format", fmt])
        out, err = capsys.readouterr()
        assert code == 1 and out == ""
        assert err == f"costctl: no ledger database at {path}\n"
    assert not (tmp_path / "nonexistent").exists()


def test_bill_with_a_missing_database_from_env_or_config_creates_nothing(tmp_path, capsys, monkeypatch):
    path = tmp_path / "typo.db"
    monkeypatch.setenv("COSTCTL_DATABASE_URL", f"sqlite:///{path}")
    assert main(["bill"]) == 1
    assert capsys.readouterr().err == f"costctl: no ledger database at {path}\n"
    monkeypatch.delenv("COSTCTL_DATABASE_URL")
    (tmp_path / "costctl.toml").write_text(f'database_url = "sqlite:///{path}"\n')
    assert main(["bill", "--by", "instance"]) == 1
    assert capsys.readouterr().err == f"costctl: no ledger database at {path}\n"
    assert not path.exists()


def test_bill_on_the_default_ledger_before_anything_was_recorded(tmp_path, capsys):
    default = tmp_path / "data" / "costctl.db"
    assert main(["bill"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Nothing recorded yet") and str(default) in out
    assert main(["bill", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: doc[k] for k in ("by", "since", "until", "rows", "totals")} == {
        "by": "run", "since": None, "until": None, "rows": [], "totals": {}}
    assert main(["bill", "--format", "csv", "--by", "day"]) == 0
    assert capsys.readouterr().out == "day,currency,runs,instances,duration_s,spend,waste_s,waste,saved_s,saved\n"
    assert not default.exists()


def test_db_current_creates_nothing(tmp_path, capsys):
    path = tmp_path / "nonexistent" / "x.db"
    assert main(["db", "current", "--db", f"sqlite:///{path}"]) == 1
    assert capsys.readouterr().err == f"costctl: no ledger database at {path}\n"
    assert not path.parent.exists()
    default = tmp_path / "data" / "costctl.db"
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.startswith(f"none (no ledger database at {default} yet")
    assert not default.exists()
    assert main(["db", "downgrade", "base", "--yes", "--db", f"sqlite:///{path}"]) == 1
    assert not path.parent.exists()
