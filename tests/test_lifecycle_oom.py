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


#: Real children that die of a CUDA OOM (message shaped as torch prints it) and exit 1.
IGNORES_BATCH = """
import sys
batch = 1024  # hard-coded: COSTCTL_BATCH_SIZE is never read
print(f"training at batch {batch}", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
      "of 23.65 GiB of which 1.02 GiB is free.", file=sys.stderr, flush=True)
sys.exit(1)
"""
HONOURS_BATCH = """
import sys
from costctl import job
batch = job.batch_size(default=1024)
print(f"training at batch {batch} x accumulation {job.accum_steps()}", flush=True)
if batch > 256:
    print(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {batch * 2} MiB. GPU 0 has a total "
          "capacity of 23.65 GiB of which 1.02 GiB is free.", file=sys.stderr, flush=True)
    sys.exit(1)
print("done", flush=True)
"""


def _oom_decisions(data: Path) -> list[DecisionRow]:
    with _db(data) as db:
        return list(db.scalars(select(DecisionRow).where(DecisionRow.policy == "oom").order_by(DecisionRow.time)))


def test_a_retry_that_dies_of_the_same_oom_stops_and_says_how_to_pass_the_batch(tmp_path):
    data = tmp_path / "data"
    proc = run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "1024", "--no-status",
                       "--", PY, "-c", IGNORES_BATCH, env=costctl_env(data), timeout=120)
    assert proc.returncode != 0
    first, second = _oom_decisions(data)  # one retry, then no more
    assert first.action == "retry" and "effective batch 512" not in first.reason
    assert "COSTCTL_BATCH_SIZE=512" in first.reason and "unconfirmed" in first.reason
    assert second.action == "advise" and second.outcome == "stopped retrying"
    assert "same CUDA out of memory" in second.reason and "{batch_size}" in second.reason
    assert second.evidence["batch_heard"] is False
    assert proc.stdout.decode().count("training at batch 1024") == 2  # the job ran twice, never more


def test_a_job_that_honours_costctl_batch_size_is_retried_until_it_fits(tmp_path):
    data = tmp_path / "data"
    proc = run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "1024", "--no-status",
                       "--", PY, "-c", HONOURS_BATCH, env=costctl_env(data), timeout=120)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert "training at batch 256 x accumulation 4" in out and "done" in out
    decisions = _oom_decisions(data)
    assert [d.action for d in decisions] == ["retry", "retry"]
    assert [d.evidence["new_batch_size"] for d in decisions] == [512, 256]


#: A job whose memory does not depend on the batch: it takes {batch_size} from its argv, and the
#: same 20 GiB allocation fails whatever the batch (a fixed-size buffer), as torch >= 2.1 prints it.
FIXED_ALLOCATION = """
import sys
batch = int(sys.argv[sys.argv.index("--batch-size") + 1])
print(f"training at batch {batch}", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
      "23.65 GiB of which 3.29 GiB is free. Including non-PyTorch memory, this process has 20.36 GiB memory in use. "
      "Of the allocated memory 19.88 GiB is allocated by PyTorch, and 42.00 MiB is reserved by PyTorch but "
      "unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.", file=sys.stderr, flush=True)
sys.exit(1)
"""
#: A job whose failing allocation halves with the batch (activations), fitting at batch 256.
SCALING_ALLOCATION = """
import sys
batch = int(sys.argv[sys.argv.index("--batch-size") + 1])
print(f"training at batch {batch} x accumulation {sys.argv[-1]}", flush=True)
if batch > 256:
    print(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {batch * 8}.00 MiB. GPU 0 has a total "
          "capacity of 23.65 GiB of which 1.02 GiB is free.", file=sys.stderr, flush=True)
    sys.exit(1)
print("done", flush=True)
"""
#: A job whose OOM message has no allocation figure (the CUDA runtime's own error).
NO_FIGURE = """
import sys
batch = int(sys.argv[sys.argv.index("--batch-size") + 1])
print(f"training at batch {batch}", flush=True)
if batch > 256:
    print("RuntimeError: CUDA error: out of memory", file=sys.stderr, flush=True)
    sys.exit(1)
print("done", flush=True)
"""


def _watch_retry(data: Path, script: str) -> subprocess.CompletedProcess[bytes]:
    return run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "1024", "--no-status",
                       "--", PY, "-c", script, "--batch-size", "{batch_size}", "--accum-steps", "{accum_steps}",
                       env=costctl_env(data), timeout=120)


def test_an_allocation_that_does_not_shrink_with_the_batch_stops_after_one_retry(tmp_path):
    data = tmp_path / "data"
    proc = _watch_retry(data, FIXED_ALLOCATION)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 1, err
    assert out.count("training at batch") == 2 and "training at batch 512" in out  # one retry, no more
    first, second = _oom_decisions(data)
    assert first.action == "retry" and first.evidence["new_batch_size"] == 512
    assert second.action == "advise" and second.outcome == "stopped retrying"
    said = [ln for ln in err.splitlines() if "does not depend on the batch size" in ln]
    assert len(said) == 1 and said[0] == f"costctl oom: {second.reason}"  # one line
    assert "(20480.00 MiB requested at batch 1024 and at 512)" in second.reason
    assert "batch 512 x accumulation 2 (effective batch 1024)" in second.reason  # what the job was given
    for remedy in ("costctl recommend", "mixed precision", "gradient checkpointing", "8-bit optimizer"):
        assert remedy in second.reason
    ev = second.evidence
    assert ev["batch_dependent"] is False and ev["same_oom"] is True and ev["batch_in_command"] is True
    assert (ev["batch_size"], ev["accum_steps"], ev["effective_batch"]) == (512, 2, 1024)
    cmp = ev["comparison"]
    assert cmp["verdict"] == "same" and cmp["tolerance"] == 0.01
    assert cmp["before"]["batch_size"] == 1024 and cmp["after"]["batch_size"] == 512
    assert cmp["before"]["requested_bytes"] == cmp["after"]["requested_bytes"] == 20 * 2**30
    assert cmp["after"]["allocated_bytes"] == round(19.88 * 2**30)
    assert cmp["after"]["reserved_bytes"] == round(19.88 * 2**30) + 42 * 2**20


def test_an_allocation_that_halves_with_the_batch_is_still_retried_until_it_fits(tmp_path):
    data = tmp_path / "data"
    proc = _watch_retry(data, SCALING_ALLOCATION)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert "training at batch 256 x accumulation 4" in out and "done" in out
    decisions = _oom_decisions(data)
    assert [d.action for d in decisions] == ["retry", "retry"]
    assert [d.evidence["new_batch_size"] for d in decisions] == [512, 256]
    assert "comparison" not in decisions[0].evidence  # nothing to compare with yet
    assert decisions[1].evidence["comparison"]["verdict"] == "changed"
    assert all("cannot tell" not in d.reason for d in decisions)


def test_an_oom_without_an_allocation_figure_is_retried_and_says_it_could_not_compare(tmp_path):
    data = tmp_path / "data"
    proc = _watch_retry(data, NO_FIGURE)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert "training at batch 256" in out and "done" in out
    decisions = _oom_decisions(data)
    assert [d.action for d in decisions] == ["retry", "retry"]  # the current behaviour
    for d in decisions:
        assert "the OOM message gives no allocation size: costctl cannot tell whether the memory depends on " \
               "the batch" in d.reason
        assert d.evidence["comparison_possible"] is False
    assert decisions[1].evidence["comparison"]["verdict"] == "unknown"


#: The batch through the environment only, and an OOM message without an allocation figure
#: (the CUDA runtime's own error): the job takes the batch and fits at batch 2.
ENV_NO_FIGURE = """
import sys
from costctl import job
batch = job.batch_size(8)
print(f"training at batch {batch} x accumulation {job.accum_steps()}", flush=True)
if batch > 2:
    print("RuntimeError: CUDA error: out of memory", file=sys.stderr, flush=True)
    sys.exit(1)
print("done", flush=True)
"""


def test_an_env_batch_oom_without_a_figure_is_not_called_unheard_and_is_halved_until_it_fits(tmp_path):
    data = tmp_path / "data"
    proc = run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "8", "--no-status",
                       "--", PY, "-c", ENV_NO_FIGURE, env=costctl_env(data), timeout=120)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "training at batch 2 x accumulation 4" in out and "done" in out
    assert "did not take the batch" not in err
    decisions = _oom_decisions(data)
    assert [d.action for d in decisions] == ["retry", "retry"]
    assert [d.evidence["new_batch_size"] for d in decisions] == [4, 2]
    assert all("cannot tell whether the memory depends on the batch" in d.reason for d in decisions)
    assert decisions[1].evidence["comparison"]["verdict"] == "unknown"


def test_an_env_batch_oom_without_a_figure_is_halved_down_to_min_batch_then_advised(tmp_path):
    data = tmp_path / "data"
    script = IGNORES_BATCH.replace(
        'print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "\n'
        '      "of 23.65 GiB of which 1.02 GiB is free.", file=sys.stderr, flush=True)',
        'print("RuntimeError: CUDA error: out of memory", file=sys.stderr, flush=True)')
    assert "CUDA error: out of memory" in script
    proc = run_costctl("watch", "--on-exit", "leave", "--on-oom", "retry", "--batch-size", "1024", "--no-status",
                       "--", PY, "-c", script, env=costctl_env(data, COSTCTL_OOM__MIN_BATCH="256"), timeout=120)
    assert proc.returncode != 0
    decisions = _oom_decisions(data)
    assert [(d.action, d.outcome) for d in decisions] == [("retry", "retry 1"), ("retry", "retry 2"),
                                                          ("advise", "advised")]
    assert "min_batch 256" in decisions[-1].reason and "batch_heard" not in decisions[-1].evidence
    assert proc.stdout.decode().count("training at batch 1024") == 3
