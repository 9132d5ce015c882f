"""Issue 17, part 1 (money side): the ledger's money columns hold only amounts from 0 to 10^9,
the bill's rounding never fails, and a price a provider reports is checked where it enters
(refused with a clear line, never charged or stored). Regression tests are named after the fault
suite's cases; property tests give the money types and the bill arbitrary input."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from costctl.cli.main import main
from costctl.cloud import PriceRefused, checked_instance, checked_offers, checked_price
from costctl.errors import CostctlError
from costctl.ledger import Ledger
from costctl.ledger.tables import instances as instances_table
from costctl.ledger.types import DECIMAL_TEXT_CHARS, DecimalText, money_text
from costctl.money import MAX_AMOUNT, MAX_ROUNDED, AmountError, Money, round_money
from costctl.report import EXPORT_MONEY_PLACES, export_amount, money_cell, money_text as report_money_text, row_totals
from costctl_providers.base import BillingMode, Instance, Offer, Status

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))


def instance(price: Decimal | None, *, bid: Decimal | None = None, iid: str = "i-1") -> Instance:
    return Instance(provider="vastai", id=iid, gpu="RTX 4090", gpu_raw="RTX 4090", gpu_count=1,
                    billing=BillingMode.ON_DEMAND, price_per_hour=price, currency="USD", status=Status.RUNNING,
                    bid_per_hour=bid, started_at=T0)


# --------------------------------------------------------------------------- the report's cases


@pytest.mark.parametrize("price", [Decimal("1e26"), Decimal("9" * 80), Decimal("-1"), Decimal("1E+999999")])
def test_ledger_price_1e26_or_80_digits_is_never_stored(db_url, price):
    """A price of ~1e26 (or 80 digits) went into the ledger and `bill` crashed from then on: the
    money columns refuse it, so nothing absurd is ever billed."""
    with Ledger.open(db_url) as ledger:
        with pytest.raises(CostctlError) as info:
            ledger.ensure_instance("sim", "i-1", gpu="T4", gpu_count=1, billing="on-demand",
                                   price_per_hour=price, currency="USD")
        assert "\n" not in info.value.message
        with ledger.session() as s:
            assert s.execute(select(instances_table.c.id)).all() == []


def test_bill_and_instances_with_the_largest_price_accepted_do_not_crash(db_url, capsys):
    """The largest price accepted (10^9 per hour) charged for two days: every grouping and
    format of the bill, and its rounding, still work (the 1e26 price crashed them all)."""
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "i-1", gpu="T4", gpu_count=64, billing="on-demand",
                                    price_per_hour=MAX_AMOUNT, currency="IDR")
        run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host=None)
        ledger.accrue(run, T0 + timedelta(days=2, microseconds=7), MAX_AMOUNT, "IDR")
        ledger.finish_run(run, ended_at=T0 + timedelta(days=2, microseconds=7), exit_code=0, status="succeeded")
    for by, fmt in [(by, "json") for by in ("run", "chain", "instance", "day", "gpu")] + [("run", "table"),
                                                                                         ("day", "csv")]:
        assert main(["bill", "--db", db_url, "--by", by, "--format", fmt]) == 0, (by, fmt)
        out = capsys.readouterr().out
        if fmt == "json":
            assert json.loads(out)["totals"] == {"IDR": "48000000001.944444"}  # 10^9 x (48 h + 7 us)


def test_provider_negative_price_is_refused_with_a_clear_message():
    """A provider reporting a negative price made every tick fail; the boundary refuses it."""
    with pytest.raises(PriceRefused) as info:
        checked_price("vastai", Decimal("-0.5"), "USD", instance="312")
    assert info.value.message == ("vastai reported a price of -0.5 USD per hour for instance 312; expected an "
                                  "amount of money from 0 to 1000000000, like 2.5 or \"2.50\"")
    assert isinstance(info.value, CostctlError)
    assert checked_price("vastai", None, "USD", instance="312") is None
    assert checked_price("vastai", Decimal("0.28666666666666667"), "USD", instance="312") == Decimal("0.2866666667")


def test_listings_show_a_refused_price_as_unknown_and_leave_refused_offers_out():
    said: list[str] = []
    shown = checked_instance(instance(Decimal("1e26"), bid=Decimal("-3")), said.append)
    assert shown.price_per_hour is None and shown.bid_per_hour is None
    assert said == ["costctl: vastai reported a price of 1E+26 USD per hour for instance i-1; expected an amount "
                    "of money from 0 to 1000000000, like 2.5 or \"2.50\"; refused, shown as unknown",
                    "costctl: vastai reported a price of -3 USD per hour for instance i-1; expected an amount of "
                    "money from 0 to 1000000000, like 2.5 or \"2.50\"; refused, shown as unknown"]
    assert checked_instance(instance(Decimal("0.42")), said.append).price_per_hour == Decimal("0.42")

    def offer(oid: str, price: str, count: int = 1) -> Offer:
        return Offer(provider="vastai", id=oid, gpu="RTX 4090", gpu_raw="RTX 4090", gpu_count=count,
                     billing=BillingMode.ON_DEMAND, price_per_hour=Decimal(price), currency="USD")

    said.clear()
    kept = checked_offers([offer("1", "0.40"), offer("2", "-1"), offer("3", "1e30"), offer("4", "0.5", 0)], said.append)
    assert [o.id for o in kept] == ["1"] and len(said) == 3
    assert "offer 2" in said[0] and "offer 3" in said[1] and "offer 4 with 0 GPUs" in said[2]


# --------------------------------------------------------------------------- property tests

decimals = st.one_of(
    st.decimals(),  # NaN, sNaN, infinities, any exponent
    st.decimals(min_value=0, max_value=MAX_AMOUNT, places=10),
    st.decimals(min_value=-1, max_value=10**12, allow_nan=False, allow_infinity=False),
    st.builds(lambda d, e: d.scaleb(e), st.decimals(allow_nan=False, allow_infinity=False),
              st.integers(min_value=-500, max_value=500)),
    st.integers(min_value=-(10**40), max_value=10**40).map(Decimal),
)


@given(st.one_of(decimals, st.integers(min_value=-(10**40), max_value=10**40)))
def test_money_column_binds_an_amount_in_range_exactly_or_refuses_it(value):
    """DecimalText (every money column of the ledger): an amount from 0 to 10^9 whose text fits
    is stored as its exact text (and reads back equal); anything else is an AmountError (a
    CostctlError), never an InvalidOperation or a column overflow."""
    column = DecimalText()
    try:
        text = column.process_bind_param(value, None)  # type: ignore[arg-type]
    except AmountError as exc:
        assert isinstance(exc, CostctlError) and "\n" not in exc.message
        d = Decimal(value)
        assert not d.is_finite() or d < 0 or d > MAX_AMOUNT or len(str(d)) > DECIMAL_TEXT_CHARS
        return
    assert text is not None and len(text) <= DECIMAL_TEXT_CHARS
    back = column.process_result_value(text, None)  # type: ignore[arg-type]
    assert back == Decimal(value) and 0 <= back <= MAX_AMOUNT and str(back) == text


@pytest.fixture(scope="module")
def one_ledger(tmp_path_factory):
    """One real SQLite ledger file for the round-trip property test (examples reuse it)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'costctl.db'}"
    with Ledger.open(url) as ledger:
        yield ledger


@settings(max_examples=40)
@given(st.one_of(st.decimals(min_value=0, max_value=MAX_AMOUNT, allow_nan=False, allow_infinity=False),
                 st.decimals(min_value=0, max_value=MAX_AMOUNT, places=10), decimals))
def test_a_price_round_trips_through_a_real_sqlite_ledger_or_is_refused(one_ledger, value):
    try:
        money_text(value)
    except AmountError:
        with pytest.raises(CostctlError):
            one_ledger.ensure_instance("sim", "rt", gpu=None, gpu_count=1, billing="on-demand",
                                       price_per_hour=value, currency="USD")
        return
    one_ledger.ensure_instance("sim", "rt", gpu=None, gpu_count=1, billing="on-demand", price_per_hour=value,
                               currency="USD")
    with one_ledger.session() as s:
        stored = s.execute(select(instances_table.c.price_per_hour)
                           .where(instances_table.c.provider_instance_id == "rt")).scalar_one()
    assert stored == value and str(stored) == str(value)


@given(decimals, st.integers(min_value=0, max_value=12))
def test_the_bill_s_rounding_gives_the_nearest_amount_or_an_amount_error(value, places):
    """round_money (every figure the bill, the summary and the policies show): the amount
    rounded half-even to ``places`` decimals, for any finite amount up to 10^30 however many
    digits it has; AmountError otherwise. The export and table helpers follow it."""
    try:
        got = round_money(value, places)
    except AmountError as exc:
        assert isinstance(exc, CostctlError)
        assert not value.is_finite() or abs(value) > MAX_ROUNDED
        return
    assert -got.as_tuple().exponent == places
    assert abs(got - value) <= Decimal(1).scaleb(-places) / 2
    assert report_money_text(value, places) == str(got)
    if places == EXPORT_MONEY_PLACES:
        assert export_amount(value) == got
    cell = money_cell(value, "USD")
    assert cell.lstrip("<>-").startswith("$") and "E" not in cell  # format_money: $1,234.57
    assert str(Money(value, "usd")).endswith(" USD")


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from(["USD", "CNY", "IDR"]),
                          st.decimals(min_value=0, max_value=Decimal(10) ** 17, allow_nan=False,
                                      allow_infinity=False)), max_size=20))
def test_bill_rows_add_up_to_their_totals_for_any_amounts_a_ledger_can_hold(rows):
    """The rounding rule of costctl.report on any amounts a ledger can hold (a rate of at most
    10^9 per hour over ten thousand years): each currency's total is the exact sum of its
    rows' rounded spend, and the JSON and CSV renderings give the same strings."""
    from dataclasses import make_dataclass

    from costctl.report import render_csv, render_json

    Row = make_dataclass("Row", [("currency", str), ("spend", Decimal)])
    bill_rows = [Row(cur, amount) for cur, amount in rows]
    totals = row_totals(bill_rows)
    for cur in {c for c, _ in rows}:
        assert totals[cur] == sum((export_amount(a) for c, a in rows if c == cur), Decimal(0))
    doc = json.loads(render_json("run", bill_rows, totals, None, None))
    for cur, total in doc["totals"].items():
        assert Decimal(total) == sum((Decimal(r["spend"]) for r in doc["rows"] if r["currency"] == cur), Decimal(0))
    exported = list(csv.DictReader(io.StringIO(render_csv(bill_rows, ["currency", "spend"]))))
    assert [r["spend"] for r in exported] == [r["spend"] for r in doc["rows"]]


def test_instances_with_a_provider_price_of_1e26_shows_it_unknown_not_a_crash(tmp_path, capsys, monkeypatch):
    """`costctl instances` crashed on a price of ~1e26 (its spend's rounding); the listing now
    refuses the provider's price at the boundary: shown as unknown, said on stderr, exit 0."""
    from tests.fakes.vastai import API_KEY, FakeVast

    with FakeVast() as fake:
        fake.add(312, dph_total=1e26)
        cfg = tmp_path / "costctl.toml"
        cfg.write_text(f'[instance]\nprovider = "vastai"\n[providers.vastai]\nbase_url = "{fake.url}"\n')
        monkeypatch.setenv("VAST_API_KEY", API_KEY)
        assert main(["instances", "-c", str(cfg), "--format", "json"]) == 0
        out, err = capsys.readouterr()
        (row,) = json.loads(out)
        assert row["price_per_hour"] is None and row["spend"] is None
        assert ("costctl: vastai reported a price of 1E+26 USD per hour for instance 312; expected an amount of "
                "money from 0 to 1000000000, like 2.5 or \"2.50\"; refused, shown as unknown") in err
        assert main(["instances", "-c", str(cfg)]) == 0
        assert "internal error" not in capsys.readouterr().err
