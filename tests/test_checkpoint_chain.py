"""A job's chain across runs: a save acknowledged outside ``[checkpoint] path`` is said once and
found by ``--resume``; a resumed run's Young/Daly interval starts from the save time its chain
measured before (``checkpoints.save_duration_s``, migration 0008). Real children, real files,
a real watch on a simulated clock (nothing here depends on how fast the child runs: the save's
duration is the job's own record)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger import Ledger, migrate
from costctl.ledger.engine import make_engine
from costctl.ledger.schema import CheckpointRow, Run
from costctl.lifecycle.periodic import young_daly_interval
from lifecycle_support import PY, T0, SimClock, drive, settings, watcher

#: A job that counts steps, resumes from the step in $COSTCTL_RESUME_FROM, and on a checkpoint
#: request saves a torch-style zip at OUT/step-N.pt, acknowledges it with a save that took SAVE
#: seconds (its own record: started SAVE s before it ended), and exits.
JOB = r'''
import json, os, sys, time, zipfile
from costctl import job
out, save = sys.argv[1], float(sys.argv[2])
step = 0
resumed = os.environ.get("COSTCTL_RESUME_FROM")
if resumed:
    with zipfile.ZipFile(resumed) as z:
        step = json.loads(z.read("step/data.pkl"))["step"]
    print(f"resumed at step {step} from {resumed}", flush=True)
end = time.time() + 60
while time.time() < end:
    step += 1
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    if job.checkpoint_requested():
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"step-{step}.pt")
        with zipfile.ZipFile(path + ".tmp", "w") as z:
            z.writestr("step/data.pkl", json.dumps({"step": step}))
            z.writestr("step/version", "3\n")
        os.replace(path + ".tmp", path)
        t = time.time()
        job.acknowledge_checkpoint(checkpoint=path, step=step, started_at=t - save, ended_at=t)
        sys.exit(0)
    time.sleep(0.01)
sys.exit(3)
'''


def _config(tmp_path: Path, ckpt: Path):
    return settings(tmp_path, f"""
[instance]
provider = "sim"
gpu = "RTX 4090"
billing = "spot"
[watch]
sample_interval = "5s"
[checkpoint]
path = "{ckpt}/*.pt"
periodic = "on"
mtbf = "1h"
min_interval = "60s"
max_interval = "2h"
""")


def _watch(tmp_path: Path, out: Path, save_s: float, *, resume: bool = False):
    """One run of JOB under a watch on a simulated clock: (exit status, lines costctl said, job's log)."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    s = _config(tmp_path, tmp_path / "ckpt")
    clock = SimClock(T0 + timedelta(hours=2) if resume else T0)
    w = watcher(s, [PY, str(job), str(out), f"{save_s:g}"], clock, on_exit="leave", resume=resume)
    said: list[str] = []
    w.say = said.append  # costctl's own lines (the watch is quiet otherwise)
    code, _ = drive(w, clock, step_s=10, max_real_s=60)
    return code, said, Path(w.log_path).read_text()


def _db(tmp_path: Path) -> Session:
    return Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}"))


def test_a_save_acknowledged_outside_the_configured_path_is_said_once_and_resumed_from(tmp_path):
    elsewhere = tmp_path / "hf-output"  # e.g. a Trainer's output_dir, not [checkpoint] path
    code, said, _ = _watch(tmp_path, elsewhere, 5)
    assert code == 0
    saved = sorted(elsewhere.glob("step-*.pt"))
    assert len(saved) == 1
    notes = [ln for ln in said if "outside [checkpoint] path" in ln]
    assert len(notes) == 1, said
    assert str(saved[0]) in notes[0] and f"{tmp_path / 'ckpt'}/*.pt" in notes[0]
    assert "--resume will still find it" in notes[0] and f'path = "{elsewhere}/*"' in notes[0]
    step = int(saved[0].stem.split("-")[1])

    code, said, log = _watch(tmp_path, elsewhere, 5, resume=True)
    assert code == 0
    assert f"resumed at step {step} from {saved[0]}" in log  # continued, not restarted from 0
    assert f"step {step + 1} loss" in log and "step 1 loss" not in log
    with _db(tmp_path) as db:
        first, second = db.scalars(select(Run).order_by(Run.started_at)).all()
    assert second.resumed_from == str(saved[0]) and second.continues_run_id == first.id


def test_resume_without_a_configured_path_uses_the_acknowledged_saves_and_their_siblings(tmp_path):
    from costctl.checkpoint import known_patterns, newest_intact_checkpoint

    from checkpoint_files import write_torch_zip

    out = tmp_path / "out"
    out.mkdir()
    acked = write_torch_zip(out / "epoch-0003.pt")
    later = write_torch_zip(out / "epoch-0004.pt")  # saved by the job on its own, never acknowledged
    patterns = known_patterns([str(acked)])
    assert patterns == [str(acked), f"{out}/epoch-*.pt"]
    newest = newest_intact_checkpoint(patterns)
    assert newest is not None and newest.path in (acked, later)


def test_a_resumed_run_starts_young_daly_from_the_save_time_its_chain_measured(tmp_path):
    ckpt = tmp_path / "ckpt"
    code, said, _ = _watch(tmp_path, ckpt, 40)  # the first run's save took 40 s (its record)
    assert code == 0
    first = [ln for ln in said if ln.startswith("costctl: periodic checkpoints every")][0]
    assert "save 60s configured" in first  # no history yet: [checkpoint] save_time
    with _db(tmp_path) as db:
        row = db.scalars(select(CheckpointRow).where(CheckpointRow.outcome == "saved")).one()
    assert row.save_duration_s == pytest.approx(40, abs=1e-3)

    code, said, log = _watch(tmp_path, ckpt, 40, resume=True)
    assert code == 0 and "resumed at step" in log
    line = [ln for ln in said if ln.startswith("costctl: periodic checkpoints every")][0]
    assert "save 40s measured: median of 1 save(s), 1 in earlier runs of this chain (ledger" in line, line
    mtbf = float(re.search(r"MTBF ([0-9.e+]+)s", line).group(1))
    every = int(re.search(r"every (\d+)s", line).group(1))
    assert every == round(young_daly_interval(40, mtbf, min_s=60, max_s=7200))
    assert every != round(young_daly_interval(60, mtbf, min_s=60, max_s=7200))


def test_0008_adds_save_duration_to_a_populated_ledger_and_downgrades_cleanly(db_url):
    t0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0007")
        old = Ledger(engine)
        pk = old.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="spot", price_per_hour=None,
                                 currency="USD")
        run = old.start_run(pk, started_at=t0, command=["python", "t.py"], log_path=None, host="h")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO checkpoints (run_id, reason, requested_at, deadline, outcome, save_s, "
                                 "path) VALUES (:r, 'periodic', :t, :t, 'saved', 12.5, '/c/a.pt')"),
                         {"r": run, "t": t0})
        migrate.upgrade(engine, "head")
        assert "save_duration_s" in {c["name"] for c in sa.inspect(engine).get_columns("checkpoints")}
        ledger = Ledger(engine)
        from costctl.ledger.chains import chain_saves, saved_checkpoint_paths

        with ledger.session() as s:
            (old_row,) = chain_saves(s, [run])
            assert (old_row.seconds, old_row.measured_by) == (12.5, "request")  # no record before 0008
            assert saved_checkpoint_paths(s, ["python", "t.py"]) == ["/c/a.pt"]
        cid = ledger.record_checkpoint_request(run, reason="periodic", requested_at=t0 + timedelta(hours=1),
                                               deadline=t0 + timedelta(hours=1))
        ledger.complete_checkpoint(cid, outcome="saved", completed_at=t0 + timedelta(hours=1), save_s=50.0,
                                   save_duration_s=40.0, path="/c/b.pt")
        with ledger.session() as s:
            assert [(c.seconds, c.measured_by) for c in chain_saves(s, [run])] == [(12.5, "request"), (40.0, "record")]
        migrate.downgrade(engine, "0007")
        assert "save_duration_s" not in {c["name"] for c in sa.inspect(engine).get_columns("checkpoints")}
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
