"""costctl.job: the helper training scripts import (request file, resume, OOM-retry sizes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from costctl import job


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (job.ENV_CHECKPOINT_REQUEST, job.ENV_RESUME_FROM, job.ENV_BATCH_SIZE, job.ENV_ACCUM_STEPS):
        monkeypatch.delenv(name, raising=False)


def test_request_file_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = tmp_path / "req"
    assert job.checkpoint_request_path() is None and not job.checkpoint_requested()
    job.acknowledge_checkpoint()  # nothing configured: a no-op
    monkeypatch.setenv(job.ENV_CHECKPOINT_REQUEST, str(request))
    assert job.checkpoint_request_path() == request
    assert not job.checkpoint_requested()
    request.write_text("")
    assert job.checkpoint_requested()
    job.acknowledge_checkpoint()
    assert not request.exists() and not job.checkpoint_requested()
    job.acknowledge_checkpoint()  # already gone: fine
    other = tmp_path / "other"
    other.write_text("")
    job.acknowledge_checkpoint(other)
    assert not other.exists()


def test_resume_and_sizes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert job.resume_path() is None
    monkeypatch.setenv(job.ENV_RESUME_FROM, "  ")
    assert job.resume_path() is None
    monkeypatch.setenv(job.ENV_RESUME_FROM, "/ckpt/last.pkl")
    assert job.resume_path() == "/ckpt/last.pkl"
    assert (job.batch_size(64), job.accum_steps(), job.accum_steps(4)) == (64, 1, 4)
    monkeypatch.setenv(job.ENV_BATCH_SIZE, "32")
    monkeypatch.setenv(job.ENV_ACCUM_STEPS, "2")
    assert (job.batch_size(64), job.accum_steps(1)) == (32, 2)
    for bad in ("0", "-4", "2.5", "lots"):
        monkeypatch.setenv(job.ENV_BATCH_SIZE, bad)
        with pytest.raises(ValueError, match=f"COSTCTL_BATCH_SIZE='{bad}' is not allowed: it must be a positive integer"):
            job.batch_size(64)


def test_configured_signal_becomes_a_request(tmp_path: Path) -> None:
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        job.request_checkpoint_on_signal(signal.SIGUSR1)
        assert not job.checkpoint_requested()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert job.checkpoint_requested()
        job.acknowledge_checkpoint()
        assert not job.checkpoint_requested()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_importing_it_pulls_in_nothing_heavy() -> None:
    code = ("import sys, costctl.job; heavy = {'numpy', 'torch', 'sklearn', 'sqlalchemy', 'typer', 'pydantic', "
            "'rich', 'requests', 'apscheduler'} & set(sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
