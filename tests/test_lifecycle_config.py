"""The lifecycle config sections: the shipped example parses, bad values are one line, and
--resume without a checkpoint is a usage error that changes nothing."""

from __future__ import annotations

import sys
import tomllib
from datetime import timedelta
from importlib import resources
from pathlib import Path

import pytest

from costctl.config import Settings, load_settings
from costctl.errors import ConfigError
from helpers import costctl_env, run_costctl


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)


def test_the_example_config_parses_and_shows_the_lifecycle_sections(tmp_path):
    text = resources.files("costctl").joinpath("data/costctl.example.toml").read_text()
    doc = tomllib.loads(text)
    for section in ("checkpoint", "preemption", "downsize", "oom"):
        assert section in doc, section
    path = tmp_path / "costctl.toml"
    path.write_text(text)
    s = load_settings(path)
    default = Settings()
    assert s.checkpoint == default.checkpoint and s.preemption == default.preemption
    assert s.downsize == default.downsize and s.oom == default.oom
    assert s.checkpoint.signal is None  # no signal unless asked for
    assert s.preemption.poll_interval == timedelta(seconds=1)


@pytest.mark.parametrize("toml, expect", [
    ('[checkpoint]\nsignal = "SIGKILL"\n', "checkpoint.signal"),
    ('[checkpoint]\nsignal = "SIGFOO"\n', "SIGUSR1"),
    ('[checkpoint]\nmin_interval = "5h"\n', "must not exceed max_interval"),
    ('[checkpoint]\ndeadline = "0"\n', "checkpoint.deadline"),
    ('[downsize]\npeak_memory = "lots"\n', "downsize.peak_memory"),
    ('[downsize]\nheadroom = -1\n', "downsize.headroom"),
    ('[oom]\nmin_batch = 0\n', "oom.min_batch"),
    ('[oom]\naction = "pray"\n', "retry"),
    ('[preemption]\npoll_interval = "never"\n', "preemption.poll_interval"),
])
def test_bad_lifecycle_values_are_one_line(tmp_path, toml, expect):
    path = tmp_path / "costctl.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert expect in info.value.message and "\n" not in info.value.message


def test_signal_names_are_normalized(tmp_path):
    path = tmp_path / "costctl.toml"
    path.write_text('[checkpoint]\nsignal = "usr2"\n[downsize]\npeak_memory = "6GiB"\n')
    s = load_settings(path)
    assert s.checkpoint.signal == "SIGUSR2" and s.downsize.peak_memory == 6 * 2**30


def test_resume_without_a_checkpoint_is_a_usage_error(tmp_path):
    env = costctl_env(tmp_path)
    proc = run_costctl("watch", "--resume", "--", sys.executable, "-c", "print(1)", env=env)
    assert proc.returncode == 2 and b"[checkpoint] path" in proc.stderr and b"Traceback" not in proc.stderr
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[checkpoint]\npath = "{tmp_path / "ckpt"}/*.pt"\n')
    proc = run_costctl("watch", "--config", str(cfg), "--resume", "--", sys.executable, "-c", "print(1)", env=env)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.decode().splitlines() if ln.strip()]
    assert len(lines) == 1 and "no checkpoint matches" in lines[0]
    assert not Path(tmp_path / "costctl.db").exists()
