"""CPU sources with real child processes (busy loops, sleepers, grandchildren, orphans)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from costctl.errors import UsageError
from costctl.records import SignalStatus
from costctl.telemetry.base import CpuRead
from costctl.telemetry.cpu import MachineCpu, ProcessTreeCpu

TICK = 0.4  # seconds between reads: enough for psutil to measure a busy loop

BUSY = "import time\nwhile True: pass\n"
SLEEP = "import time\ntime.sleep(60)\n"
# Starts a busy grandchild, prints its PID, then sleeps (the child itself is idle).
BUSY_GRANDCHILD = (
    "import subprocess, sys, time\n"
    f"g = subprocess.Popen([sys.executable, '-c', {BUSY!r}])\n"
    "print(g.pid, flush=True)\n"
    "time.sleep(60)\n"
)
# Starts a busy grandchild in its own session, prints its PID and exits (the grandchild is orphaned).
ORPHAN = (
    "import subprocess, sys\n"
    f"g = subprocess.Popen([sys.executable, '-c', {BUSY!r}], start_new_session=True)\n"
    "print(g.pid, flush=True)\n"
)
# Idle until a line arrives on stdin, then starts a busy child.
SPAWN_ON_INPUT = (
    "import subprocess, sys, time\n"
    "sys.stdin.readline()\n"
    f"g = subprocess.Popen([sys.executable, '-c', {BUSY!r}])\n"
    "print(g.pid, flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def spawn():
    """Start ``python -c CODE`` children; kill them (and any PIDs registered) at the end."""
    procs: list[subprocess.Popen] = []
    extra: list[int] = []

    def start(code: str, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kw
        )
        procs.append(proc)
        return proc

    start.extra = extra  # type: ignore[attr-defined]
    yield start
    for pid in extra:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in procs:
        for child in _children(proc.pid):
            try:
                child.kill()
            except psutil.Error:
                pass
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def read_twice(source):
    first = source.read()
    time.sleep(TICK)
    return first, source.read()


class CpuClock:
    """Independent measure of what ``pids`` used, from their cumulative CPU times (percent of a core)."""

    def __init__(self, *pids: int) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.start = self._total()

    def _total(self) -> tuple[float, float]:
        cpu = sum(sum(p.cpu_times()[:2]) for p in self.procs)
        return cpu, time.monotonic()

    def percent(self) -> float:
        cpu, wall = self._total()
        return (cpu - self.start[0]) / (wall - self.start[1]) * 100.0


def assert_busy(read, clock: CpuClock) -> None:
    """A busy loop reads busy: above 50 % of a core on a free CPU. On an oversubscribed test
    machine the loop gets less, so the reading must then match the loop's own CPU time (within
    15 points) and still be far above the default idle threshold (10 %)."""
    assert read.status is SignalStatus.OK, read
    expected = clock.percent()
    assert read.percent > 50.0 or (
        read.percent == pytest.approx(expected, abs=15.0) and read.percent > 25.0
    ), (read.percent, expected)


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_first_reading_is_measured_since_creation_then_a_busy_child_reads_busy(spawn):
    proc = spawn(BUSY)
    time.sleep(TICK)
    source = ProcessTreeCpu(proc.pid)
    first = source.read()
    clock = CpuClock(proc.pid)
    # never psutil's meaningless first 0.0: the CPU time since the process was created
    assert first.status is SignalStatus.OK and first.percent > 25.0, first
    time.sleep(TICK)
    assert_busy(source.read(), clock)


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_a_sleeping_child_reads_near_zero(spawn):
    proc = spawn(SLEEP)
    time.sleep(0.2)  # let the interpreter finish starting up
    first, second = read_twice(ProcessTreeCpu(proc.pid))
    assert first.status is SignalStatus.OK
    assert second.status is SignalStatus.OK and second.percent < 5.0


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_a_busy_grandchild_counts(spawn):
    proc = spawn(BUSY_GRANDCHILD)
    grandchild = int(proc.stdout.readline())
    source = ProcessTreeCpu(proc.pid)
    first = source.read()
    clock = CpuClock(proc.pid, grandchild)
    assert first.status is SignalStatus.OK and first.percent is not None
    time.sleep(TICK)
    assert_busy(source.read(), clock)
    # Rebuilding the tree every tick must not lose the measurement (the psutil pitfall).
    clock = CpuClock(proc.pid, grandchild)
    time.sleep(TICK)
    assert_busy(source.read(), clock)


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_a_new_process_in_the_tree_is_measured_from_its_creation(spawn):
    proc = spawn(SPAWN_ON_INPUT, stdin=subprocess.PIPE)
    time.sleep(0.2)
    source = ProcessTreeCpu(proc.pid)
    _, idle = read_twice(source)
    assert idle.status is SignalStatus.OK and idle.percent < 5.0
    proc.stdin.write("go\n")
    proc.stdin.flush()
    worker = int(proc.stdout.readline())
    appeared = source.read()
    clock = CpuClock(worker)
    assert appeared.status is SignalStatus.OK and appeared.percent is not None  # measured, not guessed
    time.sleep(TICK)
    assert_busy(source.read(), clock)


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_after_the_root_exits_the_tree_reads_idle(spawn):
    proc = spawn(BUSY)
    source = ProcessTreeCpu(proc.pid)
    source.read()
    clock = CpuClock(proc.pid)
    time.sleep(TICK)
    assert_busy(source.read(), clock)
    proc.kill()
    time.sleep(0.1)  # killed, not reaped yet: a zombie uses no CPU
    zombie = source.read()
    assert zombie.status is SignalStatus.OK and zombie.percent == 0.0
    proc.wait()
    gone = source.read()
    assert gone.status is SignalStatus.OK and gone.percent == 0.0


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_an_orphaned_busy_grandchild_still_counts_after_the_root_exits(spawn):
    proc = spawn(
        "import subprocess, sys, time\n"
        f"g = subprocess.Popen([sys.executable, '-c', {BUSY!r}])\n"
        "print(g.pid, flush=True)\n"
        "sys.stdin.readline()\n",
        stdin=subprocess.PIPE,
    )
    grandchild = int(proc.stdout.readline())
    spawn.extra.append(grandchild)
    source = ProcessTreeCpu(proc.pid)
    source.read()
    clock = CpuClock(grandchild)
    time.sleep(TICK)
    assert_busy(source.read(), clock)
    proc.stdin.write("exit\n")
    proc.stdin.flush()
    proc.wait()  # the root is gone; its busy child now belongs to init
    source.read()
    clock = CpuClock(grandchild)
    time.sleep(TICK)
    assert_busy(source.read(), clock)
    os.kill(grandchild, signal.SIGKILL)
    time.sleep(0.1)
    assert source.read() == CpuRead(SignalStatus.OK, 0.0)  # nothing of the job is left


def test_access_denied_skips_a_member_but_an_unreadable_root_is_error(spawn, monkeypatch):
    proc = spawn(BUSY_GRANDCHILD)
    grandchild = int(proc.stdout.readline())
    source = ProcessTreeCpu(proc.pid)
    source.read()
    time.sleep(TICK)

    import costctl.telemetry.cpu as cpu_mod

    real = cpu_mod._read_stat
    denied = {grandchild}

    def read_stat(pid):
        if pid in denied:
            raise PermissionError(13, "Permission denied", f"/proc/{pid}/stat")
        return real(pid)

    monkeypatch.setattr(cpu_mod, "_read_stat", read_stat)
    skipped = source.read()
    assert skipped.status is SignalStatus.OK and skipped.percent < 5.0  # only the sleeper
    denied.add(proc.pid)
    root_denied = source.read()
    assert root_denied.status is SignalStatus.ERROR
    assert f"PID {proc.pid}" in (root_denied.error or "")


def test_unknown_pid_is_a_usage_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(UsageError, match=f"no process with PID {proc.pid}"):
        ProcessTreeCpu(proc.pid)


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_machine_cpu_first_read_measured_then_counts_a_busy_process(spawn):
    # A busy process that is not our descendant (MachineCpu leaves costctl's own tree out).
    proc = spawn(ORPHAN)
    orphan = int(proc.stdout.readline())
    spawn.extra.append(orphan)
    proc.wait()
    source = MachineCpu()
    first = source.read()
    assert first.status is SignalStatus.OK
    for _ in range(15):
        clock = CpuClock(orphan)
        time.sleep(TICK)
        read = source.read()
        if read.status is SignalStatus.OK:
            break
    # The whole machine reads at least what the busy process alone used.
    assert read.status is SignalStatus.OK
    assert read.percent > 50.0 or read.percent >= clock.percent() - 15.0
    assert read.percent > 25.0


def test_machine_cpu_leaves_out_costctls_own_children(spawn):
    proc = spawn(SLEEP)
    source = MachineCpu()
    source.read()
    assert proc.pid not in {key[0] for key in source._tracker.procs}
    assert os.getpid() not in {key[0] for key in source._tracker.procs}


# --- the mechanism, on fakes (no real CPU readings) ----------------------------------------
class _Times:
    def __init__(self, user: float, system: float) -> None:
        self.user, self.system = user, system


class _FakeProc:
    def __init__(self, user: float, system: float = 0.0) -> None:
        self._times = _Times(user, system)

    def cpu_times(self) -> _Times:
        return self._times


def test_a_process_created_since_the_previous_read_counts_all_its_cpu_in_the_interval():
    from costctl.telemetry.cpu import _since_creation

    # previous read at t=100, now t=102; the process was born at t=101.5 and used 0.5 s
    assert _since_creation(_FakeProc(0.4, 0.1), created=101.5, now=102.0, previous=100.0) == pytest.approx(25.0)
    # born long before (first read of the source): its average since creation, 10 s over 100 s
    assert _since_creation(_FakeProc(10.0), created=2.0, now=102.0, previous=None) == pytest.approx(10.0)
    assert _since_creation(_FakeProc(10.0), created=2.0, now=102.0, previous=100.0) == pytest.approx(10.0)


def test_cgroup_cpu_reads_usage_usec_and_finds_its_own_cgroup(tmp_path):
    from costctl.telemetry.cpu import CgroupCpu

    proc_cgroup = tmp_path / "cgroup"
    proc_cgroup.write_text("1:cpu:/\n0::/system.slice/job.scope\n")
    unified = tmp_path / "unified" / "system.slice" / "job.scope"
    unified.mkdir(parents=True)
    (unified / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    found = CgroupCpu.own(proc_cgroup, roots=(tmp_path / "v2-not-mounted", tmp_path / "unified"))
    assert found is not None and found.seconds() == pytest.approx(2.5)
    assert CgroupCpu.own(tmp_path / "missing") is None
    (tmp_path / "v1").write_text("4:memory:/x\n")
    assert CgroupCpu.own(tmp_path / "v1", roots=(tmp_path / "unified",)) is None  # cgroup v1 only
    (unified / "cpu.stat").write_text("garbage\n")
    assert found.seconds() is None


def test_machine_cpu_counts_short_lived_processes_through_the_cgroup(tmp_path, monkeypatch):
    from costctl.telemetry.cpu import CgroupCpu

    stat = tmp_path / "cpu.stat"
    stat.write_text("usage_usec 10000000\n")
    now = [1000.0]
    source = MachineCpu(cgroup=CgroupCpu(stat), monotonic=lambda: now[0])
    monkeypatch.setattr(source, "_own_seconds", lambda: 3.0)  # costctl's own CPU stays out
    monkeypatch.setattr(source, "_processes", lambda: [])  # nothing long-lived to list
    first = source.read()
    assert first.status is SignalStatus.OK and first.percent == 0.0
    now[0] += 2.0
    stat.write_text("usage_usec 11800000\n")  # 1.8 s of CPU by processes no list saw
    second = source.read()
    assert second.status is SignalStatus.OK and second.percent == pytest.approx(90.0)
    now[0] += 2.0
    stat.write_text("usage_usec 11810000\n")
    assert source.read().percent == pytest.approx(0.5)
    stat.unlink()  # the counter went away: the process figure alone
    now[0] += 2.0
    assert source.read().percent == 0.0


def _no_full_scan(monkeypatch):
    """Any psutil call that reads every process on the host raises."""
    def scan(*a, **k):
        raise AssertionError("a full process scan")
    monkeypatch.setattr(psutil, "process_iter", scan)
    monkeypatch.setattr(psutil, "pids", scan)
    monkeypatch.setattr(psutil.Process, "children", scan)
    import psutil._pslinux as pslinux
    monkeypatch.setattr(pslinux, "ppid_map", scan)


def test_a_grandchild_started_later_is_found_without_a_full_process_scan(spawn, monkeypatch):
    proc = spawn(
        "import subprocess, sys, time\n"
        "sys.stdin.readline()\n"
        f"c = subprocess.Popen([sys.executable, '-c', {BUSY_GRANDCHILD!r}], stdout=subprocess.PIPE, text=True)\n"
        "print(c.pid, c.stdout.readline().strip(), flush=True)\n"
        "time.sleep(60)\n",
        stdin=subprocess.PIPE,
    )
    with monkeypatch.context() as patch:
        _no_full_scan(patch)
        source = ProcessTreeCpu(proc.pid)
        assert source.read().status is SignalStatus.OK
        members = {p.pid for p in source._tracker.procs.values()}
        assert members == {proc.pid}
        proc.stdin.write("go\n")
        proc.stdin.flush()
        child, grandchild = map(int, proc.stdout.readline().split())
        spawn.extra.extend([grandchild, child])
        for _ in range(3):
            assert source.read().status is SignalStatus.OK
        assert {p.pid for p in source._tracker.procs.values()} == {proc.pid, child, grandchild}


def test_proc_children_fallback_reads_each_new_pid_once(tmp_path):
    """Without /proc/PID/task/*/children: /proc is listed each read, but a pid's stat is read
    only when the pid first appears."""
    from costctl.telemetry.cpu import ProcChildren

    def make(pid, ppid):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a b) c) S {ppid} 1 1 0\n")

    make(1, 0)
    make(10, 1)
    make(11, 10)
    tree = ProcChildren(str(tmp_path))
    assert not tree.native
    reads: list[int] = []
    real = tree._read_ppid
    tree._read_ppid = lambda pid: reads.append(pid) or real(pid)
    tree.refresh()
    assert tree.descendants(10) == [11] and sorted(reads) == [1, 10, 11]
    make(12, 11)
    reads.clear()
    tree.refresh()
    assert tree.descendants(10) == [11, 12] and reads == [12]


def test_proc_stat_parse_reads_state_cpu_threads_and_start_past_an_odd_comm():
    from costctl.telemetry.cpu import ProcStat

    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice num_threads itrealvalue starttime ...
    line = b"42 (a) b (c)) S 1 42 42 0 -1 4194560 10 0 0 0 7 5 100 100 20 0 3 0 98765 1000 200\n"
    st = ProcStat.parse(line)
    assert (st.state, st.cpu_ticks, st.num_threads, st.start_ticks) == ("S", 12, 3, 98765)
    with pytest.raises(ValueError):
        ProcStat.parse(b"garbage")


@pytest.mark.realtime  # a CPU reading of a real busy process
def test_a_reused_root_pid_is_not_taken_for_the_job(spawn, monkeypatch):
    proc = spawn("while True:\n    pass\n")  # busy: read as the job, it would not be 0
    source = ProcessTreeCpu(proc.pid)
    assert source.read().status is SignalStatus.OK
    time.sleep(TICK)
    assert source.read().percent > 20.0
    time.sleep(TICK)
    source._root_start -= 1  # as if the pid now belonged to a process started at another time
    assert source.read() == CpuRead(SignalStatus.OK, 0.0)  # the job is gone: its tree is idle
