"""Gradient norms logged in a metrics file (``$COSTCTL_METRICS_FILE``, ``--metrics-file``): the
live follower yields them as ``costctl analyze`` reads them, so a persistent NaN ``grad_norm``
logged through :func:`costctl.job.log_metrics` (the HF callback's route) is divergence live
too; an isolated one (an fp16 loss-scaling skip) is not."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl import job
from costctl.policies.grad_norm import GradNormStreak
from costctl.progress import MetricsFileFollower
from costctl.replay.readers import read_train_log
from helpers import costctl_env, run_costctl

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _rows(path: Path, grads: list[float]) -> None:
    for i, g in enumerate(grads):
        job.log_metrics({"loss": 0.5 - 0.01 * i, "grad_norm": g, "learning_rate": 2e-05},
                        step=8 + i, epoch=0.1 * (i + 1), path=path)


def _decisions(records) -> list[str]:
    rule = GradNormStreak()
    return [d.reason for r in records if (d := rule.add(r[0], NOW, loss=r[1], step=r[2], epoch=r[3]))]


def test_the_follower_yields_the_grad_norm_records_of_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "run.metrics.jsonl"
    _rows(path, [1.2, 0.9, math.nan, math.nan, math.nan])
    follower = MetricsFileFollower(path)
    assert len(follower.poll(NOW)) == 5
    got = follower.take_grad_norms()
    assert [(r[1], r[2]) for r in got] == [(0.5 - 0.01 * i, 8 + i) for i in range(5)]
    assert got[0][0] == 1.2 and all(math.isnan(r[0]) for r in got[2:])
    assert follower.take_grad_norms() == []  # taken once
    _rows(path, [0.7])
    follower.poll(NOW)
    assert [r[0] for r in follower.take_grad_norms()] == [0.7]


def test_live_and_analyze_agree_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "run.metrics.jsonl"
    _rows(path, [1.0, 1.1, math.nan, math.nan, math.nan])
    follower = MetricsFileFollower(path)
    follower.poll(NOW)
    live = _decisions(follower.take_grad_norms())
    tlog = read_train_log(path)
    offline = [d.reason for d in tlog.grad_norms.feed(GradNormStreak(), NOW)]
    assert live == offline == ["grad_norm is NaN at step 12, 3 logged values in a row (an isolated one is an "
                               "fp16 loss-scaling skip; 3 in a row is not): the run diverged"]


@pytest.mark.parametrize("shape", ["csv", "document"])
def test_csv_and_trainer_state_shapes_too(tmp_path: Path, shape: str) -> None:
    if shape == "csv":
        path = tmp_path / "metrics.csv"
        path.write_text("step,train_loss,grad_norm\n1,0.5,1.0\n2,0.49,nan\n3,0.48,nan\n4,0.47,nan\n")
    else:
        path = tmp_path / "trainer_state.json"
        hist = [{"step": s, "loss": 0.5, "grad_norm": g} for s, g in ((1, 1.0), (2, math.nan), (3, math.nan), (4, math.nan))]
        path.write_text(json.dumps({"log_history": hist}))
    follower = MetricsFileFollower(path)
    follower.flush(NOW)
    assert [d.split(",")[0] for d in _decisions(follower.take_grad_norms())] == ["grad_norm is NaN at step 4"]


JOB = r"""
import sys, time
from costctl import job
job.metrics_file_path().touch()
for i, g in enumerate(GRADS):
    job.log_metrics({"loss": 0.5 - 0.01 * i, "grad_norm": g, "learning_rate": 2e-05}, step=10 + i)
    print("step", 10 + i, flush=True)
    time.sleep(0.05)
"""


@pytest.mark.parametrize("grads,diverged", [
    ("[1.2, float('nan'), float('nan'), float('nan'), 0.8]", True),
    ("[1.2, float('nan'), 0.9, float('nan'), 0.8]", False),
])
def test_a_real_watch_reads_grad_norms_from_the_jobs_metrics_file(tmp_path: Path, grads: str, diverged: bool) -> None:
    script = JOB.replace("GRADS", grads)
    proc = run_costctl("watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--", sys.executable, "-c", script,
                       env=costctl_env(tmp_path / "data"), timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    assert "progress now read from the job's metrics file" in err, err[-2000:]
    said = "costctl divergence advice: grad_norm is NaN at step 13, 3 logged values in a row" in err
    assert said is diverged, err[-2000:]
    assert ("divergence" in err) is diverged, err[-2000:]
