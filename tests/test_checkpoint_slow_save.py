"""A Hugging Face-like save that takes its time (config.json first, the weights 0.3 s later in
two writes, trainer_state.json last), answered by a preemption notice on a simulated spot
instance: costctl ends the job only once the checkpoint is whole — by the job's record, or
without one by the format check — never because its files sat unchanged for a while.
A real child process against a simulated clock."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.checkpoint_integrity import check_checkpoint
from costctl.ledger.schema import CheckpointRow, Run
from helpers import REPO
from lifecycle_support import PY, T0, SimClock, drive, log_text, settings, watcher

TESTS = str(Path(__file__).resolve().parent)

JOB = textwrap.dedent("""
    import json, os, sys, time
    sys.path[:0] = [{repo!r}, {tests!r}]
    from costctl import job
    from checkpoint_files import safetensors_bytes
    out, acknowledge = sys.argv[1], sys.argv[2] == "ack"
    served = None
    for step in range(1, 100000):
        print(f"{{{{'loss': '{{1.0 / step:.4g}}', 'grad_norm': '1.2', 'epoch': {{step / 100}}}}}}", flush=True)
        time.sleep(0.05)
        if not job.checkpoint_requested():
            continue
        try:
            rid = job.checkpoint_request_path().read_text()
        except OSError:
            continue
        if rid == served:
            continue  # saved for this request already (no record: costctl will find it on disk)
        served = rid
        t0 = time.time()
        d = os.path.join(out, f"checkpoint-{{step}}")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump({{"model_type": "gpt2"}}, fh)
        time.sleep(0.3)
        data = safetensors_bytes({{"w": 50000}})
        with open(os.path.join(d, "model.safetensors"), "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(0.2)
            fh.write(data[len(data) // 2 :])
        time.sleep(0.1)
        with open(os.path.join(d, "trainer_state.json"), "w") as fh:
            json.dump({{"global_step": step}}, fh)
        print(f"saved {{d}}", flush=True)
        if acknowledge:
            job.acknowledge_checkpoint(checkpoint=d, step=step, started_at=t0)
""")

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


@pytest.mark.realtime  # a real child against a simulated clock
@pytest.mark.parametrize("route", ["ack", "format"])
def test_a_slow_hf_save_is_whole_before_the_job_is_ended(tmp_path, route):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB.format(repo=str(REPO), tests=TESTS))
    s = settings(tmp_path, SPOT + f'[checkpoint]\npath = "{out}/checkpoint-*"\nperiodic = "off"\n')
    clock = SimClock(T0)
    w = watcher(s, [PY, str(script), str(out), route], clock, on_exit="leave")
    notice = {}

    def preempt_when_training(now):
        if not notice and log_text(w).count("'loss'") >= 3:
            notice["at"] = now
            w.provider.inject_preemption(w.instance_id, notice_s=120)

    code, status = drive(w, clock, step_s=0.25, on_step=preempt_when_training)
    assert notice and status == "preempted"
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        cp = db.scalars(select(CheckpointRow)).one()
        assert db.scalars(select(Run)).one().status == "preempted"
    assert cp.outcome == "saved" and cp.path is not None
    saved = Path(cp.path)
    # the job was ended after its save was whole: trainer_state.json there, the weights intact
    assert (saved / "trainer_state.json").exists()
    ok, why = check_checkpoint(saved)
    assert ok, why
    assert sorted(p.name for p in out.iterdir()) == [saved.name]  # one save, nothing half-written beside it
    assert cp.saved_at >= cp.requested_at and cp.saved_at <= notice["at"] + timedelta(seconds=120)
