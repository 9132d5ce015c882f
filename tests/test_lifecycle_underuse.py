"""Underutilization advice at the end of a watch and in `costctl bill`."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.cli.main import main
from costctl.config import DownsizeConfig
from costctl.ledger.schema import DecisionRow
from costctl.lifecycle.sizing import PriceOption
from costctl.lifecycle.underuse import underuse_advice
from costctl.money import Money
from lifecycle_support import PY, T0, FixedGpu, GiB, SimClock, drive, settings, watcher

JOB = "import time\nfor i in range(30):\n    print(f'loss: {1/(i+1)}', flush=True)\n    time.sleep(0.05)\n"
A100 = '[instance]\nprovider = "sim"\ngpu = "A100 80GB"\n[watch]\nsample_interval = "5s"\n'


@pytest.mark.realtime  # a real child against a simulated clock
def test_end_of_run_advice_names_the_cheaper_card_and_the_money(tmp_path, capsys, monkeypatch):
    s = settings(tmp_path, A100)
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", JOB], clock, on_exit="leave",
                sampler=FixedGpu(used_bytes=4 * GiB, total_bytes=80 * GiB, utilization=20.0))
    code, _ = drive(w, clock, step_s=2, max_real_s=30)
    assert code == 0
    (line,) = w.summary.advice
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        d = db.scalars(select(DecisionRow).where(DecisionRow.policy == "underutilized")).one()
    ev = d.evidence
    card = ev["cheaper_card"]
    # at 20 % utilization the slow RTX 3090 (71 vs 312 dense TFLOPS) still costs least per unit of work
    assert card["gpu"] == "RTX 3090" and card["price_per_hour"] == "0.44" and card["fits"]
    factor = 0.8 + 0.2 * 312 / 71
    per_hour = Decimal("1.89") - Decimal("0.44") * Decimal(repr(factor))
    assert Decimal(card["saving_per_hour"]) == per_hour.quantize(Decimal("0.000001"))
    duration = (w.stopped_at or d.time) - T0
    assert Decimal(ev["would_have_saved"]) == (per_hour * Decimal(repr(duration.total_seconds())) / 3600).quantize(
        Decimal("0.000001"))
    assert "RTX 3090" in line and "4.0 GiB of 80 GiB" in line and "20% mean utilization" in line

    # the bill gives the same kind of advice from the recorded telemetry and the price table
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    capsys.readouterr()
    assert main(["bill", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (advice,) = doc["advice"]
    assert advice["run_id"] == doc["rows"][0]["run_id"] and advice["mean_utilization"] == 20.0
    assert advice["peak_memory_bytes"] == 4 * GiB and advice["cheaper_card"]["fits"]
    assert Decimal(advice["would_have_saved"]) > 0
    assert main(["bill"]) == 0
    assert "advice: run" in capsys.readouterr().out


OPTIONS = [PriceOption("RTX 3090", 1, Decimal("0.44"), "USD", "sim", "on-demand", 24 * GiB),
           PriceOption("RTX 4090", 1, Decimal("0.69"), "USD", "sim", "on-demand", 24 * GiB)]


@pytest.mark.parametrize("peak_gib, util, advised", [
    (4, 20.0, True),
    (4, 80.0, False),    # the GPU was busy: not underutilized
    (50, 20.0, False),   # more than half the card's memory
    (22, 20.0, False),   # underused, but 22 GiB + 20 % headroom fits no cheaper card
])
def test_advice_only_for_underused_runs_that_a_cheaper_card_fits(peak_gib, util, advised):
    got = underuse_advice(run_id="r" * 32, gpu="A100 80GB", rate=Money(Decimal("1.89"), "USD"), duration_s=3600,
                          peak_memory_bytes=peak_gib * GiB, card_memory_bytes=80 * GiB, mean_utilization=util,
                          options=OPTIONS, config=DownsizeConfig())
    assert (got is not None) == advised


def test_no_advice_without_gpu_telemetry_or_in_another_currency():
    cfg = DownsizeConfig()
    base = dict(run_id="r", gpu="A100 80GB", duration_s=3600, card_memory_bytes=80 * GiB, options=OPTIONS, config=cfg)
    assert underuse_advice(rate=Money(Decimal("1.89"), "USD"), peak_memory_bytes=None, mean_utilization=None,
                           **base) is None
    assert underuse_advice(rate=Money(Decimal("13.4"), "CNY"), peak_memory_bytes=4 * GiB, mean_utilization=10.0,
                           **base) is None  # USD prices are never compared with a CNY rate
