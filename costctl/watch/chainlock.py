"""One watch per checkpoint chain: the lock a watch holds on its checkpoint directory, and the
ledger check that refuses a second ``costctl watch --resume`` of a chain still being watched.

Two ``--resume`` of one job at once would run two copies writing (and resuming from) the same
checkpoints. Two mechanisms together refuse the second one before anything starts:

* **An OS file lock** (``fcntl.flock``, exclusive, non-blocking) on the checkpoint directory
  itself (the directory part of ``[checkpoint] path``, when it exists: no lock file is made,
  nothing is left beside the checkpoints), held while the watch's job runs. The kernel
  releases it when the watch's process ends however it ends (``kill -9``, the OOM killer, a
  reboot), so a dead watch never blocks a resume: no stale lock file to clean up, no pid to
  trust (pids are reused). The descriptor is not inherited (PEP 446), so a job that outlives
  its watch does not keep it. It covers every watch on this machine with no ledger round trip
  and no race: the check and the taking are one system call. Where it cannot be had (the
  directory does not exist yet, a file system without ``flock`` on directories) the ledger
  check alone applies.
* **The ledger check** (:func:`blocking_run`) covers what a local lock cannot: a watch of
  the chain on another host sharing the ledger (PostgreSQL), or one whose checkpoint
  directory differs (the chain's checkpoints were acknowledged elsewhere). A run of the chain
  blocks while it is not ended and its heartbeat (``runs.last_seen_at``, moved by every
  accrual) is fresh. On this host the relay's state decides, heartbeat or not: a run whose job
  still runs blocks, watched or not (a job whose watch was killed runs on, unguarded: a resume
  would start a second copy beside it; ``costctl watch --attach`` takes it over), and one whose
  job ended does not (a watch guarding the instance after its job, or one killed with its job).

Only ``--resume`` is refused; a fresh watch that finds the lock taken goes on without it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..ledger.chains import OpenRun

#: A run whose heartbeat is older than this does not block a resume (seconds).
HEARTBEAT_STALE_S = 300.0


def lock_dir(pattern: str) -> Path:
    """The directory of an absolute checkpoint glob (:func:`costctl.checkpoint.resolve_pattern`):
    its part before the first wildcard, up to the last separator."""
    cut = min((i for i in (pattern.find(c) for c in "*?[") if i >= 0), default=len(pattern))
    head = pattern[:cut]
    return Path(head if head.endswith(os.sep) else os.path.dirname(head) or ".")


class ChainLock:
    """An exclusive ``flock`` on the checkpoint directory itself (see the module docstring): no
    file is made, nothing is left in the directory.

    Args:
        directory: the checkpoint directory.
    """

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock without waiting; True when taken, False when another process holds it.

        Raises:
            OSError: the directory does not exist (yet), or cannot be opened or locked (a file
                system without ``flock`` on directories): the caller goes on without the lock.
        """
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        """Let the lock go (safe to call twice)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def blocking_run(runs: Sequence[OpenRun], *, now: datetime, host: str, own_pid: int,
                 alive: Callable[[int], bool], job_running: Callable[[str | None], bool],
                 stale_s: float = HEARTBEAT_STALE_S) -> OpenRun | None:
    """The first of ``runs`` (open runs of the chain) whose job may still run, or None.

    A run recorded on ``host`` (this machine) blocks when ``job_running(log_path)`` (its relay's
    state says the job runs), whether its watch ``pid`` is ``alive`` or not (an unwatched job
    is a copy too); a run of another host blocks when its heartbeat ``last_seen_at`` is at
    most ``stale_s`` seconds before ``now`` (aware UTC). ``alive`` is kept for the callers that
    name the holder (:func:`refusal`'s ``unwatched``).
    """
    for run in runs:
        if run.host == host:
            if run.pid == own_pid or not job_running(run.log_path):
                continue
            return run
        if now - run.last_seen_at > timedelta(seconds=stale_s):
            continue
        return run
    return None


def refusal(run_id: str | None, *, pid: Any = None, host: Any = None, since: str | None = None,
            directory: Path | None = None, unwatched: bool = False) -> str:
    """The one line that refuses a second ``--resume`` of a chain: the run still watched (its
    watch's pid and host, its last heartbeat), or whose job runs on with its watch gone
    (``unwatched``: take it over with ``--attach``), else the directory another watch holds
    locked."""
    if run_id and unwatched:
        return (f"--resume: the job of run {run_id[:8]} still runs without a watch (its watch, pid {pid}, is gone: "
                "nothing stops the instance when it ends); a second copy would write and resume from the same "
                f"checkpoints: take it over with `costctl watch --attach {run_id[:8]}`, or end the job, then run "
                "--resume again")
    if run_id:
        where = ", ".join(x for x in (f"watch pid {pid}" if pid else "", f"host {host}" if host else "",
                                      f"last seen {since}" if since else "") if x)
        who = f"run {run_id[:8]} of this job is still being watched{f' ({where})' if where else ''}"
    else:
        who = f"another costctl watch holds the checkpoint directory {directory} (its job still runs)"
    return (f"--resume: {who}; two copies would write and resume from the same checkpoints: wait for it to "
            "end, or stop it (Ctrl-C in its terminal, or kill its watch's pid: the job ends first), "
            "then run --resume again")


__all__ = ["ChainLock", "HEARTBEAT_STALE_S", "blocking_run", "lock_dir", "refusal"]
