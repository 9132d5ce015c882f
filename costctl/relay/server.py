"""The relay process: starts the job, owns its stdout/stderr pipes, writes the run log, serves
watches (see :mod:`costctl.relay`).

The job's output is two pipes (stdout, stderr) or, with ``pty=True``, one pseudo-terminal for
both (see :func:`open_job_pty`): its bytes are then one stream, relayed as stdout frames.

One thread, one ``selectors`` loop, bytes only: nothing the job writes is decoded or parsed, so
nothing it writes can end the relay. Reading the job never waits on a watch, and a watch never
misses a byte: each watch has a cursor (the log offset of the next byte it gets). While it keeps
up, the job's output is queued for it as it is read (at most :data:`CLIENT_MAX_BYTES` queued);
a watch further behind gets the rest from the run log (the source of truth), piece by piece
(:data:`REPLAY_BYTES`) as its socket takes them, on the stream each byte was written to
(:class:`_Streams`), until it has caught up. The job's exit and the end of output reach a watch
after all the output before them.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import json
import os
import pty
import selectors
import signal
import socket
import subprocess
import struct
import sys
import termios
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..i18n import _
from . import protocol as p

#: The most bytes read from the job's pipe at once (the pipes are enlarged to it where Linux lets).
CHUNK_BYTES = 1 << 20
#: The size of the relay's reused first-read buffer (:func:`read_chunk`).
SMALL_READ_BYTES = 1 << 16
#: The most bytes queued for one watch; output read while a watch has more queued is not queued
#: for it: it gets it from the run log once its socket took what was queued (it never misses any).
CLIENT_MAX_BYTES = 4 << 20
#: A watch behind the job is given the log from its cursor in pieces of this size, whenever it
#: has less than this queued.
REPLAY_BYTES = 1 << 20
#: The most stream changes remembered (:class:`_Streams`); older output replayed from the log
#: goes out as :data:`~.protocol.LOG` frames (stream unknown).
MAX_STREAM_RUNS = 1 << 20
#: Seconds the relay lets output gather in the job's (enlarged) pipes after a read, so that a
#: job writing in small pieces is read in few large ones (the job does not wait: at this pace a
#: 1 MiB pipe takes 200 MB/s; a read of half the pipe or more is followed at once by the next).
GATHER_S = 0.005

#: Seconds: after a select that slept at least this long for the job's output, the relay does
#: not pause to gather more (the output is sparse: nothing gathers in 5 ms).
GATHER_AFTER_WAIT_S = 0.05
#: The stream "kind" of run-log bytes another process appended (:meth:`Relay._skip_foreign`):
#: never relayed (not a frame kind of :mod:`.protocol`).
SKIP = 0
#: Linux's ``fcntl`` command to set a pipe's capacity (``F_SETPIPE_SZ``).
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: Seconds the pipes are still read after the job's root exited (stragglers holding them).
DRAIN_S = 5.0
#: Seconds the relay waits, after the end, for attached watches to take the last frames.
LINGER_S = 10.0
#: Seconds the relay waits, after the end, for the on-exit watch it started to attach and finish.
ON_EXIT_WAIT_S = 300.0
#: Seconds between two looks at a child process's exit where the kernel has no pidfd (Linux
#: before 5.3); with one, the relay's loop sleeps until an fd is ready (output, a watch, the
#: job's exit) and never wakes otherwise.
NO_PIDFD_POLL_S = 0.5


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exited: the relay's loop sleeps on it), or None
    where the kernel or the platform has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def open_job_pty(winsize: tuple[int, int] | None = None) -> tuple[int, int]:
    """A pseudo-terminal for the job's stdout and stderr; returns ``(master_fd, slave_fd)``.

    Output post-processing (``OPOST``, so ``ONLCR``'s ``\\n`` -> ``\\r\\n``) is turned off on the
    slave: the bytes read from the master, and so the run log, are exactly the bytes the job
    wrote; the watch's own terminal translates them as it would the job's own writes. The job
    still sees a terminal (``isatty``: C stdio and perl line-buffer, progress bars draw).

    Args:
        winsize: ``(rows, columns)`` of the watch's terminal, given to the pty (None: the
            kernel's default 0x0).
    """
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # oflag
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    if winsize is not None:
        set_winsize(master, *winsize)
    return master, slave


def set_winsize(fd: int, rows: int, cols: int) -> None:
    """Set the window size (``TIOCSWINSZ``) of the pty behind ``fd`` (master or slave)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def read_chunk(fd: int, small: memoryview, limit: int = CHUNK_BYTES) -> bytes:
    """Up to ``limit`` bytes of the job's output from ``fd`` (b"": its end), read first into
    the reused buffer ``small``: a line now and then costs one small copy, not the map and
    unmap of a ``limit``-sized buffer per read (``os.read``); a full ``small`` (a flood) is
    followed by one read of up to the rest. Raises ``OSError`` (``BlockingIOError``: nothing
    to read) as ``os.read`` when the first read does."""
    n = os.readv(fd, [small])
    if n < len(small):
        return bytes(small[:n])
    head = bytes(small)
    try:
        rest = os.read(fd, limit - n)
    except OSError:  # nothing more now (EAGAIN), or EIO: the head now, the next read says it
        return head
    return head + rest if rest else head


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _enlarge_pipe(fd: int, size: int = CHUNK_BYTES) -> int:
    """Give the pipe behind ``fd`` a capacity of ``size`` bytes where the kernel allows (Linux
    ``F_SETPIPE_SZ``, up to ``/proc/sys/fs/pipe-max-size``): the job can write that much before
    it waits for the relay, and the relay reads it in one call. Returns the pipe's capacity in
    bytes (0: unknown, not Linux or not allowed)."""
    try:
        return int(fcntl.fcntl(fd, F_SETPIPE_SZ, size))
    except OSError:
        return 0


class _Streams:
    """Which stream each byte of the log came from: the offsets where the stream changed.

    Two flat arrays (8 + 1 bytes per change), at most :data:`MAX_STREAM_RUNS` changes (the
    oldest are forgotten; bytes before the first remembered change are :data:`~.protocol.LOG`).
    """

    def __init__(self) -> None:
        self.starts = array("q")
        self.kinds = bytearray()

    def add(self, offset: int, kind: int) -> None:
        """Output of ``kind`` starts at ``offset`` (no entry when the stream did not change)."""
        if self.kinds and self.kinds[-1] == kind:
            return
        if len(self.kinds) >= MAX_STREAM_RUNS:
            del self.starts[: MAX_STREAM_RUNS // 2]
            del self.kinds[: MAX_STREAM_RUNS // 2]
        self.starts.append(offset)
        self.kinds.append(kind)

    def at(self, offset: int) -> tuple[int, int | None]:
        """``(kind, end)``: the stream of the byte at ``offset`` and where its run ends (None:
        it runs on to the log's end)."""
        i = bisect.bisect_right(self.starts, offset) - 1
        end = self.starts[i + 1] if i + 1 < len(self.starts) else None
        return (self.kinds[i] if i >= 0 else p.LOG), end


class _Client:
    """One attached watch: its socket, the bytes queued for it, and its cursor in the log."""

    def __init__(self, sock: socket.socket, *, attached: bool, cursor: int = 0) -> None:
        self.sock = sock
        self.out = bytearray()
        self.attached = attached  # False until it sent the offset to resume from
        self.inbuf = b""
        #: the log offset of the next output byte to queue for it (everything before is queued)
        self.cursor = cursor
        #: control frames (exit, end) waiting until its cursor reaches their offset
        self.pending: list[tuple[int, bytes]] = []
        self.sent_to: int | None = None  # the log offset after the last output queued for it
        #: the selector events it is registered for (modified only when they change: one
        #: ``epoll_ctl`` fewer per line relayed)
        self.events = selectors.EVENT_READ


class Relay:
    """The relay of one start of the job.

    Args:
        argv: the job's command.
        log_path: the run log (appended to; offsets are the log's absolute offsets).
        state_path: the state file.
        sock_path: the socket re-attaching watches connect to.
        control: the first watch's connection (inherited), or None.
        cwd: the job's working directory.
        pty: give the job one pseudo-terminal for stdout and stderr (its output is then one
            stream, relayed as stdout); stdin is inherited either way.
        winsize: ``(rows, columns)`` for the pty.
    """

    def __init__(self, argv: Sequence[str], *, log_path: Path, state_path: Path, sock_path: Path,
                 control: socket.socket | None, cwd: str | None = None, watch_pid: int | None = None,
                 pty: bool = False, winsize: tuple[int, int] | None = None,
                 on_exit_argv: list[str] | None = None) -> None:
        self.argv = list(argv)
        self.pty, self.winsize = pty, winsize
        self.tty: str | None = None  # the job's pty (slave) path, once started
        self.log_path, self.state_path, self.sock_path = log_path, state_path, sock_path
        self.cwd = cwd
        self.sel = selectors.DefaultSelector()
        self.log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.offset = os.fstat(self.log_fd).st_size
        self.read_fd = os.open(log_path, os.O_RDONLY)
        self.streams = _Streams()
        self._small = memoryview(bytearray(SMALL_READ_BYTES))  # the first read of each turn (read_chunk)
        self.last_progress = time.monotonic()  # when a watch last took bytes (the linger waits on it)
        self.clients: list[_Client] = []
        self.state: dict[str, Any] = {
            "version": 1, "run_id": os.environ.get("COSTCTL_RUN_ID"),
            "relay_pid": os.getpid(), "job_pid": None, "job_pgid": None,
            "argv": self.argv, "log": str(log_path), "socket": str(sock_path), "watch_pid": watch_pid,
            "started_at": time.time(), "exit_status": None, "ended": False, "log_bytes": None,
            "watch_offset": None, "on_exit_argv": on_exit_argv, "on_exit_pid": None,
        }
        self.log_error: str | None = None
        if control is not None:
            control.setblocking(False)
            self._add_client(_Client(control, attached=True, cursor=self.offset))
        try:
            sock_path.unlink()
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(sock_path))
        self.listener.listen(8)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")

    # ----------------------------------------------------------------- clients
    def _add_client(self, client: _Client) -> None:
        self.clients.append(client)
        self.sel.register(client.sock, selectors.EVENT_READ, client)

    def _drop(self, client: _Client) -> None:
        if client in self.clients:
            self.clients.remove(client)
            try:
                self.sel.unregister(client.sock)
            except (KeyError, ValueError):
                pass
            client.sock.close()
            if client.sent_to is not None:  # where a watch that died stopped: --attach resumes there
                self.state["watch_offset"] = client.sent_to
                self._write_state()

    def _flush(self, client: _Client) -> None:
        """Send what the socket takes; whenever less than :data:`REPLAY_BYTES` is queued and the
        watch is behind, queue the next piece from the log first."""
        try:
            while True:
                if len(client.out) < REPLAY_BYTES and (client.cursor < self.offset or client.pending):
                    self._refill(client)
                if not client.out:
                    break
                sent = client.sock.send(client.out)
                del client.out[:sent]
                self.last_progress = time.monotonic()
        except BlockingIOError:
            pass
        except OSError:
            self._drop(client)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.out else 0)
        if events == client.events:
            return
        try:
            self.sel.modify(client.sock, events, client)
            client.events = events
        except (KeyError, ValueError):
            pass

    def _refill(self, client: _Client) -> None:
        """Queue for a watch that is behind the next piece of output from the log (on its
        stream), then the control frames its cursor has reached."""
        if client.cursor < self.offset:
            kind, end = self.streams.at(client.cursor)
            if kind == SKIP:  # not the job's output (see _skip_foreign)
                client.cursor = client.sent_to = end if end is not None else self.offset
                return self._refill(client)
            end = min(self.offset, client.cursor + REPLAY_BYTES, end if end is not None else self.offset)
            try:
                data = os.pread(self.read_fd, end - client.cursor, client.cursor)
            except OSError:
                data = b""
            if data:
                client.out += p.encode(kind, client.cursor, data)
                client.cursor += len(data)
            else:  # not in the log (it could not be written): the watch skips to what can be sent
                client.cursor = self.offset
            client.sent_to = client.cursor
        while client.pending and client.pending[0][0] <= client.cursor:
            client.out += client.pending.pop(0)[1]

    def _queue_control(self, client: _Client, frame: bytes) -> None:
        """A control frame (exit, end, ...) for one watch, after all output before it."""
        if client.cursor >= self.offset and not client.pending:
            client.out += frame
        else:
            client.pending.append((self.offset, frame))

    def _accept(self) -> None:
        """A watch connects to the socket (it then sends the log offset it wants from)."""
        try:
            conn, _addr = self.listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self._add_client(_Client(conn, attached=False))

    def _broadcast(self, frame: bytes) -> None:
        """A control frame to every attached watch (after the output it has not had yet)."""
        for client in list(self.clients):
            if client.attached:
                self._queue_control(client, frame)
                self._flush(client)

    def _greet(self, client: _Client, since: int) -> None:
        """A watch attached at log offset ``since``: the job's pid, then everything from
        ``since`` on (from the log, as its socket takes it), then the exit and end if over."""
        if self.state["job_pid"] is not None:
            client.out += p.encode_json(p.STARTED, self.offset, self._started_info())
        client.cursor = min(max(0, since), self.offset)
        client.sent_to = client.cursor
        if self.state["exit_status"] is not None:
            self._queue_control(client, p.encode_json(p.EXITED, self.offset, {"status": self.state["exit_status"]}))
        if self.state["ended"]:
            self._queue_control(client, p.encode(p.EOF, self.offset))
        self._flush(client)

    def _on_client(self, client: _Client, events: int) -> None:
        if events & selectors.EVENT_READ:
            try:
                data = client.sock.recv(4096)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._drop(client)
                return
            if data and not client.attached:
                client.inbuf += data
                if len(client.inbuf) >= p.OFFSET.size:
                    (since,) = p.OFFSET.unpack(client.inbuf[:p.OFFSET.size])
                    client.attached = True
                    self._greet(client, since)
                    return
        if events & selectors.EVENT_WRITE and client in self.clients:
            self._flush(client)

    # ----------------------------------------------------------------- the job
    def _started_info(self) -> dict[str, Any]:
        """The started frame's payload: the job's pid and group, and its pty's path if it has one."""
        info: dict[str, Any] = {"pid": self.state["job_pid"], "pgid": self.state["job_pgid"]}
        if self.tty is not None:
            info["tty"] = self.tty
        return info

    def _write_state(self) -> None:
        try:
            p.write_state(self.state_path, self.state)
        except OSError as exc:
            print(_("costctl relay: cannot write {path}: {error}").format(path=self.state_path, error=exc), file=sys.stderr)

    def _skip_foreign(self) -> None:
        """Bytes another process appended to the run log since the relay's last write (the
        watch's before_stop hook output): not the job's output, so never relayed as it; the
        relay's offsets follow the file (they are the log's own, which the watch's parser reads
        back), and a watch at the old end skips them."""
        try:
            size = os.fstat(self.log_fd).st_size
        except OSError:
            return
        if size <= self.offset:
            return
        old = self.offset
        self.streams.add(old, SKIP)
        self.offset = size
        for client in self.clients:
            if client.attached and client.cursor == old and not client.pending:
                client.cursor = client.sent_to = size

    def _on_output(self, kind: int, data: bytes) -> None:
        self._skip_foreign()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.log_fd, view):]
            except OSError as exc:  # disk full: keep reading the job, say it once
                if self.log_error is None:
                    self.log_error = str(exc)
                    print(_("costctl relay: cannot write the run log {path}: {error}").format(path=self.log_path, error=exc),
                          file=sys.stderr)
                break
        off = self.offset
        self.streams.add(off, kind)
        self.offset += len(data)
        frame: bytes | None = None
        for client in list(self.clients):
            if not client.attached:
                continue
            if client.cursor == off and not client.pending and len(client.out) + len(data) <= CLIENT_MAX_BYTES:
                if frame is None:
                    frame = p.encode(kind, off, data)
                client.out += frame
                client.cursor = client.sent_to = self.offset
            # else: it is behind; _flush gives it the log from its cursor as its socket drains
            self._flush(client)

    def run(self) -> int:
        """Start the job and relay until it ended and the watches took everything; returns the
        job's exit status (126/127 when it could not be started)."""
        master: int | None = None
        slave: int | None = None
        if self.pty:
            try:
                master, slave = open_job_pty(self.winsize)
            except OSError as exc:  # no ptys here (a container without /dev/pts): pipes, as by default
                print(_("costctl relay: no pty for the job ({error}); using pipes").format(error=exc), file=sys.stderr)
        try:
            if master is not None:
                proc = subprocess.Popen(self.argv, stdout=slave, stderr=slave,
                                        start_new_session=True, bufsize=0, cwd=self.cwd)
            else:
                proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        start_new_session=True, bufsize=0, cwd=self.cwd)
        except OSError as exc:
            for fd in (master, slave):
                if fd is not None:
                    os.close(fd)
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            if code == 127:
                what = _("command not found")
            elif isinstance(exc, PermissionError):
                what = _("command is not executable")
            else:
                what = _("cannot run ({reason})").format(reason=exc.strerror)
            self.state.update(exit_status=code, ended=True, error=what)
            self._write_state()
            self._broadcast(p.encode_json(p.FAILED, self.offset, {"code": code, "message": what}))
            self._linger()
            return code
        self.state.update(job_pid=proc.pid, job_pgid=proc.pid)
        self._write_state()
        if slave is not None:
            try:
                self.tty = os.ttyname(slave)
            except OSError:
                pass
        self._broadcast(p.encode_json(p.STARTED, self.offset, self._started_info()))
        if slave is not None:
            os.close(slave)  # the job holds it now: the master reads EIO once all of its holders closed it
        if master is not None:
            pipes = {master: p.STDOUT}
        else:
            pipes = {proc.stdout.fileno(): p.STDOUT, proc.stderr.fileno(): p.STDERR}  # type: ignore[union-attr]
        gather = master is None
        for fd, kind in pipes.items():
            if master is None:
                gather = _enlarge_pipe(fd) >= CHUNK_BYTES and gather
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, kind)
        exit_fd = _pidfd(proc.pid)
        if exit_fd is not None:
            self.sel.register(exit_fd, selectors.EVENT_READ, "exit")
        drain_until: float | None = None
        read_most = 0  # the largest read of the last turn (bytes)
        waited = 0.0  # how long the last turn's select slept (seconds)
        while pipes:
            # Let the job's output gather in its pipe (fewer, larger reads), unless the last
            # turn had slept long for it: a job printing now and then is read at once, with
            # no pause (and no extra wake-up) per line.
            if gather and 0 < read_most < CHUNK_BYTES // 2 and waited < GATHER_AFTER_WAIT_S:
                time.sleep(GATHER_S)
            read_most = 0
            if drain_until is not None:
                timeout: float | None = max(0.0, drain_until - time.monotonic())
            else:
                timeout = None if exit_fd is not None else NO_PIDFD_POLL_S
            before = time.monotonic()
            ready = self.sel.select(timeout)
            waited = time.monotonic() - before
            for key, events in ready:
                if key.data == "listen":
                    self._accept()
                elif key.data == "exit":  # the job's root exited: seen below
                    self.sel.unregister(exit_fd)
                    os.close(exit_fd)  # type: ignore[arg-type]
                    exit_fd = None
                elif isinstance(key.data, _Client):
                    self._on_client(key.data, events)
                else:
                    fd = key.fd
                    try:
                        data = read_chunk(fd, self._small)
                    except BlockingIOError:
                        continue
                    except OSError as exc:  # EIO on a pty master: every holder of the slave closed it
                        if exc.errno != errno.EIO:
                            print(_("costctl relay: reading the job's output: {error}").format(error=exc), file=sys.stderr)
                        data = b""
                    if data:
                        read_most = max(read_most, len(data))
                        self._on_output(key.data, data)
                    else:
                        self.sel.unregister(fd)
                        del pipes[fd]
            if drain_until is None:
                rc = proc.poll()
                if rc is not None:
                    self.state.update(exit_status=_exit_status(rc), log_bytes=self.offset)
                    self._write_state()
                    self._broadcast(p.encode_json(p.EXITED, self.offset, {"status": self.state["exit_status"]}))
                    drain_until = time.monotonic() + DRAIN_S
            elif time.monotonic() >= drain_until:
                break
        for fd in list(pipes):
            self.sel.unregister(fd)
        if exit_fd is not None:
            self.sel.unregister(exit_fd)
            os.close(exit_fd)
        if master is not None:
            os.close(master)
        else:
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
        rc = proc.wait()
        if self.state["exit_status"] is None:
            self.state["exit_status"] = _exit_status(rc)
            self._broadcast(p.encode_json(p.EXITED, self.offset, {"status": self.state["exit_status"]}))
        self.state.update(ended=True, log_bytes=self.offset)
        self._write_state()
        self._broadcast(p.encode(p.EOF, self.offset))
        self._linger(self._start_on_exit_watch())
        return int(self.state["exit_status"])

    def _start_on_exit_watch(self) -> subprocess.Popen[bytes] | None:
        """The job ended and no watch is attached (it died): start ``on_exit_argv`` (``costctl
        watch --attach RUN`` with the dead watch's ``--on-exit`` and config), detached, its output
        to ``<stem>.on-exit.out``, so the run is closed and the instance guarded or stopped as
        configured. None when a watch is attached or there is nothing to start."""
        argv = self.state.get("on_exit_argv")
        if not argv or any(c.attached for c in self.clients):
            return None
        try:
            with open(self.log_path.with_suffix(".on-exit.out"), "ab") as out:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                        start_new_session=True, cwd=self.cwd)
        except OSError as exc:
            print(_("costctl relay: cannot start the on-exit watch {argv!r}: {error}").format(argv=argv, error=exc),
                  file=sys.stderr)
            return None
        self.state["on_exit_pid"] = proc.pid
        self._write_state()
        return proc

    def _linger(self, on_exit: subprocess.Popen[bytes] | None = None) -> None:
        """Serve the attached watches until they took everything and hung up (at most
        :data:`LINGER_S`), and the on-exit watch ``on_exit`` until it exited (at most
        :data:`ON_EXIT_WAIT_S`), then remove the socket."""
        start = time.monotonic()
        exit_fd = _pidfd(on_exit.pid) if on_exit is not None else None
        if exit_fd is not None:
            self.sel.register(exit_fd, selectors.EVENT_READ, "exit")

        def until() -> float:
            # a watch still taking its output (a slow terminal) is waited for as long as it takes some
            deadline = max(start, self.last_progress) + LINGER_S
            return max(deadline, start + (ON_EXIT_WAIT_S if on_exit else 0))

        def waiting() -> bool:
            now = time.monotonic()
            if on_exit is not None and on_exit.poll() is None and now < start + ON_EXIT_WAIT_S:
                return True
            return bool(self.clients) and now < until()

        while waiting():
            timeout = max(0.0, until() - time.monotonic())
            if on_exit is not None and exit_fd is None:
                timeout = min(timeout, NO_PIDFD_POLL_S)
            for key, events in self.sel.select(timeout):
                if isinstance(key.data, _Client):
                    self._on_client(key.data, events)
                elif key.data == "listen":
                    self._accept()
                elif key.data == "exit":  # the on-exit watch ended: waiting() sees it
                    self.sel.unregister(exit_fd)
                    os.close(exit_fd)  # type: ignore[arg-type]
                    exit_fd = None
        if exit_fd is not None:
            self.sel.unregister(exit_fd)
            os.close(exit_fd)
        self.listener.close()
        try:
            self.sock_path.unlink()
        except OSError:
            pass
        os.close(self.log_fd)
        os.close(self.read_fd)


def _ignore(signum: int, frame: Any) -> None:
    """A signal that must not end the relay."""


def _parse_winsize(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    rows, cols = (int(x) for x in text.split(","))
    return rows, cols


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costctl.relay --log L --state S --socket P [--control-fd N] [--watch-pid N]
    [--pty [--winsize ROWS,COLS]] -- CMD...``"""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m costctl.relay")
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--watch-pid", type=int)
    parser.add_argument("--cwd")
    parser.add_argument("--pty", action="store_true")
    parser.add_argument("--winsize", help=_("ROWS,COLS of the pty"))
    parser.add_argument("--on-exit-argv", type=json.loads, default=None,
                        help=_("JSON argv started when the job ends with no watch attached"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    # Nothing sent to the watch's terminal or process group may end the relay. A handler, not
    # SIG_IGN: an ignored signal would stay ignored in the job across exec, a handler does not.
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _ignore)
    control = socket.socket(fileno=args.control_fd) if args.control_fd is not None else None
    relay = Relay(command, log_path=args.log, state_path=args.state, sock_path=args.socket,
                  control=control, cwd=args.cwd, watch_pid=args.watch_pid, pty=args.pty,
                  winsize=_parse_winsize(args.winsize), on_exit_argv=args.on_exit_argv)
    return relay.run()
