"""The frozen table of diagnoses (tests/data/diagnoses.toml) held on the documented corpus runs
through ``costctl analyze --format json``: each run gets every diagnosis it must and none it
must not (issue 15, part 1). One test per (file, diagnosis) so a failure names both."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from costctl.cli.main import main

from replay_support import corpus_file

TABLE_PATH = Path(__file__).parent / "data" / "diagnoses.toml"
TABLE = tomllib.loads(TABLE_PATH.read_text())["run"]
DIAGNOSES = ("plateau", "overfitting", "not_learning", "unstable", "divergence")

#: (file, "must"|"must_not", diagnosis) not built yet: strict xfail until the rule lands.
PENDING: set[tuple[str, str, str]] = set()


def _cases() -> list:
    out = []
    for row in TABLE:
        for which in ("must", "must_not"):
            for diagnosis in row[which]:
                marks = ([pytest.mark.xfail(strict=True, reason="diagnosis not built yet")]
                         if (row["file"], which, diagnosis) in PENDING else [])
                out.append(pytest.param(row["file"], which, diagnosis, marks=marks,
                                        id=f"{row['file']}-{which}-{diagnosis}"))
    return out


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # no stray ./costctl.toml


_CACHE: dict[str, dict] = {}


def analyze_json(name: str, capsys: pytest.CaptureFixture[str]) -> dict:
    """``costctl analyze --train-log FILE --format json`` of corpus file ``name`` (cached per worker)."""
    if name not in _CACHE:
        path = corpus_file(name)
        capsys.readouterr()
        code = main(["analyze", "--train-log", str(path), "--price", "2.5", "--format", "json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        _CACHE[name] = json.loads(out)
    return _CACHE[name]


def test_table_is_well_formed() -> None:
    files = [row["file"] for row in TABLE]
    assert len(files) == len(set(files))
    for row in TABLE:
        assert set(row) == {"file", "must", "must_not", "reason"}, row
        assert set(row["must"]) <= set(DIAGNOSES) and set(row["must_not"]) <= set(DIAGNOSES), row
        assert not set(row["must"]) & set(row["must_not"]), row
        assert row["reason"].strip()
    required = {"hf_trainer_state_whisper_ja_overfit.json", "yolov8_results_wheat.csv",
                "lightning_metrics_not_learning.csv", "hf_trainer_state_no_progress.json",
                "lightning_metrics_turngpt.csv", "keras_stdout_nan_issue.txt", "nanogpt_nan_termux.log",
                "hf_trainer_state_t5_plateau.json", "lightning_metrics_resumed_run.csv",
                "yolov5_results_well.csv", "hf_trl_grpo_state_loss_zero.json", "mmengine_scalars_fish.json"}
    assert required <= set(files)


@pytest.mark.parametrize(("name", "which", "diagnosis"), _cases())
def test_analyze_diagnoses(name: str, which: str, diagnosis: str, capsys: pytest.CaptureFixture[str]) -> None:
    got = {d["policy"] for d in analyze_json(name, capsys)["decisions"]}
    if which == "must":
        assert diagnosis in got, f"{name}: expected {diagnosis}, got {sorted(got)}"
    else:
        assert diagnosis not in got, f"{name}: must not get {diagnosis}, got {sorted(got)}"


@pytest.mark.parametrize("name", [row["file"] for row in TABLE])
def test_each_diagnosis_names_the_money_at_stake(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """With ``--price`` every curve diagnosis carries the spend per hour at stake (no wall times in
    these logs: no rest-of-run or since-the-best-eval figure) in its evidence and its reason."""
    for d in analyze_json(name, capsys)["decisions"]:
        if d["policy"] in ("plateau", "not_learning", "overfitting", "unstable"):
            assert (d["evidence"]["spend_per_hour"], d["evidence"]["currency"]) == ("2.5", "USD"), d
            assert "it costs $2.50/h while it runs" in d["reason"], d["reason"]


@pytest.mark.parametrize("name", ["lightning_metrics_not_learning.csv", "hf_trainer_state_no_progress.json"])
def test_analyze_never_downsizes_a_run_that_is_not_learning(name: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "downsize.toml"
    config.write_text('[policies.plateau]\naction = "downsize"\n')
    capsys.readouterr()
    code = main(["analyze", "--train-log", str(corpus_file(name)), "--config", str(config), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    decisions = json.loads(out)["decisions"]
    assert [d["policy"] for d in decisions if d["policy"] == "not_learning"] == ["not_learning"]
    assert not [d for d in decisions if d["policy"] == "plateau" or d["action"] == "downsize"]


def test_analyze_says_where_the_not_learning_rule_does_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    notes = " ".join(analyze_json("hf_trl_grpo_state_loss_zero.json", capsys)["notes"])
    assert "not_learning: the loss starts at 0" in notes
    notes = " ".join(analyze_json("lightning_metrics_resumed_run.csv", capsys)["notes"])
    assert "resumed run" in notes
