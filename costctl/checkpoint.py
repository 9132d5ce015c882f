"""costctl's side of the checkpoint protocol: ask for a checkpoint, wait for a new one, find the newest.

Protocol (the job's side is :mod:`costctl.job`):

1. costctl *requests* a checkpoint by creating the file named in the job's
   ``$COSTCTL_CHECKPOINT_REQUEST`` (a small JSON document: reason, requested_at, deadline).
   Only when ``[checkpoint] signal`` is set does it also send that signal — to the worker
   processes (:func:`worker_processes`), never to a launcher: SIGUSR1's default action ends a
   process with no handler, and torchrun's agent handles only SIGTERM, SIGINT, SIGHUP and SIGQUIT.
2. The job saves at its next safe point, writes the *acknowledgement record* beside the
   request (``<request>.ack.json``, :func:`costctl.job.acknowledge_checkpoint`; the schema is
   in :mod:`costctl.job`: the request it answers, the checkpoint path, the step, the save's
   start and end as aware UTC ISO times; written atomically) and deletes the request. The
   ready callbacks (:mod:`costctl.integrations`) write it once the framework's save returned.
3. costctl polls (:meth:`CheckpointRequester.poll`). The attempt is ``saved``:

   * as soon as the record *for this request* (its ``request`` equals the request's
     ``requested_at``) arrives: the checkpoint is the one it names, else the newest new match
     of ``[checkpoint] path``;
   * without a record, when a *new* match of ``[checkpoint] path`` (a file, a directory or a
     glob; modified after the request, or changed since it; the newest by mtime, whatever its
     name) passes :func:`costctl.checkpoint_integrity.is_complete` — an explicit marker or
     the format check (safetensors header, torch zip end record, Hugging Face directory with
     ``trainer_state.json`` and whole weights) — on two polls in a row, the second look
     giving the job's record a chance to arrive first. A job that deleted the request by
     hand (no record) gets its complete match at once. A file of unknown format is never
     complete by itself: unchanged size and mtime prove nothing (a Hugging Face save pauses
     between ``config.json`` and the weights).
4. Otherwise it ends as ``acknowledged`` (the job acknowledged, but nothing matched ``path``
   within :data:`ACK_GRACE_S`, or no ``path`` is set), ``timed-out`` (deadline passed with no
   complete checkpoint; the request is withdrawn) or ``job-exited``.

Times are read from the watch's clock (real or simulated); a checkpoint's own time is its
file's mtime, expressed on that clock (``now - (wall now - mtime)``), so simulated-clock tests
with real child processes measure consistent save durations.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import signal as signal_mod
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

import psutil

from .checkpoint_integrity import check_checkpoint, is_complete
from .clock import Clock, ensure_utc
from .job import ack_path

#: Names never taken for checkpoints: temporary files of an atomic write in progress.
_PARTIAL_SUFFIXES = (".tmp", ".partial", ".part", ".incomplete", ".lock", ".ack.json")
#: Seconds to wait, after the job acknowledged a request, for its checkpoint to match ``path``.
ACK_GRACE_S = 5.0
#: Wrapper processes a configured signal passes through to their children.
_WRAPPERS = {"sh", "bash", "dash", "zsh", "fish", "env", "timeout", "nohup", "stdbuf", "uv", "conda"}
#: Environment variables that mark a worker process of a launcher (torchrun, accelerate,
#: deepspeed, Lightning, SLURM's srun).
_RANK_VARS = ("LOCAL_RANK", "RANK", "SLURM_PROCID")


class Outcome(str, Enum):
    """How a checkpoint request ended."""

    SAVED = "saved"
    ACKNOWLEDGED = "acknowledged"
    TIMED_OUT = "timed-out"
    JOB_EXITED = "job-exited"


@dataclass(frozen=True)
class CheckpointFile:
    """A checkpoint found on disk.

    Attributes:
        path: absolute path (a file, or a directory such as Hugging Face's ``checkpoint-500/``).
        mtime_ns: modification time in ns since the epoch (a directory: its newest file's).
        size: bytes (a directory: the sum of its files).
    """

    path: Path
    mtime_ns: int
    size: int

    @property
    def state(self) -> tuple[int, int]:
        """``(mtime_ns, size)``: unchanged between two looks means the write is complete."""
        return (self.mtime_ns, self.size)


def resolve_pattern(path: str, cwd: Path | None = None) -> str:
    """``[checkpoint] path`` as an absolute glob: relative to ``cwd`` (default: the current
    directory); ``~`` expanded; an existing directory means every entry in it (``dir/*``)."""
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (cwd or Path.cwd()) / p
    if p.is_dir():
        return str(p / "*")
    return str(p)


def _stat_entry(path: Path) -> CheckpointFile | None:
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_dir():
        return CheckpointFile(path, st.st_mtime_ns, st.st_size)
    newest, total = st.st_mtime_ns, 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                fst = os.stat(os.path.join(root, name))
            except OSError:
                continue
            newest = max(newest, fst.st_mtime_ns)
            total += fst.st_size
    return CheckpointFile(path, newest, total)


def find_checkpoints(pattern: str | Sequence[str]) -> list[CheckpointFile]:
    """Every checkpoint matching ``pattern`` (absolute glob, ``**`` allowed; or several, each
    match once), oldest first.

    Hidden entries (a leading dot, as temporary files of atomic writes are named) and names
    ending in ``.tmp``/``.partial``/``.part``/``.incomplete``/``.lock`` are skipped.
    """
    found: dict[str, CheckpointFile] = {}
    for one in [pattern] if isinstance(pattern, str) else pattern:
        for name in glob.glob(one, recursive=True):
            base = os.path.basename(name.rstrip(os.sep))
            if base.startswith(".") or base.endswith(_PARTIAL_SUFFIXES) or name in found:
                continue
            entry = _stat_entry(Path(name))
            if entry is not None:
                found[name] = entry
    return sorted(found.values(), key=lambda c: (c.mtime_ns, str(c.path)))


_DIGITS = re.compile(r"\d+")


def known_patterns(paths: Iterable[str]) -> list[str]:
    """Globs for checkpoints the job acknowledged outside ``[checkpoint] path`` (recorded in
    the ledger): each path itself, and when its name holds digits its siblings named alike,
    every run of digits a wildcard (``/x/checkpoint-500`` -> ``/x/checkpoint-*``,
    ``/x/epoch-0003.pt`` -> ``/x/epoch-*.pt``), so a later save the job made there on its own
    is found too. Each glob once, in the order given."""
    out: list[str] = []
    for raw in paths:
        p = os.path.abspath(raw.rstrip(os.sep) or raw)
        parent, name = os.path.split(p)
        for g in (glob.escape(p), os.path.join(glob.escape(parent), _DIGITS.sub("*", glob.escape(name)))):
            if g not in out:
                out.append(g)
    return out


def under_pattern(path: str | os.PathLike[str], pattern: str | None) -> bool:
    """Whether checkpoint ``path`` is one ``pattern`` (an absolute glob,
    :func:`resolve_pattern`) matches: False without a pattern."""
    if not pattern:
        return False
    return fnmatch.fnmatchcase(os.path.abspath(os.fspath(path)).rstrip(os.sep), pattern.rstrip(os.sep))


def newest_checkpoint(pattern: str) -> CheckpointFile | None:
    """The match with the latest modification time (ties: the later name), or None."""
    found = find_checkpoints(pattern)
    return found[-1] if found else None


def newest_intact_checkpoint(
    pattern: str | Sequence[str],
    *,
    on_skip: Callable[[CheckpointFile, str], None] | None = None,
    newer_than_s: float | None = None,
) -> CheckpointFile | None:
    """The newest match of ``pattern`` (a glob, or several) that passes
    :func:`costctl.checkpoint_integrity.check_checkpoint` (a truncated or empty newer one is
    passed over), or None.

    Args:
        on_skip: called with each newer match passed over and the reason (one line).
        newer_than_s: consider only matches modified at or after this time (seconds since
            the epoch).
    """
    for cp in reversed(find_checkpoints(pattern)):
        if newer_than_s is not None and cp.mtime_ns / 1e9 < newer_than_s:
            break
        ok, why = check_checkpoint(cp.path)
        if ok:
            return cp
        if on_skip is not None:
            on_skip(cp, why)
    return None


# ----------------------------------------------------------------------------- signals


def _rank_env(proc: psutil.Process) -> bool:
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return False
    return any(v in env for v in _RANK_VARS)


def worker_processes(root_pid: int) -> list[psutil.Process]:
    """The processes a configured checkpoint signal goes to, in the tree under ``root_pid``.

    * Processes started by a launcher (torchrun, accelerate, deepspeed, srun) carry a rank in
      their environment (``LOCAL_RANK``, ``RANK`` or ``SLURM_PROCID``): the top-most such
      processes are the workers (their own children, e.g. DataLoader workers, inherit the
      variables and are left alone). The launcher itself never gets the signal.
    * Otherwise the job's main process: the root, or — when the root is a wrapper such as
      ``sh -c`` or ``env`` with exactly one child — the process it wraps.

    Returns an empty list when the root has exited.
    """
    try:
        root = psutil.Process(root_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    ranked = {p.pid for p in tree if _rank_env(p)}
    if ranked:
        tops = []
        for p in tree:
            if p.pid not in ranked:
                continue
            try:
                parent = p.ppid()
            except psutil.Error:
                continue
            if parent not in ranked:
                tops.append(p)
        return tops
    proc = root
    for _ in range(8):
        try:
            name = proc.name()
            kids = proc.children()
        except psutil.Error:
            break
        if name in _WRAPPERS and len(kids) == 1:
            proc = kids[0]
            continue
        break
    return [proc]


def send_to_workers(root_pid: int, signum: int) -> list[int]:
    """Send ``signum`` to :func:`worker_processes` of ``root_pid``; returns the pids signalled."""
    sent = []
    for proc in worker_processes(root_pid):
        try:
            os.kill(proc.pid, signum)
            sent.append(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return sent


# ----------------------------------------------------------------------------- storage


def ephemeral_storage_warning(
    path: str,
    *,
    hostname: str | None = None,
    env: Mapping[str, str] | None = None,
    partitions: Iterable[Any] | None = None,
    layouts: Iterable[tuple[str, Any]] | None = None,
) -> str | None:
    """A one-line warning when checkpoints under ``path`` would not survive a stop, else None.

    Checked: the storage each provider adapter declares (its ``storage``: which paths survive
    on its machines, and how to tell this is one, e.g. a hostname pattern or an environment
    variable; see :class:`costctl_providers.capabilities.Storage`), then a RAM-backed file system
    (``tmpfs``/``ramfs``, e.g. ``/dev/shm``; from the mount table, :func:`psutil.disk_partitions`).

    Args:
        path: ``[checkpoint] path`` (a glob is judged by its directory part).
        hostname / env / partitions: for tests (default: this machine's).
        layouts: ``(provider name, Storage)`` pairs (default: every available adapter's,
            :func:`costctl_providers.registry.storage_layouts`).
    """
    env = os.environ if env is None else env
    hostname = socket.gethostname() if hostname is None else hostname
    head = path.split("*")[0].split("?")[0].split("[")[0]
    target = Path(os.path.expanduser(head or ".")).resolve()
    where = str(target)
    if layouts is None:
        from costctl_providers.registry import storage_layouts

        layouts = storage_layouts()
    for name, storage in layouts:
        if storage.on_this_machine(hostname, env):
            warning = storage.warning(path, where, name)
            if warning:
                return warning
    try:
        parts = list(partitions) if partitions is not None else psutil.disk_partitions(all=True)
    except (OSError, psutil.Error):
        parts = []
    best = None
    for part in parts:
        mount = str(getattr(part, "mountpoint", ""))
        if mount and (where == mount or where.startswith(mount.rstrip("/") + "/")):
            if best is None or len(mount) > len(str(best.mountpoint)):
                best = part
    if best is not None and str(getattr(best, "fstype", "")) in {"tmpfs", "ramfs"}:
        return (f"checkpoint path {path} is on {best.fstype} ({best.mountpoint}): it lives in memory "
                "and is lost when the machine stops; keep checkpoints on a disk")
    return None


# ----------------------------------------------------------------------------- requests


@dataclass
class CheckpointAttempt:
    """One checkpoint request and how it ended.

    Attributes:
        reason: why it was asked for (``"preemption"``, ``"periodic"``, ``"downsize"``, ...).
        requested_at / deadline: aware UTC on the watch's clock.
        signal: the signal name sent to the workers, or None (the default: none).
        signalled_pids: where the signal went.
        outcome: None while pending; then an :class:`Outcome`.
        completed_at: when costctl saw the outcome.
        checkpoint: the new checkpoint (for ``saved``).
        saved_at: the checkpoint's mtime on the watch's clock.
        save_s: seconds from the request to the checkpoint (``saved``) or to the acknowledgement.
        record: the job's acknowledgement record for this request (see :mod:`costctl.job`), or None.
        complete_by: what showed the checkpoint whole: ``"acknowledgement"``, ``"format check"``
            (or the explicit marker; :func:`costctl.checkpoint_integrity.is_complete`).
        check: the last completeness check's one-line reason.
        step: the step the record names.
        save_started_at / save_ended_at: the save itself per the record, on the watch's clock.
    """

    reason: str
    requested_at: datetime
    deadline: datetime
    signal: str | None = None
    signalled_pids: list[int] = field(default_factory=list)
    outcome: Outcome | None = None
    completed_at: datetime | None = None
    checkpoint: CheckpointFile | None = None
    saved_at: datetime | None = None
    save_s: float | None = None
    acknowledged: bool = False
    ledger_id: int | None = None
    record: dict[str, Any] | None = None
    complete_by: str | None = None
    check: str | None = None
    step: int | None = None
    save_started_at: datetime | None = None
    save_ended_at: datetime | None = None
    _request_mtime_ns: int = 0
    _complete_seen: Path | None = field(default=None, repr=False)
    _before: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)

    def evidence(self) -> dict[str, Any]:
        """JSON-ready facts for a decision's evidence."""
        return {
            "reason": self.reason,
            "requested_at": self.requested_at.isoformat(),
            "deadline": self.deadline.isoformat(),
            "signal": self.signal,
            "signalled_pids": list(self.signalled_pids),
            "outcome": self.outcome.value if self.outcome else None,
            "checkpoint": str(self.checkpoint.path) if self.checkpoint else None,
            "saved_at": self.saved_at.isoformat() if self.saved_at else None,
            "save_s": self.save_s,
            "complete_by": self.complete_by,
            "check": self.check,
            "step": self.step,
            "save_started_at": self.save_started_at.isoformat() if self.save_started_at else None,
            "save_ended_at": self.save_ended_at.isoformat() if self.save_ended_at else None,
        }


class CheckpointRequester:
    """Makes checkpoint requests and follows each one to its outcome (one at a time).

    Args:
        request_path: the file the job watches (``$COSTCTL_CHECKPOINT_REQUEST``).
        pattern: absolute glob of the job's checkpoints (:func:`resolve_pattern`), or None
            (then only the job's acknowledgement tells that it saved).
        clock: the watch's clock.
        signal: ``[checkpoint] signal`` name, or None (default: no signal).
        job_pid: returns the pid of the job's root process (or None when there is none).
        wall_time: seconds since the epoch (``time.time``), to place file mtimes on ``clock``.
    """

    def __init__(
        self,
        request_path: Path,
        pattern: str | None,
        clock: Clock,
        *,
        signal: str | None = None,
        job_pid: Callable[[], int | None] = lambda: None,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self.request_path = Path(request_path)
        self.pattern = pattern
        self.clock = clock
        self.signal = signal
        self._job_pid = job_pid
        self._wall = wall_time
        self.pending: CheckpointAttempt | None = None

    def request(self, reason: str, deadline: datetime) -> CheckpointAttempt:
        """Ask for a checkpoint by ``deadline`` (aware UTC). While one is pending, the same
        attempt is returned with the earlier of the two deadlines and both reasons.

        Raises:
            OSError: the request file cannot be written (the caller records it).
        """
        deadline = ensure_utc(deadline)
        if self.pending is not None:
            attempt = self.pending
            if deadline < attempt.deadline:
                attempt.deadline = deadline
            if reason not in attempt.reason.split("+"):
                attempt.reason = f"{attempt.reason}+{reason}"
            self._write_request(attempt)
            return attempt
        now = self.clock.now()
        before = {str(c.path): c.state for c in find_checkpoints(self.pattern)} if self.pattern else {}
        attempt = CheckpointAttempt(reason=reason, requested_at=now, deadline=deadline, signal=self.signal,
                                    _before=before)
        self._drop_ack()
        self._write_request(attempt)
        try:
            attempt._request_mtime_ns = self.request_path.stat().st_mtime_ns
        except OSError:
            attempt._request_mtime_ns = time.time_ns()
        if self.signal:
            pid = self._job_pid()
            if pid is not None:
                attempt.signalled_pids = send_to_workers(pid, signal_mod.Signals[self.signal])
        self.pending = attempt
        return attempt

    def _write_request(self, attempt: CheckpointAttempt) -> None:
        self.request_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.request_path.with_name(self.request_path.name + ".tmp")
        tmp.write_text(json.dumps({
            "reason": attempt.reason,
            "requested_at": attempt.requested_at.isoformat(),
            "deadline": attempt.deadline.isoformat(),
        }) + "\n")
        os.replace(tmp, self.request_path)

    def withdraw(self) -> None:
        """Delete the request file (a job that saves late then finds nothing to do)."""
        try:
            self.request_path.unlink()
        except FileNotFoundError:
            pass

    def on_clock(self, mtime_ns: int, now: datetime) -> datetime:
        """A file time (``mtime_ns``, wall clock) on the watch's clock, whose time is ``now``
        (``now - (wall now - mtime)``; never after ``now``)."""
        return self._on_clock(mtime_ns, now)

    def _on_clock(self, mtime_ns: int, now: datetime, wall_now: float | None = None) -> datetime:
        behind = max(0.0, (self._wall() if wall_now is None else wall_now) - mtime_ns / 1e9)
        return now - timedelta(seconds=behind)

    def _new_checkpoint(self, attempt: CheckpointAttempt) -> CheckpointFile | None:
        if not self.pattern:
            return None
        fresh = []
        for c in find_checkpoints(self.pattern):
            old = attempt._before.get(str(c.path))
            if c.mtime_ns > attempt._request_mtime_ns or (
                old != c.state and c.mtime_ns >= attempt._request_mtime_ns
            ):
                fresh.append(c)
        return fresh[-1] if fresh else None

    @property
    def ack_path(self) -> Path:
        """Where the job writes its acknowledgement record (:func:`costctl.job.ack_path`)."""
        return ack_path(self.request_path)

    def _drop_ack(self) -> None:
        try:
            self.ack_path.unlink()
        except OSError:
            pass

    def _read_ack(self, attempt: CheckpointAttempt) -> dict[str, Any] | None:
        """The job's record when it answers ``attempt``'s request, else None (a stale or
        unreadable one is ignored)."""
        try:
            mtime_ns = self.ack_path.stat().st_mtime_ns
            record = json.loads(self.ack_path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        answered = record.get("request")
        if answered is None:
            return record if mtime_ns >= attempt._request_mtime_ns else None
        try:
            return record if ensure_utc(datetime.fromisoformat(answered)) == attempt.requested_at else None
        except (TypeError, ValueError):
            return None

    def _wall_on_clock(self, value: Any, now: datetime, wall_now: float) -> datetime | None:
        try:
            wall = ensure_utc(datetime.fromisoformat(value)).timestamp()
        except (TypeError, ValueError):
            return None
        return now - timedelta(seconds=max(0.0, wall_now - wall))

    def poll(self, *, job_running: bool = True) -> CheckpointAttempt | None:
        """Follow the pending request; returns the attempt when it ends on this call, else None.

        Args:
            job_running: False once the job has exited (the attempt then ends at once).
        """
        attempt = self.pending
        if attempt is None:
            return None
        now = self.clock.now()
        if attempt.record is None:
            record = self._read_ack(attempt)
            if record is not None:
                attempt.record = record
                attempt.step = record.get("step") if isinstance(record.get("step"), int) else None
                wall_now = self._wall()
                attempt.save_started_at = self._wall_on_clock(record.get("save_started_at"), now, wall_now)
                attempt.save_ended_at = self._wall_on_clock(record.get("save_ended_at"), now, wall_now)
        if not attempt.acknowledged and (attempt.record is not None or not self.request_path.exists()):
            attempt.acknowledged = True
            attempt.save_s = max(0.0, (now - attempt.requested_at).total_seconds())
        found: CheckpointFile | None = None
        named = attempt.record.get("checkpoint") if attempt.record else None
        if named:
            found = _stat_entry(Path(named))
        if found is None:
            found = self._new_checkpoint(attempt)
        done: Outcome | None = None
        if found is not None:
            if attempt.record is not None:
                done, attempt.complete_by = Outcome.SAVED, "acknowledgement"
                attempt.check = check_checkpoint(found.path)[1]  # for the evidence; the job's word decides
            else:
                ok, attempt.check = is_complete(found.path)
                if ok and (attempt.acknowledged or not job_running or attempt._complete_seen == found.path):
                    done, attempt.complete_by = Outcome.SAVED, "format check"
                attempt._complete_seen = found.path if ok else None
        if done is None:
            late = attempt.acknowledged and attempt.save_s is not None and \
                now >= attempt.requested_at + timedelta(seconds=attempt.save_s + ACK_GRACE_S)
            if attempt.acknowledged and (not self.pattern or late):
                done = Outcome.ACKNOWLEDGED
            elif not job_running:
                done = Outcome.ACKNOWLEDGED if attempt.acknowledged else Outcome.JOB_EXITED
            elif now >= attempt.deadline:
                done = Outcome.ACKNOWLEDGED if attempt.acknowledged else Outcome.TIMED_OUT
        if done is None:
            return None
        attempt.outcome = done
        attempt.completed_at = now
        if done is Outcome.SAVED and found is not None:
            attempt.checkpoint = found
            end = attempt.save_ended_at or self._on_clock(found.mtime_ns, now)
            saved_at = max(attempt.requested_at, min(now, end))
            attempt.saved_at = saved_at
            attempt.save_s = (saved_at - attempt.requested_at).total_seconds()
        if not attempt.acknowledged:
            self.withdraw()
        self._drop_ack()
        self.pending = None
        return attempt


__all__ = [
    "CheckpointAttempt",
    "CheckpointFile",
    "CheckpointRequester",
    "Outcome",
    "ephemeral_storage_warning",
    "find_checkpoints",
    "known_patterns",
    "newest_checkpoint",
    "newest_intact_checkpoint",
    "resolve_pattern",
    "send_to_workers",
    "under_pattern",
    "worker_processes",
]
