"""The table of `costctl bill` adds up as shown, in every grouping: over many random ledgers
(Hypothesis, derandomized), the WASTE, SAVED and SPEND cells of each currency add up to that
column's footer to the cent, and each footer is the exact (6-place) JSON total rounded half-even
to the cent — by run, chain (with --expand), instance, day (in three time zones) and GPU, and
with --limit (the runs not shown are one row of their own).

Ledgers are built through the ledger's own API on a real SQLite file: several instances in USD
and CNY, runs at rates with four decimals for lengths to the microsecond (some re-priced midway,
some overlapping on one instance), idle stops confirmed, failed or dry-run, preemption waste.
The table is parsed from the real command's output, piped (each row one line)."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costctl.cli.main import main
from costctl.ledger import Ledger
from costctl.records import Action, Decision
from costctl.report import apportion

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=timezone.utc)
CENT = Decimal("0.01")
MONEY_HEADERS = ("WASTE", "SAVED", "SPEND")

rates = st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("40"), places=4, allow_nan=False,
                    allow_infinity=False)
runs = st.lists(st.fixed_dictionaries({
    "instance": st.integers(0, 3),
    "start_us": st.integers(0, 3 * 86_400 * 10**6),
    "length_us": st.integers(1, 30_000 * 10**6),
    "rate": rates,
    "repriced": st.one_of(st.none(), rates),
    "stop": st.sampled_from([None, "confirmed", "failed", "dry", "budget"]),
    "idle_from": st.floats(0, 1),
    "waste": st.booleans(),
}), min_size=1, max_size=7)
instances = st.lists(st.tuples(st.sampled_from(["USD", "CNY"]), st.sampled_from(["T4", "L4", "A100"])),
                     min_size=4, max_size=4)


def build(url: str, insts: list[tuple[str, str]], specs: list[dict]) -> None:
    with Ledger.open(url) as ledger:
        pks = [ledger.ensure_instance("sim", f"i{k}", gpu=gpu, gpu_count=1 + k % 2, billing="on-demand",
                                      price_per_hour=Decimal(1), currency=cur)
               for k, (cur, gpu) in enumerate(insts)]
        for spec in specs:
            currency = insts[spec["instance"]][0]
            start = T0 + timedelta(microseconds=spec["start_us"])
            end = start + timedelta(microseconds=spec["length_us"])
            mode = "dry-run" if spec["stop"] == "dry" else None
            run = ledger.start_run(pks[spec["instance"]], started_at=start, command=None, log_path=None, host="h",
                                   mode=mode)
            if spec["repriced"] is not None:
                ledger.accrue(run, start + (end - start) / 2, spec["rate"], currency)
                ledger.accrue(run, end, spec["repriced"], currency)
            else:
                ledger.accrue(run, end, spec["rate"], currency)
            ledger.finish_run(run, ended_at=end, exit_code=0, status="succeeded")
            if spec["waste"]:
                ledger.record_waste(run, start_at=start + (end - start) / 3, end_at=start + (end - start) / 2,
                                    rate_per_hour=spec["rate"], currency=currency, reason="preemption")
            if spec["stop"] is None:
                continue
            since = start + (end - start) * spec["idle_from"]
            evidence = {} if spec["stop"] == "budget" else {"idle_since": since.isoformat()}
            decision = Decision(time=end - (end - start) / 10, policy="budget" if spec["stop"] == "budget" else "idle",
                                action=Action.STOP, reason="stop", evidence=evidence)
            did = ledger.record_decision(run, decision, outcome="stop", dry_run=spec["stop"] == "dry")
            if spec["stop"] != "dry":
                state = "failed" if spec["stop"] == "failed" else "confirmed"
                ledger.record_stop_event(run, decision_id=did, time=decision.time, state="requested", attempt=0)
                ledger.record_stop_event(run, decision_id=did, time=end, state=state, attempt=1)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("│")]


def parse_tables(out: str) -> list[dict]:
    """Each table of the output: its headers, body rows (cells) and footer lines (cells)."""
    tables, current, part = [], None, None
    for line in out.splitlines():
        if line.startswith("┏"):
            current, part = {"headers": [], "body": [], "footer": []}, "head"
            tables.append(current)
        elif current is None:
            continue
        elif line.startswith("┃"):
            current["headers"] = [c.strip() for c in line.strip()[1:-1].split("┃")]
        elif line.startswith("┡"):
            part = "body"
        elif line.startswith("├"):
            part = "footer"
        elif line.startswith("└"):
            current = None
        elif line.startswith("│"):
            current[part].append(_cells(line))
    return tables


#: How the table writes each currency of these ledgers (costctl.i18n.format_money, English:
#: ``$1,234.57``, ``CN¥2.50``): symbol -> ISO code.
SYMBOLS = {"$": "USD", "CN¥": "CNY"}


def amount(cell: str, symbols: dict[str, str] = SYMBOLS) -> tuple[Decimal, str | None]:
    """``(amount, currency)`` of a money cell as shown (``-`` is nothing, in no currency)."""
    if cell in ("-", ""):
        return Decimal(0), None
    for symbol, code in symbols.items():
        if cell.startswith(symbol):
            return Decimal(cell[len(symbol):].replace(",", "")), code
    raise AssertionError(f"not a money cell: {cell!r}")


def check_table(table: dict) -> dict[str, dict[str, Decimal]]:
    """Assert every money column adds up to its footer per currency; return the footers."""
    h = table["headers"]
    spend_at = h.index("SPEND")
    footers: dict[str, dict[str, Decimal]] = {}
    currencies = [amount(line[spend_at])[1] for line in table["footer"]]
    assert table["body"] and all(currencies)
    for header in MONEY_HEADERS:
        at = h.index(header)
        sums: dict[str, Decimal] = {}
        for row in table["body"]:
            currency = amount(row[spend_at])[1]
            value, own = amount(row[at])
            assert own in (None, currency)
            assert value == value.quantize(CENT)  # shown to the cent
            sums[currency] = sums.get(currency, Decimal(0)) + value
        footers[header] = {}
        for line, currency in zip(table["footer"], currencies):
            value, own = amount(line[at])
            assert own in (None, currency)
            assert sums.get(currency, Decimal(0)) == value, (header, currency, sums, value)
            footers[header][currency] = value
    return footers


def run(capsys, *args: str) -> str:
    assert main(["bill", *args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE", "COSTCTL_BILL__SAVED_HORIZON"):
        monkeypatch.delenv(name, raising=False)


#: Each grouping's table, with the options that change what it shows (the JSON totals are the
#: grouping's own, whatever --limit shows).
CASES = {"run": [(), ("--limit", "2")], "chain": [("--expand",), ("--limit", "1")], "instance": [()], "day": [()],
         "gpu": [()]}


@settings(derandomize=True, deadline=None, max_examples=8,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(insts=instances, specs=runs, zone=st.sampled_from(["UTC", "Asia/Shanghai", "America/New_York"]))
def test_every_grouping_adds_up_as_shown(capsys, monkeypatch, insts, specs, zone):
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", zone)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        build(url, insts, specs)
        for by, variants in CASES.items():
            doc = json.loads(run(capsys, "--by", by, "--format", "json", "--db", url))
            for key, name in (("totals", "spend"), ("waste_totals", "waste"), ("saved_totals", "saved")):
                for cur, total in doc[key].items():  # the JSON rows add up to the JSON totals exactly
                    assert sum(Decimal(r[name]) for r in doc["rows"] if r["currency"] == cur) == Decimal(total)
            for extra in variants:
                tables = parse_tables(run(capsys, "--by", by, *extra, "--db", url))
                footers = check_table(tables[0])
                for header, key in (("SPEND", "totals"), ("WASTE", "waste_totals"), ("SAVED", "saved_totals")):
                    exact = {cur: Decimal(v) for cur, v in doc[key].items()}
                    for currency, shown in footers[header].items():
                        assert shown == exact.get(currency, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_EVEN)
                # one row for those not shown (when they carry money: a run whose amounts round to
                # 0.000000 adds nothing to show; with every row's spend non-zero, the hidden ones' is)
                if ("--limit" in extra and len(doc["rows"]) > int(extra[1])
                        and all(Decimal(r["spend"]) != 0 for r in doc["rows"])):
                    assert any(row[0].endswith(f"older {by}s") or row[0].endswith(f"older {by}")
                               for row in tables[0]["body"])
                for extra_table in tables[1:]:  # --expand: the chains' runs add up too
                    check_table(extra_table)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(st.decimals(min_value=Decimal("-1000"), max_value=Decimal("1000"), places=6), max_size=30))
def test_apportion_adds_up_and_moves_each_amount_less_than_a_cent(amounts):
    cells, total = apportion(amounts)
    assert sum(cells, Decimal(0)) == total == sum(amounts, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_EVEN)
    assert all(abs(c - a) < CENT and c == c.quantize(CENT) for c, a in zip(cells, amounts))


def test_apportion_gives_the_missing_cents_to_the_largest_remainders():
    # 0.333 x 3 = 0.999 -> 1.00: two cells of 0.33 and one of 0.34, the first of the equal remainders.
    assert apportion([Decimal("0.333")] * 3) == ([Decimal("0.34"), Decimal("0.33"), Decimal("0.33")], Decimal("1.00"))
    assert apportion([Decimal("0.004"), Decimal("0.004"), Decimal("0.006")]) == (
        [Decimal("0.00"), Decimal("0.00"), Decimal("0.01")], Decimal("0.01"))
    # rounding each half-even would show 0.01 + 0.01 + 0.01 = 0.03 over a total of 0.02
    cells, total = apportion([Decimal("0.007")] * 3)
    assert total == Decimal("0.02") and sorted(cells) == [Decimal("0.00"), Decimal("0.01"), Decimal("0.01")]
