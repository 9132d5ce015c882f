"""``costctl analyze --format json`` carries per loss series (name, train/eval, batch/epoch) its
count, first, last, minimum and where the minimum is; figures checked against the ones
../shared/corpus/SOURCES.md computed with python3 from the files (not with costctl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costctl.cli.main import main
from replay_support import corpus_file


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def series_of(capsys: pytest.CaptureFixture[str], path: Path) -> dict[tuple[str, str, str], dict]:
    """``analyze --format json``'s series, by (name, kind, granularity)."""
    code = main(["analyze", "--train-log", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return {(s["name"], s["kind"], s["granularity"]): s for s in json.loads(out)["train_log"]["series"]}


# (file, (name, kind, granularity), count, first, last, min, argmin (step, epoch) -- None: not checked)
CORPUS = [
    ("hf_trainer_state_whisper_ja_overfit.json", ("loss", "train", "batch"), 200, 0.3048, 0.0002, 0.0001, (4325, None)),
    ("hf_trainer_state_whisper_ja_overfit.json", ("eval_loss", "eval", "batch"), 5, 0.3210, 0.4200, 0.3210, (1000, None)),
    ("hf_trainer_state_t5_plateau.json", ("loss", "train", "batch"), 430, 1.9963, 1.7423, 1.734, (181000, None)),
    ("hf_trainer_state_no_progress.json", ("loss", "train", "batch"), 100, 2.2538, 2.2816, 1.9218, (110, None)),
    ("hf_trl_grpo_state_loss_zero.json", ("loss", "train", "batch"), 1, 0.0, 0.0, 0.0, (10, None)),
    ("hf_stdout_cpt_cmd.txt", ("loss", "train", "batch"), 10, 1.1409, 0.2645, 0.2645, (None, 9.11)),
    ("hf_stdout_cpt_cmd.txt", ("eval_loss", "eval", "epoch"), 10, 0.6598, 0.4917, 0.4853, (None, 6.0)),
    ("hf_stdout_slurm_bert_sst2.log", ("loss", "train", "batch"), 47, 0.6879, 0.1306, 0.1296, (None, 2.29)),
    ("hf_stdout_slurm_bert_sst2.log", ("eval_loss", "eval", "batch"), 4, 0.3684, 0.3033, 0.2884, (None, 1.91)),
    ("lightning_metrics_resumed_run.csv", ("train_loss_step", "train", "batch"), 1126, 3.7083, 3.9139, 3.3786, (141249, None)),
    ("lightning_metrics_resumed_run.csv", ("train_loss_epoch", "train", "epoch"), 4, 3.6696, 3.7186, 3.6696, None),
    ("lightning_metrics_resumed_run.csv", ("val_loss", "eval", "batch"), 4, 3.5629, 3.6042, 3.5629, (154813, None)),
    ("lightning_metrics_turngpt.csv", ("loss", "train", "batch"), 50, 2.3691, 2.2439, 1.2439, (1749, None)),
    ("lightning_metrics_not_learning.csv", ("train_loss", "train", "batch"), 28, 2.3472, 2.7272, 2.3472, (49, None)),
    ("detectron2_metrics_medwaste.json", ("total_loss", "train", "batch"), 200, 2.7251, 1.0375, 0.9390, (3799, None)),
    ("keras_csvlogger_brats.csv", ("loss", "train", "epoch"), 24, 0.05603, 0.02580, 0.02578, (None, 21)),
]


@pytest.mark.parametrize("name,key,count,first,last,low,where", CORPUS, ids=lambda v: v if isinstance(v, str) else None)
def test_corpus_series_figures(capsys, name, key, count, first, last, low, where) -> None:
    s = series_of(capsys, corpus_file(name))[key]
    assert s["count"] == count
    assert s["first"] == pytest.approx(first, abs=5e-5)
    assert s["last"] == pytest.approx(last, abs=5e-5)
    assert s["min"] == pytest.approx(low, abs=5e-5)
    if where is not None:
        step, epoch = where
        if step is not None:
            assert s["argmin"]["step"] == step
        if epoch is not None:
            assert s["argmin"]["epoch"] == pytest.approx(epoch)


def test_nanogpt_nan_tail_is_counted_and_min_is_finite(capsys) -> None:
    s = series_of(capsys, corpus_file("nanogpt_nan_termux.log"))[("loss", "train", "batch")]
    assert s["count"] == 91 and s["nonfinite"] == 6 and s["first"] == pytest.approx(4.2709)
    assert s["last"] == "nan" and s["min"] == pytest.approx(3.2452) and s["argmin"]["step"] == 415


def test_transformers5_string_dicts_train_and_eval_apart(tmp_path: Path, capsys) -> None:
    log = tmp_path / "hf5.log"
    log.write_text(
        "{'loss': '0.695', 'grad_norm': '1.21', 'learning_rate': '4.9e-05', 'epoch': '0.1'}\n"
        "{'loss': '0.5123', 'grad_norm': '1.1', 'learning_rate': '4.8e-05', 'epoch': '0.2'}\n"
        "{'eval_loss': '0.6', 'eval_runtime': '1.234', 'eval_samples_per_second': '81.1', 'epoch': '0.2'}\n"
        "{'loss': '0.6011', 'grad_norm': '0.9', 'learning_rate': '4.7e-05', 'epoch': '0.3'}\n"
        "{'train_runtime': '12.5', 'train_samples_per_second': '9.1', 'train_loss': '0.6', 'epoch': '0.3'}\n"
    )
    by = series_of(capsys, log)
    train, ev = by[("loss", "train", "batch")], by[("eval_loss", "eval", "batch")]
    assert (train["count"], train["first"], train["last"], train["min"]) == (3, 0.695, 0.6011, 0.5123)
    assert train["argmin"]["epoch"] == 0.2
    assert (ev["count"], ev["first"]) == (1, 0.6)


def test_llamafactory_trainer_log_null_loss_skipped_and_current_steps_is_the_step(tmp_path: Path, capsys) -> None:
    log = tmp_path / "trainer_log.jsonl"
    rows = [
        {"current_steps": 10, "total_steps": 30, "loss": 1.2345, "lr": 4.9e-05, "epoch": 0.33},
        {"current_steps": 20, "total_steps": 30, "loss": 1.1, "lr": 4.5e-05, "epoch": 0.67},
        {"current_steps": 20, "total_steps": 30, "eval_loss": 1.3, "epoch": 0.67},
        {"current_steps": 30, "total_steps": 30, "loss": None, "eval_loss": 1.25, "epoch": 1.0},
        {"current_steps": 30, "total_steps": 30, "loss": 1.05, "lr": 1e-05, "epoch": 1.0},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by = series_of(capsys, log)
    train, ev = by[("loss", "train", "batch")], by[("eval_loss", "eval", "batch")]
    assert (train["count"], train["first"], train["last"], train["min"], train["argmin"]["step"]) == (3, 1.2345, 1.05, 1.05, 30)
    assert (ev["count"], ev["first"], ev["last"]) == (2, 1.3, 1.25)


def test_loss_option_on_a_metrics_file_picks_the_column(capsys) -> None:
    path = corpus_file("lightning_metrics_resumed_run.csv")
    code = main(["analyze", "--train-log", str(path), "--loss", "train_loss_epoch", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    primary = [s for s in json.loads(out)["train_log"]["series"] if s["primary"] and s["kind"] == "train"]
    assert [(s["name"], s["count"], s["first"]) for s in primary] == [("train_loss_epoch", 4, pytest.approx(3.6696, abs=5e-5))]
    code = main(["analyze", "--train-log", str(path), "--loss", "nope"])
    _, err = capsys.readouterr()
    assert code != 0 and "--loss 'nope'" in err and "train_loss_step" in err
