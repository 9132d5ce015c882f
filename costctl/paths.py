"""Where costctl keeps its files (platformdirs): database, per-run logs, provider state, crash logs.

``COSTCTL_DATA_DIR`` (or ``data_dir`` in the config) moves all of it, which is how tests
isolate themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError
from .i18n import N_, _

APP_NAME = "costctl"
#: The config file looked for in the working directory (here, not in :mod:`costctl.config`, so
#: that ``costctl init``'s signature needs no pydantic at start-up).
CONFIG_FILE_NAME = "costctl.toml"


#: What :func:`_ensure_dir` says about each of costctl's directories, one whole sentence per
#: directory and failure (translated where shown): (not a directory, cannot be created, not writable).
_DIR_MESSAGES = {
    "data": (N_("data dir {path} is not a directory (a file is in the way)"),
             N_("data dir {path} cannot be created: {reason}"),
             N_("data dir {path} is not writable")),
    "runs": (N_("run log dir {path} is not a directory (a file is in the way)"),
             N_("run log dir {path} cannot be created: {reason}"),
             N_("run log dir {path} is not writable")),
    "logs": (N_("log dir {path} is not a directory (a file is in the way)"),
             N_("log dir {path} cannot be created: {reason}"),
             N_("log dir {path} is not writable")),
}


def _ensure_dir(path: Path, kind: str) -> Path:
    """Create ``path`` (and parents) if missing; ``kind`` (a key of :data:`_DIR_MESSAGES`)
    names the directory in the messages.

    Raises:
        ConfigError: one line when it cannot be a writable directory (a file in the way,
            a read-only or virtual file system, no permission).
    """
    not_a_dir, cannot_create, not_writable = _DIR_MESSAGES[kind]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(_(not_a_dir).format(path=path)) from None
    except OSError as exc:
        raise ConfigError(_(cannot_create).format(path=path, reason=exc.strerror)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(_(not_writable).format(path=path))
    return path


def data_dir(configured: Path | None = None, *, create: bool = True) -> Path:
    """The data directory (created if missing): configured, else ``$COSTCTL_DATA_DIR`` (an empty
    value counts as unset), else the platform's user data dir (``~/.local/share/costctl`` on Linux).

    ``create=False`` (read-only commands: ``costctl bill`` before anything was recorded) gives
    the path without creating or checking anything.

    Raises:
        ConfigError: the directory cannot be created or written (``create=True`` only).
    """
    if configured is None and os.environ.get("COSTCTL_DATA_DIR", "").strip():
        configured = Path(os.environ["COSTCTL_DATA_DIR"])
    if configured:
        path = Path(configured).expanduser()
    else:
        import platformdirs  # only when the platform's default is used

        path = Path(platformdirs.user_data_dir(APP_NAME))
    return _ensure_dir(path, "data") if create else path


def default_database_url(configured_data_dir: Path | None = None, *, create: bool = True) -> str:
    """``sqlite:///<data dir>/costctl.db`` (``create``: as :func:`data_dir`'s)."""
    return f"sqlite:///{data_dir(configured_data_dir, create=create) / 'costctl.db'}"


def runs_dir(configured_data_dir: Path | None = None) -> Path:
    """Directory of per-run log files (created if missing)."""
    return _ensure_dir(data_dir(configured_data_dir) / "runs", "runs")


def runtime_dir() -> Path:
    """This user's directory for the watches' control sockets (``costctl snooze`` finds them
    there): platformdirs' user runtime dir (``$XDG_RUNTIME_DIR/costctl`` on Linux, else
    ``<temp dir>/runtime-<uid>/costctl``), created mode 0700.

    Raises:
        ConfigError: it cannot be created, or it is not a directory owned by this user and
            closed to everyone else (mode 0700): a socket there could be reached by others.
    """
    import stat
    import warnings

    import platformdirs

    with warnings.catch_warnings():  # "XDG_RUNTIME_DIR is not set, falling back to ..."
        warnings.simplefilter("ignore")
        path = Path(platformdirs.user_runtime_dir(APP_NAME))
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise ConfigError(_("runtime dir {path} cannot be created: {reason}").format(
            path=path, reason=exc.strerror)) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(_("runtime dir {path} is not a directory owned by this user (uid {uid})").format(
            path=path, uid=os.getuid()))
    if info.st_mode & 0o077:
        try:
            path.chmod(0o700)
        except OSError as exc:
            raise ConfigError(_("runtime dir {path} is open to other users and cannot be closed: {reason}").format(
                path=path, reason=exc.strerror)) from None
    return path


def crash_log_dir() -> Path:
    """Directory for tracebacks of unexpected errors (user log dir, or data dir/logs)."""
    if os.environ.get("COSTCTL_DATA_DIR", "").strip():
        path = Path(os.environ["COSTCTL_DATA_DIR"]) / "logs"
    else:
        import platformdirs

        path = Path(platformdirs.user_log_dir(APP_NAME))
    return _ensure_dir(path, "logs")
