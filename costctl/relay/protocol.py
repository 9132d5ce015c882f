"""The relay's wire format and state file (shared by the relay process and the watch).

Frames, relay → watch, on a Unix stream socket: a 13-byte header ``>BQI`` — the frame's kind
(1 byte), a log offset (8 bytes: where the payload starts in the run log for output frames; the
log's length at that moment for the others), the payload's length in bytes (4 bytes) — then the
payload. A watch that connects on the socket path sends one ``>Q`` (8 bytes): the log offset to
resume from; the relay then replays what it still holds from there and goes on live. The watch
that started the relay gets its first connection as an inherited socket and sends nothing.

The state file (JSON, replaced atomically) beside the run log says, for someone whose watch
died: the ledger run (``$COSTCTL_RUN_ID`` of the job), the relay's and the job's pids, the
job's process group, the socket, the watch that started it, and at the end the job's exit
status (``exit_status``), ``ended`` once its output was all read and the run log's length
(``log_bytes``). ``watch_offset`` is the log offset up to which output was sent to a watch that
hung up (``costctl watch --attach`` resumes there, so no output is parsed twice as progress).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import tempfile
from pathlib import Path
from typing import Any

HEADER = struct.Struct(">BQI")
OFFSET = struct.Struct(">Q")

#: Output of the job's stdout / stderr (payload: the bytes as the job wrote them).
STDOUT = 1
STDERR = 2
#: Output replayed from the run log for a re-attaching watch, whose stream is not known any more.
LOG = 3
#: The job started (payload: JSON ``{"pid": int, "pgid": int}``).
STARTED = 4
#: The job's root process exited (payload: JSON ``{"status": int}``, shell convention 128+N).
EXITED = 5
#: Both pipes reached EOF (or the drain time after the exit ran out): nothing more will come.
EOF = 6
#: The job could not be started (payload: JSON ``{"code": 126|127, "message": str}``).
FAILED = 7

#: Longest Unix socket path used in the run dir (the kernel's limit is 108 bytes with the NUL).
MAX_SOCKET_PATH = 100


def encode(kind: int, offset: int, payload: bytes = b"") -> bytes:
    """One frame (header + payload)."""
    return HEADER.pack(kind, offset, len(payload)) + payload


def encode_json(kind: int, offset: int, value: dict[str, Any]) -> bytes:
    """One frame whose payload is ``value`` as JSON."""
    return encode(kind, offset, json.dumps(value).encode())


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> tuple[int, int, bytes] | None:
    """Read one frame (blocking): ``(kind, offset, payload)``; None at EOF.

    Raises:
        OSError: the connection failed.
    """
    head = _recv_exact(sock, HEADER.size)
    if head is None:
        return None
    kind, offset, length = HEADER.unpack(head)
    payload = _recv_exact(sock, length) if length else b""
    if payload is None:
        return None
    return kind, offset, payload


class FrameReader:
    """Frames from a socket, read in large pieces (one ``recv`` of up to ``bufsize`` bytes
    serves many frames: few system calls, and so few waits for the GIL, per megabyte).

    The piece asked for adapts: :data:`SMALL_RECV` bytes while the output is sparse (each
    ``recv`` allocates what it asks for: 1 MiB per line of a job printing once a second cost
    more than the line), ``bufsize`` once a ``recv`` came back full, and small again once one
    came back with less than :data:`SMALL_RECV`.

    Args:
        sock: a blocking socket.
        bufsize: the most bytes asked of one ``recv``.
    """

    #: Bytes asked of one ``recv`` while the output is sparse.
    SMALL_RECV = 1 << 16

    def __init__(self, sock: socket.socket, bufsize: int = 1 << 20) -> None:
        self.sock = sock
        self.bufsize = bufsize
        self._ask = min(self.SMALL_RECV, bufsize)
        self._buf = bytearray()
        self._pos = 0

    def _fill(self, n: int) -> bool:
        """Have at least ``n`` unread bytes buffered; False at EOF first."""
        while len(self._buf) - self._pos < n:
            if self._pos:
                del self._buf[:self._pos]
                self._pos = 0
            ask = max(self._ask, n - len(self._buf))
            chunk = self.sock.recv(ask)
            if not chunk:
                return False
            got = len(chunk)
            if got >= ask:
                self._ask = self.bufsize  # a flood: large pieces
            elif got < self.SMALL_RECV:
                self._ask = min(self.SMALL_RECV, self.bufsize)
            self._buf += chunk
        return True

    def buffered(self) -> bool:
        """A whole frame is buffered (:meth:`next` returns it without reading the socket)."""
        avail = len(self._buf) - self._pos
        if avail < HEADER.size:
            return False
        return avail >= HEADER.size + HEADER.unpack_from(self._buf, self._pos)[2]

    def next(self) -> tuple[int, int, bytes] | None:
        """The next frame (blocking): ``(kind, offset, payload)``; None at EOF (a frame cut
        short by the end of the connection is not returned).

        Raises:
            OSError: the connection failed.
        """
        if not self._fill(HEADER.size):
            return None
        kind, offset, length = HEADER.unpack_from(self._buf, self._pos)
        if not self._fill(HEADER.size + length):
            return None
        start = self._pos + HEADER.size
        payload = bytes(self._buf[start:start + length])
        self._pos = start + length
        return kind, offset, payload


def state_path(log_path: Path) -> Path:
    """The relay state file of the run whose log is ``log_path`` (``<stem>.relay.json``)."""
    return log_path.with_suffix(".relay.json")


def socket_path(log_path: Path, start: int) -> Path:
    """The socket of the relay of the ``start``-th start of the job logged to ``log_path``: in
    the run dir, or (a path too long for a Unix socket) in a per-user dir under the temp dir."""
    path = log_path.with_suffix(f".relay-{start}.sock")
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    short = Path(tempfile.gettempdir()) / f"costctl-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    digest = hashlib.sha1(os.fsencode(path)).hexdigest()[:16]
    return short / f"{digest}.sock"


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (write a sibling, then rename).

    Raises:
        OSError: it cannot be written.
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    """The state file's content; None when it is missing or unreadable."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def relay_alive(state: dict[str, Any]) -> bool:
    """Whether the job of a relay state is still running: no exit status was recorded and its
    relay or its job process runs (a pid reused since is taken for it: unsure counts as running)."""
    if state.get("exit_status") is not None:
        return False
    return any(_pid_running(state.get(key)) for key in ("relay_pid", "job_pid"))


def _pid_running(pid: object) -> bool:
    """Process ``pid`` exists and is not a zombie (a zombie is an exited process not reaped yet)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b") ", 1)[1][:1] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: it exists


def job_running(log_path: str | Path | None) -> bool:
    """Whether the job of the run logged to ``log_path`` still runs, by its relay's state file
    (False without a log, a state file, or once the job's exit was recorded)."""
    if not log_path:
        return False
    state = read_state(state_path(Path(log_path)))
    return state is not None and relay_alive(state)


def relay_running(log_path: str | Path | None) -> bool:
    """Whether the relay of the run logged to ``log_path`` still runs (its job, or after the
    job's end while it serves watches or waits for its on-exit watch), or its job does."""
    if not log_path:
        return False
    state = read_state(state_path(Path(log_path)))
    return state is not None and (relay_alive(state) or _pid_running(state.get("relay_pid")))
