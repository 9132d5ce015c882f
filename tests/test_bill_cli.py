"""`costctl bill` on a real ledger (SQLite and PostgreSQL): JSON, CSV, table, groupings, windows."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.ledger import Ledger
from costctl.paths import default_database_url
from helpers import SHIELD

T0 = datetime(2026, 3, 1, 14, 0, 0, tzinfo=timezone.utc)
USD_RATE = Decimal("0.45")
CNY_RATE = Decimal("2.18")
SIX = Decimal("0.000001")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No costctl.toml from the caller's directory, no database URL from the caller's env."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


def bill(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["bill", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def bill_json(capsys, db_url: str, *args: str) -> dict:
    code, out, err = bill(capsys, "--format", "json", "--db", db_url, *args)
    assert code == 0, err
    return json.loads(out)


def record_runs(url: str) -> dict[str, str]:
    """A finished USD run (1 h 1 min 1 s), a USD run whose watch was killed after 600 s, and a
    CNY run on another provider (30 min)."""
    with Ledger.open(url) as ledger:
        vast = ledger.ensure_instance("vastai", "123456", gpu="RTX 4090", gpu_count=2, billing="spot",
                                      price_per_hour=USD_RATE, currency="USD")
        autodl = ledger.ensure_instance("autodl", "abc-uuid", gpu="RTX 3090", gpu_count=1, billing="on-demand",
                                        price_per_hour=CNY_RATE, currency="CNY")
        done = ledger.start_run(vast, started_at=at(0), command=["python", "train.py"], log_path=None, host="h")
        for s in (5, 1800, 3600, 3661, 3661):
            ledger.accrue(done, at(s), USD_RATE, "USD")
        ledger.finish_run(done, ended_at=at(3661), exit_code=0, status="succeeded")
        killed = ledger.start_run(vast, started_at=at(4000), command=None, log_path=None, host="h")
        ledger.accrue(killed, at(4300), USD_RATE, "USD")
        ledger.accrue(killed, at(4600), USD_RATE, "USD")
        cny = ledger.start_run(autodl, started_at=at(100), command=None, log_path=None, host=None)
        ledger.accrue(cny, at(1900), CNY_RATE, "CNY")
        ledger.finish_run(cny, ended_at=at(1900), exit_code=1, status="failed")
    return {"done": done, "killed": killed, "cny": cny}


def test_bill_json_by_run(db_url, capsys):
    runs = record_runs(db_url)
    doc = bill_json(capsys, db_url)
    rows = {r["run_id"]: r for r in doc["rows"]}
    assert set(rows) == set(runs.values())
    for row in rows.values():
        for key in ("run_id", "instance_id", "provider", "gpu", "started_at", "ended_at", "duration_s",
                    "price_per_hour", "currency", "spend", "status"):
            assert key in row
        # spend == duration_s x price_per_hour / 3600 (money as decimal strings)
        expected = Decimal(str(row["duration_s"])) * Decimal(row["price_per_hour"]) / 3600
        assert Decimal(row["spend"]) == expected.quantize(SIX)
        assert isinstance(row["spend"], str) and isinstance(row["price_per_hour"], str)

    done = rows[runs["done"]]
    assert done["duration_s"] == 3661 and done["status"] == "succeeded"
    assert done["instance_id"] == "123456" and done["provider"] == "vastai" and done["gpu"] == "RTX 4090"
    assert done["started_at"] == "2026-03-01T14:00:00+00:00" and done["ended_at"] == "2026-03-01T15:01:01+00:00"
    assert done["spend"] == str((USD_RATE * 3661 / 3600).quantize(SIX)) == "0.457625"
    # The killed watch never recorded an end: its duration stops at its last charge, not "now".
    killed = rows[runs["killed"]]
    assert killed["ended_at"] is None and killed["duration_s"] == 600 and killed["status"] == "running"
    assert rows[runs["cny"]]["currency"] == "CNY" and rows[runs["cny"]]["spend"] == "1.090000"
    # Totals per currency, never added together.
    assert doc["totals"] == {
        "CNY": "1.090000",
        "USD": str((USD_RATE * (3661 + 600) / 3600).quantize(SIX)),
    }


def test_bill_groupings(db_url, capsys, monkeypatch):
    record_runs(db_url)
    by_instance = bill_json(capsys, db_url, "--by", "instance")["rows"]
    assert [(r["provider"], r["instance_id"], r["runs"], r["duration_s"], r["spend"]) for r in by_instance] == [
        ("vastai", "123456", 2, 4261, str((USD_RATE * 4261 / 3600).quantize(SIX))),
        ("autodl", "abc-uuid", 1, 1800, "1.090000"),
    ]
    by_gpu = {r["gpu"]: r for r in bill_json(capsys, db_url, "--by", "gpu")["rows"]}
    assert by_gpu["RTX 4090"]["gpu_hours"] == pytest.approx(2 * 4261 / 3600, abs=1e-6)
    assert by_gpu["RTX 3090"]["currency"] == "CNY" and by_gpu["RTX 3090"]["spend"] == "1.090000"

    # Days in UTC: everything is on 2026-03-01.
    by_day = bill_json(capsys, db_url, "--by", "day")["rows"]
    assert [(r["day"], r["currency"]) for r in by_day] == [("2026-03-01", "CNY"), ("2026-03-01", "USD")]


def test_bill_by_day_splits_a_charge_at_local_midnight(db_url, capsys, monkeypatch):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "night", gpu="T4", gpu_count=1, billing="on-demand",
                                    price_per_hour=USD_RATE, currency="USD")
        run = ledger.start_run(pk, started_at=at(3600), command=None, log_path=None, host=None)  # 15:00 UTC
        ledger.accrue(run, at(3 * 3600 + 900), USD_RATE, "USD")  # 17:15 UTC, one charge row
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "Asia/Shanghai")  # midnight = 16:00 UTC
    doc = bill_json(capsys, db_url, "--by", "day")
    assert [(r["day"], r["duration_s"], r["spend"]) for r in doc["rows"]] == [
        ("2026-03-01", 3600, "0.450000"),
        ("2026-03-02", 4500, str((USD_RATE * 4500 / 3600).quantize(SIX))),
    ]
    assert doc["totals"] == {"USD": str((USD_RATE * 8100 / 3600).quantize(SIX))}


def test_bill_window_clips_charges(db_url, capsys):
    runs = record_runs(db_url)
    doc = bill_json(capsys, db_url, "--since", "2026-03-01T14:30:00Z", "--until", "2026-03-01T15:10:00+00:00")
    rows = {r["run_id"]: r for r in doc["rows"]}
    assert rows[runs["done"]]["duration_s"] == 1861  # 14:30:00 -> 15:01:01
    assert rows[runs["cny"]]["duration_s"] == 100  # 14:30:00 -> 14:31:40
    assert rows[runs["killed"]]["duration_s"] == 200  # 15:06:40 -> 15:10:00
    for row in rows.values():
        expected = Decimal(str(row["duration_s"])) * Decimal(row["price_per_hour"]) / 3600
        assert Decimal(row["spend"]) == expected.quantize(SIX)
    assert doc["totals"]["USD"] == str((USD_RATE * 2061 / 3600).quantize(SIX))
    # A run entirely outside the window is not listed.
    doc = bill_json(capsys, db_url, "--since", "2026-03-01T15:02:00Z", "--until", "2026-03-01T15:06:00Z")
    assert doc["rows"] == [] and doc["totals"] == {}


def test_bill_dates_are_midnights_in_configured_timezone(db_url, capsys, monkeypatch):
    runs = record_runs(db_url)
    # Shanghai is UTC+8: 2026-03-01T23:05 there is 15:05 UTC; 2026-03-02 starts at 16:00 UTC.
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "Asia/Shanghai")
    doc = bill_json(capsys, db_url, "--since", "2026-03-01T23:05")  # 15:05 UTC
    assert doc["since"] == "2026-03-01T15:05:00+00:00"
    assert [r["run_id"] for r in doc["rows"]] == [runs["killed"]]
    doc = bill_json(capsys, db_url, "--until", "2026-03-02")  # 16:00 UTC: everything
    assert doc["until"] == "2026-03-01T16:00:00+00:00" and len(doc["rows"]) == 3
    doc = bill_json(capsys, db_url, "--since", "2026-03-02")
    assert doc["rows"] == []
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "America/New_York")  # UTC-5: 2026-03-01 09:00 = 14:00 UTC
    doc = bill_json(capsys, db_url, "--since", "2026-03-01T09:30")
    assert doc["since"] == "2026-03-01T14:30:00+00:00"


def test_bill_csv_matches_json(db_url, capsys):
    record_runs(db_url)
    doc = bill_json(capsys, db_url)
    code, out, err = bill(capsys, "--format", "csv", "--db", db_url)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["run_id"], r["spend"], r["currency"]) for r in rows] == [
        (r["run_id"], r["spend"], r["currency"]) for r in doc["rows"]
    ]
    assert out.splitlines()[0].startswith("run_id,instance_id,provider,gpu")


def test_bill_table_shows_totals_per_currency(db_url, capsys):
    record_runs(db_url)
    code, out, err = bill(capsys, "--db", db_url)
    assert code == 0, err
    assert "TOTAL" in out and "CN¥1.09" in out and "$0.53" in out  # 0.532625 USD (format_money, English)
    assert "succeeded (0)" in out and "failed (1)" in out
    code, out, _ = bill(capsys, "--db", db_url, "--by", "gpu")
    assert code == 0 and "GPU-HOURS" in out and "RTX 4090" in out


def test_bill_empty_ledger(db_url, capsys):
    Ledger.open(db_url).close()  # an existing ledger with nothing charged (bill never creates one)
    doc = bill_json(capsys, db_url)
    counterfactual = doc.pop("saved_counterfactual")
    assert doc == {"by": "run", "since": None, "until": None, "rows": [], "totals": {}, "waste_totals": {},
                   "saved_totals": {}}
    assert counterfactual["horizon_s"] == 86400 and "24h" in counterfactual["text"]
    code, out, _ = bill(capsys, "--db", db_url)
    assert code == 0 and "No charges recorded" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--since", "yesterday-ish"], "--since 'yesterday-ish': expected a date"),
        (["--until", "2026-13-01"], "--until '2026-13-01': expected a date"),
        (["--since", "2026-03-02", "--until", "2026-03-01"], "is not before --until"),
    ],
)
def test_bill_bad_window_is_one_line(args, message, capsys, tmp_path):
    code, out, err = bill(capsys, "--db", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and message in err and err.startswith("costctl: ")


def test_bill_unwritable_database_path_is_one_line(capsys, tmp_path):
    (tmp_path / "blocker").write_text("")
    code, out, err = bill(capsys, "--db", f"sqlite:///{tmp_path / 'blocker' / 'costctl.db'}")
    assert code == 1 and out == ""
    assert err.startswith("costctl: no ledger database at") and err.count("\n") == 1


def test_console_script_uses_the_data_dir_database(tmp_path):
    """The installed `costctl` script, in a child process, with only COSTCTL_DATA_DIR set."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["COSTCTL_DATA_DIR"] = str(data)
    url = default_database_url(data)
    runs = record_runs(url)
    script = Path(sys.executable).parent / "costctl"
    result = subprocess.run([str(script), "bill", "--format", "json"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {r["run_id"] for r in doc["rows"]} == set(runs.values())
    # COSTCTL_DATABASE_URL selects another database (empty here).
    Ledger.open(f"sqlite:///{tmp_path / 'other.db'}").close()
    env["COSTCTL_DATABASE_URL"] = f"sqlite:///{tmp_path / 'other.db'}"
    result = subprocess.run([str(script), "bill", "--format", "json"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and json.loads(result.stdout)["rows"] == []
    # ... and one that does not exist is an error, not a new empty ledger.
    env["COSTCTL_DATABASE_URL"] = f"sqlite:///{tmp_path / 'typo' / 'other.db'}"
    result = subprocess.run([str(script), "bill", "--format", "json"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"costctl: no ledger database at {tmp_path / 'typo' / 'other.db'}\n"
    assert not (tmp_path / "typo").exists()
