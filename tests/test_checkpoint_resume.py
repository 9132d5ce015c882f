"""--resume from the newest *intact* checkpoint: a truncated newest one and an empty one are
skipped (named on stderr with the reason, one line each) and the job resumes from the intact
one before them; real files, the real CLI, a real child."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from checkpoint_files import truncate, write_hf_checkpoint, write_torch_zip
from helpers import costctl_env, run_costctl

PRINT_RESUME = [sys.executable, "-c", "import os; print('resumed from', os.environ['COSTCTL_RESUME_FROM'])"]


def _age(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


def _watch_resume(tmp_path: Path, pattern: str):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f'[instance]\nprice_per_hour = "1.0"\n[checkpoint]\npath = "{pattern}"\n')
    proc = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *PRINT_RESUME,
                       env=costctl_env(tmp_path / "data"))
    return proc, proc.stdout.decode(), proc.stderr.decode()


def _skips(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("costctl: skipped checkpoint")]


def test_resume_skips_a_truncated_and_an_empty_newest_single_file_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    good = write_torch_zip(ckpt / "epoch-1.pt", 5000)
    cut = truncate(write_torch_zip(ckpt / "epoch-2.pt", 5000), 3000)
    empty = ckpt / "epoch-3.pt"
    empty.write_bytes(b"")
    for age, p in ((300, good), (200, cut), (100, empty)):
        _age(p, age)
    proc, out, err = _watch_resume(tmp_path, f"{ckpt}/*.pt")
    assert proc.returncode == 0, err
    assert f"resumed from {good}" in out
    skips = _skips(err)
    assert skips[0] == f"costctl: skipped checkpoint {empty} (epoch-3.pt is empty (0 bytes))"
    assert skips[1].startswith(f"costctl: skipped checkpoint {cut} (epoch-2.pt truncated or corrupt (3,000 bytes)")
    assert len(skips) == 2 and f"costctl: resuming from {good}" in err


def test_resume_skips_half_written_hugging_face_directories(tmp_path):
    out_dir = tmp_path / "out"
    intact = write_hf_checkpoint(out_dir, 10)
    cut = write_hf_checkpoint(out_dir, 20)
    size = (cut / "model.safetensors").stat().st_size
    truncate(cut / "model.safetensors", 300)
    config_only = write_hf_checkpoint(out_dir, 30, weights=False, state=False)  # the save killed after config.json
    for age, p in ((300, intact), (200, cut), (100, config_only)):
        _age(p, age)
    proc, out, err = _watch_resume(tmp_path, f"{out_dir}/checkpoint-*")
    assert proc.returncode == 0, err
    assert f"resumed from {intact}" in out
    assert _skips(err) == [
        f"costctl: skipped checkpoint {config_only} (no trainer_state.json (transformers writes it last): has config.json)",
        f"costctl: skipped checkpoint {cut} (model.safetensors truncated: header says {size:,} bytes, file has 300)",
    ]


def test_resume_with_no_intact_checkpoint_is_a_usage_error_naming_each(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "a.pt").write_bytes(b"")
    truncate(write_torch_zip(ckpt / "b.pt"), 10)
    proc, out, err = _watch_resume(tmp_path, f"{ckpt}/*.pt")
    assert proc.returncode == 2 and "Traceback" not in err and "resumed" not in out
    assert len(_skips(err)) == 2
    assert "--resume: none of the 2 checkpoints matching [checkpoint] path" in err and "is intact" in err
    assert not (tmp_path / "data" / "costctl.db").exists()


def test_the_restarts_costctl_makes_itself_take_the_newest_intact_checkpoint(tmp_path):
    """OOM retry and downsize restart from :meth:`Lifecycle.resume_point`: a half-written newer
    checkpoint is passed over (and named), one older than the watch is not a resume point."""
    from types import SimpleNamespace

    from costctl.clock import SimClock
    from costctl.lifecycle.controller import Lifecycle
    from lifecycle_support import T0, settings

    out_dir = tmp_path / "out"
    before_watch = write_hf_checkpoint(out_dir, 5)
    _age(before_watch, 1000)
    started = time.time() - 500
    intact = write_hf_checkpoint(out_dir, 10)
    cut = write_hf_checkpoint(out_dir, 20, state=False)
    _age(intact, 300)
    _age(cut, 100)
    s = settings(tmp_path, f'[checkpoint]\npath = "{out_dir}/checkpoint-*"\nperiodic = "off"\n')
    said: list[str] = []
    none = SimpleNamespace()
    lc = Lifecycle(s, clock=SimClock(T0), run=SimpleNamespace(state=SimpleNamespace(billing="on-demand")),
                   job=SimpleNamespace(pid=None), instances=none, log=none, stopper=none, ledger=none, summary=none,
                   say=said.append, request_path=tmp_path / "req", started_wall=started)
    assert lc.resume_point() == str(intact)
    assert said == [f"costctl: skipped checkpoint {cut} (no trainer_state.json (transformers writes it last): "
                    "has config.json, model.safetensors, optimizer.pt)"]
    truncate(intact / "model.safetensors", 10)
    assert lc.resume_point() is None  # the only other one predates the watch
