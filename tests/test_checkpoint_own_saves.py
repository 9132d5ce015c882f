"""The checkpoints a job saves on its own schedule, anywhere, reported through
``$COSTCTL_CHECKPOINT_SAVES`` (:func:`costctl.job.report_checkpoint`, or
:func:`costctl.job.acknowledge_checkpoint` with no request pending): a preemption's waste runs
from the newest of them, the Young/Daly interval takes their save time, the ledger keeps them,
and ``--resume`` continues from the newest — though they lie outside ``[checkpoint] path``.
Real children, a real watch on a simulated clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import CheckpointRow, Run, WasteRow
from costctl.lifecycle.own_saves import SavesFollower, parse_report
from lifecycle_support import PY, T0, SimClock, drive, settings, watcher

#: Counts steps (from the step in $COSTCTL_RESUME_FROM's zip when resuming); every 3rd step saves
#: OUT/step-N.pt (a torch-style zip, written atomically) and reports it with a 2 s save
#: (started 2 s before it ended) through HOW: report_checkpoint or acknowledge_checkpoint.
JOB = r'''
import json, os, sys, time, zipfile
from costctl import job
out, how = sys.argv[1], sys.argv[2]
step = 0
resumed = os.environ.get("COSTCTL_RESUME_FROM")
if resumed:
    with zipfile.ZipFile(resumed) as z:
        step = json.loads(z.read("step/data.pkl"))["step"]
    print(f"resumed at step {step} from {resumed}", flush=True)
os.makedirs(out, exist_ok=True)
end = time.time() + 30
while time.time() < end:
    step += 1
    print(f"step {step} loss: {1.0 / step:.6f}", flush=True)
    if step % 3 == 0:
        path = os.path.join(out, f"step-{step:06d}.pt")
        with zipfile.ZipFile(path + ".tmp", "w") as z:
            z.writestr("step/data.pkl", json.dumps({"step": step}))
        os.replace(path + ".tmp", path)
        t = time.time()
        if how == "report":
            job.report_checkpoint(path, step=step, started_at=t - 2, ended_at=t)
        else:
            job.acknowledge_checkpoint(checkpoint=path, step=step, started_at=t - 2, ended_at=t)
    if resumed and step % 3 == 0:
        sys.exit(0)  # the resumed run: one save, then done
    time.sleep(0.1)
'''

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
[checkpoint]
path = "{ckpt}/*.pt"
periodic = "on"
mtbf = "1h"
min_interval = "60s"
max_interval = "2h"
"""


def _db(tmp_path: Path) -> Session:
    return Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}"))


@pytest.mark.realtime  # a real child against a simulated clock (as test_lifecycle_preemption's)
@pytest.mark.parametrize("how", ["report", "acknowledge"])
def test_own_saves_outside_the_path_count_for_waste_young_daly_and_resume(tmp_path, how):
    elsewhere = tmp_path / "output"  # not [checkpoint] path
    job = tmp_path / "job.py"
    job.write_text(JOB)
    s = settings(tmp_path, SPOT.format(ckpt=tmp_path / "ckpt"))
    clock = SimClock(T0)
    w = watcher(s, [PY, str(job), str(elsewhere), how], clock, on_exit="leave")
    said: list[str] = []
    w.say = said.append
    taken = {}

    def preempt_when_saved(now):
        if not taken and len(list(elsewhere.glob("step-*.pt"))) >= 3:
            taken["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=0)  # taken at once: nothing asked

    code, status = drive(w, clock, on_step=preempt_when_saved)
    assert taken and status == "preempted"
    with _db(tmp_path) as db:
        run = db.scalars(select(Run)).one()
        rows = db.scalars(select(CheckpointRow).order_by(CheckpointRow.id)).all()
        waste = db.scalars(select(WasteRow)).one()
    saved = sorted(elsewhere.glob("step-*.pt"))
    # every reported save is in the ledger, saved, with its path and its own 2 s duration
    assert len(rows) >= 3 and {r.outcome for r in rows} == {"saved"}
    assert {r.path for r in rows} <= {str(p) for p in saved} and all(r.save_duration_s == 2.0 for r in rows)
    assert all(r.reason == "the job's own save" for r in rows)
    # the waste runs from the newest reported save, not from the start of the run
    run_s = (waste.end_at - run.started_at).total_seconds()
    lost_s = (waste.end_at - waste.start_at).total_seconds()
    # (how long the run lasted before the third save depends on the machine's load: not asserted)
    assert waste.start_at > run.started_at and run_s > lost_s, (lost_s, run_s, waste.detail)
    assert 0 <= lost_s <= s.watch.sample_interval.total_seconds(), (lost_s, run_s, waste.detail)
    # Young/Daly took the save's own duration; the save outside the path was said once
    assert any("save 2s" in line for line in said), said
    assert sum("outside [checkpoint] path" in line for line in said) == 1, said
    assert any("checkpoint saved by the job on its own" in line for line in said), said

    # --resume continues from the newest reported save, outside [checkpoint] path
    newest = str(Path(max(rows, key=lambda r: r.id).path))
    clock2 = SimClock(T0.replace(hour=T0.hour + 2))
    w2 = watcher(s, [PY, str(job), str(elsewhere), how], clock2, on_exit="leave", resume=True)
    code, status = drive(w2, clock2)
    assert code == 0
    step = json.loads(__import__("zipfile").ZipFile(newest).read("step/data.pkl"))["step"]
    assert f"resumed at step {step} from {newest}" in Path(w2.log_path).read_text()


def test_the_saves_file_is_read_once_line_by_line_and_ignores_what_is_not_a_report(tmp_path):
    path = tmp_path / "saves.jsonl"
    follower = SavesFollower(path)
    assert follower.take() == []  # not there yet
    good = {"checkpoint": "/x/a.pt", "step": 3, "save_started_at": "2026-01-01T00:00:00+00:00",
            "save_ended_at": "2026-01-01T00:00:02+00:00"}
    with path.open("w") as fh:
        fh.write(json.dumps(good) + "\n")
        fh.write("not json\n")
        fh.write(json.dumps({**good, "save_ended_at": "2026-01-01T00:00:02"}) + "\n")  # naive: not a report
        fh.write(json.dumps({**good, "step": 2**70}) + "\n")  # a huge step is dropped, the report kept
        fh.write(json.dumps(good)[:20])  # a line still being written
    first = follower.take()
    assert [(str(r.checkpoint), r.step, r.duration_s) for r in first] == [("/x/a.pt", 3, 2.0), ("/x/a.pt", None, 2.0)]
    assert follower.take() == []
    with path.open("a") as fh:
        fh.write(json.dumps(good)[20:] + "\n")
    assert len(follower.take()) == 1
    assert parse_report(b"[1, 2]") is None and parse_report(b"{" * 100_000) is None


#: Saves (and reports) a checkpoint every step, 10 ms apart: some land after the instance was taken.
FAST = r'''
import json, os, sys, time, zipfile
from costctl import job
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for step in range(1, 100000):
    print(f"step {step} loss: {1.0 / step:.6f}", flush=True)
    path = os.path.join(out, f"step-{step:06d}.pt")
    with zipfile.ZipFile(path + ".tmp", "w") as z:
        z.writestr("step/data.pkl", json.dumps({"step": step}))
    os.replace(path + ".tmp", path)
    job.report_checkpoint(path, step=step)
    time.sleep(0.01)
'''


@pytest.mark.realtime  # a real child against a simulated clock
def test_a_save_made_after_the_instance_was_taken_is_not_the_restart_point(tmp_path):
    """The watch learns of a preemption up to a poll late and the job goes on saving meanwhile:
    a checkpoint saved after the take would not exist on a real cloud, so the waste runs from
    the newest one saved by then (it once ran from the newest of all: 0 s of waste)."""
    out = tmp_path / "output"
    s = settings(tmp_path, SPOT.format(ckpt=tmp_path / "ckpt").replace('periodic = "on"', 'periodic = "off"'))
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", FAST, str(out)], clock, on_exit="leave")
    taken = {}

    def preempt(now):
        if not taken and len(list(out.glob("step-*.pt"))) >= 5:
            taken["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=0)

    code, status = drive(w, clock, on_step=preempt)
    assert taken and status == "preempted"
    with _db(tmp_path) as db:
        rows = db.scalars(select(CheckpointRow)).all()
        waste = db.scalars(select(WasteRow)).one()
    saved = sorted(r.saved_at for r in rows)
    assert any(t > taken["at"] for t in saved), "no save landed after the take: the race did not happen"
    assert waste.start_at == max(t for t in saved if t <= taken["at"]) and waste.end_at == taken["at"]
