"""Every training file of the corpus read by costctl's replay readers (the same loss parsers
``costctl watch`` runs live); the facts SOURCES.md states for each file are asserted as it states
them (its rounding). Train and eval kept apart. A renamed copy reads the same."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from costctl.progress.lines import parse_value
from costctl.replay.formats import detect_file
from costctl.replay.loss_stats import mean_value, spikes, summarize
from costctl.replay.readers import read_train_log
from costctl.replay.train_log import TrainLog

from replay_support import corpus_file, renamed_copy


def _read(name: str) -> TrainLog:
    return read_train_log(corpus_file(name))


def _r(value: float | None, places: int) -> float:
    assert value is not None
    return round(value, places)


def _xs(log: TrainLog, points: list) -> list[float | None]:
    return [log.x(p) for p in points]


# -- A. Hugging Face / TRL ---------------------------------------------------------------------
def test_hf_whisper_overfit() -> None:
    log = _read("hf_trainer_state_whisper_ja_overfit.json")
    assert log.format == "hf-trainer-state" and log.x_axis == "step"
    s = summarize(log.train)
    assert s.count == 200
    assert _xs(log, log.train) == [float(x) for x in range(25, 5001, 25)]
    assert (s.first.value, s.last.value) == (0.3048, 0.0002)
    assert (s.min.value, s.min.step) == (0.0001, 4325)
    assert s.last_improvement.step == 4325
    e = summarize(log.eval)
    assert e.count == 5 and [p.step for p in log.eval] == [1000, 2000, 3000, 4000, 5000]
    assert (_r(e.first.value, 4), _r(e.last.value, 4)) == (0.3210, 0.4200)
    assert (_r(e.min.value, 4), e.min.step) == (0.3210, 1000)
    assert all(p.kind == "eval" and p.name == "eval_loss" for p in log.eval)
    assert "grad_norm" not in log.series  # older transformers
    assert "eval_wer" in log.series and "eval_runtime" in log.series
    assert _r(log.summary["train_loss"], 5) == 0.01890
    assert log.summary["global_step"] == 5000 and _r(log.summary["epoch"], 2) == 38.17
    assert _r(log.summary["best_metric"], 4) == 0.7432


def test_hf_t5_plateau() -> None:
    log = _read("hf_trainer_state_t5_plateau.json")
    s = summarize(log.train)
    assert s.count == 430
    assert (log.train[0].step, log.train[-1].step) == (500, 215000)
    assert (s.first.value, s.last.value) == (1.9963, 1.7423)
    assert (s.min.value, s.min.step) == (1.734, 181000)
    assert (s.min.value, s.max.value) == (1.734, 1.9963)  # whole run in 1.734-1.996
    assert _r(mean_value(log.train[:43]), 3) == 1.876 and _r(mean_value(log.train[-43:]), 3) == 1.769
    drop = (mean_value(log.train[:43]) - mean_value(log.train[-43:])) / mean_value(log.train[:43])
    assert round(drop * 100) == 6  # ~6 % drop over 215k steps
    assert "grad_norm" in log.series and log.eval == []
    assert _r(log.summary["train_loss"], 5) == 1.80405
    assert log.summary["global_step"] == 215337 and log.summary["epoch"] == 3.0


def test_hf_no_progress() -> None:
    log = _read("hf_trainer_state_no_progress.json")
    s = summarize(log.train)
    assert s.count == 100 and (log.train[0].step, log.train[-1].step) == (10, 1000)
    assert (s.first.value, s.last.value) == (2.2538, 2.2816)
    assert (s.min.value, s.min.step) == (1.9218, 110)
    assert s.last_improvement.step == 110
    # SOURCES.md says "oscillates 1.92-2.43"; the file's largest values are 2.5253 (step 570) and
    # 2.5413 (step 770), 2.4289 (step 610) is the third: the low end and the oscillation hold.
    assert _r(s.min.value, 2) == 1.92 and _r(s.max.value, 2) == 2.54
    assert sorted(p.value for p in log.train)[-3] == 2.4289
    assert s.last.value > s.first.value  # ends higher than it started
    assert log.eval == [] and "train_loss" not in log.summary  # no eval, no summary entry
    assert log.summary["global_step"] == 1000 and _r(log.summary["epoch"], 4) == 0.0228


def test_trl_grpo_loss_zero_is_a_value() -> None:
    log = _read("hf_trl_grpo_state_loss_zero.json")
    assert len(log.train) == 1
    p = log.train[0]
    assert (p.step, p.value) == (10, 0.0)  # 0.0 is a loss, not "missing"
    assert log.series["reward"] == [(10.0, 0.365625)]
    assert _r(log.series["kl"][0][1], 5) == 0.00259
    assert _r(log.series["grad_norm"][0][1], 4) == 0.5695
    assert log.summary["global_step"] == 12 and log.summary["epoch"] == 3.0


def test_hf_cpt_state_and_stdout_agree() -> None:
    state = _read("hf_trainer_state_cpt_eval_predict.json")
    stdout_path = corpus_file("hf_stdout_cpt_cmd.txt")
    stdout = read_train_log(stdout_path)
    assert stdout.format == "console"
    assert stdout_path.read_bytes().count(b"\r") == 466  # every line ends in CRLF
    # state: 10 train points, steps 500..5000, epochs 0.91..9.11
    assert [p.step for p in state.train] == list(range(500, 5001, 500))
    for log in (state, stdout):
        s = summarize(log.train)
        assert s.count == 10
        assert (log.train[0].epoch, log.train[-1].epoch) == (0.91, 9.11)
        assert (s.first.value, s.last.value, s.min.value) == (1.1409, 0.2645, 0.2645)
        e = summarize(log.eval)
        assert e.count == 10 and [p.epoch for p in log.eval] == [float(k) for k in range(1, 11)]
        assert (_r(e.first.value, 4), _r(e.last.value, 4)) == (0.6598, 0.4917)
        assert (_r(e.min.value, 4), e.min.epoch) == (0.4853, 6.0)
        assert _r(log.summary["train_loss"], 4) == 0.4479
        assert round(log.summary["train_runtime"]) == 64358
    assert [(p.value, p.epoch) for p in state.train] == [(p.value, p.epoch) for p in stdout.train]
    assert [(p.value, p.epoch) for p in state.eval] == [(p.value, p.epoch) for p in stdout.eval]
    assert summarize(state.eval).min.step == 3294
    assert all(p.step is None for p in stdout.train)  # the console log prints no step
    # predict_* entries have no step (10 of the 31 entries) and are neither train nor eval
    assert len(state.series["predict_loss"]) == 10
    assert all(x is not None and x == int(x) for x, _ in state.series["predict_loss"])  # x = epoch there
    assert all(p.name == "eval_loss" for p in state.eval)


def test_hf_stdout_slurm_bert() -> None:
    path = corpus_file("hf_stdout_slurm_bert_sst2.log")
    raw = path.read_bytes()
    assert raw.splitlines()[1].startswith(b"CondaError") and raw.count(b"\r") == 847  # tqdm bars
    log = read_train_log(path)
    s = summarize(log.train)
    assert s.count == 47
    assert (log.train[0].epoch, log.train[-1].epoch) == (0.06, 2.99)
    assert (s.first.value, s.last.value) == (0.6879, 0.1306)
    assert (s.min.value, s.min.epoch) == (0.1296, 2.29)
    e = summarize(log.eval)
    assert e.count == 4 and (log.eval[0].epoch, log.eval[-1].epoch) == (0.64, 2.55)
    assert (_r(e.first.value, 4), _r(e.last.value, 4)) == (0.3684, 0.3033)
    assert (_r(e.min.value, 4), e.min.epoch) == (0.2884, 1.91)
    assert _r(log.summary["train_loss"], 5) == 0.28662
    assert _r(log.summary["train_runtime"], 2) == 187.98 and log.summary["epoch"] == 3.0


# -- B. Lightning CSVLogger --------------------------------------------------------------------
def test_lightning_resumed_run() -> None:
    path = corpus_file("lightning_metrics_resumed_run.csv")
    assert len(path.read_bytes().splitlines()) == 1135
    log = read_train_log(path)
    assert log.format == "lightning-csv"
    s = summarize(log.train)
    assert s.count == 1126 and all(p.name == "train_loss_step" for p in log.train)
    assert (log.train[0].step, log.train[-1].step) == (140749, 196999)
    assert log.train[0].epoch == 10.0  # resumed: starts at epoch 10
    assert (_r(s.first.value, 4), _r(s.last.value, 4)) == (3.7083, 3.9139)
    assert (_r(s.min.value, 4), s.min.step) == (3.3786, 141249)
    assert _r(mean_value(log.train[:100]), 3) == 3.673 and _r(mean_value(log.train[-100:]), 3) == 3.725
    assert s.last_improvement.step == 141049
    epoch_loss = log.series["train_loss_epoch"]
    assert len(epoch_loss) == 4
    assert sorted({int(v) for _, v in log.series["epoch"] if v is not None}) == [10, 11, 12, 13]
    assert (_r(epoch_loss[0][1], 4), _r(epoch_loss[-1][1], 4)) == (3.6696, 3.7186)
    e = summarize(log.eval)
    assert e.count == 4 and all(p.name == "val_loss" for p in log.eval)
    assert (_r(e.first.value, 4), _r(e.last.value, 4)) == (3.5629, 3.6042)
    assert (_r(e.min.value, 4), e.min.step) == (3.5629, 154813)


def test_lightning_turngpt() -> None:
    log = _read("lightning_metrics_turngpt.csv")
    s = summarize(log.train)
    assert s.count == 50 and [p.step for p in log.train] == list(range(49, 2500, 50))
    assert {p.epoch for p in log.train} == {0.0}
    assert (_r(s.first.value, 4), _r(s.last.value, 4)) == (2.3691, 2.2439)
    assert (_r(s.min.value, 4), s.min.step) == (1.2439, 1749)
    assert _r(s.max.value, 2) == 3.15


def test_lightning_not_learning() -> None:
    log = _read("lightning_metrics_not_learning.csv")
    s = summarize(log.train)
    assert s.count == 28 and [p.step for p in log.train] == list(range(49, 1400, 50))
    epochs = [p.epoch for p in log.train]
    assert (min(epochs), max(epochs)) == (0.0, 19.0) and len(set(epochs)) < len(epochs)
    assert (_r(s.first.value, 4), _r(s.last.value, 4)) == (2.3472, 2.7272)
    assert s.min is log.train[0]  # min at the very first point
    rest = [p.value for p in log.train[1:]]
    assert round(min(rest), 1) >= 2.6 and _r(max(rest), 2) == 3.99  # rises to 2.6-3.99
    acc = [v for _, v in log.series["train_acc"]]
    assert all(0.03 <= v <= 0.22 for v in acc[13:])  # train_acc stays 0.03-0.22 once the loss has risen


# -- C. Other frameworks -----------------------------------------------------------------------
def test_nanogpt_nan() -> None:
    log = _read("nanogpt_nan_termux.log")
    s = summarize(log.train)
    assert s.count == 91 and [p.step for p in log.train] == list(range(0, 451, 5))
    assert s.first.value == 4.2709
    assert (s.min.value, s.min.step) == (3.2452, 415)
    assert (s.last_finite.value, s.last_finite.step) == (3.5023, 420)
    assert s.nonfinite == 6 and s.first_nonfinite.step == 425
    assert all(math.isnan(p.value) for p in log.train if p.step >= 425)
    assert [(p.step, p.value) for p in log.eval] == [(0, 4.2475), (100, 3.4987), (200, 3.4427),
                                                      (300, 3.4254), (400, 3.3687)]
    assert s.last_improvement.step == 195  # running-min improvement stalls after iter 195


def test_keras_csvlogger() -> None:
    log = _read("keras_csvlogger_brats.csv")
    assert log.format == "keras-csv" and log.x_axis == "epoch"
    s = summarize(log.train)
    assert s.count == 24 and [p.epoch for p in log.train] == [float(k) for k in range(24)]
    assert (_r(s.first.value, 5), _r(s.last.value, 5)) == (0.05603, 0.02580)
    assert (_r(s.min.value, 5), s.min.epoch) == (0.02578, 21.0)
    e = summarize(log.eval)
    assert (_r(e.first.value, 5), _r(e.last.value, 5)) == (0.05464, 0.03449)
    assert (_r(e.min.value, 5), e.min.epoch) == (0.03447, 13.0)
    assert e.last_improvement.epoch <= 10  # val_loss plateaus after epoch ~10
    lrs = []
    for _, v in log.series["lr"]:
        if not lrs or not math.isclose(v, lrs[-1], rel_tol=1e-5):
            lrs.append(v)
    assert [float(f"{v:.2g}") for v in lrs] == [0.001, 2e-4, 4e-5, 8e-6, 1.6e-6, 1e-6]


def test_keras_stdout_nan() -> None:
    path = corpus_file("keras_stdout_nan_issue.txt")
    log = read_train_log(path)
    assert len(log.train) == 7 and [p.epoch for p in log.train] == [float(k) for k in range(1, 8)]
    assert log.train[0].value == 0.6242
    assert sum(math.isnan(p.value) for p in log.train) == 6
    assert log.eval[0].value == 0.5265 and all(math.isnan(p.value) for p in log.eval[1:])
    accs = re.findall(r" acc: (\S+)", path.read_text())
    assert parse_value(accs[0]) == 0.6295 and parse_value(accs[-1]) == 0.0  # collapses to 0.0000e+00


def test_detectron2_medwaste() -> None:
    path = corpus_file("detectron2_metrics_medwaste.json")
    assert len(path.read_text().splitlines()) == 200
    log = read_train_log(path)
    assert log.format == "detectron2-jsonl"
    s = summarize(log.train)
    assert s.count == 200 and [p.step for p in log.train] == list(range(19, 4000, 20))
    assert all(p.name == "total_loss" for p in log.train)
    assert (_r(s.first.value, 4), _r(s.last.value, 4)) == (2.7251, 1.0375)
    assert (_r(s.min.value, 4), s.min.step) == (0.9390, 3799)
    assert log.series["eta_seconds"][-1][1] == 0.0  # the run finished
    flat = [p.value for p in log.train if p.step >= 2000]
    assert len(flat) == 100 and (_r(min(flat), 3), _r(max(flat), 3)) == (0.939, 1.170)


def test_detectron2_aborted() -> None:
    log = _read("detectron2_metrics_aborted.json")
    s = summarize(log.train)
    assert s.count == 5 and [p.step for p in log.train] == [19, 39, 59, 79, 99]
    assert _r(s.first.value, 4) == 2.0360
    assert (_r(s.last.value, 4), s.last.step) == (1.2803, 99) and s.min is s.last
    assert _r(log.series["eta_seconds"][-1][1], 1) == 3731.6  # stopped early, not finished


def test_mmengine_scalars() -> None:
    log = _read("mmengine_scalars_fish.json")
    assert log.format == "mmengine-jsonl"
    s = summarize(log.train)
    assert s.count == 15 and (log.train[0].step, log.train[-1].step) == (50, 1002)
    assert [p.epoch for p in log.train] == [float(k) for k in range(1, 16)]
    assert _r(s.first.value, 4) == 2.4472
    assert (_r(s.min.value, 4), s.min.step, s.min.epoch) == (1.7563, 322, 5.0)
    assert _r(s.last.value, 4) == 17.8183
    jump = spikes(log.train)[0]  # (the next two points are still > 2x the pre-jump median)
    assert (jump.step, jump.epoch) == (390, 6.0)
    before = next(p for p in log.train if p.step == 322)
    assert (_r(before.value, 2), _r(jump.value, 2)) == (1.76, 24.23)
    after = [p.value for p in log.train if p.step >= 390]
    assert after == sorted(after, reverse=True)  # falls steadily 24.23 -> 17.82
    assert log.eval == []  # validation rows carry metrics, no loss
    mAP = log.series["coco/bbox_mAP"]
    assert len(mAP) == 29  # validation rows (each epoch's row appears twice)
    best = max(mAP, key=lambda xv: xv[1])
    assert (best[1], best[0]) == (0.42, 5.0)  # peaks at epoch 5 (validation step = epoch)
    assert [v for x, v in mAP if x == 6.0] == [0.08, 0.08]  # drops after the jump


def test_yolov5_results() -> None:
    log = _read("yolov5_results_well.csv")
    assert log.format == "yolo-csv" and log.x_axis == "epoch"
    assert [p.epoch for p in log.train] == [float(k) for k in range(300)]
    s = summarize(log.train)
    assert all(p.name == "train/box_loss" for p in log.train)
    assert (s.first.value, s.last.value) == (0.059296, 0.0065351)
    assert (s.min.value, s.min.epoch) == (0.0064653, 298.0)
    obj = log.series["train/obj_loss"]
    assert (obj[0][1], obj[-1][1]) == (0.022021, 0.0036363)
    e = summarize(log.eval)
    assert all(p.name == "val/box_loss" for p in log.eval)
    assert (e.first.value, e.last.value) == (0.036698, 0.0069171) and e.min is e.last


def test_yolov8_results() -> None:
    log = _read("yolov8_results_wheat.csv")
    assert [p.epoch for p in log.train] == [float(k) for k in range(1, 103)]
    s = summarize(log.train)
    assert (s.first.value, s.last.value) == (1.1267, 0.72402)
    assert (s.min.value, s.min.epoch) == (0.71206, 97.0)
    cls = log.series["train/cls_loss"]
    assert (cls[0][1], cls[-1][1]) == (1.17186, 0.58595)
    e = summarize(log.eval)
    assert (e.first.value, e.last.value) == (1.31339, 1.39398)
    assert (e.min.value, e.min.epoch) == (1.2277, 3.0)
    assert e.last_improvement.epoch <= 3.0  # never improves after epoch 3


TRAIN_FILES = [
    ("hf_trainer_state_whisper_ja_overfit.json", "hf-trainer-state"),
    ("hf_trainer_state_t5_plateau.json", "hf-trainer-state"),
    ("hf_trainer_state_no_progress.json", "hf-trainer-state"),
    ("hf_trl_grpo_state_loss_zero.json", "hf-trainer-state"),
    ("hf_trainer_state_cpt_eval_predict.json", "hf-trainer-state"),
    ("hf_stdout_cpt_cmd.txt", "console"),
    ("hf_stdout_slurm_bert_sst2.log", "console"),
    ("lightning_metrics_resumed_run.csv", "lightning-csv"),
    ("lightning_metrics_turngpt.csv", "lightning-csv"),
    ("lightning_metrics_not_learning.csv", "lightning-csv"),
    ("nanogpt_nan_termux.log", "console"),
    ("keras_csvlogger_brats.csv", "keras-csv"),
    ("keras_stdout_nan_issue.txt", "console"),
    ("detectron2_metrics_medwaste.json", "detectron2-jsonl"),
    ("detectron2_metrics_aborted.json", "detectron2-jsonl"),
    ("mmengine_scalars_fish.json", "mmengine-jsonl"),
    ("yolov5_results_well.csv", "yolo-csv"),
    ("yolov8_results_wheat.csv", "yolo-csv"),
]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize(("name", "fmt"), TRAIN_FILES)
def test_renamed_copy_reads_the_same(name: str, fmt: str, tmp_path: Path) -> None:
    original = corpus_file(name)
    copy = renamed_copy(original, tmp_path, "gpu_usage.csv")  # a misleading name
    assert detect_file(copy) == fmt
    a, b = read_train_log(original), read_train_log(copy)
    assert a.format == b.format == fmt
    for pa, pb in zip(a.points, b.points, strict=True):
        assert (pa.kind, pa.name, pa.step, pa.epoch) == (pb.kind, pb.name, pb.step, pb.epoch)
        assert _same(pa.value, pb.value)
    assert a.summary == b.summary and a.series.keys() == b.series.keys()


@pytest.mark.parametrize(("name", "fmt"), TRAIN_FILES)
def test_train_and_eval_never_mixed(name: str, fmt: str) -> None:
    log = read_train_log(corpus_file(name))
    assert log.train, f"{name}: no train-loss point"
    assert all(p.kind == "train" for p in log.train) and all(p.kind == "eval" for p in log.eval)
    assert {p.name for p in log.train}.isdisjoint({p.name for p in log.eval})
    assert all(p.time is None for p in log.points)  # no file here records wall times
