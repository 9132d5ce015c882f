"""costctl.progress.metrics_file: corpus metrics files read whole, and a file that grows under a
follower (missing at first, partial last line, Lightning's header rewrite, truncation)."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path


from costctl.progress import MetricsFileFollower, read_metrics_file

from replay_support import corpus_file

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _split(points):
    return [p for p in points if p.kind == "train"], [p for p in points if p.kind == "eval"]


def test_lightning_resumed_run() -> None:
    train, evals = _split(read_metrics_file(corpus_file("lightning_metrics_resumed_run.csv")))
    assert len(train) == 1126 and {p.name for p in train} == {"train_loss_step"}  # epoch column not mixed in
    assert (train[0].step, train[-1].step) == (140749, 196999)
    assert (round(train[0].value, 4), round(train[-1].value, 4)) == (3.7083, 3.9139)
    best = min(train, key=lambda p: p.value)
    assert (round(best.value, 4), best.step) == (3.3786, 141249)
    assert len(evals) == 4 and {p.name for p in evals} == {"val_loss"}
    assert (round(evals[0].value, 4), round(evals[-1].value, 4)) == (3.5629, 3.6042)
    assert evals[0].step == 154813
    assert [p.epoch for p in evals] == [10.0, 11.0, 12.0, 13.0]
    assert all(p.time is None for p in train + evals)


def test_lightning_turngpt() -> None:
    train, evals = _split(read_metrics_file(corpus_file("lightning_metrics_turngpt.csv")))
    assert len(train) == 50 and not evals
    assert [p.step for p in train] == list(range(49, 2500, 50))
    assert (round(train[0].value, 4), round(train[-1].value, 4)) == (2.3691, 2.2439)
    best = min(train, key=lambda p: p.value)
    assert (round(best.value, 4), best.step) == (1.2439, 1749)
    assert round(max(p.value for p in train), 2) == 3.15


def test_lightning_not_learning_column_order() -> None:
    train, _ = _split(read_metrics_file(corpus_file("lightning_metrics_not_learning.csv")))
    assert len(train) == 28 and {p.name for p in train} == {"train_loss"}
    assert [p.step for p in train] == list(range(49, 1400, 50))
    assert (train[0].epoch, train[-1].epoch) == (0.0, 19.0)
    assert (round(train[0].value, 4), round(train[-1].value, 4)) == (2.3472, 2.7272)
    assert min(train, key=lambda p: p.value) is train[0]


def test_follower_reads_a_growing_lightning_file(tmp_path: Path) -> None:
    """Lightning's CSVLogger appends rows, and rewrites the whole file when a new metric
    appears; a poll may catch a row half written, or the rewrite half done."""
    path = tmp_path / "version_0" / "metrics.csv"
    follower = MetricsFileFollower(path)
    assert follower.poll(T0) == []  # not created yet
    path.parent.mkdir()
    path.write_text("epoch,step,train_loss_step\n0,49,2.5\n0,99,2.")
    [p] = follower.poll(T0)
    assert (p.step, p.value, p.time, p.name) == (49, 2.5, T0, "train_loss_step")
    assert follower.poll(T0) == []  # "0,99,2." waits for its newline
    with path.open("a") as fh:
        fh.write("25\n0,149,nan\n")
    t1 = T0 + timedelta(seconds=5)
    got = follower.poll(t1)
    assert [(p.step, p.time) for p in got] == [(99, t1), (149, t1)]
    assert got[0].value == 2.25 and math.isnan(got[1].value)
    # validation ran: Lightning rewrites everything under a wider header; first caught half-way
    rows = ["0,49,2.5,", "0,99,2.25,", "0,149,nan,", "0,149,,1.75"]
    path.write_text("epoch,step,train_loss_step,val_loss\n" + rows[0] + "\n" + rows[1][:3])
    assert follower.poll(t1) == []
    path.write_text("epoch,step,train_loss_step,val_loss\n" + "\n".join(rows) + "\n1,199,1.5,\n")
    got = follower.poll(t1)
    assert [(p.kind, p.step, p.value) for p in got] == [("eval", 149, 1.75), ("train", 199, 1.5)]
    # a new run truncates the file and starts over with the same header
    path.write_text("epoch,step,train_loss_step,val_loss\n0,49,3.0,\n")
    assert [(p.step, p.value) for p in follower.poll(t1)] == [(49, 3.0)]


def test_follower_survives_an_atomic_replace_with_more_rows(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    path.write_text("epoch,loss,val_loss\n1,0.9,1.0\n")
    follower = MetricsFileFollower(path)
    assert [p.value for p in follower.poll(T0)] == [0.9, 1.0]
    tmp = tmp_path / "results.csv.tmp"
    tmp.write_text("epoch,loss,val_loss\n1,0.9,1.0\n2,0.8,0.95\n")
    os.replace(tmp, path)
    assert [(p.kind, p.epoch, p.value) for p in follower.poll(T0)] == [("train", 2.0, 0.8), ("eval", 2.0, 0.95)]


def test_follower_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFileFollower(path)
    with path.open("w") as fh:
        fh.write(json.dumps({"iteration": 19, "total_loss": 2.5, "lr": 0.01}) + "\n")
        fh.write("not json\n")
        fh.write(json.dumps({"iteration": 39, "total_loss": 2.0}) + "\n")
        fh.write('{"iteration": 59, "total_lo')
    assert [(p.step, p.value, p.name) for p in follower.poll(T0)] == [(19, 2.5, "total_loss"), (39, 2.0, "total_loss")]
    with path.open("a") as fh:
        fh.write('ss": 1.5, "val_loss": 1.7}\n')
    assert [(p.kind, p.step, p.value) for p in follower.poll(T0)] == [("train", 59, 1.5), ("eval", 59, 1.7)]


def test_follower_hf_trainer_state_document(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    history = [{"loss": 2.0, "step": 10, "epoch": 0.1}]
    path.write_text(json.dumps({"global_step": 10, "log_history": history}, indent=2))
    follower = MetricsFileFollower(path)
    assert [(p.step, p.value) for p in follower.poll(T0)] == [(10, 2.0)]
    history += [{"eval_loss": 2.2, "step": 20, "epoch": 0.2}, {"loss": 1.5, "step": 20, "epoch": 0.2},
                {"train_runtime": 9.0, "train_loss": 1.7, "step": 20}]
    path.write_text(json.dumps({"global_step": 20, "log_history": history}, indent=2)[:-5])  # mid-write
    assert follower.poll(T0) == []
    path.write_text(json.dumps({"global_step": 20, "log_history": history}, indent=2))
    assert [(p.kind, p.step, p.value) for p in follower.poll(T0)] == [("eval", 20, 2.2), ("train", 20, 1.5)]


def test_forced_columns_and_missing_file(tmp_path: Path) -> None:
    assert read_metrics_file(tmp_path / "nope.csv") == []
    path = tmp_path / "results.csv"
    path.write_text("               epoch,      train/box_loss,        val/box_loss\n"
                    "                   0,            0.059296,            0.036698\n"
                    "                   1,            0.051,               0.0301")
    assert read_metrics_file(path) == []  # no column is a loss we know
    points = read_metrics_file(path, loss_key="train/box_loss", eval_key="val/box_loss")
    assert [(p.kind, p.epoch, p.value) for p in points] == [
        ("train", 0.0, 0.059296), ("eval", 0.0, 0.036698), ("train", 1.0, 0.051), ("eval", 1.0, 0.0301)]
