"""Periodic checkpoints on spot instances: Young/Daly interval, bounds, measured save time, the
observed preemption rate from the ledger, and the schedule in a watch on a simulated clock."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.lifecycle import spot_exposure, waste_by_run
from costctl.ledger.schema import CheckpointRow, DecisionRow
from costctl.lifecycle.periodic import PeriodicSchedule, daly_interval, young_daly_interval
from lifecycle_support import EXAMPLE, PY, T0, SimClock, drive, settings, watcher


def test_young_daly_interval_on_given_numbers():
    # 60 s to save, a preemption every 6 h on average: sqrt(2 * 60 * 21600) = 1609.97 s
    t = young_daly_interval(60, 6 * 3600, min_s=300, max_s=3600)
    assert t == pytest.approx(1609.968944, rel=1e-9) and 300 <= t <= 3600
    assert t == math.sqrt(2 * 60 * 6 * 3600)
    # the bounds win when the formula leaves them
    assert young_daly_interval(1, 3600, min_s=300, max_s=3600) == 300  # sqrt(7200) = 85 s
    assert young_daly_interval(600, 100 * 3600, min_s=300, max_s=3600) == 3600  # 20,785 s
    # Daly's higher-order estimate stays close to Young's while C << M
    assert daly_interval(60, 6 * 3600) == pytest.approx(1609.97 * (1 + math.sqrt(60 / 43200) / 3 + 60 / 43200 / 9) - 60,
                                                        rel=1e-4)
    assert abs(daly_interval(60, 6 * 3600) - t) / t < 0.03
    for bad in ((0, 3600), (60, -1), (60, float("nan"))):
        with pytest.raises(ValueError):
            young_daly_interval(*bad, min_s=1, max_s=10)
    with pytest.raises(ValueError):
        young_daly_interval(60, 3600, min_s=10, max_s=5)


def test_schedule_uses_the_measured_save_time_once_there_is_one():
    sched = PeriodicSchedule(save_time_s=60, mtbf_s=21600, min_s=60, max_s=7200)
    assert sched.interval_s == pytest.approx(1609.97, abs=0.01)
    assert sched.evidence()["save_s_source"] == "configured"
    for s in (8, 12, 10):
        sched.note_save(s)
    assert sched.save_s == 10  # the median
    assert sched.interval_s == pytest.approx(math.sqrt(2 * 10 * 21600))
    assert sched.due_at(T0) == T0 + timedelta(seconds=sched.interval_s)
    assert sched.evidence()["save_s_source"] == "measured"


def test_observed_preemptions_and_waste_from_the_ledger(ledger):
    spot = ledger.ensure_instance("vastai", "1", gpu="RTX 4090", gpu_count=1, billing="spot",
                                  price_per_hour=Decimal("0.40"), currency="USD")
    ondemand = ledger.ensure_instance("vastai", "2", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                      price_per_hour=Decimal("0.70"), currency="USD")
    run = ledger.start_run(spot, started_at=T0, command=None, log_path=None, host=None)
    other = ledger.start_run(ondemand, started_at=T0, command=None, log_path=None, host=None)
    ledger.accrue(run, T0 + timedelta(hours=10), Decimal("0.40"), "USD")
    ledger.accrue(other, T0 + timedelta(hours=5), Decimal("0.70"), "USD")
    for h in (3, 7):
        ledger.record_waste(run, start_at=T0 + timedelta(hours=h - 1), end_at=T0 + timedelta(hours=h),
                            rate_per_hour=Decimal("0.40"), currency="USD", reason="preemption")
    ledger.record_waste(run, start_at=T0, end_at=T0, rate_per_hour=Decimal("0.40"), currency="USD", reason="other")
    with ledger.session() as s:
        seen = spot_exposure(s)
        assert (seen.charged_s, seen.preemptions) == (36000, 2) and seen.mtbf_s == 18000
        wasted = waste_by_run(s)
        assert wasted[(run, "USD")].seconds == 7200 and wasted[(run, "USD")].amount == Decimal("0.80")
        clipped = waste_by_run(s, since=T0 + timedelta(hours=2, minutes=30), until=T0 + timedelta(hours=6, minutes=30))
        assert clipped[(run, "USD")].seconds == 1800 + 1800
    with pytest.raises(Exception, match="ends"):
        ledger.record_waste(run, start_at=T0 + timedelta(hours=1), end_at=T0, rate_per_hour=Decimal(1),
                            currency="USD", reason="preemption")


STEP = 10  # simulated seconds per turn of the driver


@pytest.mark.realtime  # a real child against a simulated clock
def test_periodic_requests_follow_young_daly_in_a_watch(tmp_path):
    s = settings(tmp_path, f"""
[instance]
provider = "sim"
gpu = "RTX 4090"
billing = "spot"
[watch]
sample_interval = "5s"
[checkpoint]
path = "{tmp_path / 'ckpt'}/epoch-*.pkl"
save_time = "120s"
mtbf = "1h"
min_interval = "60s"
max_interval = "2h"
""")
    clock = SimClock(T0)
    # A real job against a simulated clock: the measured save time includes the wait for the
    # job's next epoch boundary, which depends on how fast the watch's ticks are; a configured
    # 120 s keeps it above any measured one, so the second interval is the shorter.
    w = watcher(s, [PY, EXAMPLE, "--epochs", "80", "--hidden", "32", "--checkpoint-dir", str(tmp_path / "ckpt")],
                clock, on_exit="leave")
    code, _ = drive(w, clock, step_s=STEP, max_real_s=60)
    assert code == 0
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        rows = db.scalars(select(CheckpointRow).order_by(CheckpointRow.id)).all()
        plans = [d.evidence for d in db.scalars(select(DecisionRow).where(
            DecisionRow.policy == "checkpoint", DecisionRow.outcome == "requested").order_by(DecisionRow.id))]
    saved = [r for r in rows if r.outcome == "saved"]
    assert len(saved) >= 2 and all(r.reason == "periodic" for r in rows)
    first = young_daly_interval(120, 3600, min_s=60, max_s=7200)  # 929.5 s: configured save time, no history
    assert plans[0]["interval_s"] == pytest.approx(first, abs=1e-3) and plans[0]["mtbf_source"] == "configured"
    assert timedelta(0) <= rows[0].requested_at - (T0 + timedelta(seconds=first)) < timedelta(seconds=STEP)
    # the second interval uses the first save's own duration (its acknowledgement record's start
    # to end: the save itself, not the wait for the job's next safe point)
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        done = [d.evidence for d in db.scalars(select(DecisionRow).where(
            DecisionRow.policy == "checkpoint", DecisionRow.outcome == "saved").order_by(DecisionRow.id))]
    own = (datetime.fromisoformat(done[0]["save_ended_at"]) - datetime.fromisoformat(done[0]["save_started_at"]))
    assert timedelta(0) < own < timedelta(seconds=saved[0].save_s)  # shorter than request -> saved
    second = young_daly_interval(own.total_seconds(), 3600, min_s=60, max_s=7200)
    assert plans[1]["save_s_source"] == "measured" and plans[1]["interval_s"] == pytest.approx(second, abs=1e-3)
    assert timedelta(0) <= rows[1].requested_at - (saved[0].saved_at + timedelta(seconds=second)) < timedelta(seconds=STEP)
    assert second < first
