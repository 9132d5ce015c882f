"""CPU use of the watched process tree (raw /proc reads), or of every user process on the machine (psutil).

The watched tree is found without reading every process on the host (:class:`ProcChildren`:
``/proc/PID/task/*/children``, or a pid -> parent map read once per new pid); psutil reads only
the tree's own processes.

Units: percent of **one core**, summed over processes (200 = two cores fully busy), measured
between two consecutive reads.

psutil pitfalls this module is built around (psutil docs, ``Process.cpu_percent``):

* the first ``cpu_percent(interval=None)`` of a ``Process`` object returns a meaningless
  ``0.0`` — it only starts the measurement;
* ``children()`` returns NEW ``Process`` objects on every call, so a tree rebuilt each tick
  would always read 0 %.

So the ``Process`` objects are kept across reads, keyed by ``(pid, create_time)`` (a reused
PID is a new process), and a process seen for the first time is measured from its cumulative
``cpu_times()`` (user + system) instead of its meaningless first ``cpu_percent``: created since
the previous read, all of its CPU time fell in this interval; older (the first read of a source,
or a process that just became visible), its average since ``create_time`` stands in. Nothing is
ever read as a fake 0, and a source no longer turns UNKNOWN whenever a process starts, which made
a machine where processes keep starting (a cron job, a shell loop, a notebook's kernels) never
idle. Processes that start and end between two reads are not in any process list: on Linux
:class:`MachineCpu` also reads its cgroup's ``cpu.stat`` ``usage_usec`` (cgroup v2; one file
read per tick) and takes the larger of the two figures. The module-level
``psutil.cpu_percent()`` is not used: it keeps its previous sample per *thread*, and a scheduler
that runs ticks on pool threads would get its meaningless first 0.0 again and again.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from costctl.errors import UsageError
from costctl.i18n import _
from costctl.records import SignalStatus
from costctl.telemetry.base import CpuRead

_Key = tuple[int, float]


@dataclass
class _Tally:
    known: float = 0.0
    measured: int = 0
    new: list[int] = field(default_factory=list)
    denied: list[int] = field(default_factory=list)


def _since_creation(proc: psutil.Process, created: float, now: float, previous: float | None) -> float:
    """CPU of a process seen for the first time, in percent of one core over this interval.

    Created after the previous read (at wall time ``previous``): all of its CPU time fell in
    ``[previous, now]``. Otherwise (first read of the source, or a process that just became
    visible): its average since ``created``.
    """
    times = proc.cpu_times()
    used = times.user + times.system
    if previous is not None and created >= previous:
        span = now - previous
    else:
        span = now - created
    return 100.0 * used / max(span, 0.01)


class _Tracker:
    """``Process`` objects kept across reads, keyed by ``(pid, create_time)``."""

    def __init__(self) -> None:
        self.procs: dict[_Key, psutil.Process] = {}
        self._previous: float | None = None  # wall time (epoch s) of the previous measure

    def measure(self, candidates: Iterable[psutil.Process]) -> _Tally:
        """Sum the CPU of ``candidates`` since the previous read, in percent of one core.

        Known processes count their ``cpu_percent``; new ones (listed in ``new``) their CPU
        time since creation (:func:`_since_creation`) — both go into ``known``/``measured``.
        Processes that vanished are dropped; those we may not read are listed in ``denied``.
        The kept set becomes exactly the candidates that could be read (so a dead process's
        object is released).
        """
        now = time.time()
        previous, self._previous = self._previous, now
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
                    tally.known += _since_creation(proc, key[1], now, previous)
                    tally.measured += 1
                    tally.new.append(proc.pid)
                    kept[key] = proc
            except psutil.AccessDenied:
                tally.denied.append(proc.pid)
            except psutil.Error:
                continue
        self.procs = kept
        return tally


#: Clock ticks per second of ``/proc/PID/stat``'s time fields (utime, stime, starttime).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_stat(pid: int) -> bytes:
    """The raw ``/proc/PID/stat`` of ``pid`` (one ``os.read``).

    Raises:
        FileNotFoundError / ProcessLookupError: no such process; PermissionError: not readable.
    """
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ProcStat:
    """The fields of one ``/proc/PID/stat`` read that the tree source uses.

    Attributes:
        state: one letter (R, S, D, Z, ...); ``Z``: an exited, unreaped process.
        cpu_ticks: utime + stime, clock ticks (:data:`CLK_TCK` per second).
        num_threads: threads of the process.
        start_ticks: start time after boot, clock ticks (with the pid: the process's identity).
    """

    state: str
    cpu_ticks: int
    num_threads: int
    start_ticks: int

    @classmethod
    def parse(cls, data: bytes) -> ProcStat:
        """Parse ``pid (comm) state ppid ...`` (comm may hold spaces and parentheses).

        Raises:
            ValueError: not a stat line."""
        try:
            f = data[data.rindex(b")") + 2:].split()
            return cls(chr(f[0][0]), int(f[11]) + int(f[12]), int(f[17]), int(f[19]))
        except (IndexError, ValueError) as exc:
            raise ValueError(f"not a /proc/PID/stat line: {data[:80]!r}") from exc


def read_stat(pid: int) -> ProcStat | None:
    """:class:`ProcStat` of ``pid``; None when there is no such process.

    Raises:
        PermissionError: the process exists but its stat may not be read."""
    try:
        return ProcStat.parse(_read_stat(pid))
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def _boot_seconds() -> float:
    """Seconds since boot on the clock of ``starttime`` (CLOCK_BOOTTIME where there is one)."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


@dataclass
class _Member:
    """One process of the watched tree, kept across reads (its identity: pid + start ticks)."""

    pid: int
    start_ticks: int
    cpu_ticks: int
    at: float  # boot seconds of the read that gave cpu_ticks


class _TreeTracker:
    """The tree's members kept across reads, keyed by ``(pid, start ticks)`` (a reused pid is
    a new process); their CPU from raw ``/proc/PID/stat`` reads (no psutil on the tick's path)."""

    def __init__(self) -> None:
        self.procs: dict[tuple[int, int], _Member] = {}
        self._previous: float | None = None  # boot seconds of the previous measure

    def measure(self, found: Iterable[tuple[int, ProcStat]], now: float) -> _Tally:
        """Sum the CPU of ``found`` (pid, its stat read now) since the previous read, percent
        of one core: a known member its CPU ticks since its previous read over that span, a
        new one its CPU since creation (as :func:`_since_creation`). The kept set becomes
        exactly ``found``."""
        previous, self._previous = self._previous, now
        tally = _Tally()
        kept: dict[tuple[int, int], _Member] = {}
        for pid, st in found:
            key = (pid, st.start_ticks)
            if key in kept:
                continue
            known = self.procs.get(key)
            if known is not None:
                span = now - known.at
                if span > 0:
                    tally.known += 100.0 * (st.cpu_ticks - known.cpu_ticks) / CLK_TCK / span
                known.cpu_ticks, known.at = st.cpu_ticks, now
                kept[key] = known
            else:
                created = st.start_ticks / CLK_TCK
                span = now - previous if previous is not None and created >= previous else now - created
                tally.known += 100.0 * st.cpu_ticks / CLK_TCK / max(span, 0.01)
                tally.new.append(pid)
                kept[key] = _Member(pid, st.start_ticks, st.cpu_ticks, now)
            tally.measured += 1
        self.procs = kept
        return tally


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited child nobody has reaped yet uses no CPU)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _task_children(pid: int) -> list[int] | None:
    """Children of ``pid`` from ``/proc/PID/task/*/children`` (Linux with CONFIG_PROC_CHILDREN);
    [] when the process is gone, None when the kernel has no such file."""
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"{base}/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            if os.path.exists(f"{base}/{tid}"):
                return None  # the thread is there, its children file is not: unsupported
        except (OSError, ValueError):
            return None
    return out


class ProcChildren:
    """Who is whose child, kept across reads without reading every process on the host.

    Where the kernel has ``/proc/PID/task/*/children`` only the tree's own processes are read.
    Elsewhere the parent of each pid is read once, when the pid first appears in ``/proc`` (one
    directory listing per read; ``/proc/PID/stat`` only for pids new since the previous read),
    and remembered until the pid is gone. psutil is used only for the processes found.

    Args:
        proc: the procfs mount (tests pass a fake tree).
    """

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.native = proc == "/proc" and os.path.exists(f"/proc/self/task/{os.getpid()}/children")
        self._ppid: dict[int, int] = {}
        self._map: dict[int, list[int]] | None = None

    def refresh(self) -> None:
        """Start a new read: the pid -> parent map is brought up to date (fallback mode only)."""
        if self.native:
            return
        try:
            names = os.listdir(self.proc)
        except OSError:
            self._map = {}
            return
        pids = {int(n) for n in names if n.isdigit()}
        known = self._ppid
        fresh = {pid: known[pid] for pid in pids if pid in known}
        for pid in pids - fresh.keys():
            ppid = self._read_ppid(pid)
            if ppid is not None:
                fresh[pid] = ppid
        self._ppid = fresh
        children: dict[int, list[int]] = {}
        for pid, ppid in fresh.items():
            children.setdefault(ppid, []).append(pid)
        self._map = children

    def _read_ppid(self, pid: int) -> int | None:
        try:
            with open(f"{self.proc}/{pid}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        try:  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            return int(data[data.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            return None

    def forget(self, pid: int) -> None:
        """``pid`` was seen reparented or reused: read its parent again at the next refresh."""
        self._ppid.pop(pid, None)

    def children(self, pid: int, num_threads: int | None = None) -> list[int]:
        """The direct children of ``pid`` (as of the last :meth:`refresh`). ``num_threads``
        (from its stat, when known): a single-threaded process's children are read from its
        one thread's ``children`` file, without listing ``/proc/PID/task``."""
        if self.native and num_threads == 1:
            try:
                fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY)
                try:
                    data = os.read(fd, 65536)
                    while len(data) % 65536 == 0 and data:  # a very long list: read the rest
                        more = os.read(fd, 65536)
                        if not more:
                            break
                        data += more
                finally:
                    os.close(fd)
                return [int(x) for x in data.split()]
            except (FileNotFoundError, ProcessLookupError):
                return []  # gone (the kernel has the file: checked at start)
            except (OSError, ValueError):
                pass  # read it the general way
        if self.native:
            found = _task_children(pid)
            if found is not None:
                return found
            self.native = False
            self.refresh()
        if self._map is None:
            self.refresh()
        assert self._map is not None
        return list(self._map.get(pid, ()))

    def descendants(self, pid: int) -> list[int]:
        """Every descendant of ``pid``, parents before children."""
        out: list[int] = []
        seen = {pid}
        todo = [pid]
        while todo:
            for child in self.children(todo.pop()):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    todo.append(child)
        return out


class ProcessTreeCpu:
    """CPU of one process and all its descendants, in percent of one core.

    Args:
        root_pid: the watched job (the child costctl started, or ``--pid``).

    Raises:
        UsageError: no process with ``root_pid`` exists (or it may not be read) when the
            source is created.

    Reading rules (:meth:`read`):

    * the tree is the root plus its descendants, plus every member seen earlier that still
      runs (a worker re-parented to init when its parent died is still the job's work);
    * a member seen for the first time counts its CPU time since it was created (the module
      docstring), so a worker started between two reads is measured, not guessed;
    * a member we may not read (``PermissionError``) is skipped, but an unreadable root is ERROR;
    * after the root has exited (or is an unreaped zombie) and no member remains: OK 0.0 — the
      job is gone, so its tree is idle.

    Each read costs one raw ``/proc/PID/stat`` read per member (state, CPU ticks, threads,
    start time: a reused pid has another start time, so it is not taken for the member) and
    one ``children`` file per single-threaded member (``/proc/PID/task`` is listed only for
    multi-threaded ones); no psutil.
    """

    name = "cpu"

    def __init__(self, root_pid: int) -> None:
        try:
            st = read_stat(root_pid)
        except PermissionError as exc:
            raise UsageError(_("cannot watch PID {pid}: permission denied").format(pid=root_pid)) from exc
        if st is None:
            raise UsageError(_("no process with PID {pid}: give the PID of a running process").format(pid=root_pid))
        self.root_pid = root_pid
        self._root_start = st.start_ticks  # the root's identity (pid reuse)
        self._tracker = _TreeTracker()
        self._lock = threading.Lock()
        self._tree = ProcChildren()

    def read(self) -> CpuRead:
        """CPU use of the tree since the previous read (see the class docstring for the rules)."""
        with self._lock:
            now = _boot_seconds()
            found, denied = self._members()
            tally = self._tracker.measure(found, now)
            if self.root_pid in denied:
                return CpuRead(
                    SignalStatus.ERROR,
                    error=_("cannot read the CPU use of PID {pid}: access denied").format(pid=self.root_pid),
                )
            if not tally.measured:
                # Root gone and no descendant left (or only unreadable ones): the job is idle.
                return CpuRead(SignalStatus.OK, percent=0.0)
            return CpuRead(SignalStatus.OK, percent=tally.known)

    def _members(self) -> tuple[list[tuple[int, ProcStat]], list[int]]:
        """The tree's processes with their stat read now, and the pids that may not be read."""
        found: list[tuple[int, ProcStat]] = []
        denied: list[int] = []
        seen: set[int] = set()
        tree = self._tree
        tree.refresh()

        def add_with_children(pid: int, st: ProcStat) -> None:
            found.append((pid, st))
            seen.add(pid)
            todo: list[tuple[int, ProcStat | None]] = [(pid, st)]
            while todo:
                parent, pst = todo.pop()
                for child in tree.children(parent, pst.num_threads if pst is not None else None):
                    if child in seen:
                        continue
                    seen.add(child)
                    try:
                        cst = read_stat(child)
                    except PermissionError:
                        denied.append(child)
                        todo.append((child, None))
                        continue
                    if cst is not None:
                        found.append((child, cst))
                        todo.append((child, cst))

        root = self.root_pid
        try:
            rst = read_stat(root)
        except PermissionError:
            denied.append(root)
            rst = None
        if rst is not None and rst.start_ticks == self._root_start and rst.state != "Z":
            add_with_children(root, rst)
        for member in list(self._tracker.procs.values()):
            if member.pid in seen or member.pid == root:
                continue
            try:
                st = read_stat(member.pid)
            except PermissionError:
                continue
            # an orphaned member, re-parented away from the root, that still runs
            if st is not None and st.start_ticks == member.start_ticks and st.state != "Z":
                add_with_children(member.pid, st)
        return found, denied


class ExitedTreeCpu:
    """The CPU source of a job that had exited before it could be watched (a short job, reaped
    by its relay at once): its tree is idle, OK 0.0 — as :class:`ProcessTreeCpu` reads once
    its root is gone."""

    name = "cpu"

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid

    def read(self) -> CpuRead:
        """Always OK 0.0 (the job is gone)."""
        return CpuRead(SignalStatus.OK, percent=0.0)


class MachineCpu:
    """CPU of every user process on the machine, in percent of one core (no-command guard).

    Sums per-process ``cpu_percent`` over everything psutil lists, except costctl itself and
    its descendants (the sampler's own ``nvidia-smi`` calls, hooks) and, on Linux, kernel
    threads (PID 2 ``kthreadd`` and its children). Per-process sums are used rather than the
    system-wide ``/proc/stat`` figure because inside a container (AutoDL, Vast.ai, RunPod)
    ``/proc/stat`` counts the whole host, other tenants included, while the process list is the
    container's own.

    The same first-reading rule as :class:`ProcessTreeCpu`: a process seen for the first time
    counts its CPU time since it was created. A process that started and ended between two reads
    is in no process list; on Linux the CPU time of costctl's cgroup (cgroup v2 ``cpu.stat``
    ``usage_usec``, :class:`CgroupCpu`), less costctl's own, catches it: the read is the larger
    of the two figures (each a lower bound of the truth). Unreadable processes
    (``AccessDenied``) are skipped.

    Args:
        cgroup: the cgroup CPU counter (default: costctl's own cgroup, when readable).
        monotonic: seconds clock for the cgroup figure's interval (tests pass a fake).
    """

    name = "cpu"

    def __init__(self, cgroup: CgroupCpu | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._tracker = _Tracker()
        self._by_pid: dict[int, psutil.Process] = {}
        self._kernel: dict[_Key, bool] = {}
        self._self = psutil.Process(os.getpid())
        self._tree = ProcChildren()  # costctl's own descendants, left out
        self._lock = threading.Lock()
        self._cgroup = cgroup if cgroup is not None else CgroupCpu.own()
        self._cgroup_last: tuple[float, float] | None = None  # (monotonic s, cgroup CPU s - own CPU s)
        self._monotonic = monotonic

    def read(self) -> CpuRead:
        """CPU use of all user processes since the previous read."""
        with self._lock:
            try:
                procs = self._processes()
            except psutil.Error as exc:
                return CpuRead(SignalStatus.ERROR, error=_("cannot list processes: {error}").format(error=exc))
            tally = self._tracker.measure(procs)
            cgroup = self._cgroup_percent()
            if not tally.measured and tally.denied and cgroup is None:
                return CpuRead(SignalStatus.ERROR, error=_("no process could be read: access denied"))
            return CpuRead(SignalStatus.OK, percent=max(tally.known, cgroup or 0.0))

    def _cgroup_percent(self) -> float | None:
        """The cgroup's CPU since the previous read, less costctl's own tree (percent of a core);
        None on the first read or without a readable cgroup counter."""
        if self._cgroup is None:
            return None
        used = self._cgroup.seconds()
        if used is None:
            return None
        now = self._monotonic()
        others = used - self._own_seconds()
        last, self._cgroup_last = self._cgroup_last, (now, others)
        if last is None or now <= last[0]:
            return None
        return max(0.0, 100.0 * (others - last[1]) / (now - last[0]))

    def _own_seconds(self) -> float:
        """CPU seconds of costctl itself, its reaped children and its live descendants."""
        try:
            t = self._self.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for pid in self._tree.descendants(self._self.pid):
                try:
                    c = psutil.Process(pid).cpu_times()
                    total += c.user + c.system
                except psutil.Error:
                    continue
            return total
        except psutil.Error:
            return 0.0

    def _processes(self) -> list[psutil.Process]:
        excluded = {self._self.pid}
        self._tree.refresh()
        excluded.update(self._tree.descendants(self._self.pid))
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


class CgroupCpu:
    """Cumulative CPU time of one cgroup v2 (``cpu.stat`` ``usage_usec``), in seconds.

    It counts every process that ran in the cgroup, those that started and ended between two
    reads included — which no process list can see. Inside a container (AutoDL, Vast.ai,
    RunPod) costctl's cgroup is the container's.

    Args:
        stat_path: the ``cpu.stat`` file.
    """

    def __init__(self, stat_path: Path) -> None:
        self.stat_path = Path(stat_path)

    @classmethod
    def own(cls, proc_cgroup: Path = Path("/proc/self/cgroup"),
            roots: tuple[Path, ...] = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))) -> CgroupCpu | None:
        """costctl's own cgroup v2 (the ``0::PATH`` line of /proc/self/cgroup, under the unified
        hierarchy's mount); None where there is none (not Linux, cgroup v1 only, unreadable)."""
        try:
            lines = proc_cgroup.read_text().splitlines()
        except OSError:
            return None
        rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
        if rel is None:
            return None
        for root in roots:
            path = root / rel.lstrip("/") / "cpu.stat"
            source = cls(path)
            if source.seconds() is not None:
                return source
        return None

    def seconds(self) -> float | None:
        """``usage_usec`` / 1e6, or None when the file cannot be read or has no such line."""
        try:
            text = self.stat_path.read_text()
        except OSError:
            return None
        for line in text.splitlines():
            name, _sep, value = line.partition(" ")
            if name == "usage_usec":
                try:
                    return int(value) / 1e6
                except ValueError:
                    return None
        return None
