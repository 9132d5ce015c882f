"""The job's output, parsed from the run log at the parser's own pace: :class:`ParsePump`.

The relay (:mod:`costctl.relay`) appends every byte the job writes to the run log before the
watch gets it; the watch's output thread passes the bytes through (costctl's stdout, byte for
byte) and queues here only *where* they are: ``(stream, log offset, length)``
(:meth:`ParsePump.put_range`), O(1), never waiting. One parser thread reads the queued ranges
back from the run log (``pread``, from the page cache: the bytes were just written) in pieces of
up to :data:`MAX_PIECE_BYTES` and parses each in one call (``LineParser.feed_batch`` on bytes
→ one :class:`~costctl.progress.batch.PointBatch`).

A job that prints now and then (a line a second) would wake the parser thread for every line;
instead the output thread parses a small range itself when it finds the parser idle with nothing
queued (``inline_max_bytes``, the watch's :data:`INLINE_MAX_BYTES`): the same code, one parser
at a time, in well under a millisecond.

So, whatever the job prints:

* the passthrough never waits for the parser thread (the job is never slowed by a backlog: a
  range is parsed inline only when nothing is queued, and only a small one);
* the queue holds no text: its memory is a few numbers per range, ranges of one stream that
  follow each other are merged, and a new range starts only on a stream change or after
  :data:`RANGE_SPAN_S` (the time a range was read becomes its points' time); at most
  :data:`MAX_RANGES` are queued (beyond it a new range is merged into the last one when
  contiguous, else counted as :attr:`ParsePump.lost_bytes`, see below);
* every byte is parsed, however far the parser falls behind while the job runs: the
  plateau, divergence and stall rules see every point.

Loss of data, and only that, is a *gap* (``on_gap``: the parser drops its unfinished line and
the next text up to its first line end, so the two sides are never read as one false line):
the run log does not hold the bytes of a range (the relay could not write it: disk full), or a
range could not be queued (:data:`MAX_RANGES`); such bytes are counted in
:attr:`ParsePump.lost_bytes`.

When the job has exited the watch gives the parser what is left of one sample interval
(:meth:`ParsePump.drain`), then ends; what it has not parsed by then is *not* lost: it is in
the run log, counted (:attr:`ParsePump.unparsed_bytes`, :meth:`ParsePump.unparsed`) and
reported with the offsets to read it from (``costctl analyze --train-log LOG``), so a flood of
output never keeps a watch — and its bill — running long after its job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..progress.batch import PointBatch

#: The most bytes read from the run log and parsed in one call (256 KiB: few Python calls per
#: point, bounded memory, one piece at a time; and a piece the pure-Python parser finishes in
#: tens of milliseconds, so the drain at the job's exit does not overrun its deadline by much).
MAX_PIECE_BYTES = 1 << 18

#: Seconds of output one queued range spans at most: the time a range was read (its first
#: byte's) becomes its points' time, so a parser that lags keeps the points' times within this
#: of when the job printed them. 0.25 s: at most 4 ranges a second per stream.
RANGE_SPAN_S = 0.25

#: The most ranges queued (each a few numbers, ~100 bytes: 64 Ki ranges are ~6 MiB). It is
#: reached only by a parser hours behind a job that switches streams all the time; then a
#: range contiguous with the last one is merged into it (its time is the earlier one), and a
#: range that is not is lost (counted, a gap).
MAX_RANGES = 1 << 16

#: The most points parsed and handed on (``emit``) but not yet taken by the watch
#: (:meth:`ParsePump.consumed`): beyond it the parser waits (nothing is lost: it reads the
#: run log later) and asks for them to be taken (``on_backlog``). 128 Ki points are ~6 MB in
#: a PointBatch's columns: the watch's memory stays bounded however fast the parser is.
MAX_UNCONSUMED_POINTS = 1 << 17

#: The watch's ``inline_max_bytes`` (:class:`ParsePump`): the most bytes of one range the
#: output thread parses itself when the parser is idle with nothing queued, so that a job that
#: prints a line now and then is parsed without waking the parser thread for each line (4 KiB:
#: well under a millisecond for the in-place scanner, a few for the per-line parser; the
#: passthrough waits no longer than that, and never while the parser has work).
INLINE_MAX_BYTES = 4096

#: The parser thread's niceness, added to the watch's own (Linux, where a thread has its own):
#: when the machine's cores are busy, the job (and its output relay) get them first, so a job
#: that floods its output is not slowed by the parsing of it; idle cores still parse at full speed.
PARSER_NICE = 10


@dataclass(frozen=True, slots=True)
class Unparsed:
    """Output the parser had not reached when :meth:`ParsePump.drain` gave up (it is in the
    run log).

    Attributes:
        bytes: bytes not parsed.
        lines: line ends in them (counted from the run log when at most ``count_limit``
            bytes, else estimated from the bytes per line parsed so far; see ``exact``).
        exact: whether ``lines`` was counted.
        first_offset / end_offset: the run log offsets of the first byte not parsed and after
            the last one (other bytes between them were parsed).
    """

    bytes: int
    lines: int
    exact: bool
    first_offset: int
    end_offset: int


class ParsePump:
    """One parser thread reading the run log behind the output thread (see the module docstring).

    Args:
        log_path: the run log the queued offsets are in (opened read-only on first use).
        parse: ``(stream, data, now) -> PointBatch``: the stream's ``LineParser.feed_batch``
            (``data`` is bytes from the log; the parser decodes UTF-8 incrementally).
        emit: called (parser thread) with each non-empty batch, in output order.
        now: the clock; the time a range was queued becomes its points' time.
        on_error: called once with an exception the parser raised (parsing goes on, from the
            stream's next line end: see :attr:`failed_pieces`).
        on_gap: called (parser thread) with a stream whose output was lost before its next
            bytes are parsed (see the module docstring); with ``at_line_start=True`` when what
            was lost (a piece whose parse raised) ended at a line end.
        lines_seen: gives the line ends parsed so far (all streams), to estimate the lines of
            what is left unparsed; None: estimated from 1 line per 40 bytes.
        on_backlog: called (parser thread) when :data:`MAX_UNCONSUMED_POINTS` points wait to
            be taken: the watch should take them (and call :meth:`consumed`) soon.
        inline_max_bytes: a range of at most this many bytes that finds the parser idle and
            nothing queued is parsed by the caller of :meth:`put_range` (0: never; see
            :data:`INLINE_MAX_BYTES`).
    """

    def __init__(self, log_path: Path | str | None, parse: Callable[[str, bytes, datetime], PointBatch],
                 emit: Callable[[PointBatch], None], now: Callable[[], datetime],
                 on_error: Callable[[BaseException], None] | None = None,
                 on_gap: Callable[[str], None] | None = None,
                 lines_seen: Callable[[], int] | None = None,
                 on_backlog: Callable[[], None] | None = None, inline_max_bytes: int = 0) -> None:
        self.log_path = log_path
        self.inline_max_bytes = inline_max_bytes
        self._parse = parse
        self._emit = emit
        self._now = now
        self._on_error = on_error
        self._on_gap = on_gap
        self._lines_seen = lines_seen
        self.on_backlog = on_backlog
        self._emitted = 0  # points handed on; _consumed: taken by the watch
        self._consumed = 0
        self._fd: int | None = None
        #: [stream, start, end, time, monotonic start]; a list, so the last one can grow in place.
        self._queue: deque[list] = deque()
        self._gaps: set[str] = set()  # streams whose next range follows lost output
        #: streams whose last piece failed to parse at a line end: the parser starts the next clean
        self._clean: dict[str, bool] = {}
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        #: the parser thread's own wait for work, on the same lock: an inline parse's "idle
        #: again" (notified on ``_cond``, for drain()/wait_idle()) does not wake it.
        self._work = threading.Condition(lock)
        self._busy = False
        self._consume_waiters = 0  # parsers waiting in _wait_consumed (consumed() wakes them)
        self._closed = False
        self._accepting = True  # False after drain(): the job ended; resume() at its next start
        self._error_reported = False
        #: bytes queued but not parsed when :meth:`drain` gave up (whole life; in the run log)
        self.unparsed_bytes = 0
        #: what the last :meth:`drain` left unparsed (None: it left nothing)
        self.last_unparsed: Unparsed | None = None
        #: bytes lost: not in the run log when read, or not queued (:data:`MAX_RANGES`)
        self.lost_bytes = 0
        self.parsed_bytes = 0
        self.queued_bytes = 0
        #: pieces whose parse raised (the first is reported through ``on_error``); each is
        #: followed by a gap on its stream
        self.failed_pieces = 0
        self._thread = threading.Thread(target=self._run, name="costctl-parse", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the output thread
    def put_range(self, stream: str, offset: int, length: int) -> None:
        """Queue ``length`` bytes of ``stream`` at run-log ``offset`` for parsing (output
        thread; never waits for the parser). A range of at most ``inline_max_bytes`` that
        finds the parser idle, nothing queued and room for its points is parsed here, at once
        (the same :meth:`_parse_piece`, one parser at a time): sparse output costs no thread
        wake-up per line."""
        if length <= 0:
            return
        end = offset + length
        mono = time.monotonic()
        with self._cond:
            if self._closed or not self._accepting:
                return
            self.queued_bytes += length
            q = self._queue
            inline = (length <= self.inline_max_bytes and not q and not self._busy and stream not in self._gaps
                      and self._emitted - self._consumed < MAX_UNCONSUMED_POINTS - self.inline_max_bytes)
            if inline:
                self._busy = True
                when = self._now()
            else:
                last = q[-1] if q else None
                if last is not None and last[0] == stream and last[2] == offset and (
                        mono - last[4] < RANGE_SPAN_S or len(q) >= MAX_RANGES):
                    last[2] = end
                elif len(q) >= MAX_RANGES:
                    self.lost_bytes += length
                    self._gaps.add(stream)
                    return
                else:
                    q.append([stream, offset, end, self._now(), mono])
                self._work.notify()
                return
        try:
            self._parse_piece(stream, offset, length, when)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()  # drain()/wait_idle() (no waiter: no wake-up)

    # ------------------------------------------------------------------ the parser thread
    def _read(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the run log at ``offset`` (fewer: the log does not hold them)."""
        if self._fd is None:
            if self.log_path is None:
                return b""
            try:
                self._fd = os.open(self.log_path, os.O_RDONLY)
            except OSError:
                return b""
        out = []
        got = 0
        while got < length:
            try:
                data = os.pread(self._fd, length - got, offset + got)
            except OSError:
                break
            if not data:
                break
            out.append(data)
            got += len(data)
        return out[0] if len(out) == 1 else b"".join(out)

    def _take(self) -> tuple[str, int, int, datetime] | None:
        """The next piece (caller holds _cond): up to MAX_PIECE_BYTES from the head range."""
        if not self._queue:
            return None
        head = self._queue[0]
        stream, start, end, when = head[0], head[1], head[2], head[3]
        size = min(end - start, MAX_PIECE_BYTES)
        if start + size >= end:
            self._queue.popleft()
        else:
            head[1] = start + size
        return stream, start, size, when

    def _run(self) -> None:
        lower_priority()
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._work.wait()
                if self._closed and not self._queue:
                    break
                piece = self._take()
                self._busy = piece is not None
            if piece is None:
                continue
            stream, offset, size, when = piece
            try:
                self._parse_piece(stream, offset, size, when)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _parse_piece(self, stream: str, offset: int, size: int, when: datetime) -> None:
        data = self._read(offset, size)
        lost = size - len(data)
        with self._cond:
            gap = stream in self._gaps
            self._gaps.discard(stream)
            clean = self._clean.pop(stream, False)
            self.parsed_bytes += len(data)
            self.lost_bytes += lost
        try:
            if gap and self._on_gap is not None:
                self._on_gap(stream)
            elif clean and self._on_gap is not None:
                self._on_gap(stream, at_line_start=True)
            if data:
                batch = self._parse(stream, data, when)
                if batch:
                    self._wait_consumed()
                    with self._cond:
                        self._emitted += len(batch)
                    self._emit(batch)
            if lost and self._on_gap is not None:
                self._on_gap(stream)  # the rest of this range is not in the log
        except Exception as exc:  # noqa: BLE001 - parsing must go on
            # The parser's line state may be half-updated: the stream starts clean, so one bad
            # piece never corrupts the next: at the next piece's start when this piece ended at
            # a line end, else at its first line end (a gap, as for lost output).
            with self._cond:
                if data[-1:] in (b"\n", b"\r"):
                    self._clean[stream] = True
                else:
                    self._gaps.add(stream)
                self.failed_pieces += 1
            if not self._error_reported and self._on_error is not None:
                self._error_reported = True
                try:
                    self._on_error(exc)
                except Exception:  # noqa: BLE001 - reporting must not end the parser thread
                    pass

    def _wait_consumed(self) -> None:
        """Wait (parser thread) while too many points wait to be taken (see
        :data:`MAX_UNCONSUMED_POINTS`); not once the pump is draining or closed."""
        asked = None  # the on_backlog already asked (a new one, set at the watch's bind, is asked too)
        with self._cond:
            while (self._emitted - self._consumed >= MAX_UNCONSUMED_POINTS and self._accepting
                   and not self._closed and self.on_backlog is not None):
                ask = self.on_backlog
                if ask is not asked:
                    asked = ask
                    self._cond.release()
                    try:
                        ask()
                    finally:
                        self._cond.acquire()
                    continue
                self._consume_waiters += 1
                try:
                    self._cond.wait(0.05)
                finally:
                    self._consume_waiters -= 1

    # ------------------------------------------------------------------ the watch
    def consumed(self, points: int) -> None:
        """The watch took ``points`` of the points handed on (its drain of ``emit``'s batches)."""
        if points:
            with self._cond:
                self._consumed += points
                if self._consume_waiters:  # else nobody waits on it: no wake-up per tick
                    self._cond.notify_all()

    @property
    def unconsumed_points(self) -> int:
        """Points handed on and not yet taken by the watch."""
        with self._cond:
            return self._emitted - self._consumed
    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not parsed yet (the piece being parsed not included)."""
        with self._cond:
            return sum(r[2] - r[1] for r in self._queue)

    def queued_ranges(self) -> list[tuple[str, int, int]]:
        """The queued ranges ``(stream, start, end)`` (a copy; the queue holds no text)."""
        with self._cond:
            return [(r[0], r[1], r[2]) for r in self._queue]

    def idle(self) -> bool:
        """Nothing queued and nothing being parsed."""
        with self._cond:
            return not self._queue and not self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for everything queued to be parsed (nothing is
        given up: the caller may wait again, or :meth:`drain`); True when it was."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def drain(self, timeout_s: float, *, count_limit: int = 64 << 20) -> int:
        """Wait up to ``timeout_s`` seconds for everything queued to be parsed; then leave what
        is not (it stays in the run log: counted in :attr:`unparsed_bytes` and described by
        :attr:`last_unparsed`) and take no more until :meth:`resume` (the job ended). Returns
        the bytes left unparsed now.

        ``count_limit``: the most unparsed bytes whose line ends are counted from the log (more
        are estimated).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.05))
            ranges = [(r[1], r[2]) for r in self._queue]
            self._queue.clear()
            self._accepting = False
            self._cond.notify_all()  # a parser waiting for its points to be taken hands them on
            left_bytes = sum(e - s for s, e in ranges)
            self.unparsed_bytes += left_bytes
        self.last_unparsed = self._describe(ranges, left_bytes, count_limit) if left_bytes else None
        return left_bytes

    def _describe(self, ranges: list[tuple[int, int]], left: int, count_limit: int) -> Unparsed:
        """Count (or estimate) the line ends of the unparsed ``ranges`` (see :class:`Unparsed`)."""
        first, end = min(s for s, _ in ranges), max(e for _, e in ranges)
        if left <= count_limit and self.log_path is not None:
            lines = 0
            try:
                fd = os.open(self.log_path, os.O_RDONLY)
            except OSError:
                fd = None
            if fd is not None:
                try:
                    for s, e in ranges:
                        pos = s
                        while pos < e:
                            data = os.pread(fd, min(e - pos, 8 << 20), pos)
                            if not data:
                                break
                            lines += data.count(b"\n")
                            pos += len(data)
                finally:
                    os.close(fd)
                return Unparsed(left, lines, True, first, end)
        seen = self._lines_seen() if self._lines_seen is not None else 0
        per_line = self.parsed_bytes / seen if seen and self.parsed_bytes else 40.0
        return Unparsed(left, int(left / per_line), False, first, end)

    def resume(self) -> None:
        """Take output again (the job was started again)."""
        with self._cond:
            self._accepting = True

    def close(self, timeout_s: float = 0.0) -> int:
        """:meth:`drain` for ``timeout_s``, then end the thread; returns the bytes left unparsed."""
        left = self.drain(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._work.notify_all()
        self._thread.join(1.0)
        return left


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


__all__ = ["INLINE_MAX_BYTES", "MAX_PIECE_BYTES", "MAX_RANGES", "MAX_UNCONSUMED_POINTS", "PARSER_NICE", "RANGE_SPAN_S", "ParsePump", "Unparsed",
           "lower_priority"]
