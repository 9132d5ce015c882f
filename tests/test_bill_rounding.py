"""The bill's rows add up to its totals exactly (costctl.report's rounding rule), in every
grouping and format, on a ledger built so that rounding the exact total would not: three runs on
three instances (three GPU types), on three days, each costing 0.0010004 USD (3.6/h for
1.0004 s), so each row shows 0.001000 while the exact total, 0.0030012, rounds to 0.003001."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.cli.main import main
from costctl.ledger import Ledger
from costctl.report import money_cell

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
RATE = Decimal("3.6")
RUN = timedelta(seconds=1, microseconds=400)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


def build(url: str) -> list[str]:
    ids = []
    with Ledger.open(url) as ledger:
        for k, gpu in enumerate(("T4", "L4", "A10G")):
            pk = ledger.ensure_instance("sim", f"i{k}", gpu=gpu, gpu_count=1, billing="on-demand",
                                        price_per_hour=RATE, currency="USD")
            start = T0 + timedelta(days=k)
            run = ledger.start_run(pk, started_at=start, command=None, log_path=None, host=None)
            ledger.accrue(run, start + RUN, RATE, "USD")
            ledger.finish_run(run, ended_at=start + RUN, exit_code=0, status="succeeded")
            ids.append(run)
    return ids


def bill(capsys, *args: str) -> str:
    assert main(["bill", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("by", ["run", "instance", "day", "gpu"])
def test_rows_sum_exactly_to_the_totals_where_rounding_the_exact_total_would_not(db_url, capsys, by):
    build(db_url)
    exact = 3 * RATE * Decimal(RUN // timedelta(microseconds=1)) / Decimal(3_600_000_000)
    assert exact == Decimal("0.0030012") and str(exact.quantize(Decimal("0.000001"))) == "0.003001"
    doc = json.loads(bill(capsys, "--by", by, "--format", "json", "--db", db_url))
    spends = [r["spend"] for r in doc["rows"]]
    assert spends == ["0.001000"] * 3
    assert doc["totals"] == {"USD": "0.003000"}
    assert sum(Decimal(s) for s in spends) == Decimal(doc["totals"]["USD"])
    assert abs(Decimal(doc["totals"]["USD"]) - exact) <= len(spends) * Decimal("0.0000005")
    rows = list(csv.DictReader(io.StringIO(bill(capsys, "--by", by, "--format", "csv", "--db", db_url))))
    assert [r["spend"] for r in rows] == spends
    # The table to the cent: 0.001 + 0.001 + 0.001 shows 0.00 three times over a 0.00 footer (the
    # largest remainder method: every cell and the footer rounded so that the column adds up).
    table = bill(capsys, "--by", by, "--db", db_url)
    assert table.count(money_cell(Decimal("0.00"), "USD")) == 4  # 3 rows and the footer


def test_limit_totals_add_every_run_s_rounded_amount(db_url, capsys):
    ids = build(db_url)
    doc = json.loads(bill(capsys, "--format", "json", "--limit", "2", "--db", db_url))
    assert [r["run_id"] for r in doc["rows"]] == ids[1:] and doc["runs_not_shown"] == 1
    assert doc["totals"] == {"USD": "0.003000"}  # three rounded runs, the hidden one included
