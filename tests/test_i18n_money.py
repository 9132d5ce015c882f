"""Money as people read it, one rule in every command and both languages (issue 16, part 3:
"¥ and thousands separators by locale").

Every amount a person reads goes through :func:`costctl.i18n.format_amount` (or
:meth:`costctl.money.Money.shown`, the same): Babel's CLDR symbols and separators (``¥1,008.00``
in Chinese, ``CN¥1,008.00`` / ``$0.45`` in English), 2 decimals from 1 up, up to 4 below (a
Vast.ai price of 0.0123 USD/h is ``$0.0123``, never ``$0.01``). Tables whose cells must add up
(``costctl bill``) keep fixed places (tests/test_bill_table_sums.py). Machine output is left
exact and the same in either language: JSON, the evidence a decision stores, the stored
countdown text, ``str(Money)``."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costctl import i18n
from costctl.i18n import SMALL_AMOUNT_PLACES, amount_places, format_amount
from costctl.money import Money

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: Vast.ai's kind of price: under a cent's worth of display at 2 places.
SMALL_PRICE_TOML = """
[[catalog.prices]]
provider = "vastai"
gpu = "RTX 3060"
price_per_gpu_hour = "0.0123"
currency = "USD"
seen = 2026-11-01
"""


@pytest.fixture(autouse=True)
def _language_restored(monkeypatch: pytest.MonkeyPatch):
    """Each test chooses its language; the one before it is restored after."""
    for key in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "COSTCTL_UI__LANGUAGE"):
        monkeypatch.delenv(key, raising=False)
    before = i18n.language()
    yield
    i18n.set_language(before)


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(("amount", "currency", "english", "chinese"), [
    ("0.0123", "USD", "$0.0123", "US$0.0123"),       # a Vast.ai price: 4 decimals, not $0.01
    ("0.45", "USD", "$0.45", "US$0.45"),             # under 1: as many decimals as it needs, at least 2
    ("0.4499", "USD", "$0.4499", "US$0.4499"),
    ("0.125", "CNY", "CN¥0.125", "¥0.125"),
    ("0.123456", "USD", "$0.1235", "US$0.1235"),     # rounded half-even to 4 decimals
    ("1008", "CNY", "CN¥1,008.00", "¥1,008.00"),     # from 1 up: 2 decimals, thousands separators
    ("1234.565", "CNY", "CN¥1,234.56", "¥1,234.56"),  # half-even
    ("1.4411", "CNY", "CN¥1.44", "¥1.44"),
    ("0.99996", "USD", "$1.00", "US$1.00"),
    ("3", "JPY", "¥3", "JP¥3"),                      # the currency's own decimals (CLDR)
    ("0", "USD", "$0.00", "US$0.00"),
    ("0.00004", "USD", "<$0.0001", "<US$0.0001"),    # never 0 for an amount that is not
    ("-0.5", "USD", "-$0.50", "-US$0.50"),
])
def test_the_rule_in_either_language(amount: str, currency: str, english: str, chinese: str) -> None:
    i18n.set_language("en")
    assert format_amount(Decimal(amount), currency) == english
    assert Money(Decimal(amount), currency).shown() == english
    i18n.set_language("zh_CN")
    assert format_amount(Decimal(amount), currency) == chinese
    assert Money(Decimal(amount), currency).shown() == chinese


@given(st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"), allow_nan=False, allow_infinity=False,
                   places=8),
       st.sampled_from(["en", "zh_CN"]))
def test_what_is_shown_is_the_amount_to_its_places(amount: Decimal, language: str) -> None:
    """The number shown is the amount rounded half-even to :func:`amount_places` decimals (2
    from 1 up, at most 4 below), with the language's symbol before it; a non-zero amount is
    never shown as zero, and under 1 never loses a digit a 4-decimal price has."""
    i18n.set_language(language)
    shown = format_amount(amount, "USD")
    symbol = "$" if language == "en" else "US$"
    body = shown.lstrip("<>")
    negative = body.startswith("-")
    body = body.lstrip("-")
    assert body.startswith(symbol), shown
    number = Decimal(body[len(symbol):].replace(",", ""))
    places = amount_places(amount)
    assert 2 <= places <= SMALL_AMOUNT_PLACES
    if shown[0] in "<>":  # a non-zero amount under the last place shown
        assert amount != 0 and abs(amount) < Decimal("0.00005") and number == Decimal("0.0001")
        return
    value = -number if negative else number
    assert abs(value - amount) <= Decimal(1).scaleb(-places) / 2
    assert -number.as_tuple().exponent == places
    if abs(amount) < 1:
        assert abs(value - amount) <= Decimal("0.00005")


def test_str_of_money_stays_the_exact_machine_form_in_chinese() -> None:
    """``str(Money)`` is what logs and ``json.dumps(..., default=str)`` write: the same in every
    language; people read :meth:`Money.shown`."""
    i18n.set_language("zh_CN")
    money = Money(Decimal("1234.5"), "CNY")
    assert str(money) == "1234.50 CNY" and money.shown() == "¥1,234.50"
    assert json.dumps({"cost": money}, default=str) == '{"cost": "1234.50 CNY"}'


# ----------------------------------------------------------------------------- gpus and recommend


def _cli(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, language: str,
         config: str = "") -> tuple[str, str]:
    from costctl.cli.main import main

    (tmp_path / "costctl.toml").write_text(config)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", language)  # [ui] language: chosen when the settings load
    for key in ("RUNPOD_API_KEY", "VAST_API_KEY", "AUTODL_TOKEN"):  # the dated table, never an API
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def _row(out: str, start: str, needle: str = "") -> str:
    return next(line for line in out.splitlines() if re.match(re.escape(start) + r"\s\s", line) and needle in line)


def test_gpus_for_autodl_shows_yuan_with_thousands_separators_in_chinese(tmp_path, monkeypatch, capsys) -> None:
    args = ["gpus", "--provider", "autodl", "--offline"]
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "zh_CN")
    assert " CNY" not in out
    assert "¥1.98" in _row(out, "RTX 4090", "按需")        # billing kinds in Chinese (display words)
    # a month's rental of an RTX 4090: 1052 yuan, with the separator, beside its price per hour
    assert "¥1.44（¥1,052.00/月）" in _row(out, "RTX 4090", "包月")
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "en")
    assert " CNY" not in out
    assert "CN¥1.98" in _row(out, "RTX 4090", "on-demand")
    assert "CN¥1.44 (CN¥1,052.00/month)" in _row(out, "RTX 4090", "prepaid")


def test_recommend_for_autodl_ranks_in_yuan_with_thousands_separators(tmp_path, monkeypatch, capsys) -> None:
    """A long BERT-base run (10^8 steps) costs thousands of yuan: the job cost has separators,
    and the hours are whole hours with separators, never an exponent."""
    args = ["recommend", "-p", "autodl", "--model", "bert-base", "--batch", "32", "--seq-len", "128",
            "--steps", "100000000", "--offline"]
    doc = json.loads(_cli([*args, "--format", "json"], tmp_path, monkeypatch, capsys, "en")[0])
    (group,) = [g for g in doc["fits"] if g["currency"]]
    first = group["ranked"][0]
    cost = Decimal(first["cost"])
    assert group["currency"] == "CNY" and cost >= 1000
    price = Decimal(first["price_per_gpu_hour"])
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "zh_CN")
    row = _row(out, " 1 ", first["gpu"])
    i18n.set_language("zh_CN")
    assert format_amount(cost, "CNY") in row and format_amount(price, "CNY") in row
    assert re.search(r"¥\d{1,3},\d{3}\.\d\d$", row.rstrip()), row
    table = out[out.index("任务花费"):out.index("注：")]
    assert "e+" not in table and " CNY" not in table
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "en")
    row = _row(out, " 1 ", first["gpu"])
    i18n.set_language("en")
    assert format_amount(cost, "CNY") in row and row.rstrip().endswith(format_amount(cost, "CNY"))
    assert re.search(r"CN¥\d{1,3},\d{3}\.\d\d$", row.rstrip()), row
    assert "e+" not in out[out.index("Job cost"):out.index("note: ")]


def test_english_shows_dollars_and_yuan_by_their_symbols(tmp_path, monkeypatch, capsys) -> None:
    out, _err = _cli(["recommend", "--model", "bert-base", "--steps", "3000", "--offline"], tmp_path, monkeypatch,
                     capsys, "en")
    usd = out[out.index("(in USD)"):]
    cny = out[out.index("(in CNY)"):]
    assert re.search(r"\$\d+\.\d{2,4}", usd.split("\n\n")[0]) and re.search(r"CN¥\d", cny.split("\n\n")[0])
    assert not re.search(r"\d (USD|CNY)\b", out), out


def test_a_small_price_keeps_four_decimals(tmp_path, monkeypatch, capsys) -> None:
    args = ["gpus", "--provider", "vastai", "--billing", "on-demand", "--offline"]
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "en", SMALL_PRICE_TOML)
    row = _row(out, "RTX 3060", "vastai")
    assert "$0.0123" in row and "$0.01 " not in row
    out, _err = _cli(args, tmp_path, monkeypatch, capsys, "zh_CN", SMALL_PRICE_TOML)
    assert "US$0.0123" in _row(out, "RTX 3060", "vastai")


@pytest.mark.parametrize("args", [
    ["gpus", "--provider", "autodl", "--offline", "--format", "json"],
    ["gpus", "--provider", "autodl", "--currency", "USD", "--offline", "--format", "json"],
    ["gpus", "--provider", "vastai", "--offline", "--format", "json"],
    ["recommend", "-p", "autodl", "--model", "bert-base", "--batch", "32", "--seq-len", "128", "--steps", "3000",
     "--currency", "USD", "--offline", "--format", "json"],
])
def test_json_is_the_same_in_either_language(args, tmp_path, monkeypatch, capsys) -> None:
    """The JSON keeps exact decimal strings and currency codes, byte for byte in either language
    (it holds no timestamps); only ``recommend``'s ``notes``, sentences for people, are in the
    language shown."""
    config = SMALL_PRICE_TOML + '[[catalog.exchange_rates]]\nbase = "USD"\nquote = "CNY"\nrate = "7.12"\n' \
                                'as_of = 2026-11-30\n'
    english, _err = _cli(args, tmp_path, monkeypatch, capsys, "en", config)
    chinese, _err = _cli(args, tmp_path, monkeypatch, capsys, "zh_CN", config)
    assert "¥" not in english + chinese and "$" not in english + chinese
    if args[0] == "gpus":
        assert chinese == english
        assert '"price_per_gpu_hour": "0.0123"' in english or "autodl" in args
    else:
        en_doc, zh_doc = json.loads(english), json.loads(chinese)
        assert en_doc.pop("notes") != zh_doc.pop("notes")
        assert en_doc == zh_doc


# ----------------------------------------------------------------------------- the watch's texts


def test_the_watch_summary_writes_money_by_language() -> None:
    from costctl.summary import RunSummary

    summary = RunSummary(spend=Money(Decimal("1234.5678"), "CNY"), duration=timedelta(hours=3),
                         waste=Money(Decimal("0.0123"), "CNY"), waste_s=42.0)

    def text() -> str:
        buf = io.StringIO()
        summary.print("abcdef0123", "CNY", buf)
        return " ".join(buf.getvalue().replace("│", " ").split())

    i18n.set_language("zh_CN")
    chinese = text()
    assert "花费 ¥1,234.57" in chinese and "¥0.0123（上一个检查点之后的 42 秒）" in chinese
    i18n.set_language("en")
    english = text()
    assert "spend CN¥1,234.57" in english and "CN¥0.0123 (42s since the last checkpoint)" in english
    assert " CNY" not in chinese + english
    assert summary.as_dict()["waste"] == "0.0123"  # the JSON form stays exact


def test_nothing_spent_is_zero_in_the_instance_s_currency() -> None:
    from costctl.summary import RunSummary

    buf = io.StringIO()
    i18n.set_language("zh_CN")
    RunSummary().print("abcdef0123", "CNY", buf)
    assert "¥0.00" in buf.getvalue()


def _budget(language: str):
    from costctl.config import BudgetConfig
    from costctl.policies import BudgetPolicy, History

    i18n.set_language(language)
    policy = BudgetPolicy(BudgetConfig(total="1000"), "CNY")
    (decision,) = policy.decisions(History(spend_total=Money(Decimal("1234.5"), "CNY")), T0)
    pending = BudgetPolicy(BudgetConfig(total="2000"), "CNY").pending(
        History(rate=Money(Decimal("100"), "CNY"), spend_total=Money(Decimal("1234.5"), "CNY")), T0)
    return decision, pending


def test_the_budget_cap_s_reason_countdown_and_notification_by_language() -> None:
    from costctl.decisions import RecordedDecision
    from costctl.notify.events import Context, decision_message

    ctx = Context(provider="autodl", instance="pro-1", run="abcdef0123", host="autodl-container-1")
    zh, zh_pending = _budget("zh_CN")
    assert zh.reason == "总花费 ¥1,234.50 已达到总预算 ¥1,000.00"
    assert zh_pending is not None and zh_pending.progress == "总预算 ¥1,234.50 / ¥2,000.00"
    message = decision_message(RecordedDecision(zh, "stopped", "abcdef0123", False, 1), ctx)
    assert message is not None and "总花费 ¥1,234.50 已达到总预算 ¥1,000.00" in message.body
    en, en_pending = _budget("en")
    assert en.reason == "total spend CN¥1,234.50 reached the total budget of CN¥1,000.00"
    assert en_pending is not None and en_pending.progress == "total budget CN¥1,234.50 of CN¥2,000.00"
    message = decision_message(RecordedDecision(en, "stopped", "abcdef0123", False, 1), ctx)
    assert message is not None and en.reason in message.body
    # what is stored stays machine data, the same in either language: exact amounts, the code
    assert zh.evidence == en.evidence
    assert (en.evidence["spend"], en.evidence["cap_amount"], en.evidence["currency"]) == ("1234.5", "1000", "CNY")
    assert zh_pending.progress_stored == en_pending.progress_stored == "total budget 1234.50 of 2000 CNY"


def test_a_cost_clause_says_the_rate_by_language() -> None:
    """The loss diagnoses' money clause (plateau, overfitting, not learning, unstable)."""
    from costctl.policies.base import cost_clause

    rate = Money(Decimal("0.0123"), "USD")
    rest = {"cost": "1234.5", "currency": "CNY"}
    i18n.set_language("zh_CN")
    assert "US$0.0123" in cost_clause(None, rate) and "¥1,234.50" in cost_clause(rest, rate)
    i18n.set_language("en")
    assert cost_clause(None, rate) == "it costs $0.0123/h while it runs"
    assert cost_clause(rest, rate) == "the rest of the run would cost about CN¥1,234.50"
