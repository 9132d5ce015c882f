"""CPU use of the watched process tree, or of every user process on the machine (psutil).

Units: percent of **one core**, summed over processes (200 = two cores fully busy), measured
between two consecutive reads.

psutil pitfalls this module is built around (psutil docs, ``Process.cpu_percent``):

* the first ``cpu_percent(interval=None)`` of a ``Process`` object returns a meaningless
  ``0.0`` — it only starts the measurement;
* ``children()`` returns NEW ``Process`` objects on every call, so a tree rebuilt each tick
  would always read 0 %.

So :class:`ProcessTreeCpu` keeps its ``Process`` objects across reads, keyed by
``(pid, create_time)`` (a reused PID is a new process), and a process seen for the first time
makes the read UNKNOWN (busy) instead of contributing a fake 0: a busy job never looks idle
because it just started a worker. The module-level ``psutil.cpu_percent()`` is not used: it
keeps its previous sample per *thread*, and a scheduler that runs ticks on pool threads would
get its meaningless first 0.0 again and again.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from costctl.errors import UsageError
from costctl.records import SignalStatus
from costctl.telemetry.base import CpuRead

_Key = tuple[int, float]


@dataclass
class _Tally:
    known: float = 0.0
    measured: int = 0
    new: list[int] = field(default_factory=list)
    denied: list[int] = field(default_factory=list)


class _Tracker:
    """``Process`` objects kept across reads, keyed by ``(pid, create_time)``."""

    def __init__(self) -> None:
        self.procs: dict[_Key, psutil.Process] = {}

    def measure(self, candidates: Iterable[psutil.Process]) -> _Tally:
        """Sum ``cpu_percent`` over ``candidates``; new ones are primed and listed in ``new``.

        Processes that vanished are dropped; those we may not read are listed in ``denied``.
        The kept set becomes exactly the candidates that could be read (so a dead process's
        object is released).
        """
        tally = _Tally()
        kept: dict[_Key, psutil.Process] = {}
        for proc in candidates:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.AccessDenied:
                tally.denied.append(proc.pid)
                continue
            except psutil.Error:  # NoSuchProcess / ZombieProcess: gone between listing and now
                continue
            if key in kept:
                continue
            known = self.procs.get(key)
            try:
                if known is not None:
                    tally.known += known.cpu_percent(interval=None)
                    tally.measured += 1
                    kept[key] = known
                else:
                    proc.cpu_percent(interval=None)  # starts the measurement; value meaningless
                    tally.new.append(proc.pid)
                    kept[key] = proc
            except psutil.AccessDenied:
                tally.denied.append(proc.pid)
            except psutil.Error:
                continue
        self.procs = kept
        return tally


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited child nobody has reaped yet uses no CPU)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _format_pids(pids: list[int], limit: int = 5) -> str:
    shown = ", ".join(str(p) for p in sorted(pids)[:limit])
    return shown + (f" and {len(pids) - limit} more" if len(pids) > limit else "")


class ProcessTreeCpu:
    """CPU of one process and all its descendants, in percent of one core.

    Args:
        root_pid: the watched job (the child costctl started, or ``--pid``).

    Raises:
        UsageError: no process with ``root_pid`` exists when the source is created.

    Reading rules (:meth:`read`):

    * the tree is the root plus its descendants, plus every member seen earlier that still
      runs (a worker re-parented to init when its parent died is still the job's work);
    * a member seen for the first time makes the read UNKNOWN (busy) — so the very first read is
      always UNKNOWN, and the tree is UNKNOWN on any tick a new process appears in it;
    * a member we may not read (``AccessDenied``) is skipped, but an unreadable root is ERROR;
    * after the root has exited (or is an unreaped zombie) and no member remains: OK 0.0 — the
      job is gone, so its tree is idle.
    """

    name = "cpu"

    def __init__(self, root_pid: int) -> None:
        try:
            self._root = psutil.Process(root_pid)
        except psutil.NoSuchProcess as exc:
            raise UsageError(f"no process with PID {root_pid}: give the PID of a running process") from exc
        except psutil.AccessDenied as exc:  # pragma: no cover - Process() reads only /proc/PID/stat
            raise UsageError(f"cannot watch PID {root_pid}: permission denied") from exc
        self.root_pid = root_pid
        self._tracker = _Tracker()
        self._lock = threading.Lock()

    def read(self) -> CpuRead:
        """CPU use of the tree since the previous read (see the class docstring for the rules)."""
        with self._lock:
            members, error = self._members()
            if error is not None:
                return CpuRead(SignalStatus.ERROR, error=error)
            tally = self._tracker.measure(members)
            if self._root.pid in tally.denied and _alive(self._root):
                return CpuRead(
                    SignalStatus.ERROR,
                    error=f"cannot read the CPU use of PID {self._root.pid}: access denied",
                )
            if tally.new:
                return CpuRead(
                    SignalStatus.UNKNOWN,
                    percent=tally.known if tally.measured else None,
                    error=f"first reading of PID {_format_pids(tally.new)} (not measurable yet)",
                )
            if not tally.measured:
                # Root gone and no descendant left (or only unreadable ones): the job is idle.
                return CpuRead(SignalStatus.OK, percent=0.0)
            return CpuRead(SignalStatus.OK, percent=tally.known)

    def _members(self) -> tuple[list[psutil.Process], str | None]:
        members: list[psutil.Process] = []
        seen: set[int] = set()

        def add_with_children(proc: psutil.Process) -> None:
            members.append(proc)
            seen.add(proc.pid)
            try:
                children = proc.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for child in children:
                if child.pid not in seen:
                    seen.add(child.pid)
                    members.append(child)

        if _alive(self._root):
            try:
                add_with_children(self._root)
            except psutil.AccessDenied:
                return [], f"cannot list the children of PID {self._root.pid}: access denied"
        for proc in list(self._tracker.procs.values()):
            if proc.pid in seen or proc.pid == self._root.pid:
                continue
            if _alive(proc):  # an orphaned member, re-parented away from the root
                try:
                    add_with_children(proc)
                except psutil.AccessDenied:
                    members.append(proc)
        return members, None


class MachineCpu:
    """CPU of every user process on the machine, in percent of one core (no-command guard).

    Sums per-process ``cpu_percent`` over everything psutil lists, except costctl itself and
    its descendants (the sampler's own ``nvidia-smi`` calls, hooks) and, on Linux, kernel
    threads (PID 2 ``kthreadd`` and its children). Per-process sums are used rather than the
    system-wide ``/proc/stat`` figure because inside a container (AutoDL, Vast.ai, RunPod)
    ``/proc/stat`` counts the whole host, other tenants included, while the process list is the
    container's own.

    The same first-reading rule as :class:`ProcessTreeCpu`: the first read is UNKNOWN, and so is
    any read where a new process appeared since the previous one (a process started and ended
    between two reads is not seen at all). Unreadable processes (``AccessDenied``) are skipped.
    """

    name = "cpu"

    def __init__(self) -> None:
        self._tracker = _Tracker()
        self._by_pid: dict[int, psutil.Process] = {}
        self._kernel: dict[_Key, bool] = {}
        self._self = psutil.Process(os.getpid())
        self._lock = threading.Lock()

    def read(self) -> CpuRead:
        """CPU use of all user processes since the previous read."""
        with self._lock:
            try:
                procs = self._processes()
            except psutil.Error as exc:
                return CpuRead(SignalStatus.ERROR, error=f"cannot list processes: {exc}")
            tally = self._tracker.measure(procs)
            if tally.new:
                return CpuRead(
                    SignalStatus.UNKNOWN,
                    percent=tally.known if tally.measured else None,
                    error=f"first reading of PID {_format_pids(tally.new)} (not measurable yet)",
                )
            if not tally.measured and tally.denied:
                return CpuRead(SignalStatus.ERROR, error="no process could be read: access denied")
            return CpuRead(SignalStatus.OK, percent=tally.known)

    def _processes(self) -> list[psutil.Process]:
        excluded = {self._self.pid}
        try:
            excluded.update(c.pid for c in self._self.children(recursive=True))
        except psutil.Error:
            pass
        out: dict[int, psutil.Process] = {}
        live_kernel: set[_Key] = set()
        for pid in psutil.pids():
            if pid in excluded or pid == 0:
                continue
            proc = self._by_pid.get(pid)
            if proc is None or not proc.is_running():
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:
                    continue
            if self._is_kernel_thread(proc):
                live_kernel.add((proc.pid, proc.create_time()))
                continue
            out[pid] = proc
        self._by_pid = out
        if len(self._kernel) > 2 * len(self._by_pid) + 2 * len(live_kernel) + 64:
            live = {(p.pid, p.create_time()) for p in out.values()} | live_kernel
            self._kernel = {k: v for k, v in self._kernel.items() if k in live}  # forget the dead
        return list(out.values())

    def _is_kernel_thread(self, proc: psutil.Process) -> bool:
        """Linux kernel threads: PID 2 (kthreadd) and its children; cached per process."""
        if not sys.platform.startswith("linux"):
            return False
        try:
            key = (proc.pid, proc.create_time())
            cached = self._kernel.get(key)
            if cached is None:
                cached = proc.pid == 2 or proc.ppid() == 2
                self._kernel[key] = cached
            return cached
        except psutil.Error:
            return False
