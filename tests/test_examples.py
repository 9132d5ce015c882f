"""examples/train_digits.py run as a real child process (--quick): its output lines, the
checkpoint request protocol, resume, gradient accumulation and the simulated CUDA OOM."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl.progress import LineParser

from helpers import SHIELD, REPO

EXAMPLE = REPO / "examples" / "train_digits.py"
LINE = re.compile(r"^epoch (\d+)/(\d+) (loss|val_loss): (\d+\.\d{6})$", re.MULTILINE)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None, script: Path = EXAMPLE,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


def _losses(stdout: str) -> list[tuple[int, int, str, str]]:
    return [(int(m[1]), int(m[2]), m[3], m[4]) for m in LINE.finditer(stdout)]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One uninterrupted --quick run (6 epochs)."""
    workdir = tmp_path_factory.mktemp("straight")
    proc = _run("--quick", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_quick_run_prints_one_train_and_one_eval_line_per_epoch(straight_run, tmp_path: Path) -> None:
    lines = _losses(straight_run.stdout)
    assert [(e, n, k) for e, n, k, _ in lines] == [(e, 6, k) for e in range(1, 7) for k in ("loss", "val_loss")]
    train = [float(v) for _, _, k, v in lines if k == "loss"]
    assert train[-1] < train[0] * 0.6  # it really learns
    # costctl's own parser reads the same lines: train and eval apart, epoch and total known
    parser = LineParser()
    points = parser.feed(straight_run.stdout, T0) + parser.flush(T0)
    assert [(p.kind, p.epoch, p.total) for p in points] == [
        (kind, float(e), 6) for e in range(1, 7) for kind in ("train", "eval")]
    assert [p.value for p in points if p.kind == "train"] == train


def test_final_checkpoint_files_are_written_atomically(straight_run, tmp_path: Path) -> None:
    proc = _run("--quick", "--epochs", "4", "--save-every", "2", "--checkpoint-dir", str(tmp_path / "ck"),
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["epoch-0002.pkl", "epoch-0004.pkl", "last.pkl"]
    last = tmp_path / "ck" / "last.pkl"
    assert not last.is_symlink()
    assert last.read_bytes() == (tmp_path / "ck" / "epoch-0004.pkl").read_bytes()
    with last.open("rb") as fh:
        state = pickle.load(fh)
    assert state["epoch"] == 4 and len(state["train_losses"]) == 4
    # --epochs 4 of a 6-epoch schedule runs the same first 4 epochs as the straight run
    assert _losses(proc.stdout) == [(e, 4, k, v) for e, _, k, v in _losses(straight_run.stdout) if e <= 4]


def test_checkpoint_request_is_honoured_at_the_end_of_the_epoch_and_removed(tmp_path: Path) -> None:
    request = tmp_path / "request" / "checkpoint.request"
    request.parent.mkdir()
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--quick", "--epochs", "100000",
                             "--checkpoint-dir", str(tmp_path / "ck")], cwd=tmp_path,
                            env=_env(COSTCTL_CHECKPOINT_REQUEST=str(request)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen_epoch = None
        saved = None
        requested_at = 0.0
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            assert time.monotonic() < deadline, "no checkpoint within 60 s"
            m = re.match(r"epoch (\d+)/100000 val_loss", line)
            if m and seen_epoch is None and int(m[1]) >= 2:
                seen_epoch = int(m[1])
                assert not (tmp_path / "ck").exists()  # nothing saved before the request
                request.write_text("")
                requested_at = time.time()
            m = re.match(r"checkpoint saved \(on request\): (\S+) \(epoch (\d+)\)", line)
            if m:
                saved = (Path(m[1]), int(m[2]))
                break
        assert saved is not None, proc.stderr.read()
        assert not request.exists()  # acknowledged
        path, epoch = saved
        # saved at the end of the epoch whose check first saw the request (the job may have run
        # ahead of the lines we had read when the request was written, never behind)
        assert epoch >= seen_epoch
        assert path == tmp_path / "ck" / f"epoch-{epoch:04d}.pkl"
        assert path.stat().st_mtime >= requested_at - 1
        with (tmp_path / "ck" / "last.pkl").open("rb") as fh:
            assert pickle.load(fh)["epoch"] == epoch
        assert proc.poll() is None  # it keeps training after the checkpoint
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_resume_continues_the_epoch_count_with_the_same_losses(straight_run, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    first = _run("--quick", "--epochs", "3", "--checkpoint-dir", str(ck), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    resumed = _run("--quick", "--checkpoint-dir", str(ck), "--resume", str(ck / "epoch-0003.pkl"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed after epoch 3" in resumed.stdout
    # epochs 4..6 follow 3, and are exactly what the uninterrupted run printed
    expected = [(e, 6, k, v) for e, _, k, v in _losses(straight_run.stdout) if e >= 4]
    assert _losses(resumed.stdout) == expected
    # the same through costctl's environment variable and a directory (its last.pkl)
    again = _run("--quick", "--checkpoint-dir", str(tmp_path / "ck2"), cwd=tmp_path,
                 env=_env(COSTCTL_RESUME_FROM=str(ck)))
    assert again.returncode == 0, again.stderr
    assert "resumed after epoch 6" in again.stdout and _losses(again.stdout) == []


def test_simulated_cuda_oom_then_retry_with_half_batch_and_double_accumulation(tmp_path: Path) -> None:
    oom = _run("--quick", "--epochs", "2", "--batch-size", "64", "--simulate-memory-limit-batch", "32",
               cwd=tmp_path)
    assert oom.returncode == 1
    assert _losses(oom.stdout) == []
    last = oom.stderr.strip().splitlines()[-1]
    assert last.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert "GPU 0 has a total capacity of 23.65 GiB" in last
    assert "Traceback (most recent call last):" in oom.stderr
    # costctl's retry: batch 32 x accumulation 2 through its environment variables
    retry = _run("--quick", "--epochs", "2", "--simulate-memory-limit-batch", "32", cwd=tmp_path,
                 env=_env(COSTCTL_BATCH_SIZE="32", COSTCTL_ACCUM_STEPS="2"))
    assert retry.returncode == 0, retry.stderr
    assert "batch 32 x accum 2 (effective 64)" in retry.stdout
    # the same effective batch gives the same updates as batch 64 on a card big enough
    big = _run("--quick", "--epochs", "2", "--batch-size", "64", cwd=tmp_path)
    assert big.returncode == 0 and len(_losses(big.stdout)) == 4
    assert _losses(retry.stdout) == _losses(big.stdout)
    # flags beat the environment
    flags = _run("--quick", "--epochs", "1", "--batch-size", "16", "--accum-steps", "1", cwd=tmp_path,
                 env=_env(COSTCTL_BATCH_SIZE="32", COSTCTL_ACCUM_STEPS="2"))
    assert "batch 16 x accum 1 (effective 16)" in flags.stdout


@pytest.mark.parametrize(
    "args,env,fragment",
    [
        (["--resume", "no/such/checkpoint.pkl"], {}, "checkpoint 'no/such/checkpoint.pkl' does not exist"),
        ([], {"COSTCTL_BATCH_SIZE": "abc"}, "COSTCTL_BATCH_SIZE='abc' is not allowed"),
        (["--batch-size", "0"], {}, "'0' is not a positive integer"),
    ],
)
def test_bad_input_is_one_line_without_traceback(tmp_path: Path, args, env, fragment: str) -> None:
    proc = _run("--quick", *args, cwd=tmp_path, env=_env(**env))
    assert proc.returncode == 2
    assert fragment in proc.stderr and "Traceback" not in proc.stderr
