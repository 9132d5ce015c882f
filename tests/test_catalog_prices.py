"""Price table: shipped seed, config overrides, currencies and exchange rates."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from costctl_providers.base import BillingMode, Offer

from costctl.catalog.prices import (
    PriceTable,
    load_imported_prices,
    load_price_table,
    make_entry,
    merge_prices,
    parse_price_csv,
    prices_from_offers,
    rank_groups,
    shipped_prices,
)
from costctl.cli.main import main
from costctl.config import load_settings
from costctl.errors import ConfigError, CurrencyMismatchError
from costctl.money import ExchangeRate, Money


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def _settings(tmp_path: Path, toml: str):
    path = tmp_path / "costctl.toml"
    path.write_text(toml)
    return load_settings(path)


def test_shipped_prices_have_date_source_and_normalized_gpu():
    rows = shipped_prices()
    assert len(rows) >= 10
    for r in rows:
        assert isinstance(r.price_per_gpu_hour, Decimal) and r.price_per_gpu_hour > 0
        assert r.billing in ("on-demand", "spot", "prepaid", "from")
        assert r.source and isinstance(r.seen, date) and len(r.currency) == 3
        assert (r.billing == "prepaid") == (r.period_price is not None)
    by_raw = {(r.provider, r.gpu_raw, r.billing, r.tier): r for r in rows}
    nvl = by_raw[("vastai", "H100 NVL", "from", "on-demand listings")]
    assert nvl.known is False and nvl.gpu == "H100 NVL"  # kept, flagged
    assert len({r.key for r in rows}) == len(rows)  # no row hides another


def test_runpod_rows_are_labelled_as_runpod_publishes_them():
    """RunPod's own documentation (https://docs.runpod.io/sdks/python/apis, runpod.get_gpu
    for "NVIDIA A100 80GB PCIe"): securePrice 1.89, communityPrice 1.59, communitySpotPrice
    0.89, secureSpotPrice null -- on-demand in the secure and community clouds, spot in the
    community cloud. The old rows called the community on-demand price "spot"."""
    runpod = {(r.gpu, r.billing, r.tier): r for r in shipped_prices() if r.provider == "runpod"}
    documented = {k: v.price_per_gpu_hour for k, v in runpod.items() if v.gpu == "A100-80GB-PCIe"}
    assert documented == {
        ("A100-80GB-PCIe", "on-demand", "secure"): Decimal("1.89"),
        ("A100-80GB-PCIe", "on-demand", "community"): Decimal("1.59"),
        ("A100-80GB-PCIe", "spot", "community"): Decimal("0.89"),
    }
    assert all(runpod[k].source.startswith("https://docs.runpod.io/") for k in documented)
    # the third-party table's "Spot" column ($0.34 for an RTX 4090) is the community on-demand
    # price; RunPod's spot price for the card is lower ($0.22)
    assert runpod[("RTX 4090", "on-demand", "community")].price_per_gpu_hour == Decimal("0.34")
    assert runpod[("RTX 4090", "on-demand", "secure")].price_per_gpu_hour == Decimal("0.60")
    assert runpod[("RTX 4090", "spot", "")].price_per_gpu_hour == Decimal("0.22")
    assert all(r.seen and r.source for r in runpod.values())


def test_vast_from_prices_are_shown_but_never_ranked(tmp_path, capsys):
    """The Vast rows are third-party "from" figures (a range's low end, the lowest listing):
    no billing mode a job can count on. recommend never ranks them; gpus lists them last."""
    vast = [r for r in shipped_prices() if r.provider == "vastai"]
    assert vast and all(r.billing == "from" and not r.ranked for r in vast)
    assert main(["gpus", "--sort", "price", "--billing", "any", "--format", "json"]) == 0
    listed = [r for r in json.loads(capsys.readouterr().out) if r["price"]]
    ranks = [r["price"]["ranked"] for r in listed]
    assert ranks == sorted(ranks, reverse=True)  # every ranked price before any "from" floor
    assert main(["recommend", "--model", "gpt2", "--batch", "1", "--seq-len", "128", "--billing", "any",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    billed = {o["billing"] for g in out["fits"] for o in g["ranked"] if o["billing"]}
    assert "from" not in billed and billed


def test_config_override_wins_over_the_seed(tmp_path):
    settings = _settings(tmp_path, """
[[catalog.prices]]
provider = "runpod"
gpu = "NVIDIA GeForce RTX 4090"
billing = "on-demand"
price_per_gpu_hour = "0.59"
currency = "usd"
seen = 2026-07-01
tier = "secure"
""")
    table = load_price_table(settings)
    rows = {r.tier: r for r in table.lookup("RTX 4090", provider="runpod", billing="on-demand")}
    row = rows["secure"]
    assert row.price_per_gpu_hour == Decimal("0.59") and row.currency == "USD"
    assert row.source == "config" and row.seen == date(2026, 7, 1)
    assert row.price == Money(Decimal("0.59"), "USD")
    assert rows["community"].price_per_gpu_hour == Decimal("0.34")  # the other tier is untouched


def test_bad_config_price_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="catalog.prices"):
        _settings(tmp_path, """
[[catalog.prices]]
provider = "autodl"
gpu = "RTX 4090"
price_per_gpu_hour = "cheap"
currency = "CNY"
seen = 2026-07-01
""")
    with pytest.raises(ConfigError, match="billing"):
        _settings(tmp_path, """
[[catalog.prices]]
provider = "autodl"
gpu = "RTX 4090"
billing = "monthly"
price_per_gpu_hour = "1.98"
currency = "CNY"
seen = 2026-07-01
""")


@pytest.mark.parametrize(
    "args, match",
    [
        (("", "RTX 4090", "on-demand", "1", "USD", "2026-01-01", "s"), "provider is empty"),
        (("x", "", "on-demand", "1", "USD", "2026-01-01", "s"), "gpu is empty"),
        (("x", "RTX 4090", "hourly", "1", "USD", "2026-01-01", "s"), "billing"),
        (("x", "RTX 4090", "spot", "-1", "USD", "2026-01-01", "s"), "-1 is outside the range; expected an amount of money from 0 to 1000000000"),
        (("x", "RTX 4090", "spot", "abc", "USD", "2026-01-01", "s"), "not a number"),
        (("x", "RTX 4090", "spot", "1", "US", "2026-01-01", "s"), "currency"),
        (("x", "RTX 4090", "spot", "1", "USD", "01/02/2026", "s"), "YYYY-MM-DD"),
    ],
)
def test_make_entry_rejects_bad_values(args, match):
    with pytest.raises(ConfigError, match=match):
        make_entry(*args)


def test_price_csv_needs_its_columns():
    with pytest.raises(ConfigError, match="missing column"):
        parse_price_csv("provider,gpu,price\nx,RTX 4090,1\n", origin="t.csv")
    rows = parse_price_csv(
        "# comment\nsource,seen,currency,price_per_gpu_hour,billing,gpu,provider\n"
        "s,2026-01-02,cny,1.98,on-demand,RTX 4090,AutoDL\n",
        origin="t.csv",
    )
    assert rows[0].provider == "autodl" and rows[0].currency == "CNY" and rows[0].gpu == "RTX 4090"


def _entries():
    return [
        make_entry("autodl", "RTX 4090", "on-demand", "1.98", "CNY", "2026-07-01", "s"),
        make_entry("runpod", "RTX 4090", "on-demand", "0.34", "USD", "2026-07-01", "s"),
        make_entry("vastai", "RTX 4090", "on-demand", "0.30", "USD", "2026-07-01", "s"),
    ]


def test_currencies_are_never_mixed_without_a_rate():
    table = PriceTable(tuple(_entries()))
    with pytest.raises(CurrencyMismatchError, match="exchange_rates"):
        table.cheapest("RTX 4090")
    assert table.cheapest("RTX 4090", currency="USD").provider == "vastai"
    groups = rank_groups(list(table.entries), lambda e: e.price)
    assert [(c, [e.provider for e in g]) for c, g in groups] == [("CNY", ["autodl"]), ("USD", ["vastai", "runpod"])]


def test_an_exchange_rate_ranks_currencies_together():
    """1 USD = 7.10 CNY: AutoDL's 1.98 CNY is 0.279 USD, cheaper than Vast's 0.30 USD."""
    rate = ExchangeRate("USD", "CNY", Decimal("7.10"), date(2026, 7, 1))
    table = PriceTable(tuple(_entries()), rates=(rate,))
    assert table.cheapest("RTX 4090", currency="USD").provider == "autodl"
    assert table.cheapest("RTX 4090", currency="CNY").provider == "autodl"
    groups = rank_groups(list(table.entries), lambda e: e.price, table.rates, "USD")
    assert [(c, [e.provider for e in g]) for c, g in groups] == [("USD", ["autodl", "vastai", "runpod"])]
    # Without a target currency, the currency most prices are in is used.
    groups = rank_groups(list(table.entries), lambda e: e.price, table.rates)
    assert groups[0][0] == "USD" and len(groups) == 1


def test_exchange_rates_come_from_config(tmp_path):
    settings = _settings(tmp_path, """
[catalog]
currency = "USD"
[[catalog.exchange_rates]]
base = "usd"
quote = "cny"
rate = "7.10"
as_of = 2026-07-01
""")
    table = load_price_table(settings)
    [rate] = table.rates
    assert (rate.base, rate.quote, rate.rate, rate.as_of) == ("USD", "CNY", Decimal("7.10"), date(2026, 7, 1))
    assert table.convert(Money(Decimal("7.10"), "CNY"), "USD") == Money(Decimal("1"), "USD")
    assert table.convert(Money(Decimal("1"), "EUR"), "USD") is None
    with pytest.raises(ConfigError, match="rate"):
        _settings(tmp_path, "[[catalog.exchange_rates]]\nbase='USD'\nquote='CNY'\nrate=0\nas_of=2026-07-01\n")


def test_merge_later_layers_win_by_provider_gpu_billing():
    a = make_entry("runpod", "RTX 4090", "spot", "0.30", "USD", "2026-01-01", "old")
    b = make_entry("runpod", "RTX4090", "spot", "0.25", "USD", "2026-02-01", "new")
    c = make_entry("runpod", "RTX 4090", "on-demand", "0.60", "USD", "2026-02-01", "od")
    merged = merge_prices([a, c], [b])
    assert [(e.billing, e.source) for e in merged] == [("spot", "new"), ("on-demand", "od")]
    secure = make_entry("runpod", "RTX 4090", "on-demand", "0.69", "USD", "2026-02-01", "s", tier="secure")
    assert len(merge_prices([c], [secure])) == 2  # a tier is its own price


def test_prices_from_provider_offers_keep_the_cheapest_per_gpu_hour():
    def offer(gpu, n, price, billing=BillingMode.ON_DEMAND, cur="USD"):
        return Offer(provider="vastai", id=f"{gpu}-{n}", gpu=None, gpu_raw=gpu, gpu_count=n, billing=billing,
                     price_per_hour=Decimal(price), currency=cur, gpu_memory_bytes=80 * 2**30)

    rows = prices_from_offers([
        offer("A100 SXM4", 1, "1.30"), offer("A100 SXM4", 4, "4.80"),  # 1.20 per GPU-hour wins
        offer("RTX 4090", 2, "0.70", BillingMode.SPOT), offer("RTX 4090", 1, "0.50", BillingMode.PREPAID),
    ], seen=date(2026, 7, 1))
    got = {(r.gpu, r.billing): r.price_per_gpu_hour for r in rows}
    assert got == {("A100-80GB", "on-demand"): Decimal("1.20"), ("RTX 4090", "spot"): Decimal("0.35")}


def test_cli_refresh_from_the_simulated_provider(tmp_path, capsys):
    assert main(["gpus", "--refresh", "sim", "--seen", "2026-07-01"]) == 0
    assert "imported" in capsys.readouterr().err
    rows = load_imported_prices()
    assert rows and {r.provider for r in rows} == {"sim"} and all(r.known for r in rows)
    assert main(["gpus", "--provider", "sim", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["price"]["provider"] for r in listed} == {"sim"}
    assert main(["gpus", "--refresh", "autodl"]) == 2  # AutoDL publishes no price list
    assert "[[catalog.prices]]" in capsys.readouterr().err
    assert main(["gpus", "--refresh", "nosuch"]) == 2
    assert "unknown provider" in capsys.readouterr().err
