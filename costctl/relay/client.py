"""The watch's side of the relay: :class:`RelayChild`, the job as the watch sees it.

It has the interface of :class:`costctl.child.Child` (pid, process group, poll, wait, signals,
kill, terminate), but the job is the relay's child: the watch starts the relay (in a session of
its own) and reads the job's output from the relay's socket, frame by frame, into the
:class:`~costctl.child.OutputMux` (terminal pass-through, progress parsing). The run log is
written by the relay, not here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from pathlib import Path

from ..child import OutputMux
from ..errors import UsageError
from ..i18n import _
from . import protocol as p
from .server import set_winsize


def shares_one_terminal(out_fd: int = 1, err_fd: int = 2) -> bool:
    """True when ``out_fd`` and ``err_fd`` are both the very same terminal (same device and
    inode, and a tty): the case where the job gets one pty for both streams by default."""
    try:
        if not (os.isatty(out_fd) and os.isatty(err_fd)):
            return False
        a, b = os.fstat(out_fd), os.fstat(err_fd)
    except OSError:
        return False
    return (a.st_rdev, a.st_ino, a.st_dev) == (b.st_rdev, b.st_ino, b.st_dev)


def terminal_size(fd: int = 1) -> tuple[int, int] | None:
    """``(rows, columns)`` of the terminal on ``fd``; None when it has none (or reports 0x0)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return (size.lines, size.columns) if size.lines and size.columns else None

#: Seconds to wait for the relay to say the job started.
START_TIMEOUT_S = 30.0
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = f"import sys; sys.path.insert(0, {_ROOT!r}); from costctl.relay.server import main; sys.exit(main())"


def costctl_argv(*args: str) -> list[str]:
    """argv running ``costctl ARGS`` with this interpreter and this copy of costctl."""
    boot = f"import sys; sys.path.insert(0, {_ROOT!r}); from costctl.cli.main import run; run()"
    return [sys.executable, "-c", boot, *args]


class _Foreign:
    """A relay this process did not start (``--attach``): the bits of ``Popen`` the watch uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not p._pid_running(self.pid):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["relay"], timeout or 0)
            time.sleep(0.05)
        return 0

    def kill(self) -> None:
        """Nothing: a relay this watch did not start is never killed by it."""


class RelayChild:
    """The job, started by a relay process and relayed to ``mux``.

    Args:
        argv: the command and its arguments.
        mux: where its output goes (its ``log_file`` should be None: the relay writes the log).
        log_path: the run log the relay appends to.
        start: the number of this start of the job in the run (names the socket).
        env: extra environment variables (added to costctl's own environment).
        cwd: working directory.
        on_error: called with an exception raised while handing output to ``mux`` (the output
            goes on being read); default: ignored.
        on_exit_argv: what the relay starts when the job ends with no watch attached (this
            watch died): ``costctl watch --attach RUN ...`` (:func:`costctl_argv`).
        pty: run the job on one pseudo-terminal for stdout and stderr (see
            :func:`costctl.relay.server.open_job_pty`): its output then reaches ``mux`` as one
            stream, "stdout", in the order written; False: two pipes.
        winsize: ``(rows, columns)`` for the pty (default: costctl's terminal on fd 1, if any).
        on_output: called (reader thread) with ``(stream, log offset, length)`` of each piece of
            output handed to ``mux``, after it: where those bytes are in the run log (the relay
            wrote them there first), so a parser can read them back at its own pace
            (:class:`costctl.watch.pump.ParsePump`); bytes the log could not take are there
            fewer (or not at all).

    Raises:
        UsageError: (exit status 127/126) when the command does not exist or cannot be run.
    """

    def __init__(self, argv: Sequence[str], mux: OutputMux, *, log_path: Path, start: int = 0,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 on_error: Callable[[BaseException], None] | None = None,
                 on_exit_argv: Sequence[str] | None = None, pty: bool = False,
                 winsize: tuple[int, int] | None = None,
                 on_output: Callable[[str, int, int], None] | None = None) -> None:
        if not argv:
            raise UsageError(_("no command given after --"))
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        log_path = Path(log_path)
        sock_path = p.socket_path(log_path, start)
        pty_args: list[str] = []
        if pty:
            size = winsize or terminal_size(1)
            pty_args = ["--pty", *(["--winsize", f"{size[0]},{size[1]}"] if size else [])]
        ours, theirs = socket.socketpair()
        err = open(log_path.with_suffix(".relay.err"), "ab")
        try:
            relay = subprocess.Popen(
                [sys.executable, "-c", _BOOT, "--log", str(log_path), "--state", str(p.state_path(log_path)),
                 "--socket", str(sock_path), "--control-fd", str(theirs.fileno()),
                 "--watch-pid", str(os.getpid()), *(["--cwd", str(cwd)] if cwd else []),
                 *(["--on-exit-argv", json.dumps(list(on_exit_argv))] if on_exit_argv else []), *pty_args,
                 "--", *argv],
                stdin=subprocess.DEVNULL if not os.isatty(0) else None, stdout=subprocess.DEVNULL,
                stderr=err, env=full_env, start_new_session=True, pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
            err.close()
        self._setup(argv, mux, log_path, sock_path, relay, ours, on_error, on_output)
        self.pty = pty
        self.pid, self.pgid = self._await_start(ours)
        self._start_reader()

    @classmethod
    def attach(cls, log_path: Path, mux: OutputMux, *, since: int,
               on_error: Callable[[BaseException], None] | None = None,
               on_output: Callable[[str, int, int], None] | None = None) -> RelayChild:
        """The job of a running relay (one whose watch died), followed from log offset ``since``.

        Raises:
            UsageError: the relay's state file or socket is gone, or it does not answer.
        """
        log_path = Path(log_path)
        state = p.read_state(p.state_path(log_path))
        if state is None or not state.get("socket") or not isinstance(state.get("relay_pid"), int):
            raise UsageError(_("the run's output relay is gone (no state file beside {path})").format(path=log_path))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(START_TIMEOUT_S)
            sock.connect(state["socket"])
            sock.sendall(p.OFFSET.pack(since))
        except OSError as exc:
            sock.close()
            raise UsageError(_("the run's output relay is gone ({socket}: {reason})").format(
                socket=state["socket"], reason=exc.strerror or exc)) from None
        self = cls.__new__(cls)
        self._setup(list(state.get("argv") or []), mux, log_path, Path(state["socket"]),
                    _Foreign(int(state["relay_pid"])), sock, on_error, on_output)
        self._next = since
        self.pid, self.pgid = self._await_start(sock)
        self._next = since  # the STARTED frame carries the log's end: replay from `since`
        self._start_reader()
        return self

    def _setup(self, argv: Sequence[str], mux: OutputMux, log_path: Path, sock_path: Path,
               relay: subprocess.Popen[bytes] | _Foreign, sock: socket.socket,
               on_error: Callable[[BaseException], None] | None,
               on_output: Callable[[str, int, int], None] | None = None) -> None:
        self.argv = list(argv)
        self._mux = mux
        self._on_error = on_error
        self._on_output = on_output
        self.log_path = log_path
        self.state_path = p.state_path(log_path)
        self.socket_path = sock_path
        self.relay = relay
        self._sock: socket.socket | None = sock
        self._next = 0  # the log offset of the next byte expected
        self._status: int | None = None
        #: ``time.monotonic()`` when this watch learnt of the job's exit (after all its output
        #: before it was handed on), None before
        self.exited_monotonic: float | None = None
        self._exited = threading.Event()
        self._eof = threading.Event()
        self._error_reported = False
        self.pty = False
        self.tty: str | None = None

    def _start_reader(self) -> None:
        self._thread = threading.Thread(target=self._read, daemon=True, name="costctl-relay")
        self._thread.start()

    # ----------------------------------------------------------------- reading
    def _await_start(self, sock: socket.socket) -> tuple[int, int]:
        sock.settimeout(START_TIMEOUT_S)
        try:
            frame = p.recv_frame(sock)
        except OSError:
            frame = None
        sock.settimeout(None)
        if frame is None and isinstance(self.relay, _Foreign):
            sock.close()
            raise UsageError(_("the run's output relay did not answer on {socket}").format(socket=self.socket_path))
        if frame is None:
            self.relay.kill()
            self.relay.wait()
            raise UsageError(_("cannot run {command}: the output relay did not start (see {path})").format(
                command=self.argv[0], path=self.log_path.with_suffix(".relay.err")), exit_code=126)
        kind, offset, payload = frame
        if kind == p.FAILED:
            info = json.loads(payload)
            sock.close()
            self.relay.wait()
            raise UsageError(f"{info['message']}: {self.argv[0]}", exit_code=int(info["code"]))
        info = json.loads(payload)
        self._next = offset
        self.tty = info.get("tty")
        self.pty = self.pty or bool(self.tty)
        return int(info["pid"]), int(info["pgid"])

    #: The most bytes of output frames, already received, handed to the mux in one write.
    MERGE_BYTES = 1 << 20

    def _read(self) -> None:
        """The reader thread: frames to the mux until the end; a lost connection re-attaches at
        the next offset; an exception in the mux is reported and the reading goes on. Output
        frames already received together are handed to the mux as one write per stream."""
        reader: p.FrameReader | None = None
        while not self._eof.is_set():
            sock = self._sock
            if sock is None:
                reader = None
            elif reader is None or reader.sock is not sock:
                reader = p.FrameReader(sock)
            try:
                frame = reader.next() if reader is not None else None
                frames = [frame] if frame is not None else []
                size = len(frame[2]) if frame is not None else 0
                while frames and size < self.MERGE_BYTES and reader is not None and reader.buffered():
                    more = reader.next()
                    if more is None:
                        break
                    frames.append(more)
                    size += len(more[2])
            except OSError:
                frames = []
            if not frames:
                if not self._reattach():
                    self._give_up()
                    break
                continue
            self._dispatch_all(frames)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _dispatch_all(self, frames: list[tuple[int, int, bytes]]) -> None:
        """Hand frames on in order, consecutive output of one stream as one mux write (then
        ``on_output`` with where each frame's bytes are in the run log)."""
        run: list[bytes] = []
        spans: list[tuple[int, int]] = []
        run_stream = ""
        for kind, offset, payload in frames:
            if kind in (p.STDOUT, p.STDERR, p.LOG):
                end = offset + len(payload)
                payload = self._new_output(offset, payload)
                if not payload:
                    continue
                stream = "stderr" if kind == p.STDERR else "stdout"
                if run and stream != run_stream:
                    self._hand_on(run_stream, run, spans)
                    run, spans = [], []
                run_stream = stream
                run.append(payload)
                spans.append((end - len(payload), len(payload)))
                continue
            if run:
                self._hand_on(run_stream, run, spans)
                run, spans = [], []
            self._guarded(self._dispatch, kind, offset, payload)
        if run:
            self._hand_on(run_stream, run, spans)

    def _hand_on(self, stream: str, run: list[bytes], spans: list[tuple[int, int]]) -> None:
        """One mux write of ``run``; then ``on_output`` for each of its frames' log spans."""
        self._guarded(self._mux.write, stream, run[0] if len(run) == 1 else b"".join(run))
        if self._on_output is not None:
            for offset, length in spans:
                self._guarded(self._on_output, stream, offset, length)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)``; an exception is reported once (``on_error``) and the reading goes on."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the output must go on being read
            if not self._error_reported and self._on_error is not None:
                self._error_reported = True
                try:
                    self._on_error(exc)
                except Exception:  # noqa: BLE001
                    pass

    def _new_output(self, offset: int, payload: bytes) -> bytes:
        """The part of an output frame not seen before (a re-attach replays from an offset)."""
        end = offset + len(payload)
        if end <= self._next:
            return b""
        if offset < self._next:
            payload = payload[self._next - offset:]
        self._next = end
        return payload

    def _dispatch(self, kind: int, offset: int, payload: bytes) -> None:
        if kind in (p.STDOUT, p.STDERR, p.LOG):
            end = offset + len(payload)
            payload = self._new_output(offset, payload)
            if payload:
                self._hand_on("stderr" if kind == p.STDERR else "stdout", [payload],
                              [(end - len(payload), len(payload))])
        elif kind == p.EXITED:
            self._status = int(json.loads(payload)["status"])
            self._mark_exited()
        elif kind == p.EOF:
            self._eof.set()
            self._mark_exited()

    def _mark_exited(self) -> None:
        if self.exited_monotonic is None:
            self.exited_monotonic = time.monotonic()
        self._exited.set()

    def _reattach(self) -> bool:
        """Connect again on the relay's socket and resume at the next offset; False when the
        relay is gone."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for _attempt in range(20):
            if self.relay.poll() is not None and not self.socket_path.exists():
                return False
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(str(self.socket_path))
                sock.sendall(p.OFFSET.pack(self._next))
                self._sock = sock
                return True
            except OSError:
                sock.close()
                time.sleep(0.1)
        return False

    def _give_up(self) -> None:
        """The relay is gone: the exit status from its state file (255 when it has none)."""
        state = p.read_state(self.state_path) or {}
        status = state.get("exit_status")
        if self._status is None:
            self._status = int(status) if isinstance(status, int) else 255
        self._mark_exited()
        self._eof.set()

    # ----------------------------------------------------------------- the Child interface
    def poll(self) -> int | None:
        """The exit status if the job has exited, else None (shell convention: 128+N for signal N)."""
        self.relay.poll()  # reap the relay once it ended
        return self._status if self._exited.is_set() else None

    @property
    def running(self) -> bool:
        """True while the job's root process has not exited."""
        return not self._exited.is_set()

    def wait_exit(self, timeout: float | None = None) -> bool:
        """Block until the job's root process exited (or the relay is gone), at most
        ``timeout`` seconds (None: no limit); True once it has. Nothing is reaped or drained
        (the watch's main loop sleeps on it; :meth:`wait` reaps)."""
        return self._exited.wait(timeout)

    def wait(self, timeout: float | None = None, *, end_wait_s: float = 5 + 1) -> int:
        """Wait for the job to exit and its output to be relayed; return its exit status.

        The exit is seen once everything the job wrote before it was handed on (the relay sends
        the exit after that output). ``end_wait_s``: seconds to wait after that for the end of
        the output — what processes the job left behind still write while they hold its
        output (the relay reads them until :data:`~.server.DRAIN_S` after the exit; they stay
        in the run log); :attr:`output_ended` says whether the end came.

        Raises:
            subprocess.TimeoutExpired: if ``timeout`` (seconds) passes first.
        """
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.argv, timeout or 0)
        self.drain(timeout=end_wait_s)
        return self._status if self._status is not None else 255

    @property
    def output_ended(self) -> bool:
        """True once the relay's end of output came (no process of the job holds its output)."""
        return self._eof.is_set()

    def drain(self, timeout: float = 5) -> None:
        """Wait (up to ``timeout`` seconds) for the relay's end of output, then flush decoders."""
        self._eof.wait(timeout)
        self._thread.join(max(0.0, 1.0 if self._eof.is_set() else 0.0))
        try:
            self.relay.wait(1.0 if self._eof.is_set() else 0.01)
        except subprocess.TimeoutExpired:
            pass
        self._mux.finish()

    def resize(self, rows: int, cols: int) -> bool:
        """Give the job's pty a new window size and SIGWINCH its process group (the pty is not
        its controlling terminal, so the kernel does not); False without a pty or when it is gone."""
        if not self.tty or self._exited.is_set():
            return False
        try:
            fd = os.open(self.tty, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            set_winsize(fd, rows, cols)
        except OSError:
            return False
        finally:
            os.close(fd)
        return self.send_signal(signal.SIGWINCH)

    def send_signal(self, sig: int) -> bool:
        """Send ``sig`` to the job's whole process group; False if it is already gone."""
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def kill(self) -> int:
        """SIGKILL the job's whole process group at once and wait (at most 10 s) for the relay
        to report its exit, then drain its output (at most 2 s); returns its exit status (137
        when the SIGKILL ended it)."""
        self.send_signal(signal.SIGKILL)
        self._exited.wait(10)
        self.drain(timeout=2)
        return self._status if self._status is not None else 137

    def terminate(self, grace_s: float, first_signal: int = signal.SIGTERM) -> int:
        """Signal the process group (SIGTERM by default), wait ``grace_s`` seconds, then SIGKILL.

        Returns:
            the job's exit status.
        """
        if not self._exited.is_set():
            self.send_signal(first_signal)
            if not self._exited.wait(grace_s):
                self.send_signal(signal.SIGKILL)
                self._exited.wait(10)
        self.send_signal(signal.SIGKILL)  # stragglers of the group
        self.drain(timeout=2)
        return self._status if self._status is not None else 137
