"""Bad input to costctl watch: one clear line, a non-zero exit, no traceback, nothing lost."""

from __future__ import annotations

import sys

import pytest

from helpers import costctl_env, run_costctl


def _one_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("costctl: ")
    return lines[0]


def test_command_that_does_not_exist(tmp_path):
    proc = run_costctl("watch", "--", "definitely-not-a-command-xyz", env=costctl_env(tmp_path))
    assert proc.returncode == 127
    assert "command not found: definitely-not-a-command-xyz" in _one_line(proc.stderr)


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("COSTCTL_POLICIES__IDLE__TIME_WINDOW", "0", "environment variable COSTCTL_POLICIES__IDLE__TIME_WINDOW = '0'"),
        ("COSTCTL_POLICIES__IDLE__TIME_WINDOW", "soon", "or off"),
        ("COSTCTL_POLICIES__IDLE__MIN_GPU_UTILIZATION", "150",
         "environment variable COSTCTL_POLICIES__IDLE__MIN_GPU_UTILIZATION = '150': expected a number from 0 to 100"),
        ("COSTCTL_POLICIES__IDLE__ACTION", "nuke", "advise"),
        ("COSTCTL_INSTANCE__PRICE_PER_HOUR", "cheap", "environment variable COSTCTL_INSTANCE__PRICE_PER_HOUR = 'cheap'"),
        ("COSTCTL_POLICIES__IDLE__TIME_WINDW", "10m", "unknown environment variable COSTCTL_POLICIES__IDLE__TIME_WINDW"),
        ("COSTCTL_BOGUS", "1", "unknown environment variable"),
        ("COSTCTL_WATCH__TIMEZONE", "Mars/Base", "IANA"),
    ],
)
def test_invalid_config_value_from_env(tmp_path, key, value, expect):
    env = costctl_env(tmp_path, **{key: value})
    proc = run_costctl("watch", "--", sys.executable, "-c", "print(1)", env=env)
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert expect in line
    assert not (tmp_path / "costctl.db").exists(), "a bad config must not touch the ledger"


def test_unknown_section_in_file(tmp_path):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[instance]\nprice_per_hour = "2.5"\n\n[polices.idle]\ntime_window = "10m"\n')
    proc = run_costctl("watch", "--config", str(cfg), "--", sys.executable, "-c", "print(1)", env=costctl_env(tmp_path))
    assert proc.returncode == 2
    assert "unknown key 'polices'" in _one_line(proc.stderr)


def test_invalid_toml(tmp_path):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text("[instance\nprice = 1\n")
    proc = run_costctl("watch", "--config", str(cfg), "--", sys.executable, "-c", "print(1)", env=costctl_env(tmp_path))
    assert proc.returncode == 2
    assert "not valid TOML" in _one_line(proc.stderr)


def test_missing_config_file(tmp_path):
    proc = run_costctl("watch", "--config", str(tmp_path / "nope.toml"), "--", "true", env=costctl_env(tmp_path))
    assert proc.returncode == 2
    assert "does not exist" in _one_line(proc.stderr)


def test_unwritable_database_path(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    target = "sqlite:////proc/costctl-cannot-write/costctl.db"
    proc = run_costctl("watch", "--db", target, "--", sys.executable, "-c", "print(1)", env=costctl_env(tmp_path))
    assert proc.returncode != 0
    _one_line(proc.stderr)


def test_unexpected_error_leaves_a_traceback_in_a_log_file(tmp_path):
    """Only costctl's own errors become bare one-liners; a bug still leaves its traceback on disk."""
    from costctl.cli import main as cli_main

    env_dir = tmp_path
    import os

    old = os.environ.get("COSTCTL_DATA_DIR")
    os.environ["COSTCTL_DATA_DIR"] = str(env_dir)
    try:
        code = cli_main._crash(RuntimeError("boom"))
    finally:
        if old is None:
            del os.environ["COSTCTL_DATA_DIR"]
        else:
            os.environ["COSTCTL_DATA_DIR"] = old
    assert code == 70
    logs = list((env_dir / "logs").glob("crash-*.log"))
    assert logs and "RuntimeError: boom" in logs[0].read_text()


def test_the_job_protocol_variables_are_not_settings(tmp_path, monkeypatch):
    """A costctl started from inside a watched job (the relay's on-exit watch, a script calling
    costctl) inherits every costctl.job variable: none of them is an unknown setting."""
    from costctl import job
    from costctl.config import load_settings

    names = [v for k, v in vars(job).items() if k.startswith("ENV_")]
    assert "COSTCTL_METRICS_FILE" in names and "COSTCTL_CHECKPOINT_REQUEST" in names
    for name in names:
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    load_settings(None)  # no "unknown environment variable"
