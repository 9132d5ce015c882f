"""The real frameworks under ``costctl watch`` on a simulated spot instance: a Hugging Face
``Trainer.train()`` and a Lightning ``Trainer.fit()`` (tiny models built in code on the CPU,
offline: ``HF_HUB_OFFLINE=1``, nothing downloaded), each preempted three times in a row through
the user-facing ``costctl sim preempt``: every time the checkpoint on disk is complete (HF: the
weights loadable) before the job is ended, and ``costctl watch --resume`` continues from that
step, not from 0; the fourth run completes. The loss points are parsed live (transformers'
string-valued dicts included), and the bill shows the job as one chain with its preemptions.

The ``frameworks`` group: CI installs ``.[hf,lightning]`` after torch 2.13.0 and runs
``pytest -m frameworks``; with ``CI=true`` a missing framework fails the test, never skips it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, costctl_cmd, costctl_env, run_costctl

pytestmark = pytest.mark.frameworks

ROUNDS = 3  # preemptions in a row, then a run to the end


def _require(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed (CI=true: the frameworks group must run)", pytrace=False)
        pytest.skip(f"{module} is not installed: pip install -e '.[hf,lightning]' (after torch)")


def _config(tmp_path: Path, checkpoints: str) -> Path:
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f"""
[instance]
provider = "sim"
gpu = "RTX 4090"
billing = "spot"
[watch]
sample_interval = "1s"
grace_period = "10s"
[preemption]
margin = "5s"
[checkpoint]
path = "{checkpoints}"
periodic = "off"
deadline = "60s"
""")
    return cfg


def _newest_log(data: Path, before: set[Path]) -> Path | None:
    logs = [p for p in (data / "runs").glob("*.log") if p not in before] if (data / "runs").exists() else []
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


def _run_round(tmp_path: Path, cfg: Path, argv: list[str], *, resume: bool, preempt: bool,
               started: re.Pattern[str]) -> tuple[int, str, str]:
    """One watch of the job; with ``preempt``, a notice once the job has trained a little.
    Returns (exit status, the job's stdout as the watch passed it on, the watch's stderr)."""
    data = tmp_path / "data"
    env = costctl_env(data, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("COSTCTL_WATCH__SAMPLE_INTERVAL", None)
    before = set((data / "runs").glob("*.log")) if (data / "runs").exists() else set()
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    cmd = costctl_cmd("watch", "--config", str(cfg), "--on-exit", "leave", "--no-pty",
                      *(["--resume"] if resume else []), "--", *argv)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        try:
            if preempt:
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline and proc.poll() is None:
                    log = _newest_log(data, before)
                    text = log.read_text(errors="replace") if log is not None else ""
                    if started.search(text) and text.count("loss") >= 8:  # trained a few logging steps
                        break
                    time.sleep(0.2)
                assert proc.poll() is None, f"the job ended before the notice: {err.read_text()[-3000:]}"
                notice = run_costctl("sim", "preempt", "--config", str(cfg), "--notice", "30s", env=env, cwd=tmp_path)
                assert notice.returncode == 0, notice.stderr.decode()
            code = proc.wait(240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code, out.read_text(errors="replace"), err.read_text(errors="replace")


def _ledger_runs(data: Path) -> list[dict]:
    res = run_costctl("bill", "--format", "json", env=costctl_env(data))
    assert res.returncode == 0, res.stderr.decode()
    return json.loads(res.stdout)["rows"]


def _chain(data: Path) -> dict:
    res = run_costctl("bill", "--by", "chain", "--format", "json", env=costctl_env(data))
    assert res.returncode == 0, res.stderr.decode()
    (chain,) = json.loads(res.stdout)["rows"]
    return chain


def _statuses(data: Path) -> list[str]:
    """The runs' statuses, oldest first."""
    import sqlite3

    with sqlite3.connect(data / "costctl.db") as db:
        return [str(r[0]) for r in db.execute("SELECT status FROM runs ORDER BY started_at")]


def _points(data: Path) -> list[int]:
    """Progress points per run (the ledger's run summaries), oldest first."""
    import sqlite3

    with sqlite3.connect(data / "costctl.db") as db:
        return [int(r[0] or 0) for r in db.execute("SELECT points FROM runs ORDER BY started_at")]


def test_hf_trainer_preempted_three_times_resumes_each_time_from_its_complete_checkpoint(tmp_path):
    _require("transformers")
    _require("accelerate")
    from safetensors import safe_open

    from costctl.checkpoint_integrity import check_checkpoint

    out_dir = tmp_path / "out"
    cfg = _config(tmp_path, f"{out_dir}/checkpoint-*")
    argv = [sys.executable, str(REPO / "examples" / "train_hf_tiny.py"), "--output-dir", str(out_dir),
            "--max-steps", "2000", "--step-sleep", "0.03", "--logging-steps", "5"]
    started = re.compile(r"train_hf_tiny: training from global step (\d+)")
    previous = 0
    for round_ in range(ROUNDS + 1):
        last = round_ == ROUNDS
        if last:  # the last run goes to the end
            argv[argv.index("--max-steps") + 1] = str(previous + 60)
        code, out, err = _run_round(tmp_path, cfg, argv, resume=round_ > 0, preempt=not last, started=started)
        m = started.search(out)
        assert m is not None, err[-3000:]
        assert int(m.group(1)) == previous, (round_, out[-2000:], err[-3000:])  # continued, not from 0
        if last:
            assert code == 0, err[-3000:]
            assert f"train_hf_tiny: done at global step {previous + 60}" in out
            break
        # ended for the preemption (Lightning catches SIGTERM and may exit 0): the run says so
        assert "is stopped (confirmed by sim" in err and _statuses(tmp_path / "data")[-1] == "preempted", err[-3000:]
        newest = max(out_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        ok, why = check_checkpoint(newest)
        assert ok, (newest, why)
        with safe_open(str(newest / "model.safetensors"), framework="pt") as weights:  # loadable
            assert list(weights.keys())
        state = json.loads((newest / "trainer_state.json").read_text())
        step = int(state["global_step"])
        assert step > previous and newest.name == f"checkpoint-{step}"
        previous = step
    data = tmp_path / "data"
    assert all(p > 0 for p in _points(data)), _points(data)  # string-valued loss dicts parsed live
    chain = _chain(data)
    assert chain["runs"] == ROUNDS + 1 and chain["preemptions"] == ROUNDS and chain["resumes"] == ROUNDS
    assert chain["status"] == "completed"


def test_lightning_fit_preempted_three_times_resumes_each_time_from_its_checkpoint(tmp_path):
    _require("lightning")
    import torch

    from costctl.checkpoint_integrity import check_checkpoint

    root = tmp_path / "pl"
    cfg = _config(tmp_path, f"{root}/checkpoints/*.ckpt")
    argv = [sys.executable, str(REPO / "examples" / "train_lightning_tiny.py"), "--root-dir", str(root),
            "--max-steps", "5000", "--step-sleep", "0.02"]
    started = re.compile(r"train_lightning_tiny: training from global step (\d+)")
    previous = 0
    for round_ in range(ROUNDS + 1):
        last = round_ == ROUNDS
        if last:
            argv[argv.index("--max-steps") + 1] = str(previous + 50)
        code, out, err = _run_round(tmp_path, cfg, argv, resume=round_ > 0, preempt=not last, started=started)
        m = started.search(out)
        assert m is not None, err[-3000:]
        assert int(m.group(1)) == previous, (round_, out[-2000:], err[-3000:])
        if last:
            assert code == 0, err[-3000:]
            assert f"train_lightning_tiny: done at global step {previous + 50}" in out
            break
        # ended for the preemption (Lightning catches SIGTERM and may exit 0): the run says so
        assert "is stopped (confirmed by sim" in err and _statuses(tmp_path / "data")[-1] == "preempted", err[-3000:]
        newest = max((root / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        ok, why = check_checkpoint(newest)
        assert ok, (newest, why)
        step = int(torch.load(newest, map_location="cpu", weights_only=False)["global_step"])
        assert step > previous
        previous = step
    data = tmp_path / "data"
    assert all(p > 0 for p in _points(data)), _points(data)  # the progress bar's train_loss_step, live
    chain = _chain(data)
    assert chain["runs"] == ROUNDS + 1 and chain["preemptions"] == ROUNDS
