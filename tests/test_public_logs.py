"""Real public logs of formats the corpus does not cover (tests/data/logs, see its SOURCES.md),
read by ``costctl analyze --format json`` with no options: each series' count, first, last,
minimum (and where) equal the figures SOURCES.md computed with awk/python3, not with costctl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costctl.cli.main import main

LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def _analyze(capsys, name: str, *extra: str) -> dict:
    code = main(["analyze", "--train-log", str(LOGS / name), "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _series(d: dict) -> dict[str, dict]:
    return {s["name"]: s for s in d["train_log"]["series"]}


# file, series name, kind, granularity, primary, count, first, last, min, argmin (field, value) or None
EXPECTED = [
    ("yolov5_console_table_cots.log", "box", "train", "epoch", True, 30, 0.06359, 0.02385, 0.02266, ("epoch", 28)),
    ("yolov5_console_table_cots.log", "obj", "train", "epoch", False, 30, 0.03304, 0.01487, 0.01487, ("epoch", 29)),
    ("pytorch_batch_and_epoch_average_resnet110.log", "Loss", "train", "batch", True, 120, 3.781340, 0.361316, 0.275040, ("epoch", 24)),
    ("pytorch_batch_and_epoch_average_resnet110.log", "train loss", "train", "epoch", False, 30, 2.3434, 0.3696, 0.3696, ("epoch", 30)),
    ("pytorch_batch_and_epoch_average_resnet110.log", "Validation loss", "eval", "batch", True, 30, 1.9504, 0.5082, 0.5082, None),
    ("advgan_named_losses_resnet56.log", "loss_D", "train", "epoch", True, 60, 0.405, 0.118, 0.113, ("epoch", 59)),
    ("advgan_named_losses_resnet56.log", "loss_G_fake", "train", "epoch", False, 60, 0.300, 0.625, 0.300, ("epoch", 1)),
    ("advgan_named_losses_resnet56.log", "loss_perturb", "train", "epoch", False, 60, 6.856, 0.789, 0.789, ("epoch", 60)),
    ("advgan_named_losses_resnet56.log", "loss_adv", "train", "epoch", False, 60, 7.296, 1.283, 1.199, ("epoch", 57)),
    ("llamafactory_trainer_log_sft.jsonl", "loss", "train", "batch", True, 200, 0.8548, 0.5601, 0.5369, ("step", 970)),
    ("mnist_bracket_epoch_batch_loss.log", "loss", "train", "batch", True, 60, 0.719, 0.039, 0.035, None),
]


@pytest.mark.parametrize("name,series,kind,gran,primary,count,first,last,low,where", EXPECTED,
                         ids=[f"{e[0]}:{e[1]}" for e in EXPECTED])
def test_public_log_series(capsys, name, series, kind, gran, primary, count, first, last, low, where) -> None:
    s = _series(_analyze(capsys, name))[series]
    assert (s["kind"], s["granularity"], s["primary"], s["count"]) == (kind, gran, primary, count)
    assert s["first"] == pytest.approx(first) and s["last"] == pytest.approx(last) and s["min"] == pytest.approx(low)
    if where is not None:
        assert s["argmin"][where[0]] == where[1]


def test_primary_series_is_what_the_policies_watch(capsys) -> None:
    d = _analyze(capsys, "pytorch_batch_and_epoch_average_resnet110.log")
    assert d["train_log"]["train_points"] == 120  # the per-batch series only: no epoch average mixed in
    d = _analyze(capsys, "advgan_named_losses_resnet56.log")
    assert d["train_log"]["train_points"] == 60


def test_loss_option_picks_the_primary_and_names_the_choices(capsys) -> None:
    d = _analyze(capsys, "advgan_named_losses_resnet56.log", "--loss", "loss_adv")
    assert _series(d)["loss_adv"]["primary"] and not _series(d)["loss_D"]["primary"]
    code = main(["analyze", "--train-log", str(LOGS / "advgan_named_losses_resnet56.log"), "--loss", "loss_X"])
    _, err = capsys.readouterr()
    assert code != 0 and "--loss 'loss_X'" in err and "'loss_D'" in err and "Traceback" not in err


def _grad_decisions(d: dict) -> list[dict]:
    return [x for x in d["decisions"] if x["key"].startswith("divergence:grad_norm")]


def test_real_loss_zero_with_nan_grad_norms_is_divergence_not_a_silent_best_0(capsys) -> None:
    d = _analyze(capsys, "hf_loss_zero_grad_norm_nan_pink_issue6.log")
    s = _series(d)["loss"]
    assert (s["count"], s["first"], s["last"], s["min"]) == (13, 0.0, 0.0, 0.0)
    [g] = _grad_decisions(d)
    assert g["policy"] == "divergence" and g["action"] == "advise" and g["evidence"]["streak"] == 3
    assert any("best is 0" in n and "13 grad_norm" in n for n in d["notes"])
    d = _analyze(capsys, "hf_grad_norm_nan_then_loss_zero_modernbert_issue233.log")
    s = _series(d)["loss"]
    assert (s["count"], s["first"], s["last"], s["min"]) == (3, 0.2051, 0.0, 0.0)
    [g] = _grad_decisions(d)
    assert g["at"] == "epoch 0.53"


def test_real_isolated_nan_grad_norm_under_mixed_precision_is_not_divergence(capsys) -> None:
    d = _analyze(capsys, "mmocr_isolated_grad_norm_nan_issue32.log")
    by = _series(d)
    assert (by["loss"]["count"], by["loss"]["first"], by["loss"]["last"], by["loss"]["primary"]) == (2, 1.9091, 0.9186, True)
    assert (by["loss_ce"]["first"], by["vertical_bbox_loss"]["last"]) == (1.2757, 0.1055)
    assert _grad_decisions(d) == [] and [x for x in d["decisions"] if x["policy"] == "divergence"] == []
    assert any("1 isolated non-finite grad_norm" in n for n in d["notes"])


def test_real_megatron_nan_grad_norms_without_a_loss_are_divergence(capsys) -> None:
    d = _analyze(capsys, "megatron_grad_norm_nan_issue396.log")
    assert d["train_log"]["train_points"] == 0
    [g] = _grad_decisions(d)
    assert g["at"] == "step 5428" and g["evidence"]["metric"] == "grad_norm"
