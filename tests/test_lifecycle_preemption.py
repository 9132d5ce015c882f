"""Preemption on a simulated spot instance (simulated clock, real child processes):
checkpoint before the deadline, --resume continues the epoch count, the bill shows the waste;
a job that ignores the request still ends before the deadline; after-the-fact preemption."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import CheckpointRow, DecisionRow, Progress, Run, StopEventRow, WasteRow
from helpers import costctl_env, run_costctl
from lifecycle_support import EXAMPLE, PY, T0, SimClock, drive, log_text, settings, watcher

SPOT = """
[instance]
provider = "sim"
gpu = "RTX 4090"
billing = "spot"
[watch]
sample_interval = "5s"
grace_period = "5s"
[preemption]
poll_interval = "5s"
margin = "10s"
"""


def _db(tmp_path) -> Session:
    return Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}"))


def _epochs(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^epoch (\d+)/\d+ loss:", text, flags=re.M)]


@pytest.mark.realtime  # a real child against a simulated clock
def test_notice_checkpoints_before_the_deadline_resume_continues_and_the_bill_shows_waste(tmp_path):
    ckpt = tmp_path / "ckpt"
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{ckpt}/epoch-*.pkl"\nperiodic = "off"\n')
    clock = SimClock(T0)
    cmd = [PY, EXAMPLE, "--epochs", "400", "--hidden", "32", "--checkpoint-dir", str(ckpt)]
    w = watcher(s, cmd, clock, on_exit="leave")
    notice = {}

    def preempt_when_training(now):
        if not notice and len(_epochs(log_text(w))) >= 3:
            notice["deadline"] = now + timedelta(seconds=120)
            w.provider.inject_preemption(w.instance_id, notice_s=120)

    code, status = drive(w, clock, on_step=preempt_when_training)
    assert notice, "the job never trained"
    deadline = notice["deadline"]
    assert status == "preempted" and code == 128 + 15  # the job was ended with SIGTERM
    with _db(tmp_path) as db:
        run1 = db.scalars(select(Run)).one()
        cp = db.scalars(select(CheckpointRow)).one()
        decisions = db.scalars(select(DecisionRow).order_by(DecisionRow.id)).all()
        waste = db.scalars(select(WasteRow)).one()
    assert run1.status == "preempted"
    assert cp.reason == "preemption" and cp.outcome == "saved" and cp.saved_at < deadline
    assert cp.save_s is not None and 0 <= cp.save_s < 120
    stop = next(d for d in decisions if d.policy == "preemption" and d.action == "stop")
    assert stop.time < deadline - timedelta(seconds=15)  # margin 10 s + grace 5 s before the deadline
    assert "stopped" in stop.outcome and "checkpoint saved" in stop.reason
    # waste: the paid time after the last checkpoint until the stop's end (confirmed by the provider)
    with _db(tmp_path) as db:
        confirmed = db.scalars(select(StopEventRow).where(StopEventRow.state == "confirmed")).one()
    assert confirmed.decision_id == stop.id and confirmed.time >= stop.time
    assert waste.reason == "preemption" and waste.start_at == cp.saved_at and waste.end_at == confirmed.time
    saved_epoch = int(re.search(r"epoch-(\d+)\.pkl", cp.path).group(1))
    assert f"checkpoint saved (on request): {cp.path} (epoch {saved_epoch})" in log_text(w)
    with _db(tmp_path) as db:  # the losses printed up to the stop are in the ledger
        epochs = {p.epoch for p in db.scalars(select(Progress).where(Progress.run_id == run1.id, Progress.kind == "train"))}
    assert set(range(1, saved_epoch + 1)) <= {int(e) for e in epochs}

    # --resume on the same (now stopped) sim instance, later on the simulated clock
    clock.advance(600)
    cmd2 = [PY, EXAMPLE, "--epochs", str(saved_epoch + 3), "--hidden", "32", "--checkpoint-dir", str(ckpt),
            "--resume", "{checkpoint}"]
    w2 = watcher(s, cmd2, clock, on_exit="leave", resume=True)
    code2, status2 = drive(w2, clock)
    assert (code2, status2) == (0, "completed")
    text2 = log_text(w2)
    assert f"resumed after epoch {saved_epoch}" in text2
    assert _epochs(text2) == [saved_epoch + 1, saved_epoch + 2, saved_epoch + 3]  # the count goes on
    assert w2.resume_from == cp.path  # {checkpoint} and COSTCTL_RESUME_FROM: the newest checkpoint

    bill = run_costctl("bill", "--format", "json", env=costctl_env(tmp_path / "data"))
    assert bill.returncode == 0, bill.stderr.decode()
    rows = {r["run_id"]: r for r in json.loads(bill.stdout)["rows"]}
    first = rows[run1.id]
    assert first["billing"] == "spot" and first["status"] == "preempted"
    assert Decimal(first["price_per_hour"]) == Decimal("0.35")  # the sim's RTX 4090 spot price
    assert Decimal(first["spend"]) > 0
    expected_waste = Decimal("0.35") * Decimal(str((waste.end_at - waste.start_at).total_seconds())) / 3600
    assert Decimal(first["waste"]) == expected_waste.quantize(Decimal("0.000001"))
    assert Decimal(first["waste"]) < Decimal(first["spend"])
    assert first["waste_s"] == (waste.end_at - waste.start_at).total_seconds()
    second = [r for k, r in rows.items() if k != run1.id][0]
    assert second["status"] == "completed" and Decimal(second["waste"]) == 0
    table = run_costctl("bill", env=costctl_env(tmp_path / "data"))
    assert b"WASTE" in table.stdout and b"spot" in table.stdout
    # the resumed run is linked to the run it continues: one chain in the bill, with its waste
    with _db(tmp_path) as db:
        run2 = db.scalars(select(Run).where(Run.id != run1.id)).one()
    assert (run2.continues_run_id, run2.resumed_from) == (run1.id, cp.path)
    chains = run_costctl("bill", "--by", "chain", "--format", "json", env=costctl_env(tmp_path / "data"))
    assert chains.returncode == 0, chains.stderr.decode()
    (chain,) = json.loads(chains.stdout)["rows"]
    assert chain["run_ids"] == [run1.id, run2.id] and chain["preemptions"] == 1 and chain["resumes"] == 1
    assert chain["waste"] == first["waste"] and chain["status"] == "completed"
    # the chain's exact amount rounded once, its runs' each rounded: within a micro-unit
    assert abs(Decimal(chain["spend"]) - (Decimal(first["spend"]) + Decimal(second["spend"]))) <= Decimal("0.000001")


IGNORES = "import time\nwhile True:\n    print('loss: 1.0', flush=True)\n    time.sleep(0.05)\n"


@pytest.mark.realtime  # a real child against a simulated clock
def test_a_job_that_ignores_the_request_is_stopped_before_the_deadline(tmp_path):
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{tmp_path / "ckpt"}"\nperiodic = "off"\n')
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", IGNORES], clock)
    injected = {}

    def preempt(now):
        if not injected and now >= T0 + timedelta(seconds=10):
            injected["deadline"] = now + timedelta(seconds=120)
            w.provider.inject_preemption(w.instance_id, notice_s=120)

    code, status = drive(w, clock, on_step=preempt, max_real_s=30)
    deadline = injected["deadline"]
    assert status == "preempted" and code == 128 + 15
    with _db(tmp_path) as db:
        cp = db.scalars(select(CheckpointRow)).one()
        stop = db.scalars(select(DecisionRow).where(DecisionRow.policy == "preemption",
                                                    DecisionRow.action == "stop")).one()
        waste = db.scalars(select(WasteRow)).one()
    assert cp.outcome == "timed-out" and cp.saved_at is None
    assert cp.deadline == deadline - timedelta(seconds=15)
    assert cp.deadline <= stop.time < deadline
    assert "checkpoint timed-out" in stop.reason
    with _db(tmp_path) as db:
        confirmed = db.scalars(select(StopEventRow).where(StopEventRow.state == "confirmed")).one()
    # no checkpoint: all the work is lost, up to the stop's confirmed end
    assert waste.start_at == T0 and waste.end_at == confirmed.time >= stop.time
    inst = w.provider.get_instance(w.instance_id)
    assert inst.status.value == "stopped" and not inst.preempted  # costctl stopped it first
    assert not w.checkpoint_request.exists()  # the request was withdrawn
    bill = run_costctl("bill", "--format", "json", env=costctl_env(tmp_path / "data"))
    (row,) = json.loads(bill.stdout)["rows"]
    assert Decimal(row["spend"]) > 0 and row["waste"] == row["spend"]  # nothing was saved: all of it is waste


@pytest.mark.realtime  # a real child against a simulated clock
def test_a_spot_instance_taken_without_notice_ends_the_run_with_its_waste(tmp_path):
    s = settings(tmp_path, SPOT + "[checkpoint]\nperiodic = \"off\"\n")
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", IGNORES], clock)
    taken = {}

    def take(now):
        if not taken and now >= T0 + timedelta(seconds=30):
            taken["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=0)

    code, status = drive(w, clock, on_step=take, max_real_s=30)
    assert status == "preempted"
    with _db(tmp_path) as db:
        waste = db.scalars(select(WasteRow)).one()
        run = db.scalars(select(Run)).one()
    assert waste.reason == "preempted" and waste.start_at == T0 and waste.end_at == taken["at"]
    assert run.status == "preempted"


# A job that saves on its own schedule (a torch-style zip checkpoint every few steps, written
# atomically) and is preempted without notice (no request asked, none answered): the waste runs
# only from the newest complete checkpoint on disk, not from the start of the run.
SELF_SAVING = r"""
import os, sys, time, zipfile
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for step in range(1, int(sys.argv[2]) if len(sys.argv) > 2 else 100000):
    print(f"step {step} loss: {1.0 / step:.6f}", flush=True)
    if step % 3 == 0:
        tmp = os.path.join(out, f".tmp-{step}")
        with zipfile.ZipFile(tmp, "w") as z:
            z.writestr("archive/data.pkl", b"x" * 1000)
        os.replace(tmp, os.path.join(out, f"step-{step:06d}.pt"))
    time.sleep(0.1)
"""


@pytest.mark.realtime  # a real child against a simulated clock
def test_waste_runs_from_the_newest_checkpoint_the_job_saved_on_its_own(tmp_path):
    ckpt = tmp_path / "ckpt"
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{ckpt}/step-*.pt"\nperiodic = "off"\n')
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", SELF_SAVING, str(ckpt)], clock, on_exit="leave")
    taken = {}

    def preempt_when_saved(now):
        if not taken and len(list(ckpt.glob("step-*.pt"))) >= 3:
            taken["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=0)  # taken at once, no notice

    code, status = drive(w, clock, on_step=preempt_when_saved)
    assert taken and status == "preempted"
    with _db(tmp_path) as db:
        run = db.scalars(select(Run)).one()
        asked = db.scalars(select(CheckpointRow)).all()
        waste = db.scalars(select(WasteRow)).one()
    assert asked == [] and waste.reason == "preempted"  # nothing was requested
    run_s = (waste.end_at - run.started_at).total_seconds()
    lost_s = (waste.end_at - waste.start_at).total_seconds()
    assert run_s > 30  # the simulated clock ran well past the job's own saves
    # the job's own newest save was (real) moments before the preemption: within one sample interval
    assert 0 <= lost_s <= s.watch.sample_interval.total_seconds(), (lost_s, run_s, waste.detail)
    assert "the last checkpoint" in waste.detail


@pytest.mark.realtime  # a real child against a simulated clock
def test_a_job_that_saves_often_enough_on_its_own_gets_no_periodic_request(tmp_path):
    ckpt = tmp_path / "ckpt"
    # The job saves every ~0.3 real seconds, i.e. every ~15 s of this simulated clock (1 s a
    # turn, 0.02 s real pause): always within the 60 s interval.
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{ckpt}/step-*.pt"\nperiodic = "on"\n'
                                  'min_interval = "60s"\nmax_interval = "60s"\n')
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", SELF_SAVING, str(ckpt), "60"], clock, on_exit="leave")
    code, status = drive(w, clock)
    assert (code, status) == (0, "completed")
    with _db(tmp_path) as db:
        run = db.scalars(select(Run)).one()
        asked = db.scalars(select(CheckpointRow)).all()
    assert (run.ended_at - run.started_at).total_seconds() > 120  # two intervals and more went by
    assert len(list(ckpt.glob("step-*.pt"))) >= 10 and asked == []


@pytest.mark.realtime  # a real child against a simulated clock
def test_a_notice_shorter_than_the_reserve_still_leaves_the_checkpoint_half_of_it(tmp_path):
    ckpt = tmp_path / "ckpt"
    # SPOT: grace 5 s + margin 10 s = 15 s reserve; a 12 s notice would leave the checkpoint none
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{ckpt}/epoch-*.pkl"\nperiodic = "off"\n')
    clock = SimClock(T0)
    cmd = [PY, EXAMPLE, "--epochs", "400", "--hidden", "32", "--checkpoint-dir", str(ckpt)]
    w = watcher(s, cmd, clock, on_exit="leave")
    notice = {}

    def preempt_when_training(now):
        if not notice and len(_epochs(log_text(w))) >= 3:
            notice["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=12)

    code, status = drive(w, clock, step_s=0.5, on_step=preempt_when_training)
    assert notice and status == "preempted"
    with _db(tmp_path) as db:
        cp = db.scalars(select(CheckpointRow)).one()
        first = db.scalars(select(DecisionRow).where(DecisionRow.policy == "preemption").order_by(DecisionRow.id)).first()
    assert "a short notice: half of it for the checkpoint" in first.reason
    half = timedelta(seconds=first.evidence["seconds_left"] / 2)  # half of what was left when it was seen
    assert first.evidence["short_notice"] and abs(cp.deadline - (cp.requested_at + half)) < timedelta(seconds=0.5)
    assert half > timedelta(seconds=2)
    assert cp.outcome == "saved"
