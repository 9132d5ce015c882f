"""Helpers for tests that run the real ``costctl`` CLI as a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILDREN = Path(__file__).resolve().parent / "children"


#: The one COSTCTL_* variable children keep: the suite's own ``COSTCTL_CONFIG``, which the
#: conftest sets to an empty file when a costctl.toml lies where tests run (the user's own
#: config must not be read). A user's exported COSTCTL_CONFIG never gets this far.
SHIELD = "COSTCTL_CONFIG"


def costctl_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """An environment isolated to ``data_dir`` (no COSTCTL_* leaking in from the caller)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["COSTCTL_DATA_DIR"] = str(data_dir)
    env["COSTCTL_WATCH__SAMPLE_INTERVAL"] = "1s"
    # SSH sessions are counted by default: the host's own (a developer logged in over SSH) must
    # not keep the suite's watches busy. A test of SSH counting passes it in ``extra``.
    env["COSTCTL_POLICIES__IDLE__COUNT_SSH_SESSIONS"] = "false"
    env.update(extra)
    return env


def costctl_cmd(*args: str) -> list[str]:
    """argv that runs costctl with this interpreter."""
    return [sys.executable, "-m", "costctl", *args]


def run_costctl(*args: str, env: dict[str, str], timeout: float = 60, cwd: Path | None = None,
                input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run costctl to completion, capturing both streams as bytes."""
    return subprocess.run(
        costctl_cmd(*args), env=env, cwd=cwd or REPO, capture_output=True, timeout=timeout,
        input=input, stdin=None if input is not None else subprocess.DEVNULL,
    )

#: The shared corpus of real training and GPU logs: ``../shared/corpus`` beside the checkout
#: (CI lays a copy of shared/ beside its clone); ``$COSTCTL_CORPUS`` overrides.
CORPUS = Path(os.environ.get("COSTCTL_CORPUS", str(REPO.parent / "shared" / "corpus")))
