"""The job on a pty (costctl watch --pty, the default when stdout and stderr are one terminal):
a block-buffered child line-buffers, both streams arrive in the order written as one stream, the
run log holds exactly the job's bytes (no ONLCR), the pty has the terminal's size; with
--no-pty to a file the output is byte-identical to the command run alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from costctl.relay.client import RelayChild, shares_one_terminal
from helpers import REPO, costctl_cmd, costctl_env

PERL_LOSSES = 'for (1..3) { print "loss: 0.$_\\n"; sleep 1 }'
needs_perl = pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")


class _Stamped:
    """A stand-in for the OutputMux: each chunk with its stream and its arrival time."""

    def __init__(self) -> None:
        self.chunks: list[tuple[float, str, bytes]] = []

    def write(self, stream: str, data: bytes) -> None:
        self.chunks.append((time.monotonic(), stream, data))

    def stream(self, name: str) -> bytes:
        return b"".join(d for _, s, d in self.chunks if s == name)

    def finish(self) -> None:
        pass


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _line_times(mux: _Stamped) -> list[float]:
    """Arrival time of each completed line."""
    times, pending = [], b""
    for at, _, data in mux.chunks:
        pending += data
        while b"\n" in pending:
            _, pending = pending.split(b"\n", 1)
            times.append(at)
    return times


@needs_perl
@pytest.mark.realtime
def test_a_block_buffered_perl_child_on_a_pty_shows_each_loss_line_as_written(tmp_path):
    mux = _Stamped()
    child = RelayChild(["perl", "-e", PERL_LOSSES], mux, log_path=tmp_path / "run.log", pty=True)  # type: ignore[arg-type]
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"loss: 0.1\nloss: 0.2\nloss: 0.3\n"
    times = _line_times(mux)
    assert len(times) == 3
    # perl sleeps 1 s between lines: each arrives on its own (block-buffered, all 3 would come at the end)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0.5 < g < 1.5 for g in gaps), gaps


@needs_perl
def test_the_same_perl_child_on_pipes_is_block_buffered(tmp_path):
    """The counterpart: without a pty, perl holds its lines to the end (so the pty is what helps)."""
    mux = _Stamped()
    child = RelayChild(["perl", "-e", 'for (1..3) { print "loss: 0.$_\\n"; select(undef,undef,undef,0.3) }'],
                       mux, log_path=tmp_path / "run.log", pty=False)  # type: ignore[arg-type]
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"loss: 0.1\nloss: 0.2\nloss: 0.3\n"
    assert len({at for at, _, _ in mux.chunks}) == 1  # one chunk, at exit


def test_on_a_pty_stdout_and_stderr_are_one_stream_in_the_order_written_and_the_log_is_exact(tmp_path):
    log = tmp_path / "run.log"
    mux = _Stamped()
    code = ("import sys, os\n"
            "for _ in range(50):\n"
            "    sys.stdout.write('a'); sys.stdout.flush(); sys.stderr.write('b'); sys.stderr.flush()\n"
            "os.write(1, b'\\nline\\r\\n\\x1b[31mred\\xff\\n')\n"
            "sys.stdout.write('%d %d' % (os.isatty(1), os.isatty(2))); sys.stdout.flush()\n")
    child = RelayChild(_py(code), mux, log_path=log, pty=True)  # type: ignore[arg-type]
    assert child.wait(30) == 0
    expected = b"ab" * 50 + b"\nline\r\n\x1b[31mred\xff\n" + b"1 1"
    assert log.read_bytes() == expected  # no \n -> \r\n: OPOST is off on the job's pty
    assert mux.stream("stdout") == expected and mux.stream("stderr") == b""


def test_the_pty_has_the_given_window_size(tmp_path):
    mux = _Stamped()
    code = "import os; s = os.get_terminal_size(2); print(s.lines, s.columns)"
    child = RelayChild(_py(code), mux, log_path=tmp_path / "run.log", pty=True, winsize=(33, 111))  # type: ignore[arg-type]
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"33 111\n"


def test_on_pipes_the_job_sees_no_terminal(tmp_path):
    mux = _Stamped()
    child = RelayChild(_py("import os; print(os.isatty(1), os.isatty(2))"), mux,  # type: ignore[arg-type]
                       log_path=tmp_path / "run.log", pty=False)
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"False False\n"


def test_shares_one_terminal_only_when_both_fds_are_the_same_tty(tmp_path):
    master, slave = os.openpty()
    master2, slave2 = os.openpty()
    dup = os.dup(slave)
    with open(tmp_path / "f", "wb") as fh:
        try:
            assert shares_one_terminal(slave, dup)
            assert shares_one_terminal(slave, slave)
            assert not shares_one_terminal(slave, slave2)  # two terminals
            assert not shares_one_terminal(slave, fh.fileno())  # stderr a file
            assert not shares_one_terminal(fh.fileno(), fh.fileno())  # the same file, no tty
            r, w = os.pipe()
            assert not shares_one_terminal(w, w)
            os.close(r), os.close(w)
        finally:
            for fd in (master, slave, master2, slave2, dup):
                os.close(fd)


@needs_perl
def test_no_pty_to_a_file_keeps_the_output_byte_identical_to_the_command_alone(tmp_path):
    code = 'print "loss: 0.1\\n"; print STDERR "\\e[33mwarn\\e[0m\\r\\n"; print "x" x 5000; print "\\n"'
    alone = tmp_path / "alone.out"
    with open(alone, "wb") as out:
        subprocess.run(["perl", "-e", code], stdout=out, stderr=subprocess.DEVNULL, check=True, timeout=30)
    watched = tmp_path / "watched.out"
    with open(watched, "wb") as out:
        proc = subprocess.run(costctl_cmd("watch", "--quiet", "--no-pty", "--on-exit", "leave", "--", "perl", "-e", code),
                              env=costctl_env(tmp_path), cwd=REPO, stdout=out, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert watched.read_bytes() == alone.read_bytes()
    assert proc.stderr == b"\x1b[33mwarn\x1b[0m\r\n"  # stderr stays apart


def test_pty_forces_one_stream_even_when_stdout_is_a_pipe(tmp_path):
    code = "import os, sys; sys.stderr.write('E'); sys.stderr.flush(); print(os.isatty(1))"
    proc = subprocess.run(costctl_cmd("watch", "--quiet", "--pty", "--on-exit", "leave", "--", sys.executable, "-c", code),
                          env=costctl_env(tmp_path), cwd=REPO, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"ETrue\n" and proc.stderr == b""


def test_by_default_a_watch_whose_stdout_and_stderr_are_one_terminal_gives_the_job_a_pty(tmp_path):
    master, slave = os.openpty()
    code = "import os, sys; print(os.isatty(1), os.isatty(2)); sys.stderr.write('err\\n')"
    try:
        proc = subprocess.Popen(costctl_cmd("watch", "--quiet", "--no-status", "--on-exit", "leave", "--",
                                            sys.executable, "-c", code),
                                env=costctl_env(tmp_path), cwd=REPO, stdout=slave, stderr=slave,
                                stdin=subprocess.DEVNULL)
        os.close(slave)
        out = b""
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: costctl exited
                break
            if not data:
                break
            out += data
        assert proc.wait(60) == 0
    finally:
        os.close(master)
    assert b"True True" in out and b"err" in out
    log = next((tmp_path / "runs").glob("*.log")).read_bytes()
    assert log == b"True True\nerr\n"  # the job's own bytes: the watch's terminal adds its \r


def test_a_resize_reaches_the_jobs_pty_with_a_sigwinch(tmp_path):
    log = tmp_path / "run.log"
    mux = _Stamped()
    code = ("import os, signal, sys, time\n"
            "got = []\n"
            "signal.signal(signal.SIGWINCH, lambda *a: got.append(os.get_terminal_size(1)))\n"
            "print('ready', flush=True)\n"
            "deadline = time.time() + 20\n"
            "while not got and time.time() < deadline: time.sleep(0.01)\n"
            "print(got[0].lines, got[0].columns)\n")
    child = RelayChild(_py(code), mux, log_path=log, pty=True, winsize=(24, 80))  # type: ignore[arg-type]
    assert child.tty and child.tty.startswith("/dev/")
    while b"ready" not in mux.stream("stdout"):
        time.sleep(0.01)
    assert child.resize(40, 120)
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"ready\n40 120\n"
    assert not child.resize(1, 1)  # ended: nothing to resize


def test_a_job_on_pipes_has_nothing_to_resize(tmp_path):
    child = RelayChild(_py("pass"), _Stamped(), log_path=tmp_path / "run.log")  # type: ignore[arg-type]
    assert child.tty is None and not child.resize(40, 120)
    assert child.wait(30) == 0


def test_a_resize_of_the_watchs_terminal_reaches_the_job(tmp_path):
    import signal

    from costctl.relay.server import set_winsize

    master, slave = os.openpty()
    set_winsize(master, 24, 80)
    code = ("import os, signal, sys, time\n"
            "got = []\n"
            "signal.signal(signal.SIGWINCH, lambda *a: got.append(os.get_terminal_size(1)))\n"
            "print('ready', os.get_terminal_size(1).columns, flush=True)\n"
            "deadline = time.time() + 20\n"
            "while not got and time.time() < deadline: time.sleep(0.01)\n"
            "print('size', got[0].lines, got[0].columns, flush=True)\n")
    out = b""
    try:
        proc = subprocess.Popen(costctl_cmd("watch", "--quiet", "--no-status", "--on-exit", "leave", "--",
                                            sys.executable, "-c", code),
                                env=costctl_env(tmp_path), cwd=REPO, stdout=slave, stderr=slave,
                                stdin=subprocess.DEVNULL)
        os.close(slave)
        resized = False
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: costctl exited
                break
            if not data:
                break
            out += data
            if b"ready" in out and not resized:
                resized = True
                set_winsize(master, 50, 132)
                proc.send_signal(signal.SIGWINCH)  # what the kernel sends the terminal's foreground group
        assert proc.wait(60) == 0
    finally:
        os.close(master)
    assert b"ready 80" in out and b"size 50 132" in out, out


def test_without_ptys_the_relay_falls_back_to_pipes(tmp_path, monkeypatch):
    from costctl.relay import server

    def no_pty(winsize=None):
        raise OSError(2, "No such file or directory", "/dev/ptmx")

    monkeypatch.setattr(server, "open_job_pty", no_pty)
    log = tmp_path / "run.log"
    relay = server.Relay(_py("import os; os.write(1, b'%d\\n' % os.isatty(1))"), log_path=log,
                         state_path=tmp_path / "run.relay.json", sock_path=tmp_path / "r.sock", control=None, pty=True)
    assert relay.run() == 0
    assert log.read_bytes() == b"0\n" and relay.tty is None
