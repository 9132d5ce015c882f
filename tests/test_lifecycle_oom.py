"""CUDA OOM recovery: every corpus form is recognized; --on-oom retry halves the batch and
doubles accumulation (same effective batch) on a real job; without it, the advice has the numbers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.errors import UsageError
from costctl.ledger.schema import DecisionRow, Run
from costctl.lifecycle.oom_retry import BatchPlan, OomScanner, advice, render_command
from helpers import costctl_env, run_costctl
from lifecycle_support import EXAMPLE, PY
from replay_support import corpus_file


def _db(data_dir: Path) -> Session:
    return Session(create_engine(f"sqlite:///{data_dir / 'costctl.db'}"))


def test_every_oom_form_in_the_corpus_is_seen_in_a_stream_split_anywhere():
    lines = corpus_file("oom_messages_from_issues.txt").read_text().splitlines()
    oom_lines = [ln for ln in lines if "out of memory" in ln.lower() or "Tried to allocate" in ln]
    assert len(oom_lines) == 16
    for line in oom_lines:
        scanner = OomScanner()
        text = "Traceback (most recent call last):\n  ...\n" + line + "\n"
        for i in range(0, len(text), 7):  # chunks cut mid-word, as a pipe delivers them
            scanner.feed("stderr", text[i:i + 7])
        assert scanner.event is not None, line
        assert scanner.event.requested_bytes and scanner.event.total_bytes
    # context lines alone are not an OOM; an unterminated last line is scanned at exit
    scanner = OomScanner()
    scanner.feed("stderr", "During handling of the above exception, another exception occurred:\n")
    assert scanner.event is None
    scanner.feed("stdout", oom_lines[-1])  # no newline yet
    assert scanner.event is None and scanner.finish() is not None


def test_batch_plan_and_placeholders():
    assert BatchPlan(64, 1).halved() == BatchPlan(32, 2)
    assert BatchPlan(32, 2).halved(min_batch=16) == BatchPlan(16, 4)
    assert BatchPlan(16, 4).halved(min_batch=16) is None
    assert BatchPlan(25, 1).halved().effective == 24  # an odd batch cannot keep it exactly
    argv = ["train.py", "--bs={batch_size}", "--accum", "{accum_steps}", "--resume", "{checkpoint}", "-c", "x={}"]
    assert render_command(argv, batch_size=32, accum_steps=2, checkpoint="/c/last.pt") == [
        "train.py", "--bs=32", "--accum", "2", "--resume", "/c/last.pt", "-c", "x={}"]
    assert render_command(argv, batch_size=32, accum_steps=None, checkpoint=None)[5] == ""
    with pytest.raises(UsageError, match="--batch-size"):
        render_command(argv, batch_size=None, accum_steps=None, checkpoint=None)
    assert "batch 32 x accumulation 2 (effective batch 64)" in advice(BatchPlan(64), None, 1)
    assert "--batch-size N" in advice(None, None, 1)
    assert "min_batch 64" in advice(BatchPlan(64), None, 64)


def _epoch_losses(text: str) -> list[str]:
    return re.findall(r"^epoch \d+/\d+ loss: ([\d.]+)$", text, flags=re.M)


def test_on_oom_retry_halves_the_batch_and_finishes_with_the_same_effective_batch(tmp_path):
    data = tmp_path / "data"
    cmd = [PY, EXAMPLE, "--quick", "--checkpoint-dir", str(tmp_path / "ckpt"), "--simulate-memory-limit-batch", "32",
           "--batch-size", "{batch_size}", "--accum-steps", "{accum_steps}"]
    proc = run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "64", "--no-status", "--",
                       *cmd, env=costctl_env(data), timeout=120)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "batch 64 x accum 1 (effective 64)" in out and "CUDA out of memory" in err  # first try died
    assert "batch 32 x accum 2 (effective 64)" in out and "done: epochs 1..6" in out  # the retry finished
    with _db(data) as db:
        (retry,) = db.scalars(select(DecisionRow).where(DecisionRow.policy == "oom")).all()
        run = db.scalars(select(Run)).one()
    assert retry.action == "retry" and retry.outcome == "retry 1"
    ev = retry.evidence
    assert (ev["batch_size"], ev["accum_steps"], ev["new_batch_size"], ev["new_accum_steps"]) == (64, 1, 32, 2)
    assert ev["effective_batch"] == 64 and ev["exit_status"] == 1
    assert ev["total_bytes"] == round(23.65 * 2**30)  # read from the OOM message
    assert run.status == "completed" and run.exit_code == 0
    # same effective batch, same updates: the losses equal those of a run that fits batch 64
    reference = subprocess.run([PY, EXAMPLE, "--quick", "--checkpoint-dir", str(tmp_path / "ref"), "--batch-size", "64"],
                               capture_output=True, text=True, timeout=120)
    assert _epoch_losses(out) == _epoch_losses(reference.stdout) and len(_epoch_losses(out)) == 6


def test_without_retry_the_advice_names_the_numbers(tmp_path):
    data = tmp_path / "data"
    env = costctl_env(data, COSTCTL_BATCH_SIZE="64")  # the job reads it from the environment
    cmd = [PY, EXAMPLE, "--quick", "--checkpoint-dir", str(tmp_path / "ckpt"), "--simulate-memory-limit-batch", "32"]
    proc = run_costctl("watch", "--on-exit", "leave", "--no-status", "--", *cmd, env=env, timeout=120)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "retry with batch 32 x accumulation 2 (effective batch 64)" in err
    with _db(data) as db:
        (d,) = db.scalars(select(DecisionRow).where(DecisionRow.policy == "oom")).all()
    assert d.action == "advise" and "batch 64 x accumulation 1" in d.reason and "23.65 GiB" in d.reason


def test_a_batch_placeholder_without_a_batch_size_is_one_line(tmp_path):
    proc = run_costctl("watch", "--", PY, "-c", "print(1)", "{batch_size}", env=costctl_env(tmp_path))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.decode().splitlines() if ln.strip()]
    assert len(lines) == 1 and "{batch_size}" in lines[0] and "--batch-size" in lines[0]
    assert not (tmp_path / "costctl.db").exists()
