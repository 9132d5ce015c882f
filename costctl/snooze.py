"""The watches' control socket: how ``costctl snooze`` reaches a running watch.

Each watch listens on a Unix stream socket ``watch-<pid>.sock`` in this user's runtime dir
(:func:`costctl.paths.runtime_dir`: mode 0700, owned by the user), the socket itself mode 0600.
The kernel tells each side who the other is (``SO_PEERCRED``: pid, uid, gid); the watch answers
only a peer of its own uid, and ``costctl snooze`` talks only to a watch of its own uid, so
neither another user nor a process that took a socket's name can snooze or answer.

Protocol: the client sends one JSON object on one line (at most :data:`MAX_REQUEST_BYTES`),
``{"op": "snooze", "seconds": 600}``, ``{"op": "off"}`` or ``{"op": "status"}``; the watch answers
one JSON object on one line: ``{"ok": true, "message": "...", ...}`` (``message`` is a whole
sentence for the user), or ``{"ok": false, "error": "..."}``.

Standard library only (and :mod:`costctl.paths`): the CLI's ``snooze`` loads nothing else.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .paths import runtime_dir

#: Longest request line accepted, in bytes.
MAX_REQUEST_BYTES = 4096
#: Seconds either side waits for the other's line.
IO_TIMEOUT_S = 5.0
#: How a watch's socket is named in the runtime dir.
SOCKET_GLOB = "watch-*.sock"

_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}


@dataclass(frozen=True, slots=True)
class Peer:
    """The process at the other end of a socket, as the kernel reports it (``SO_PEERCRED``).

    Attributes:
        pid / uid / gid: its ids.
    """

    pid: int
    uid: int
    gid: int

    @property
    def user(self) -> str:
        """Its user name (the uid as text when it has none)."""
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)

    def describe(self) -> str:
        """``alice (uid 1000, pid 4242)``."""
        return f"{self.user} (uid {self.uid}, pid {self.pid})"


def peer_of(sock: socket.socket) -> Peer:
    """The credentials of ``sock``'s peer (Linux ``SO_PEERCRED``).

    Raises:
        OSError: the platform has no ``SO_PEERCRED`` or the call failed.
    """
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        raise OSError(errno.ENOTSUP, "SO_PEERCRED is not available on this platform")
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size))
    return Peer(pid=pid, uid=uid, gid=gid)


def socket_path(pid: int | None = None) -> Path:
    """The socket of the watch ``pid`` (default: this process) in the runtime dir.

    Raises:
        ConfigError: the runtime dir cannot be made safe (see :func:`costctl.paths.runtime_dir`).
    """
    return runtime_dir() / f"watch-{os.getpid() if pid is None else pid}.sock"


def _read_line(sock: socket.socket) -> bytes:
    """One line (without its end) of at most :data:`MAX_REQUEST_BYTES` bytes.

    Raises:
        ValueError: longer than that, or the peer closed before a whole line.
        OSError / TimeoutError: from the socket.
    """
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(MAX_REQUEST_BYTES + 1 - len(buf))
        if not chunk:
            raise ValueError("the other side closed the connection before a whole line")
        buf += chunk
        if len(buf) > MAX_REQUEST_BYTES:
            raise ValueError(f"a line longer than {MAX_REQUEST_BYTES} bytes")
    return buf.split(b"\n", 1)[0]


#: The watch's handler: the request object and its peer -> the answer object.
Handler = Callable[[dict[str, Any], Peer], dict[str, Any]]


class ControlServer:
    """A watch's control socket, served by a daemon thread (one connection at a time: they are
    rare and short).

    Args:
        handler: answers a request from a peer of this uid (the watch's snooze handling).
        path: the socket (default :func:`socket_path`).

    Raises:
        ConfigError: at :meth:`start`, the runtime dir cannot be made safe.
        OSError: at :meth:`start`, the socket cannot be bound.
    """

    def __init__(self, handler: Handler, path: Path | None = None) -> None:
        self.handler = handler
        self.path = path
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def start(self) -> None:
        """Bind the socket (mode 0600; a stale one of this pid is replaced) and serve."""
        path = self.path = self.path or socket_path()
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: never reachable by others, even for an instant
        try:
            sock.bind(str(path))
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(4)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="costctl-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._closed.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    self._answer(conn)
                except (OSError, ValueError):
                    continue  # a client that went away, or spoke nonsense: nothing to answer

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(IO_TIMEOUT_S)
        peer = peer_of(conn)
        if peer.uid != os.getuid():
            conn.sendall(_line({"ok": False, "error": f"this watch answers only uid {os.getuid()}"}))
            return
        try:
            request = json.loads(_read_line(conn))
            if not isinstance(request, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            conn.sendall(_line({"ok": False, "error": f"unreadable request: {exc}"}))
            return
        try:
            answer = self.handler(request, peer)
        except Exception as exc:  # noqa: BLE001 - the watch goes on; the client hears why
            answer = {"ok": False, "error": f"the watch could not handle it: {type(exc).__name__}: {exc}"}
        conn.sendall(_line(answer))

    def close(self) -> None:
        """Stop serving and remove the socket."""
        self._closed.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        if self._thread is not None:
            self._thread.join(1.0)


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def request(path: Path, payload: dict[str, Any], *, timeout_s: float = IO_TIMEOUT_S) -> dict[str, Any]:
    """Send ``payload`` to the watch listening on ``path``; returns its answer.

    Raises:
        ConnectionRefusedError / FileNotFoundError: nobody listens there (a stale socket).
        PermissionError: the socket belongs to another user's watch.
        OSError / TimeoutError: the connection failed.
        ValueError: the answer was unreadable.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(path))
        peer = peer_of(sock)
        if peer.uid != os.getuid():
            raise PermissionError(errno.EPERM, f"{path} is served by uid {peer.uid}, not this user")
        sock.sendall(_line(payload))
        answer = json.loads(_read_line(sock))
    if not isinstance(answer, dict):
        raise ValueError("the watch's answer is not a JSON object")
    return answer


def watch_sockets() -> list[Path]:
    """The control sockets in this user's runtime dir (a stale one whose watch died included).

    Raises:
        UsageError: the runtime dir cannot be used.
    """
    try:
        base = runtime_dir()
    except Exception as exc:  # ConfigError: one line
        raise UsageError(getattr(exc, "message", str(exc))) from None
    return sorted(base.glob(SOCKET_GLOB))


__all__ = ["ControlServer", "Handler", "IO_TIMEOUT_S", "MAX_REQUEST_BYTES", "Peer", "SOCKET_GLOB", "peer_of",
           "request", "socket_path", "watch_sockets"]
