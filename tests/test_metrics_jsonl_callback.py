"""Full-precision progress from the job: the HF callback's ``on_log`` appends JSON lines to
``$COSTCTL_METRICS_FILE`` (transformers 5 prints four significant digits), which ``costctl
watch`` reads once the file exists, the printed lines being the fallback. The callback is
driven with simple objects (no transformers installed); the watch runs a real child."""

from __future__ import annotations

import importlib
import json
import math
import sys
import types
from types import SimpleNamespace

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl import job
from costctl.ledger.schema import Progress
from costctl.progress import read_metrics_file
from helpers import costctl_env, run_costctl


def _hf(monkeypatch):
    fake = types.ModuleType("transformers")
    fake.TrainerCallback = type("TrainerCallback", (), {})
    monkeypatch.setitem(sys.modules, "transformers", fake)
    monkeypatch.delitem(sys.modules, "costctl.integrations.hf", raising=False)
    return importlib.import_module("costctl.integrations.hf")


def test_on_log_appends_full_precision_json_lines_the_follower_reads(tmp_path, monkeypatch):
    hf = _hf(monkeypatch)
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("COSTCTL_METRICS_FILE", str(path))
    cb = hf.CostctlCheckpointCallback()
    args, control = SimpleNamespace(device="cpu"), SimpleNamespace(should_save=False)
    state = SimpleNamespace(global_step=0, epoch=0.0, is_world_process_zero=True)
    cb.on_train_begin(args, state, control)
    assert path.exists() and path.read_text() == ""  # costctl switches to the file now
    for step, loss, grad in ((10, 0.6931471805599453, 1.2345678), (20, 0.6931000000000001, float("nan"))):
        state.global_step, state.epoch = step, step / 100
        cb.on_log(args, state, control, logs={"loss": loss, "grad_norm": grad, "learning_rate": 4.9e-05})
    cb.on_log(args, state, control, logs={"eval_loss": 0.7012345678, "eval_runtime": 1.5})
    points = read_metrics_file(path)
    train = [(p.step, p.value) for p in points if p.kind == "train"]
    assert train == [(10, 0.6931471805599453), (20, 0.6931000000000001)]  # not 0.6931 twice
    assert [p.value for p in points if p.kind == "eval"] == [0.7012345678]
    assert math.isnan(json.loads(path.read_text().splitlines()[1])["grad_norm"])  # JSON's NaN, read back


def test_other_ranks_and_no_metrics_file_write_nothing(tmp_path, monkeypatch):
    hf = _hf(monkeypatch)
    path = tmp_path / "metrics.jsonl"
    cb = hf.CostctlCheckpointCallback()
    args, control = SimpleNamespace(device="cpu"), SimpleNamespace(should_save=False)
    monkeypatch.delenv("COSTCTL_METRICS_FILE", raising=False)
    cb.on_log(args, SimpleNamespace(global_step=1, epoch=0.1, is_world_process_zero=True), control, logs={"loss": 1.0})
    monkeypatch.setenv("COSTCTL_METRICS_FILE", str(path))
    rank1 = SimpleNamespace(global_step=1, epoch=0.1, is_world_process_zero=False)
    cb.on_train_begin(args, rank1, control)
    cb.on_log(args, rank1, control, logs={"loss": 1.0})
    assert not path.exists()
    assert job.log_metrics({"loss": 2.0, "model": object()}, step=3, path=path) is True
    assert path.read_text() == '{"step": 3, "loss": 2.0}\n'


JOB = r"""
import os, sys, time
from costctl import job
values = [0.69314718, 0.69306, 0.69301, 0.69299]
if job.metrics_file_path() is not None:
    job.metrics_file_path().touch()
for i, v in enumerate(values):
    job.log_metrics({"loss": v, "learning_rate": 4.9e-05}, step=10 * (i + 1), epoch=0.1 * (i + 1))
    print({"loss": f"{v:.4g}", "grad_norm": "1.2", "learning_rate": "4.9e-05", "epoch": f"{0.1 * (i + 1):.4g}"})
    sys.stdout.flush()
    time.sleep(0.05)
"""


def test_watch_reads_the_jobs_full_precision_file_not_the_rounded_print(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl("watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c", JOB, env=env)
    assert proc.returncode == 0, proc.stderr
    with Session(create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")) as s:
        rows = s.scalars(select(Progress).order_by(Progress.id)).all()
        got = [(r.step, r.value) for r in rows]
    assert got == [(10, 0.69314718), (20, 0.69306), (30, 0.69301), (40, 0.69299)]


def test_without_the_file_the_printed_lines_are_the_fallback(tmp_path):
    env = costctl_env(tmp_path)
    script = JOB.replace("if job.metrics_file_path() is not None:", "if False:").replace(
        "    job.log_metrics(", "    0 and job.log_metrics(")
    proc = run_costctl("watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c", script, env=env)
    assert proc.returncode == 0, proc.stderr
    with Session(create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")) as s:
        values = [r.value for r in s.scalars(select(Progress).order_by(Progress.id)).all()]
    assert values == [0.6931, 0.6931, 0.693, 0.693]


def test_lightning_callback_logs_its_scalars_every_log_every_n_steps_on_rank_zero(tmp_path, monkeypatch):
    from test_lifecycle_integrations import _lightning

    lt = _lightning(monkeypatch)
    metrics = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(job.ENV_METRICS_FILE, str(metrics))
    monkeypatch.delenv("COSTCTL_CHECKPOINT_REQUEST", raising=False)

    class Scalar:  # a 0-d tensor's .item()
        def __init__(self, v: float) -> None:
            self.v = v

        def item(self) -> float:
            return self.v

    trainer = SimpleNamespace(global_step=0, current_epoch=0, log_every_n_steps=5, is_global_zero=True,
                              callback_metrics={}, strategy=SimpleNamespace(
                                  reduce_boolean_decision=lambda flag, all=True: flag))
    cb = lt.CostctlCheckpoint(dirpath=tmp_path / "ckpt")
    cb.on_train_start(trainer, None)
    assert metrics.exists() and metrics.read_text() == ""  # costctl reads the file from now on
    losses = {}
    for step in range(1, 21):
        trainer.global_step = step
        loss = 1.0 / step + 1e-9 * step  # beyond a progress bar's rounding
        losses[step] = loss
        trainer.callback_metrics = {"train_loss_step": Scalar(loss), "train_loss_epoch": Scalar(2.0)}
        cb.on_train_batch_end(trainer, None, None, None, step)
        cb.on_train_batch_end(trainer, None, None, None, step)  # gradient accumulation: the same step again
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    assert [r["train_loss_step"] for r in rows] == [losses[s] for s in (5, 10, 15, 20)]
    points = read_metrics_file(metrics)
    assert [p.value for p in points if p.kind == "train"] == [losses[s] for s in (5, 10, 15, 20)]
    # another rank writes nothing; nor does any rank without a metrics file
    trainer.is_global_zero, trainer.global_step = False, 25
    cb.on_train_batch_end(trainer, None, None, None, 25)
    monkeypatch.delenv(job.ENV_METRICS_FILE)
    trainer.is_global_zero, trainer.global_step = True, 30
    cb.on_train_batch_end(trainer, None, None, None, 30)
    assert len(metrics.read_text().splitlines()) == 4
