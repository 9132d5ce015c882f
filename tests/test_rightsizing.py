"""Right-sizing (issue 15, part 2): ``costctl analyze`` names the cheapest card that fits a
recorded run with headroom and what the run would have cost there, in the run's currency, through
the same rule as the end-of-watch and ``costctl bill`` advice (costctl.lifecycle.underuse).

The two cases of the issue's "Must show": a synthetic one-hour V100S-32GB trace at 26 % mean
utilization with 472 MiB peak memory, and the guides' case (an A100 40 GB at under 30 %
utilization whose memory never passed 12 GB, priced in CNY).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.catalog import get_gpu
from costctl.cli.main import main
from costctl.i18n import format_amount
from costctl.config import DownsizeConfig
from costctl.lifecycle.sizing import PriceOption, time_factor
from costctl.lifecycle.underuse import rightsizing_from_log
from costctl.money import Money

MIB = 2**20
GIB = 2**30


def smi_trace(path: Path, *, name: str, total_mib: int, hours: float, interval_s: int, mean_util: float,
              peak_mib: int, seed: int) -> float:
    """Write an ``nvidia-smi --query-gpu`` CSV (timestamp, name, utilization, memory used/total)
    whose utilization averages exactly ``mean_util`` percent (integer readings, bursty: runs of
    busy samples between quieter ones) and whose memory used peaks at ``peak_mib``; returns the
    mean written."""
    rng = random.Random(seed)
    n = int(hours * 3600 / interval_s)
    utils = [rng.choice((0, 5, 10, 40, 60, 70)) for _ in range(n)]
    target = round(mean_util * n)
    # nudge readings one point at a time (bounded 0..100) until the sum is exact
    i, total = 0, sum(utils)
    while total != target:
        k = i % n
        if total < target and utils[k] < 100:
            utils[k] += 1
            total += 1
        elif total > target and utils[k] > 0:
            utils[k] -= 1
            total -= 1
        i += 7919
    t0 = datetime(2026, 11, 20, 9, 0, 0)
    with path.open("w") as f:
        f.write("timestamp, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n")
        for k, u in enumerate(utils):
            used = peak_mib if k % 97 == 13 else int(peak_mib * (0.6 + 0.35 * rng.random()))
            f.write(f"{t0 + timedelta(seconds=k * interval_s):%Y/%m/%d %H:%M:%S}.000, {name}, {u} %, "
                    f"{used} MiB, {total_mib} MiB\n")
    return sum(utils) / n


def _analyze(capsys, *args: str) -> dict:
    capsys.readouterr()
    assert main(["analyze", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_v100s_at_26_percent_with_472_mib_gets_a_cheaper_card_and_the_money(tmp_path, capsys):
    log = tmp_path / "v100s.csv"
    mean = smi_trace(log, name="Tesla V100S-PCIE-32GB", total_mib=32768, hours=1, interval_s=1,
                     mean_util=26.0, peak_mib=472, seed=1)
    assert mean == pytest.approx(26.0)
    doc = _analyze(capsys, "--gpu-log", str(log), "--price", "0.90", "--currency", "USD")
    rs = doc["rightsizing"]
    advice = rs["advice"]
    assert advice is not None, rs["reason"]
    assert advice["gpu"] == "Tesla V100S-PCIE-32GB" and advice["peak_memory_bytes"] == 472 * MIB
    assert advice["mean_utilization"] == pytest.approx(26.0, abs=0.01)
    assert advice["currency"] == "USD" and advice["duration_s"] == pytest.approx(3599)
    card = advice["cheaper_card"]
    assert card["fits"] and card["currency"] == "USD" and Decimal(card["price_per_hour"]) < Decimal("0.90")
    # the money follows the documented speed model: effective = price x Amdahl factor at 26 %
    factor, _ = time_factor("V100S-32GB", card["gpu"], 0.26)
    assert card["time_factor"] == pytest.approx(factor, rel=1e-3)
    effective = Decimal(card["price_per_hour"]) * Decimal(repr(factor))
    saved = (Decimal("0.90") - effective) * Decimal(3599) / 3600
    assert Decimal(advice["would_have_saved"]) == pytest.approx(saved, rel=Decimal("1e-6"))
    assert Decimal(advice["would_have_cost"]) == pytest.approx(effective * Decimal(3599) / 3600, rel=Decimal("1e-6"))
    assert "any kernel ran" in advice["speed_model"]

    # the table names the card and the money
    capsys.readouterr()
    assert main(["analyze", "--gpu-log", str(log), "--price", "0.90", "--currency", "USD"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"right-sizing: the recorded run used at most 0.5 GiB of 32 GiB on Tesla V100S-PCIE-32GB at 26% mean" in out
    saved_text = format_amount(Decimal(advice["would_have_saved"]), "USD")  # as every command writes money
    assert card["gpu"] in out and f"for about {saved_text} less" in out and "would have cost about" in out


CNY_PRICES = """
[instance]
provider = "autodl"
currency = "CNY"
[[catalog.prices]]
provider = "autodl"
gpu = "A100-40GB"
price_per_gpu_hour = "6.68"
currency = "CNY"
seen = 2026-11-30
[[catalog.prices]]
provider = "autodl"
gpu = "T4"
price_per_gpu_hour = "0.88"
currency = "CNY"
seen = 2026-11-30
[[catalog.prices]]
provider = "autodl"
gpu = "V100-32GB"
price_per_gpu_hour = "2.28"
currency = "CNY"
seen = 2026-11-30
[[catalog.prices]]
provider = "autodl"
gpu = "RTX 3090"
price_per_gpu_hour = "1.58"
currency = "CNY"
seen = 2026-11-30
"""


def test_the_guides_a100_40gb_case_names_a_card_and_the_money_in_cny(tmp_path, capsys):
    """An A100 40 GB text classifier under 30 % utilization whose memory never passed 12 GB: the
    advice names a card that fits 12 GB with headroom and the yuan it would have saved."""
    log = tmp_path / "a100.csv"
    smi_trace(log, name="NVIDIA A100-PCIE-40GB", total_mib=40960, hours=3, interval_s=5, mean_util=24.0,
              peak_mib=12 * 1024, seed=2)
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(CNY_PRICES)
    doc = _analyze(capsys, "--gpu-log", str(log), "--config", str(cfg), "--price", "6.68", "--currency", "CNY")
    advice = doc["rightsizing"]["advice"]
    assert advice is not None, doc["rightsizing"]["reason"]
    card = advice["cheaper_card"]
    assert advice["currency"] == "CNY" and card["currency"] == "CNY"
    assert card["gpu"] in ("T4", "V100-32GB", "RTX 3090") and card["fits"]
    assert card["memory_bytes"] >= 12 * GIB * (1 + DownsizeConfig().headroom)
    assert Decimal(advice["would_have_saved"]) > 0
    hours = Decimal(repr(advice["duration_s"])) / 3600
    assert Decimal(advice["would_have_saved"]) + Decimal(advice["would_have_cost"]) == pytest.approx(
        Decimal("6.68") * hours, rel=Decimal("1e-6"))
    capsys.readouterr()
    assert main(["analyze", "--gpu-log", str(log), "--config", str(cfg), "--price", "6.68", "--currency", "CNY"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    saved_text = format_amount(Decimal(advice["would_have_saved"]), "CNY")
    assert "right-sizing:" in out and f"for about {saved_text} less" in out and saved_text.startswith("CN¥")
    assert card["gpu"] in out


def test_a_card_that_was_used_gets_no_advice_and_says_why(tmp_path, capsys):
    log = tmp_path / "busy.csv"
    smi_trace(log, name="NVIDIA A100-PCIE-40GB", total_mib=40960, hours=0.5, interval_s=5, mean_util=85.0,
              peak_mib=30 * 1024, seed=3)
    doc = _analyze(capsys, "--gpu-log", str(log), "--price", "1.5", "--currency", "USD")
    assert doc["rightsizing"]["advice"] is None
    assert "the card was used" in doc["rightsizing"]["reason"]
    # no price: says what to give
    doc = _analyze(capsys, "--gpu-log", str(log))
    assert doc["rightsizing"]["advice"] is None and "--price" in doc["rightsizing"]["reason"]


def test_no_price_in_the_runs_currency_is_never_compared_across_currencies():
    cfg = DownsizeConfig()
    usd = [PriceOption("T4", 1, Decimal("0.20"), "USD", "runpod", "on-demand", 16 * GIB)]
    rs = rightsizing_from_log(run_id="r", gpu="A100-40GB", rate=Money(Decimal("6.68"), "CNY"), duration_s=3600,
                              peak_memory_bytes=2 * GIB, card_memory_bytes=40 * GIB, mean_utilization=20.0,
                              options=usd, config=cfg)
    assert rs.advice is None and "no CNY price" in rs.reason


def test_missing_memory_or_utilization_is_never_guessed():
    cfg = DownsizeConfig()
    opts = [PriceOption("T4", 1, Decimal("0.20"), "USD", "runpod", "on-demand", 16 * GIB)]
    for peak, util in ((None, 20.0), (2 * GIB, None)):
        rs = rightsizing_from_log(run_id="r", gpu="A100-40GB", rate=Money(Decimal("1.5"), "USD"), duration_s=3600,
                                  peak_memory_bytes=peak, card_memory_bytes=40 * GIB, mean_utilization=util,
                                  options=opts, config=cfg)
        assert rs.advice is None and "does not record both" in rs.reason


def test_v100s_is_in_the_catalog_from_its_datasheet():
    v = get_gpu("Tesla V100S-PCIE-32GB")
    assert v is not None and v.name == "V100S-32GB" and v.memory_bytes == 32 * GIB
    assert v.peak_tflops("fp16") == 130


def test_the_guides_case_on_autodl_is_compared_with_autodls_cny_table(tmp_path, capsys):
    """An AutoDL instance (``[instance] provider = "autodl"``) at its yuan price: the cheaper
    cards come from AutoDL's CNY price table, never from a USD one."""
    log = tmp_path / "a100.csv"
    smi_trace(log, name="NVIDIA A100-PCIE-40GB", total_mib=40960, hours=2, interval_s=5, mean_util=24.0,
              peak_mib=12 * 1024, seed=4)
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[instance]\nprovider = "autodl"\ncurrency = "CNY"\n')
    doc = _analyze(capsys, "--gpu-log", str(log), "--config", str(cfg), "--price", "6.68", "--currency", "CNY")
    advice = doc["rightsizing"]["advice"]
    assert advice is not None, doc["rightsizing"]["reason"]
    assert advice["currency"] == "CNY" and advice["cheaper_card"]["currency"] == "CNY"
    assert advice["cheaper_card"]["provider"] == "autodl" and advice["cheaper_card"]["fits"]
    assert advice["cheaper_card"]["price_source"] == "price table"
    assert Decimal(advice["would_have_saved"]) > 0


def test_a_faster_card_is_never_credited_with_a_speed_up_so_a_pricier_card_never_saves():
    """An L40S's dense fp16 peak is above an RTX 4090's: without a cap the speed model would call
    a move to the pricier L40S a saving (issue 15 trial). The factor is at least 1."""
    from costctl.lifecycle.sizing import best_fit, rank_cards

    factor, _ = time_factor("RTX 4090", "L40S", None)
    assert factor == 1.0
    slower, _ = time_factor("A100-80GB", "RTX 3090", 0.5)
    assert slower > 1.0
    opts = [PriceOption("L40S", 1, Decimal("1.03"), "USD", "sim", "on-demand", 48 * GIB),
            PriceOption("RTX 3090", 1, Decimal("0.44"), "USD", "sim", "on-demand", 24 * GIB)]
    cards = rank_cards(current_gpu="RTX 4090", current_rate=Money(Decimal("0.69"), "USD"), peak_bytes=3 * GIB,
                       headroom=0.2, options=opts, utilization=0.2)
    best = best_fit(cards)
    assert best is not None and best.option.gpu == "RTX 3090"
    l40s = next(c for c in cards if c.option.gpu == "L40S")
    assert l40s.saving_per_hour < 0
