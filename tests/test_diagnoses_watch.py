"""The frozen diagnoses table (tests/data/diagnoses.toml) held through a real live ``costctl watch``
on the sim provider: a tiny job prints a corpus run's lines as its framework printed them (a
Hugging Face trainer_state's log_history as the Trainer's dict lines; a console log verbatim), or
writes a Lightning metrics.csv the watch follows with ``--metrics-file``. The decisions the watch
records in its ledger must include every diagnosis the table requires and none it forbids."""

from __future__ import annotations

import os
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import DecisionRow

from helpers import costctl_env, run_costctl
from replay_support import corpus_file

TABLE = {row["file"]: row for row in tomllib.loads(
    (Path(__file__).parent / "data" / "diagnoses.toml").read_text())["run"]}

# Prints a corpus file as its job printed it: trainer_state.json's log_history as the HF
# Trainer's stdout dict lines; any other text file line by line. A CSV is written to
# metrics.csv row by row instead (the watch follows it).
JOB = textwrap.dedent("""\
    import json, sys, time
    path = sys.argv[1]
    if path.endswith(".json"):
        for entry in json.load(open(path))["log_history"]:
            print(repr(entry), flush=True)
    elif path.endswith(".csv"):
        with open(path) as src, open("metrics.csv", "w") as out:
            for line in src:
                out.write(line)
                out.flush()
        time.sleep(1.5)  # the watch's follower reads the file's tail
    else:
        for line in open(path, encoding="utf-8", errors="replace"):
            print(line.rstrip("\\n"), flush=True)
""")

LIVE = [
    "hf_trainer_state_whisper_ja_overfit.json",  # overfitting (train and eval watched together)
    "hf_trainer_state_no_progress.json",  # not learning, never plateau
    "nanogpt_nan_termux.log",  # divergence
    "keras_stdout_nan_issue.txt",  # divergence
    "lightning_metrics_not_learning.csv",  # not learning, followed as a metrics file
]


def _watch(tmp_path: Path, name: str, toml: str = "") -> list[DecisionRow]:
    source = corpus_file(name)
    work = tmp_path / "work"
    work.mkdir()
    (work / "costctl.toml").write_text('[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n' + toml)
    (work / "job.py").write_text(JOB)
    data = tmp_path / "data"
    env = costctl_env(data)
    extra = ["--metrics-file", str(work / "metrics.csv")] if name.endswith(".csv") else []
    proc = run_costctl("watch", "--on-exit", "leave", *extra, "--", sys.executable, "job.py", str(source),
                       env=env, cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    with Session(create_engine(f"sqlite:///{data / 'costctl.db'}")) as s:
        return list(s.scalars(select(DecisionRow)).all())


@pytest.mark.parametrize("name", LIVE)
def test_a_live_watch_diagnoses_the_corpus_run_as_the_table_says(tmp_path: Path, name: str) -> None:
    row = TABLE[name]
    got = {r.policy for r in _watch(tmp_path, name)}
    missing = set(row["must"]) - got
    forbidden = set(row["must_not"]) & got
    assert not missing and not forbidden, f"{name}: got {sorted(got)}; missing {missing}, forbidden {forbidden}"


def test_a_run_that_is_not_learning_is_never_downsized(tmp_path: Path) -> None:
    """With ``[policies.plateau] action = "downsize"`` a not-learning run gets the not-learning
    advice and no plateau, so nothing moves it to a cheaper card."""
    rows = _watch(tmp_path, "hf_trainer_state_no_progress.json", '[policies.plateau]\naction = "downsize"\n')
    assert {r.policy for r in rows} >= {"not_learning"}
    assert not [r for r in rows if r.policy == "plateau" or r.action == "downsize"]
    [nl] = [r for r in rows if r.policy == "not_learning"]
    assert nl.action == "advise" and "not a plateau" in nl.reason


def test_a_live_diagnosis_carries_the_money_at_stake(tmp_path: Path) -> None:
    """Live, the points have times and the sim instance a price: overfitting names what was spent
    since the best eval, every diagnosis the spend per hour."""
    rows = _watch(tmp_path, "hf_trainer_state_whisper_ja_overfit.json")
    [over] = [r for r in rows if r.policy == "overfitting"]
    spent = over.evidence["spent_since_best"]
    assert spent is not None and spent["currency"] == over.evidence["currency"] and over.evidence["best_step"] == 1000
    assert "was spent since the best eval" in over.reason
    for r in rows:
        if r.policy in ("plateau", "overfitting", "not_learning", "unstable"):
            assert r.evidence["spend_per_hour"], r
