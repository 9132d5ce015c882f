"""The watched child process: spawned in its own process group, its output passed through.

The child's stdout and stderr are drained concurrently by two threads (a full pipe would
otherwise deadlock the child). Each chunk is written to costctl's own stdout/stderr byte for
byte as the child wrote it (carriage returns, ANSI colours and brackets untouched, no decoding
on the terminal path), appended to the per-run log file, and handed, decoded, to a callback
that parses training progress.
"""

from __future__ import annotations

import codecs
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from .errors import UsageError

CHUNK_BYTES = 65536

#: ``on_text(stream_name, text)``: decoded text of one chunk ("stdout" or "stderr").
TextCallback = Callable[[str, str], None]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # pragma: no cover - non-blocking terminal
            time.sleep(0.001)
            continue
        except BrokenPipeError:
            return  # our reader went away; keep draining the child so it does not block
        view = view[written:]


class OutputMux:
    """Routes child output to the terminal, the run log and the progress parser.

    Args:
        log_file: binary file receiving both streams in arrival order (may be None).
        on_text: called with decoded text per chunk (UTF-8, undecodable bytes replaced).
        stdout_fd / stderr_fd: where the bytes go (costctl's own fds 1 and 2 by default).
        before_write / after_write: hooks (e.g. the status line clears itself before child
            bytes reach the terminal and redraws after a newline); ``after_write(stream, data)``.
        lock: shared with whoever else writes to the terminal (the status line), so costctl's
            own messages never land inside a chunk of the child's output.
    """

    def __init__(
        self,
        log_file: BinaryIO | None,
        on_text: TextCallback | None = None,
        *,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
        before_write: Callable[[], None] | None = None,
        after_write: Callable[[str, bytes], None] | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        self._log = log_file
        self._on_text = on_text
        self._fds = {"stdout": stdout_fd, "stderr": stderr_fd}
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in self._fds}
        self._lock = lock or threading.RLock()
        self._before = before_write
        self._after = after_write
        self.bytes_seen = {"stdout": 0, "stderr": 0}

    def write(self, stream: str, data: bytes) -> None:
        """Pass ``data`` (raw bytes from the child's ``stream``) through."""
        with self._lock:
            if self._before:
                self._before()
            _write_all(self._fds[stream], data)
            if self._after:
                self._after(stream, data)
            if self._log is not None:
                self._log.write(data)
                self._log.flush()
            self.bytes_seen[stream] += len(data)
        if self._on_text is not None:
            text = self._decoders[stream].decode(data)
            if text:
                self._on_text(stream, text)

    def finish(self) -> None:
        """Flush the decoders (a trailing partial UTF-8 sequence becomes U+FFFD)."""
        if self._on_text is None:
            return
        for stream, dec in self._decoders.items():
            text = dec.decode(b"", final=True)
            if text:
                self._on_text(stream, text)


class Child:
    """A command run in its own process group with both pipes drained by threads.

    Args:
        argv: the command and its arguments.
        mux: where output goes.
        env: extra environment variables (added to costctl's own environment).
        cwd: working directory.

    Raises:
        UsageError: (exit status 127) when the command does not exist or is not executable.
    """

    def __init__(
        self,
        argv: Sequence[str],
        mux: OutputMux,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        if not argv:
            raise UsageError("no command given after --")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.argv = list(argv)
        self._mux = mux
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL if not os.isatty(0) else None,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
                bufsize=0,
            )
        except FileNotFoundError:
            raise UsageError(f"command not found: {self.argv[0]}", exit_code=127) from None
        except PermissionError:
            raise UsageError(f"command is not executable: {self.argv[0]}", exit_code=126) from None
        except OSError as exc:
            raise UsageError(f"cannot run {self.argv[0]}: {exc.strerror}", exit_code=126) from None
        self.pid = self.proc.pid
        self.pgid = os.getpgid(self.pid)
        self._threads = [
            threading.Thread(target=self._pump, args=("stdout", self.proc.stdout), daemon=True, name="costctl-stdout"),
            threading.Thread(target=self._pump, args=("stderr", self.proc.stderr), daemon=True, name="costctl-stderr"),
        ]
        for t in self._threads:
            t.start()

    def _pump(self, stream: str, pipe: BinaryIO) -> None:
        fd = pipe.fileno()
        try:
            while True:
                try:
                    data = os.read(fd, CHUNK_BYTES)
                except OSError:
                    break
                if not data:
                    break
                self._mux.write(stream, data)
        finally:
            pipe.close()

    def poll(self) -> int | None:
        """The exit status if the child has exited, else None (shell convention: 128+N for signal N)."""
        rc = self.proc.poll()
        return None if rc is None else exit_status(rc)

    @property
    def running(self) -> bool:
        """True while the child process has not exited."""
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit and its output to be drained; return its exit status.

        Raises:
            subprocess.TimeoutExpired: if ``timeout`` (seconds) passes first.
        """
        rc = self.proc.wait(timeout)
        self.drain(timeout=5)
        return exit_status(rc)

    def drain(self, timeout: float = 5) -> None:
        """Wait (up to ``timeout`` seconds) for both pipes to reach EOF, then flush decoders."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._mux.finish()

    def send_signal(self, sig: int) -> bool:
        """Send ``sig`` to the child's whole process group; False if it is already gone."""
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def kill(self) -> int:
        """SIGKILL the whole process group at once (the root and every straggler), reap the
        root and drain its output (at most 2 s); returns the root's exit status (137 when the
        SIGKILL ended it, its own status when it had exited already). Never blocks on the child."""
        self.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.drain(timeout=2)
        return exit_status(self.proc.returncode)

    def terminate(self, grace_s: float, first_signal: int = signal.SIGTERM) -> int:
        """Signal the process group (SIGTERM by default), wait ``grace_s`` seconds, then SIGKILL.

        Returns:
            the child's exit status.
        """
        if self.proc.poll() is None:
            self.send_signal(first_signal)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.send_signal(signal.SIGKILL)
                self.proc.wait()
        # Reap stragglers of the group that ignored the first signal.
        self.send_signal(signal.SIGKILL)
        self.drain(timeout=2)
        return exit_status(self.proc.returncode)


def check_command(argv: Sequence[str], cwd: Path | None = None) -> None:
    """Fail early, before anything is recorded, when ``argv[0]`` cannot be run.

    A name without a slash is looked up on ``$PATH`` (as ``execvp`` does); a path must exist
    and be executable.

    Raises:
        UsageError: exit status 127 (not found) or 126 (not executable), as shells use.
    """
    if not argv:
        raise UsageError("no command given after --")
    name = argv[0]
    if "/" not in name:
        if shutil.which(name) is None:
            raise UsageError(f"command not found: {name}", exit_code=127)
        return
    path = Path(cwd or ".") / name if not os.path.isabs(name) else Path(name)
    if not path.exists():
        raise UsageError(f"command not found: {name}", exit_code=127)
    if path.is_dir() or not os.access(path, os.X_OK):
        raise UsageError(f"command is not executable: {name}", exit_code=126)


def exit_status(returncode: int) -> int:
    """Map ``Popen.returncode`` to a shell-style exit status (signal N → 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode
