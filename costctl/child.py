"""The watched command's output on the watch's side, and the command's checks.

The job's pipes are owned by its relay process (:mod:`costctl.relay`), which writes the run
log; the watch gets the bytes from the relay and hands them to :class:`OutputMux`: each chunk
is written to costctl's own stdout/stderr byte for byte as the job wrote it (carriage returns,
ANSI colours and brackets untouched, no decoding on the terminal path) and handed, decoded, to
a callback that parses training progress. A terminal that went away (EIO) is written no more.
"""

from __future__ import annotations

import codecs
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from .errors import UsageError
from .i18n import _


#: ``on_text(stream_name, text)``: decoded text of one chunk ("stdout" or "stderr").
TextCallback = Callable[[str, str], None]


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``; a reader that went away (EPIPE) is ignored.

    Raises:
        OSError: another write error (EIO: the terminal went away).
    """
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
        on_terminal_gone: called once when a write to the terminal fails (EIO after a hangup):
            from then on nothing more is written there; the log and the parser go on.
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
        on_terminal_gone: Callable[[], None] | None = None,
    ) -> None:
        self._log = log_file
        self._on_gone = on_terminal_gone
        #: False once the terminal went away (a write failed, or the watch got SIGHUP).
        self.terminal = True
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
            if self.terminal:
                try:
                    if self._before:
                        self._before()
                    _write_all(self._fds[stream], data)
                    if self._after:
                        self._after(stream, data)
                except OSError:
                    self.terminal_gone()
            if self._log is not None:
                self._log.write(data)
                self._log.flush()
            self.bytes_seen[stream] += len(data)
        if self._on_text is not None:
            text = self._decoders[stream].decode(data)
            if text:
                self._on_text(stream, text)

    def terminal_gone(self) -> None:
        """Stop writing to the terminal (it went away); calls ``on_terminal_gone`` once."""
        if self.terminal:
            self.terminal = False
            if self._on_gone is not None:
                self._on_gone()

    def finish(self) -> None:
        """Flush the decoders (a trailing partial UTF-8 sequence becomes U+FFFD)."""
        if self._on_text is None:
            return
        for stream, dec in self._decoders.items():
            text = dec.decode(b"", final=True)
            if text:
                self._on_text(stream, text)


def check_command(argv: Sequence[str], cwd: Path | None = None) -> None:
    """Fail early, before anything is recorded, when ``argv[0]`` cannot be run.

    A name without a slash is looked up on ``$PATH`` (as ``execvp`` does); a path must exist
    and be executable.

    Raises:
        UsageError: exit status 127 (not found) or 126 (not executable), as shells use.
    """
    if not argv:
        raise UsageError(_("no command given after --"))
    name = argv[0]
    if "/" not in name:
        if shutil.which(name) is None:
            raise UsageError(_("command not found: {name}").format(name=name), exit_code=127)
        return
    path = Path(cwd or ".") / name if not os.path.isabs(name) else Path(name)
    if not path.exists():
        raise UsageError(_("command not found: {name}").format(name=name), exit_code=127)
    if path.is_dir() or not os.access(path, os.X_OK):
        raise UsageError(_("command is not executable: {name}").format(name=name), exit_code=126)


def exit_status(returncode: int) -> int:
    """Map ``Popen.returncode`` to a shell-style exit status (signal N → 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode
