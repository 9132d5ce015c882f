"""Count open SSH sessions (SkyPilot's autostop treats an open SSH session as "not idle").

Two heuristics, because neither sees every session:

1. **utmp** (``psutil.users()``): interactive logins with a remote ``host``. Misses sessions
   without a terminal (``ssh host cmd``, VS Code Remote, port forwards) and anything in a
   container that keeps no utmp (most rented GPU containers). Entries whose host is an X
   display (``:0``) or a terminal multiplexer (``tmux(1234).%0``, ``screen``) are not remote
   logins and are ignored.
2. **sshd session processes**: OpenSSH renames the per-connection process it runs as the
   logged-in user to ``sshd: USER@pts/N`` (terminal) or ``sshd: USER@notty`` (no terminal);
   OpenSSH 9.8+ runs it as ``sshd-session: USER@...``. One such process = one authenticated
   connection. Pre-authentication and privilege-separation helpers (``sshd: USER [priv]``,
   ``[net]``, ``[listener]``, ``[accepted]``) are not counted. Under ``hidepid`` mounts other
   users' processes are invisible.

The count is the larger of the two (they overlap on terminal logins), i.e. a lower bound of
the true number; what matters to the idle policy is whether it is zero.

Cost: on Linux the process scan reads ``/proc/PID/comm`` (a few bytes) of each process and the
command line only of those named ``sshd`` / ``sshd-session``; and the watch counts at most
every :data:`SSH_RESCAN_S` (:class:`SshSessionCounter`), not at every sample.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import psutil

from costctl.records import SignalStatus

_SESSION_RE = re.compile(r"^sshd(?:-session)?:\s+(?P<user>[^\s@\[\]]+)@(?P<tty>\S+)")
_LOCAL_HOST_RE = re.compile(r"^(?::\d|(?:tmux|screen)\b)")

#: Seconds a count of SSH sessions is reused before the next scan. The idle policy's windows
#: are minutes long (SkyPilot's autostop looks once a minute), so a session opened or closed is
#: seen at most this late; a scan reads ``/proc/PID/comm`` of every process on the host.
SSH_RESCAN_S = 60.0

#: ``/proc/PID/comm`` of OpenSSH's per-connection processes (its program name; the title it
#: sets is in the command line).
_SSHD_COMMS = frozenset({b"sshd", b"sshd-session"})


def is_ssh_session_cmdline(cmdline: Sequence[str] | None) -> bool:
    """True for an sshd per-connection process title: ``sshd: alice@pts/0``,
    ``sshd: alice@notty``, ``sshd-session: alice@pts/3``; False for the listener,
    ``[priv]`` / ``[net]`` helpers and anything else."""
    if not cmdline:
        return False
    return bool(_SESSION_RE.match(" ".join(part for part in cmdline if part).strip()))


def _proc_ssh_session_pids(proc_dir: str = "/proc") -> list[int]:
    """Heuristic 2 from ``/proc`` directly: the command line is read only of processes whose
    ``comm`` is ``sshd`` or ``sshd-session``. Raises OSError when ``proc_dir`` is unreadable."""
    pids = []
    for name in os.listdir(proc_dir):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_dir}/{name}/comm", "rb") as fh:
                if fh.read().strip() not in _SSHD_COMMS:
                    continue
            with open(f"{proc_dir}/{name}/cmdline", "rb") as fh:
                cmdline = fh.read().decode("utf-8", "replace").split("\0")
        except OSError:  # gone, or not ours to read (hidepid)
            continue
        if is_ssh_session_cmdline(cmdline):
            pids.append(int(name))
    return pids


def ssh_session_pids(processes: Iterable[Any] | None = None) -> list[int]:
    """PIDs of sshd per-connection processes (heuristic 2).

    Args:
        processes: psutil.Process-like objects with ``.pid`` and ``.cmdline()``; default: the
            processes of ``/proc`` named ``sshd`` / ``sshd-session`` (every process psutil
            lists where there is no ``/proc``). Processes we may not read are skipped.
    """
    if processes is None:
        if os.path.isdir("/proc/self"):
            return _proc_ssh_session_pids()
        processes = psutil.process_iter()
    pids = []
    for proc in processes:
        try:
            if is_ssh_session_cmdline(proc.cmdline()):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def remote_logins(users: Iterable[Any] | None = None) -> list[Any]:
    """utmp entries that are remote logins (heuristic 1).

    Args:
        users: entries shaped like ``psutil.users()`` (``.name``, ``.terminal``, ``.host``...);
            default ``psutil.users()``. Entries with an empty host, an X display (``:0``) or
            tmux/screen are left out; a loopback host stays (SSH through a tunnel).
    """
    if users is None:
        users = psutil.users()
    return [u for u in users if (u.host or "").strip() and not _LOCAL_HOST_RE.match(u.host.strip())]


def count_ssh_sessions(
    *,
    users: Callable[[], Iterable[Any]] = psutil.users,
    processes: Callable[[], Iterable[Any] | None] = lambda: None,
) -> tuple[SignalStatus, int | None, str | None]:
    """Number of open SSH sessions as ``(status, count, error)``.

    OK with the larger of the two heuristics' counts when at least one could be read; ERROR
    (count None, counts as busy) when both failed. ``users`` / ``processes`` are injectable
    for tests (``processes`` returning None: the default scan of :func:`ssh_session_pids`).
    """
    errors = []
    counts = []
    try:
        counts.append(len(remote_logins(users())))
    except Exception as exc:  # noqa: BLE001 - utmp unreadable: the other heuristic may work
        errors.append(f"utmp: {exc}")
    try:
        counts.append(len(ssh_session_pids(processes())))
    except Exception as exc:  # noqa: BLE001
        errors.append(f"processes: {exc}")
    if not counts:
        return SignalStatus.ERROR, None, "cannot count SSH sessions (" + "; ".join(errors) + ")"
    return SignalStatus.OK, max(counts), None


class SshSessionCounter:
    """:func:`count_ssh_sessions`, scanned at most every ``rescan_s`` seconds: the sampler
    calls it at every sample and gets the last scan's result in between.

    Args:
        scan: the counter (default :func:`count_ssh_sessions`).
        rescan_s: seconds a result is reused (default :data:`SSH_RESCAN_S`).
        clock: monotonic seconds (default ``time.monotonic``; tests pass a fake).
    """

    def __init__(self, scan: Callable[[], tuple[SignalStatus, int | None, str | None]] = count_ssh_sessions,
                 *, rescan_s: float = SSH_RESCAN_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._scan = scan
        self.rescan_s = rescan_s
        self._clock = clock
        self._last: tuple[float, tuple[SignalStatus, int | None, str | None]] | None = None

    def __call__(self) -> tuple[SignalStatus, int | None, str | None]:
        """``(status, count, error)`` as :func:`count_ssh_sessions`, from a scan at most
        :attr:`rescan_s` old."""
        now = self._clock()
        if self._last is None or now - self._last[0] >= self.rescan_s or now < self._last[0]:
            self._last = (now, self._scan())
        return self._last[1]
