"""Issue 16, part 1: AutoDL prices in CNY. The shipped table holds AutoDL's "from" price per
card-hour (pay-as-you-go) for the cards it rents, a monthly rental where one was seen and the
no-GPU mode, each row dated and sourced (an estimate says from what); the China-market cards are
in the catalog; ``gpus``, ``recommend`` and the downsize ranking rank AutoDL cards in CNY; a
configured exchange rate converts for display only (a labelled column, a separate JSON field),
and two currencies are never added."""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal

import pytest

from costctl.catalog.gpus import GIB, get_gpu, load_catalog
from costctl.catalog.prices import (
    PERIOD_HOURS,
    RANKED_BILLING_MODES,
    display_conversion,
    load_price_table,
    make_entry,
    parse_price_csv,
    shipped_prices,
)
from costctl.errors import ConfigError
from costctl.i18n import format_amount
from costctl.lifecycle.sizing import best_fit, options_from_price_table, rank_cards
from costctl.money import ExchangeRate, Money

from test_cli_instances import run  # noqa: F401 - main(argv) with captured output

RATE = ExchangeRate("USD", "CNY", Decimal("7.12"), date(2026, 11, 30))
RATE_TOML = '[[catalog.exchange_rates]]\nbase = "USD"\nquote = "CNY"\nrate = "7.12"\nas_of = 2026-11-30\n'
LABEL = "≈ USD at 7.12 CNY/USD, 2026-11-30"


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("COSTCTL_DATABASE_URL", raising=False)
    for key in ("RUNPOD_API_KEY", "VAST_API_KEY", "AUTODL_TOKEN"):  # the dated table, never an API
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def autodl_rows():
    return [e for e in shipped_prices() if e.provider == "autodl"]


# --------------------------------------------------------------------------- the table


def test_every_autodl_row_is_cny_dated_and_sourced():
    rows = autodl_rows()
    ranked_cards = {e.gpu for e in rows if e.ranked and e.known}
    assert len(ranked_cards) >= 12
    for e in rows:
        assert e.currency == "CNY" and e.price_per_gpu_hour > 0 and isinstance(e.seen, date)
        assert date(2026, 1, 1) <= e.seen <= date.today()
        # a public source with its address; an estimate says from what, its inputs named
        assert re.search(r"https?://", e.source + e.estimated), e
        if e.estimated:
            assert "estimate" in e.source and len(e.estimated) > 40
    assert any(e.estimated for e in rows), "the estimated card is marked"
    assert any(not e.known and "no-GPU" in e.gpu for e in rows), "the no-GPU mode's price is listed"


def test_autodl_cards_not_in_the_catalog_are_named_as_such():
    """A row the catalog has no specs for is a card that is not NVIDIA's, one left out of the
    catalog on purpose, or the no-GPU mode: each source says which."""
    for e in autodl_rows():
        if not e.known:
            assert ("not an NVIDIA card" in e.source or "not in costctl's GPU catalog" in e.source
                    or "without its GPU" in e.source), e


def test_prepaid_rows_state_their_period_and_are_never_ranked():
    prepaid = [e for e in autodl_rows() if e.billing == "prepaid"]
    assert prepaid and "prepaid" not in RANKED_BILLING_MODES
    for e in prepaid:
        assert not e.ranked and e.tier in PERIOD_HOURS and e.period_price is not None
        assert abs(e.price_per_gpu_hour - e.period_price / PERIOD_HOURS[e.tier]) < Decimal("0.0001")
        # a month's rental costs less per hour than the same card pay-as-you-go
        (payg,) = [o for o in autodl_rows() if o.gpu == e.gpu and o.billing == "on-demand"]
        assert e.price_per_gpu_hour < payg.price_per_gpu_hour


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"billing": "prepaid", "tier": "", "period_price": "100"}, "tier daily | weekly | monthly"),
    ({"billing": "prepaid", "tier": "monthly", "period_price": None}, "period_price"),
    ({"billing": "prepaid", "tier": "yearly", "period_price": "100"}, "tier daily | weekly | monthly"),
    ({"billing": "on-demand", "tier": "", "period_price": "100"}, "prepaid rows only"),
    ({"billing": "prepaid", "tier": "weekly", "period_price": "-1"}, "not above 0"),
])
def test_a_malformed_prepaid_row_is_one_clear_error(kwargs, needle):
    billing = kwargs.pop("billing")
    with pytest.raises(ConfigError) as err:
        make_entry("autodl", "RTX 4090", billing, "", "CNY", "2026-10-04", "s", **kwargs)
    assert needle in str(err.value)


def test_a_prepaid_row_round_trips_through_the_csv_reader():
    text = ("provider,gpu,billing,price_per_gpu_hour,currency,seen,source,tier,estimated,period_price\n"
            "autodl,RTX 3090,prepaid,,CNY,2026-10-04,s,weekly,,168\n"
            "autodl,vGPU-32GB,on-demand,2.80,CNY,2026-10-04,s,,from a reseller's list,\n")
    weekly, est = parse_price_csv(text, origin="t.csv")
    assert weekly.price_per_gpu_hour == Decimal("1.0000") and weekly.label == "prepaid weekly"
    assert est.estimated == "from a reseller's list" and est.to_dict()["estimated"] == "from a reseller's list"


# --------------------------------------------------------------------------- the catalog


@pytest.mark.parametrize("name", ["RTX 4090 D", "RTX 4090D", "A800-80GB", "H800", "H20-NVLink", "L20", "L40", "A40",
                                  "V100-32GB", "RTX 3080 Ti", "RTX 3090 Ti", "vGPU-32GB", "vGPU-48GB", "A100-SXM4-80GB"])
def test_china_market_cards_are_in_the_catalog_with_dense_figures_and_a_source(name):
    gpu = get_gpu(name)
    assert gpu is not None, name
    assert gpu.memory_gb > 0 and gpu.memory_bandwidth_gbs > 0 and 0 < gpu.fp16_tensor_tflops
    assert gpu.fp16_tensor_tflops_sparse is None or gpu.fp16_tensor_tflops < gpu.fp16_tensor_tflops_sparse
    assert "NVIDIA" in gpu.source
    if name.startswith("vGPU"):  # AutoDL's virtualized cards: no NVIDIA document, marked as estimates
        assert gpu.source.startswith("ESTIMATED") and "estimated" in gpu.notes


def test_every_nvidia_autodl_price_names_a_catalog_card():
    catalog_names = {m.name for m in load_catalog().models}
    for e in autodl_rows():
        if e.known:
            assert e.gpu in catalog_names


# --------------------------------------------------------------------------- gpus and recommend


def test_gpus_lists_autodl_cards_in_cny_with_source_and_date(capsys):
    code, out, err = run(capsys, "gpus", "--provider", "autodl", "--format", "json", "--offline")
    assert code == 0, err
    items = json.loads(out)
    cards = {i["gpu"]["name"] for i in items
             if i["gpu"].get("known", True) and i["price"]["ranked"] and i["price"]["currency"] == "CNY"}
    assert len(cards) >= 12
    for i in items:
        p = i["price"]
        assert p["provider"] == "autodl" and p["currency"] == "CNY"
        assert p["source"] and date.fromisoformat(p["seen"]) and Decimal(p["price_per_gpu_hour"]) > 0
        assert i["converted"] is None  # no rate configured: nothing converted


def test_gpus_table_marks_estimates_and_prepaid_rows(capsys):
    code, out, err = run(capsys, "gpus", "--provider", "autodl", "--offline")
    assert code == 0, err
    estimated = [e for e in autodl_rows() if e.estimated]
    for e in estimated:
        line = next(ln for ln in out.splitlines() if ln.startswith(e.gpu + " "))
        assert "est." in line and format_amount(e.price_per_gpu_hour, "CNY") in line
    monthly = next(e for e in autodl_rows() if e.billing == "prepaid")
    assert f"({format_amount(monthly.period_price, 'CNY')}/month)" in out
    assert "est.: no public figure" in out and "prepaid: a rental paid ahead" in out


def test_recommend_ranks_autodl_cards_for_a_bert_base_fine_tune_in_cny(capsys):
    code, out, err = run(capsys, "recommend", "-p", "autodl", "--model", "bert-base", "--batch", "32",
                         "--seq-len", "128", "--steps", "3000", "--format", "json", "--offline")
    assert code == 0, err
    doc = json.loads(out)
    priced = [g for g in doc["fits"] if g["currency"]]
    assert [g["currency"] for g in priced] == ["CNY"]
    ranked = priced[0]["ranked"]
    assert len(ranked) >= 12
    costs = [Decimal(o["cost"]) for o in ranked]
    assert costs == sorted(costs)
    table = {(e.gpu, e.billing): e for e in autodl_rows()}
    for o in ranked:
        assert o["provider"] == "autodl" and o["currency"] == "CNY" and o["billing"] == "on-demand"
        assert Decimal(o["price_per_gpu_hour"]) == table[(o["gpu"], "on-demand")].price_per_gpu_hour
        # cost = price x GPUs x hours, in the price's currency
        expected = Decimal(o["price_per_gpu_hour"]) * Decimal(repr(o["hours"]))
        assert abs(Decimal(o["cost"]) - expected) <= Decimal("0.005")
    code, out, err = run(capsys, "recommend", "-p", "autodl", "--model", "bert-base", "--batch", "32",
                         "--seq-len", "128", "--steps", "3000", "--offline")
    assert code == 0 and "cheapest job first (in CNY)" in out
    first = ranked[0]
    price = format_amount(Decimal(first["price_per_gpu_hour"]), "CNY")  # CN¥10.50 (costctl.i18n.format_amount)
    assert re.search(rf"\b1\s+{re.escape(first['gpu'])}\s.*autodl\s+{re.escape(price)}", out)


# --------------------------------------------------------------------------- exchange rates


def test_a_rate_converts_for_display_in_a_labelled_column(env, capsys):
    (env / "costctl.toml").write_text('[catalog]\ncurrency = "USD"\n' + RATE_TOML)
    code, out, err = run(capsys, "gpus", "--provider", "autodl", "--offline")
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if ln.startswith("GPU ") and "Mem GiB" in ln)
    assert LABEL in header
    assert f"{LABEL}: converted for display only" in out and "never added" in out
    for e in autodl_rows():
        if e.billing != "on-demand" or not e.known:
            continue
        price = format_amount(e.price_per_gpu_hour, "CNY")
        line = next(ln for ln in out.splitlines() if ln.startswith(e.gpu + " ") and f" {price}" in ln)
        cell = line.split()[-1]
        assert cell.startswith("$"), line  # the converted amount, in dollars as English writes them
        assert abs(Decimal(cell[1:].replace(",", "")) - e.price_per_gpu_hour / RATE.rate) <= Decimal("0.006"), line
        assert cell == format_amount(e.price_per_gpu_hour / RATE.rate, "USD")
        assert price.startswith("CN¥") and price in line  # the price itself stays in yuan


def test_json_keeps_the_currency_and_adds_a_converted_field(env, capsys):
    (env / "costctl.toml").write_text(RATE_TOML)
    code, out, err = run(capsys, "gpus", "--provider", "autodl", "--currency", "USD", "--format", "json", "--offline")
    assert code == 0, err
    for i in json.loads(out):
        p, c = i["price"], i["converted"]
        assert p["currency"] == "CNY"
        assert c["currency"] == "USD" and c["display_only"] is True
        assert (c["rate"], c["rate_unit"], c["rate_as_of"]) == ("7.12", "CNY/USD", "2026-11-30")
        assert abs(Decimal(c["price_per_gpu_hour"]) - Decimal(p["price_per_gpu_hour"]) / RATE.rate) < Decimal("1e-6")
        if p["period_price"] is not None:
            assert abs(Decimal(c["period_price"]) - Decimal(p["period_price"]) / RATE.rate) < Decimal("1e-6")


def test_two_currencies_are_never_added(env, capsys):
    """RunPod's USD prices and AutoDL's CNY prices in one recommendation: without a rate each
    currency is ranked on its own; with one, every cost stays in its price's currency and the
    converted figure is a separate field."""
    code, out, err = run(capsys, "recommend", "--model", "bert-base", "--steps", "3000", "--format", "json", "--offline")
    assert code == 0, err
    groups = [g["currency"] for g in json.loads(out)["fits"] if g["currency"]]
    assert sorted(groups) == ["CNY", "USD"]
    (env / "costctl.toml").write_text(RATE_TOML)
    code, out, err = run(capsys, "recommend", "--model", "bert-base", "--steps", "3000", "--currency", "CNY",
                         "--format", "json", "--offline")
    assert code == 0, err
    doc = json.loads(out)
    (group,) = [g for g in doc["fits"] if g["currency"]]
    assert group["currency"] == "CNY"
    seen = set()
    for o in group["ranked"]:
        seen.add(o["currency"])
        if o["currency"] == "CNY":
            assert o["converted"] is None
        else:
            conv = o["converted"]
            assert conv["currency"] == "CNY" and conv["display_only"]
            assert abs(Decimal(conv["cost"]) - Decimal(o["cost"]) * RATE.rate) <= Decimal("0.05")
    assert seen == {"CNY", "USD"}


def test_display_conversion_needs_a_rate_linking_the_two():
    assert display_conversion("CNY", "USD", []) is None
    assert display_conversion("CNY", "CNY", [RATE]) is None
    assert display_conversion("CNY", None, [RATE]) is None
    eur = ExchangeRate("EUR", "CNY", Decimal("7.8"), date(2026, 11, 1))
    conv = display_conversion("CNY", "USD", [eur, RATE])
    assert conv is not None and conv.rate is RATE and conv.label == LABEL
    assert conv.apply(Money(Decimal("7.12"), "CNY")) == Money(Decimal("1"), "USD")


# --------------------------------------------------------------------------- downsize


def test_downsize_ranks_autodl_cards_in_cny():
    """A plateaued run on an AutoDL A800 (charged its snapshot's price, in CNY) is offered the
    AutoDL cards of the table, in CNY; USD prices are never compared with it."""
    table = load_price_table(None, include_imported=False)
    options = options_from_price_table(table, provider="autodl", gpu_count=1, billing="on-demand", currency="CNY")
    assert len({o.gpu for o in options}) >= 12
    assert {(o.provider, o.currency) for o in options} == {("autodl", "CNY")}
    current = Money(Decimal("6.20"), "CNY")  # the live price of this instance wins over the table's 5.88
    cards = rank_cards(current_gpu="A800-80GB", current_rate=current, peak_bytes=18 * GIB, headroom=0.2,
                       options=options, utilization=0.6, remaining_s=Decimal(36000))
    assert cards and all(c.option.currency == "CNY" for c in cards)
    fit = best_fit(cards)
    assert fit is not None and fit.fits and fit.saving_per_hour > 0
    assert fit.memory_bytes >= 18 * GIB * 1.2
    # the best card saves the most per hour of the current card's work among those that fit
    assert fit.saving_per_hour == max(c.saving_per_hour for c in cards if c.fits)
    usd = options_from_price_table(table, provider="autodl", gpu_count=1, billing="on-demand", currency="USD")
    assert all(o.provider != "autodl" for o in usd)
