"""``costctl --version`` prints the installed version and exits 0, before any command runs."""

from __future__ import annotations

from importlib.metadata import version

from helpers import costctl_env, run_costctl


def test_version_prints_the_installed_version(tmp_path):
    proc = run_costctl("--version", env=costctl_env(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == f"costctl {version('costctl')}"
    assert not (tmp_path / "costctl.db").exists()  # nothing is opened or created
