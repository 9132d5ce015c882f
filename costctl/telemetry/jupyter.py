"""Read a local Jupyter server's activity: is a person working in a notebook?

A notebook left open (AutoDL images run JupyterLab) holds the card while nobody works in it; a
person working in it runs cells every few minutes. The Jupyter server knows which: its REST API
(jupyter_server's ``services/api`` and ``services/kernels`` handlers) reports

* ``GET /api/status`` → ``{"started", "last_activity", "kernels", "connections"}``:
  ``last_activity`` is the server's newest activity (authenticated API requests, kernel
  messages, terminals), ISO 8601 UTC;
* ``GET /api/kernels`` → ``[{"id", "name", "last_activity", "execution_state", "connections"}]``:
  ``execution_state`` is ``starting``, ``idle``, ``busy``, ``restarting`` or ``dead``; a kernel's
  ``last_activity`` moves on each message it sends.

Both are read with ``no_track_activity=1`` (jupyter_server's ``APIHandler.update_api_activity``
then does not count our poll as activity; ``/api/status`` never does), with the token in an
``Authorization: token ...`` header.

Finding the server: ``jupyter server list --json`` reads the runtime files a server writes at
start (``jpserver-<pid>.json``; classic Notebook < 7 wrote ``nbserver-<pid>.json``) in the
Jupyter runtime directory: ``jupyter_core.paths.jupyter_runtime_dir()`` when jupyter_core is
installed, else the same convention by hand — ``$JUPYTER_RUNTIME_DIR``, else
``$JUPYTER_DATA_DIR/runtime``, else ``<user data dir>/jupyter/runtime`` (platformdirs;
``~/.local/share/jupyter/runtime`` on Linux). Each file holds ``url``, ``port``, ``base_url``,
``token``, ``secure``, ``sock`` and the server's ``pid``. Jupyter is no dependency of costctl.

**Failure is never idleness** (the choice, and why):

* no runtime file, or only files whose ``pid`` is not running (a server killed without removing
  its file) → ``ABSENT``: no Jupyter here, no signal; it does not block an idle verdict;
* a server that runs but cannot be read (connection refused, timeout, HTTP 403 for a missing or
  wrong token, a reply that is not the documented JSON, a Unix-socket-only server) → ``ERROR``:
  a person may be working in it, so it counts as busy, with the reason in the sample
  (``jupyter: ...``); set ``[policies.idle_fraction] jupyter_token`` (or ``$JUPYTER_TOKEN``) when
  the runtime file's token is not the one to use, or ``jupyter_url = "off"``;
* a configured URL (``jupyter_url = "http://127.0.0.1:8888/"``) is a server the user says is
  there: unreadable is ``ERROR`` (busy).

Known limit: JupyterLab's background pollers count as activity while its tab is open and
focused (jupyterlab/jupyterlab#9379, #19796), so a notebook left open in a focused browser tab
keeps ``last_activity`` recent and is not called idle: the safe side.

Cost: two local GETs with a deadline (``timeout`` seconds), at most every
:data:`JUPYTER_REREAD_S`; in between the last reading is reused (``last_activity`` is a time, so
nothing is lost; a kernel's busy state is at most that old).
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from costctl.clock import ensure_utc
from costctl.records import SignalStatus

#: Seconds a Jupyter reading is reused before the next read (the idle_fraction window is an
#: hour by default; jupyterhub-idle-culler polls every 5 minutes by default).
JUPYTER_REREAD_S = 30.0

#: Seconds each request may take (a local server answers in milliseconds).
DEFAULT_TIMEOUT_S = 2.0

#: Runtime file patterns: jupyter_server (``jpserver-<pid>.json``), classic Notebook < 7.
RUNTIME_PATTERNS = ("jpserver-*.json", "nbserver-*.json")

#: ``execution_state`` values of a kernel that is not waiting for input.
BUSY_STATES = frozenset({"busy", "starting", "restarting"})


@dataclass(frozen=True, slots=True)
class JupyterReading:
    """What the Jupyter server(s) said at one read.

    Attributes:
        status: OK (read), ERROR (a server runs but could not be read: busy), ABSENT (none).
        last_activity: the newest ``last_activity`` of the servers and their kernels (aware
            UTC), or None when none was reported.
        busy_kernels: kernels whose ``execution_state`` is in :data:`BUSY_STATES`.
        kernels: how many kernels run.
        connections: open kernel connections (browser tabs, consoles) in total.
        servers: the servers read (their base URLs, never a token).
        error: why the read failed (ERROR), one line naming the server.
    """

    status: SignalStatus
    last_activity: datetime | None = None
    busy_kernels: int | None = None
    kernels: int | None = None
    connections: int | None = None
    servers: tuple[str, ...] = ()
    error: str | None = None


def runtime_dir() -> Path:
    """The Jupyter runtime directory (see the module docstring for the order)."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir  # type: ignore[import-not-found]
    except ImportError:
        jupyter_runtime_dir = None
    if jupyter_runtime_dir is not None:
        return Path(jupyter_runtime_dir())
    if os.environ.get("JUPYTER_RUNTIME_DIR"):
        return Path(os.environ["JUPYTER_RUNTIME_DIR"])
    if os.environ.get("JUPYTER_DATA_DIR"):
        return Path(os.environ["JUPYTER_DATA_DIR"]) / "runtime"
    from platformdirs import user_data_path

    return user_data_path("jupyter", appauthor=False) / "runtime"


def _alive(pid: Any) -> bool:
    try:
        return isinstance(pid, int) and pid > 0 and psutil.pid_exists(pid)
    except Exception:  # noqa: BLE001 - cannot tell: take the server as running (busy side)
        return True


def find_servers(directory: Path | None = None) -> list[dict[str, Any]]:
    """The runtime files of running servers in ``directory`` (default :func:`runtime_dir`),
    newest first: the parsed JSON objects, each with ``"_file"`` added. A file that cannot be
    read or parsed is kept as ``{"_file": path, "_error": reason}`` (a server may be there);
    one whose ``pid`` is not running is left out (stale)."""
    where = Path(directory) if directory is not None else runtime_dir()
    paths: list[str] = []
    for pattern in RUNTIME_PATTERNS:
        paths.extend(glob.glob(str(where / pattern)))
    found: list[tuple[float, dict[str, Any]]] = []
    for path in paths:
        try:
            mtime = os.stat(path).st_mtime
            info = json.loads(Path(path).read_text(encoding="utf-8"))
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except FileNotFoundError:
            continue  # the server ended between the listing and the read
        except (OSError, ValueError) as exc:
            found.append((0.0, {"_file": path, "_error": f"{type(exc).__name__}: {exc}"}))
            continue
        if "pid" in info and not _alive(info["pid"]):
            continue
        found.append((mtime, {**info, "_file": path}))
    found.sort(key=lambda item: item[0], reverse=True)
    return [info for _, info in found]


def base_url_of(info: dict[str, Any]) -> str | None:
    """The loopback base URL of a server's runtime file (``http://127.0.0.1:8888/lab-base/``),
    or None for a server without a TCP port (Unix socket only)."""
    port = info.get("port")
    if not isinstance(port, int) or port <= 0:
        return None
    base = str(info.get("base_url") or "/")
    if not base.startswith("/"):
        base = "/" + base
    if not base.endswith("/"):
        base += "/"
    scheme = "https" if info.get("secure") else "http"
    return f"{scheme}://127.0.0.1:{port}{base}"


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time as Jupyter writes it (``2026-03-01T12:00:00.123456Z``) as aware UTC.

    Raises:
        ValueError: not such a time.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"last_activity {value!r} is not a time")
    return ensure_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))


class JupyterActivity:
    """Reads the local Jupyter server(s) (see the module docstring); :meth:`read` never raises.

    Args:
        url: ``"auto"`` (find servers through their runtime files) or one server's base URL.
        token: the API token; default ``$JUPYTER_TOKEN``, else each runtime file's own.
        directory: the runtime directory (``"auto"`` only; default :func:`runtime_dir`).
        timeout: seconds each request may take.
        reread: seconds a reading is reused.
        session: a ``requests.Session`` (tests); default a new one.
        monotonic: the seconds clock of ``reread`` (tests pass a fake).
    """

    name = "jupyter"

    def __init__(self, url: str = "auto", *, token: str | None = None, directory: Path | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, reread: float = JUPYTER_REREAD_S,
                 session: Any = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._token = token if token is not None else (os.environ.get("JUPYTER_TOKEN") or None)
        self._directory = directory
        self.timeout = timeout
        self.reread = reread
        if session is None:
            import requests

            session = requests.Session()
            session.trust_env = False  # never send a local request (and its token) through a proxy
        self._session = session
        self._monotonic = monotonic
        self._last: JupyterReading | None = None
        self._last_at: float | None = None

    def read(self) -> JupyterReading:
        """The current reading (reused for ``reread`` seconds)."""
        now = self._monotonic()
        if self._last is not None and self._last_at is not None and now - self._last_at < self.reread:
            return self._last
        try:
            reading = self._read_now()
        except Exception as exc:  # noqa: BLE001 - any failure is "cannot read", never idle
            reading = JupyterReading(SignalStatus.ERROR, error=f"read raised {type(exc).__name__}: {exc}")
        self._last, self._last_at = reading, now
        return reading

    def _read_now(self) -> JupyterReading:
        if self.url != "auto":
            targets: list[tuple[str | None, str | None, str]] = [(self.url, self._token, self.url)]
        else:
            targets = []
            for info in find_servers(self._directory):
                where = f"the server of {info['_file']}"
                if "_error" in info:
                    return JupyterReading(SignalStatus.ERROR, error=f"{where} cannot be read: {info['_error']}")
                base = base_url_of(info)
                token = self._token if self._token is not None else (info.get("token") or None)
                targets.append((base, token, where))
        if not targets:
            return JupyterReading(SignalStatus.ABSENT)
        newest: datetime | None = None
        busy = kernels = connections = 0
        servers: list[str] = []
        for base, token, where in targets:
            if base is None:
                return JupyterReading(SignalStatus.ERROR,
                                      error=f"{where} listens on a Unix socket only; costctl reads a TCP port")
            one = self._read_server(base, token, where)
            if isinstance(one, JupyterReading):
                return one
            activity, n_busy, n_kernels, n_conn = one
            if activity is not None and (newest is None or activity > newest):
                newest = activity
            busy, kernels, connections = busy + n_busy, kernels + n_kernels, connections + n_conn
            servers.append(base)
        return JupyterReading(SignalStatus.OK, last_activity=newest, busy_kernels=busy, kernels=kernels,
                              connections=connections, servers=tuple(servers))

    def _get(self, base: str, path: str, token: str | None, where: str) -> Any:
        headers = {"Authorization": f"token {token}"} if token else {}
        url = base.rstrip("/") + "/" + path
        response = self._session.get(url, params={"no_track_activity": "1"}, headers=headers, timeout=self.timeout,
                                     allow_redirects=False)
        if response.status_code != 200:
            hint = " (a missing or wrong token: set jupyter_token or $JUPYTER_TOKEN)" \
                if response.status_code in (401, 403) else ""
            raise _ReadError(f"{where}: GET {path} answered HTTP {response.status_code}{hint}")
        try:
            return response.json()
        except ValueError:
            raise _ReadError(f"{where}: GET {path} did not answer JSON") from None

    def _read_server(self, base: str, token: str | None, where: str
                     ) -> JupyterReading | tuple[datetime | None, int, int, int]:
        try:
            status = self._get(base, "api/status", token, where)
            kernels = self._get(base, "api/kernels", token, where)
            if not isinstance(status, dict) or not isinstance(kernels, list):
                raise _ReadError(f"{where}: /api/status or /api/kernels is not the documented JSON")
            newest = parse_time(status.get("last_activity"))
            busy = conn = 0
            for kernel in kernels:
                if not isinstance(kernel, dict):
                    raise _ReadError(f"{where}: /api/kernels holds a {type(kernel).__name__}, not a kernel")
                if kernel.get("execution_state") in BUSY_STATES:
                    busy += 1
                conn += int(kernel.get("connections") or 0)
                activity = parse_time(kernel.get("last_activity"))
                if activity is not None and (newest is None or activity > newest):
                    newest = activity
            return newest, busy, len(kernels), conn
        except _ReadError as exc:
            return JupyterReading(SignalStatus.ERROR, error=str(exc))
        except ValueError as exc:
            return JupyterReading(SignalStatus.ERROR, error=f"{where}: {exc}")
        except Exception as exc:  # noqa: BLE001 - connection refused, timeout, TLS...
            return JupyterReading(SignalStatus.ERROR, error=f"{where} cannot be read: {type(exc).__name__}")


class _ReadError(Exception):
    """One line saying why a server could not be read."""


__all__ = ["JupyterActivity", "JupyterReading", "find_servers", "base_url_of", "runtime_dir", "parse_time",
           "JUPYTER_REREAD_S", "RUNTIME_PATTERNS", "BUSY_STATES"]
