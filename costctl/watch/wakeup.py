"""What the watch's main loop sleeps on: a self-pipe (:class:`Wakeup`).

The main loop has nothing to do between events (a tick, a signal, the job's exit, a stop's
end), so it blocks in ``poll(2)`` on the read end of a pipe until one of them writes a byte to
the other end, or until its own deadline (the end of a grace period, the next look at a pending
checkpoint request). Writing a byte to a non-blocking pipe takes no Python lock, so a signal
handler may wake the loop too (``threading.Event.set`` may not: it takes the Event's
Condition lock, which the interrupted main thread may hold).
"""

from __future__ import annotations

import os
import select


class Wakeup:
    """A self-pipe: :meth:`wake` from any thread or a signal handler, :meth:`wait` in one thread.

    Wakes coalesce: any number of :meth:`wake` calls before a :meth:`wait` end that one wait.
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self._r, select.POLLIN)
        self._closed = False

    def wake(self) -> None:
        """End the current (or the next) :meth:`wait` now. Safe in a signal handler; a full
        pipe (a wake already pending) or a closed one is ignored."""
        try:
            os.write(self._w, b"\0")
        except OSError:  # BlockingIOError: already woken; EBADF: closed
            pass

    def wait(self, timeout_s: float | None) -> bool:
        """Block until :meth:`wake` or for ``timeout_s`` seconds (None: until woken); True when
        woken. Consumes the pending wakes."""
        if self._closed:
            return False
        ms = None if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
        if not self._poll.poll(ms):
            return False
        try:
            while os.read(self._r, 4096):
                pass
        except OSError:  # BlockingIOError: emptied
            pass
        return True

    def close(self) -> None:
        """Close both ends (idempotent); later :meth:`wake` calls do nothing."""
        if self._closed:
            return
        self._closed = True
        fds, self._r, self._w = (self._r, self._w), -1, -1  # a late wake() never writes to a reused fd
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


__all__ = ["Wakeup"]
