"""The job's output, parsed off the output thread: :class:`ParsePump`.

The relay's reader thread writes each chunk of the job's output through at once (costctl's
stdout, byte for byte) and only queues its text here; one parser thread takes everything
queued, joins it into pieces of up to :data:`MAX_PIECE_CHARS` per stream and parses each in one
call (``LineParser.feed_batch`` → one :class:`~costctl.progress.batch.PointBatch`), so the
passthrough never waits for parsing and the parser works in big batches (few GIL switches, few
Python calls per point).

When the job has exited the watch gives the parser what is left of one sample interval
(:meth:`ParsePump.drain`) and then ends: what was not parsed by then is dropped and counted
(the run log keeps all of it), so a flood of output never keeps a watch — and its bill —
running minutes after its job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime

from ..progress.batch import PointBatch

#: The most characters parsed in one call.
MAX_PIECE_CHARS = 1 << 18

#: The most characters queued for parsing; beyond it new text is dropped and counted (a parser
#: that cannot keep up must not grow the watch's memory without bound). 16 Mi characters (16 MiB
#: of ASCII) are seconds of the parser's work; a larger queue only holds more memory.
MAX_PENDING_CHARS = 16 << 20

#: The parser thread's niceness, added to the watch's own (Linux, where a thread has its own):
#: when the machine's cores are busy, the job (and its output relay) get them first, so a job
#: that floods its output is not slowed by the parsing of it; idle cores still parse at full speed.
PARSER_NICE = 10


class ParsePump:
    """One parser thread between the output thread and the tick (see the module docstring).

    Args:
        parse: ``(stream, text, now) -> PointBatch`` (the stream's LineParser).
        emit: called (parser thread) with each non-empty batch, in output order.
        now: the clock (the time a piece was read becomes its points' time).
        on_error: called once with an exception the parser raised (parsing goes on).
    """

    def __init__(self, parse: Callable[[str, str, datetime], PointBatch], emit: Callable[[PointBatch], None],
                 now: Callable[[], datetime], on_error: Callable[[BaseException], None] | None = None,
                 on_gap: Callable[[str], None] | None = None) -> None:
        self._parse = parse
        self._emit = emit
        self._now = now
        self._on_error = on_error
        #: called (parser thread) with a stream whose text was dropped, before its next text is
        #: parsed: the parser must not join the two sides of the gap into one (false) line.
        self._on_gap = on_gap
        self._gaps: set[str] = set()
        #: (stream, text); text None marks a gap in that stream (text dropped before this point).
        self._queue: deque[tuple[str, str | None]] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._accepting = True  # False after drain(): the job ended; resume() at its next start
        self._pending = 0
        self._error_reported = False
        #: characters queued but not parsed when :meth:`drain` gave up (whole life)
        self.dropped_chars = 0
        self.parsed_chars = 0
        self._thread = threading.Thread(target=self._run, name="costctl-parse", daemon=True)
        self._thread.start()

    def put(self, stream: str, text: str) -> None:
        """Queue ``text`` of ``stream`` for parsing (output thread; never blocks on parsing)."""
        if not text:
            return
        with self._cond:
            if self._closed or not self._accepting:
                return
            if self._pending + len(text) > MAX_PENDING_CHARS:
                self.dropped_chars += len(text)
                self._gaps.add(stream)
                return
            if stream in self._gaps:
                self._gaps.discard(stream)
                self._queue.append((stream, None))
            self._queue.append((stream, text))
            self._pending += len(text)
            self._cond.notify()

    def _take(self) -> tuple[str, str | None] | None:
        """The next piece: consecutive texts of one stream, up to MAX_PIECE_CHARS, or a gap
        marker (text None) on its own (caller holds _cond)."""
        if not self._queue:
            return None
        stream, text = self._queue.popleft()
        if text is None:
            return stream, None
        parts = [text]
        size = len(text)
        while (self._queue and self._queue[0][0] == stream and self._queue[0][1] is not None
               and size < MAX_PIECE_CHARS):
            nxt = self._queue.popleft()[1]
            parts.append(nxt)
            size += len(nxt)
        self._pending -= size
        return stream, "".join(parts) if len(parts) > 1 else text

    def _run(self) -> None:
        lower_priority()
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                piece = self._take()
                self._busy = piece is not None
            if piece is None:
                continue
            stream, text = piece
            if text is None:  # text of this stream was dropped here
                try:
                    if self._on_gap is not None:
                        self._on_gap(stream)
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
                continue
            try:
                batch = self._parse(stream, text, self._now())
                if batch:
                    self._emit(batch)
            except Exception as exc:  # noqa: BLE001 - parsing must go on
                if not self._error_reported and self._on_error is not None:
                    self._error_reported = True
                    self._on_error(exc)
            finally:
                with self._cond:
                    self.parsed_chars += len(text)
                    self._busy = False
                    self._cond.notify_all()

    @property
    def pending_chars(self) -> int:
        """Characters queued and not parsed yet."""
        with self._cond:
            return sum(len(t) for _, t in self._queue if t is not None)

    def idle(self) -> bool:
        """Nothing queued and nothing being parsed."""
        with self._cond:
            return not self._queue and not self._busy

    def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` seconds for everything queued to be parsed; then drop what
        is left (counted in :attr:`dropped_chars`) and take no more text until :meth:`resume`
        (the job ended: the output thread then passes the rest through at full speed). Returns
        the characters dropped now."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.05))
            dropped = sum(len(t) for _, t in self._queue if t is not None)
            if dropped:
                self._gaps.update(stream for stream, _ in self._queue)
            self._queue.clear()
            self._pending = 0
            self._accepting = False
            self.dropped_chars += dropped
        return dropped

    def resume(self) -> None:
        """Take text again (the job was started again)."""
        with self._cond:
            self._accepting = True

    def close(self, timeout_s: float = 0.0) -> int:
        """:meth:`drain` for ``timeout_s``, then end the thread; returns the characters dropped."""
        dropped = self.drain(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(1.0)
        return dropped


def lower_priority(nice: int = PARSER_NICE) -> bool:
    """Raise the calling thread's niceness by ``nice`` (Linux only: there ``setpriority`` on a
    thread id changes that thread alone; elsewhere it would renice a process). Returns whether
    it was done."""
    if not sys.platform.startswith("linux") or nice <= 0:
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:
        return False
    return True


__all__ = ["MAX_PIECE_CHARS", "PARSER_NICE", "ParsePump", "lower_priority"]
