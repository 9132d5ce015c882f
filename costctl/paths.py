"""Where costctl keeps its files (platformdirs): database, per-run logs, provider state, crash logs.

``COSTCTL_DATA_DIR`` (or ``data_dir`` in the config) moves all of it, which is how tests
isolate themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "costctl"


def data_dir(configured: Path | None = None) -> Path:
    """The data directory (created if missing): configured, else ``$COSTCTL_DATA_DIR``, else the
    platform's user data dir (``~/.local/share/costctl`` on Linux)."""
    if configured is None and os.environ.get("COSTCTL_DATA_DIR"):
        configured = Path(os.environ["COSTCTL_DATA_DIR"])
    path = Path(configured) if configured else Path(platformdirs.user_data_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_database_url(configured_data_dir: Path | None = None) -> str:
    """``sqlite:///<data dir>/costctl.db``."""
    return f"sqlite:///{data_dir(configured_data_dir) / 'costctl.db'}"


def runs_dir(configured_data_dir: Path | None = None) -> Path:
    """Directory of per-run log files (created if missing)."""
    path = data_dir(configured_data_dir) / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def crash_log_dir() -> Path:
    """Directory for tracebacks of unexpected errors (user log dir, or data dir/logs)."""
    if os.environ.get("COSTCTL_DATA_DIR"):
        path = Path(os.environ["COSTCTL_DATA_DIR"]) / "logs"
    else:
        path = Path(platformdirs.user_log_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path
