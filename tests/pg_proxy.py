"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that can drop every connection:
a network partition between a watch and its ledger, on demand."""

from __future__ import annotations

import socket
import threading


class DroppingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target``; :meth:`block` drops every connection
    (open ones are cut, new ones closed at once) until :meth:`unblock`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.blocked = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.blocked.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                self._cut(s)

    def _cut(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def block(self) -> None:
        self.blocked.set()
        with self._lock:
            open_now = list(self._open)
        for s in open_now:
            self._cut(s)

    def unblock(self) -> None:
        self.blocked.clear()

    def close(self) -> None:
        self.block()
        self.server.close()
