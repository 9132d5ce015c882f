"""Trial fix for `costctl bill`: after a price or currency change, each currency's row shows the
rates charged in that currency, and the PRICE/h column says which currency."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.cli.main import main
from costctl.ledger import Ledger, queries

T0 = datetime(2026, 3, 1, 0, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "80")
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


def record_price_and_currency_change(url: str) -> None:
    """One AutoDL instance charged 0.70 then 0.80 USD/h (an hour), then re-priced at 5.00 CNY/h
    (the instance row now says CNY 5.00) and charged an hour in CNY."""
    with Ledger.open(url) as ledger:
        inst = ledger.ensure_instance("autodl", "u1", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                      price_per_hour=Decimal("0.70"), currency="USD")
        run = ledger.start_run(inst, started_at=at(0), command=None, log_path=None, host=None)
        ledger.accrue(run, at(1800), Decimal("0.70"), "USD")
        ledger.accrue(run, at(3600), Decimal("0.80"), "USD")
        ledger.finish_run(run, ended_at=at(3600), exit_code=0, status="succeeded")
        inst = ledger.ensure_instance("autodl", "u1", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                      price_per_hour=Decimal("5.00"), currency="CNY")
        run = ledger.start_run(inst, started_at=at(4000), command=None, log_path=None, host=None)
        ledger.accrue(run, at(7600), Decimal("5.00"), "CNY")
        ledger.finish_run(run, ended_at=at(7600), exit_code=0, status="succeeded")


def test_instance_rows_show_the_rates_charged_in_their_own_currency(db_url):
    record_price_and_currency_change(db_url)
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        rows = {r.currency: r for r in queries.bill_by_instance(s)}
    usd, cny = rows["USD"], rows["CNY"]
    assert (usd.price_per_hour, usd.min_price_per_hour, usd.max_price_per_hour) == (
        Decimal("0.80"), Decimal("0.70"), Decimal("0.80"))
    assert (cny.price_per_hour, cny.min_price_per_hour, cny.max_price_per_hour) == (
        Decimal("5.00"), Decimal("5.00"), Decimal("5.00"))
    assert usd.spend == Decimal("0.75") and cny.spend == Decimal("5.00")


def test_instance_rows_clip_rates_to_the_window(db_url):
    record_price_and_currency_change(db_url)
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        (usd,) = queries.bill_by_instance(s, since=at(1800), until=at(3600))
    assert usd.currency == "USD" and usd.min_price_per_hour == usd.max_price_per_hour == Decimal("0.80")


def test_bill_by_instance_json_and_table(db_url, capsys):
    record_price_and_currency_change(db_url)
    assert main(["bill", "--by", "instance", "--db", db_url, "--format", "json"]) == 0
    rows = {r["currency"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert (rows["USD"]["price_per_hour"], rows["USD"]["min_price_per_hour"], rows["USD"]["max_price_per_hour"]) == (
        "0.80", "0.70", "0.80")
    assert rows["CNY"]["price_per_hour"] == "5.00"

    assert main(["bill", "--by", "instance", "--db", db_url]) == 0
    out = capsys.readouterr().out
    usd_line = next(line for line in out.splitlines() if "$0.75" in line)
    cny_line = next(line for line in out.splitlines() if "2026-03-01 01:06:40" in line)
    assert "$0.70-0.80" in usd_line and "5.00" not in usd_line
    assert "CN¥5.00" in cny_line.replace("CN¥5.00", "", 1)  # PRICE/h and SPEND both carry CNY


def test_bill_by_run_price_carries_its_currency(db_url, capsys):
    record_price_and_currency_change(db_url)
    assert main(["bill", "--db", db_url]) == 0
    out = capsys.readouterr().out
    usd_line = next(line for line in out.splitlines() if "$0.75" in line)
    assert "$0.80" in usd_line and "CN¥" not in usd_line


def test_bill_on_an_80_column_terminal_hides_columns_instead_of_cutting_cells(db_url, capsys, monkeypatch):
    import io

    from rich.console import Console

    import costctl.cli.bill as bill_cli

    record_price_and_currency_change(db_url)
    console = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None,
                      highlight=False, markup=False)
    monkeypatch.setattr(bill_cli, "out_console", console)
    assert main(["bill", "--by", "instance", "--db", db_url]) == 0
    out = console.file.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert "$0.70-0.80" in out and "autodl:u1" in out
    assert "FIRST CHARGE" in capsys.readouterr().err  # named as hidden
