"""examples/train_digits_torch.py as a real child process (--quick, CPU); skipped without torch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import REPO
from test_examples import _env, _losses, _run

pytest.importorskip("torch", reason="torch is not installed: the PyTorch example cannot run")
pytestmark = pytest.mark.torch

EXAMPLE = REPO / "examples" / "train_digits_torch.py"


def _run_torch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _run("--device", "cpu", *args, cwd=cwd, env=env, script=EXAMPLE)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    workdir = tmp_path_factory.mktemp("torch_straight")
    proc = _run_torch("--quick", "--epochs", "4", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_prints_the_same_line_format(straight_run) -> None:
    lines = _losses(straight_run.stdout)
    assert [(e, n, k) for e, n, k, _ in lines] == [(e, 4, k) for e in range(1, 5) for k in ("loss", "val_loss")]
    train = [float(v) for _, _, k, v in lines if k == "loss"]
    assert train[-1] < train[0]


def test_request_resume_and_accumulation(straight_run, tmp_path: Path) -> None:
    request = tmp_path / "checkpoint.request"
    request.write_text("")  # already there when the job starts: it saves after epoch 1
    first = _run_torch("--quick", "--epochs", "2", "--checkpoint-dir", str(tmp_path / "ck"), cwd=tmp_path,
                       env=_env(COSTCTL_CHECKPOINT_REQUEST=str(request)))
    assert first.returncode == 0, first.stderr
    assert "checkpoint saved (on request)" in first.stdout and "(epoch 1)" in first.stdout
    assert not request.exists()
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["epoch-0001.pt", "epoch-0002.pt", "last.pt"]
    resumed = _run_torch("--quick", "--epochs", "4", "--resume", str(tmp_path / "ck"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(resumed.stdout) == [(e, 4, k, v) for e, _, k, v in _losses(straight_run.stdout) if e >= 3]
    # real gradient accumulation: batch 16 x 2 steps gives (to float rounding) the batch-32 run
    accum = _run_torch("--quick", "--epochs", "4", "--batch-size", "16", "--accum-steps", "2", cwd=tmp_path)
    assert accum.returncode == 0, accum.stderr
    for (e1, _, k1, v1), (e2, _, k2, v2) in zip(_losses(accum.stdout), _losses(straight_run.stdout), strict=True):
        assert (e1, k1) == (e2, k2) and float(v1) == pytest.approx(float(v2), rel=1e-4)


def test_simulated_oom_raises_the_real_torch_error(tmp_path: Path) -> None:
    proc = _run_torch("--quick", "--batch-size", "64", "--simulate-memory-limit-batch", "32", cwd=tmp_path)
    assert proc.returncode == 1 and _losses(proc.stdout) == []
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
