"""The parser thread between the job's output and the tick (costctl.watch.pump)."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone

import pytest

from costctl.progress.batch import PointBatch
from costctl.watch.pump import ParsePump

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _parse(stream, data, now):
    batch = PointBatch()
    for line in data.decode().splitlines():
        batch.append(float(line))
    return batch


class _Log:
    """A run log being appended to, as the relay does: ``write`` returns the range's offset."""

    def __init__(self, path):
        self.path = path
        self.fh = open(path, "ab")

    def write(self, data: bytes) -> int:
        off = self.fh.tell()
        self.fh.write(data)
        self.fh.flush()
        return off


def test_ranges_are_read_back_from_the_log_and_parsed_in_order_in_big_pieces_off_the_output_thread(tmp_path):
    got: list[PointBatch] = []
    calls: list[str] = []

    def parse(stream, data, now):
        calls.append(threading.current_thread().name)
        return _parse(stream, data, now)

    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, parse, got.append, lambda: T0)
    for i in range(1000):
        data = f"{i}\n".encode()
        pump.put_range("stdout", log.write(data), len(data))
    assert pump.drain(10) == 0
    pump.close()
    values = [v for b in got for v in b.values]
    assert values == [float(i) for i in range(1000)]
    assert set(calls) == {"costctl-parse"} and len(calls) < 1000  # joined into pieces
    assert pump.parsed_bytes == pump.queued_bytes and pump.lost_bytes == 0


def test_the_queue_holds_no_text_and_merges_contiguous_ranges_whatever_the_volume(tmp_path, monkeypatch):
    """The memory bound, structurally: a parser that does not run yet (held) while 200 000
    pieces of output (8 MB) are queued leaves a queue of a few numbers per range, not the text,
    one range per stream change or RANGE_SPAN_S; MAX_RANGES bounds the count."""
    from costctl.watch import pump as pmod

    release = threading.Event()

    def held(stream, data, now):
        release.wait(10)
        return PointBatch()

    monkeypatch.setattr(pmod, "RANGE_SPAN_S", 3600.0)  # no time split: ranges split on the stream only
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        fh.truncate(200_000 * 40)  # 8 MB of log (zeros: held, the parser never looks at them)
    pump = ParsePump(log, held, lambda b: None, lambda: T0)
    off = 0
    for i in range(200_000):
        stream = "stderr" if i % 50_000 == 49_999 else "stdout"
        pump.put_range(stream, off, 40)
        off += 40
    ranges = pump.queued_ranges()
    assert len(ranges) <= 8 and pump.pending_bytes >= off - pmod.MAX_PIECE_BYTES
    for entry in pump._queue:  # the queue itself: stream name, offsets, time; no bytes, no str of output
        assert [type(x).__name__ for x in entry] == ["str", "int", "int", "datetime", "float"]
        assert entry[0] in ("stdout", "stderr")
    # the bound on the number of ranges: beyond it, a contiguous range merges, another is lost (a gap)
    monkeypatch.setattr(pmod, "MAX_RANGES", len(pump._queue))
    pump.put_range("stdout", off + 100, 10)  # not contiguous: lost, counted
    pump.put_range("stderr", off, 100)  # contiguous with the last range: merged into it
    assert pump.lost_bytes == 10 and pump.queued_ranges()[-1][2] == off + 100 and len(pump._queue) == pmod.MAX_RANGES
    release.set()
    pump.drain(0)
    pump.close(1)


def test_drain_leaves_the_rest_in_the_log_counted_in_bytes_and_lines(tmp_path):
    release = threading.Event()
    got: list[PointBatch] = []

    def slow(stream, data, now):
        release.wait(5)
        return _parse(stream, data, now)

    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, slow, got.append, lambda: T0)
    pump.put_range("stdout", log.write(b"1\n"), 2)
    while pump.pending_bytes:  # wait until the first piece is being parsed
        pass
    second = log.write(b"2\n3\n")
    pump.put_range("stderr", second, 4)
    assert pump.drain(0.05) == 4 and pump.unparsed_bytes == 4
    info = pump.last_unparsed
    assert (info.bytes, info.lines, info.exact, info.first_offset, info.end_offset) == (4, 2, True, second, second + 4)
    pump.put_range("stdout", log.write(b"4\n"), 2)  # after the drain: not taken until resume()
    release.set()
    pump.close(5)
    assert [v for b in got for v in b.values] == [1.0]


def test_output_missing_from_the_log_is_lost_counted_and_a_gap(tmp_path):
    """The relay could not write the run log (disk full): the bytes are not there to read; they
    are counted as lost and the parser is told of the gap (no false line joined across it)."""
    from costctl.progress.lines import LineParser

    parser = LineParser()
    got: list[PointBatch] = []
    gaps: list[str] = []
    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, lambda s, d, now: parser.feed_batch(d, now), got.append, lambda: T0,
                     on_gap=lambda stream: (gaps.append(stream), parser.gap()))
    first = log.write(b"loss: 0.5\nloss: 1.2")
    pump.put_range("stdout", first, 19)
    pump.put_range("stdout", first + 19, 30)  # never written to the log
    assert pump.drain(5) == 0
    pump.resume()
    pump.put_range("stdout", log.write(b"34\nloss: 0.25\n"), 14)  # the log resumes at its real end
    assert pump.drain(5) == 0
    pump.close()
    assert [v for b in got for v in b.values] == [0.5, 0.25]
    assert pump.lost_bytes == 30 and gaps == ["stdout"]


def test_a_flooding_job_is_parsed_whole_although_the_parser_lags_far_behind(tmp_path, monkeypatch):
    """1 M loss lines from a real child at full speed, a parser slower than the job (the
    pure-Python LineParser, slowed further): while the job runs nothing is dropped (the queue
    holds offsets; the parser reads the run log), so every point reaches the policies and the
    plateau rule fires exactly where it does over the whole sequence (ReduceLROnPlateau parity,
    tests/test_policies_plateau.py). The sample interval is long, so the drain after the exit
    has time for the backlog; the passthrough got every byte."""
    import sys
    import time

    from costctl.policies.plateau import PlateauPolicy, plateau_fires
    from costctl.progress.lines import LineParser
    from helpers import CHILDREN
    from lifecycle_support import T0 as ST0, FixedGpu, SimClock, drive, settings, watcher

    real_feed = LineParser.feed_batch
    lag = {"max": 0}

    def slow_feed(self, chunk, now):
        # At most ~4 MB/s whatever the machine (the native engine alone reads >100 MB/s): the
        # job's ~20 MB at full speed leaves the parser megabytes behind on any machine.
        time.sleep(0.01 + len(chunk) / 4e6)
        return real_feed(self, chunk, now)

    monkeypatch.setattr(LineParser, "feed_batch", slow_feed)
    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "300s"
[policies.plateau]
patience = 10
hold_until_learning = false
""")
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT)
    n = 1_000_000
    clock = SimClock(ST0)
    w = watcher(s, [sys.executable, str(CHILDREN / "flood.py"), str(n)], clock, devnull=fd, on_exit="leave",
                pty=False, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0))

    def on_step(now):
        if w._pump is not None:
            lag["max"] = max(lag["max"], w._pump.pending_bytes)

    code, status = drive(w, clock, step_s=1, max_real_s=240, on_step=on_step)
    os.close(fd)
    assert (code, status) == (0, "completed")
    assert lag["max"] > 4 << 20  # the parser lagged megabytes behind the job
    pump = w._pump
    assert pump.lost_bytes == 0 and pump.unparsed_bytes == 0 and pump.parsed_bytes == pump.queued_bytes
    assert w.summary.loss_points == n
    assert out.read_bytes().count(b"\n") == n
    values = [0.5 + (i * 7919 % 1000) / 10000 for i in range(n)]
    policy = next(p for p in w.engine.policies if isinstance(p, PlateauPolicy))
    expected = plateau_fires(values, patience=10, threshold=1e-4, threshold_mode="rel")
    assert policy.missed == 0 and policy.fires == len(expected) and expected
    plateau = [d for d in w.summary.decisions if d.policy == "plateau"]
    assert plateau and plateau[0].evidence["index"] == expected[0]


def test_a_watch_ends_soon_after_a_flooding_job_even_with_a_slow_parser(tmp_path, monkeypatch):
    """The parser cannot keep up: after the job's exit the watch gives it what is left of one
    sample interval and ends; what it did not parse is said (bytes, lines, where in the run
    log, how to read it), never silently lost; the passthrough got every byte."""
    import sys
    import time

    from costctl.progress.lines import LineParser
    from lifecycle_support import T0, FixedGpu, SimClock, drive, settings, watcher

    real_feed = LineParser.feed_batch

    def slow_feed(self, chunk, now):
        time.sleep(0.2)  # a parser far slower than the job's output
        return real_feed(self, chunk, now)

    monkeypatch.setattr(LineParser, "feed_batch", slow_feed)
    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "1s"
""")
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT)
    n = 200_000
    job = [sys.executable, "-c", f"import sys\nfor i in range({n}): sys.stdout.write(f'step {{i}} loss: 0.5\\n')"]
    clock = SimClock(T0)
    w = watcher(s, job, clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0),
                devnull=fd, on_exit="leave", pty=False)
    said: list[str] = []
    w.say = said.append
    started = time.monotonic()
    code, status = drive(w, clock, step_s=1, max_real_s=60)
    assert (code, status) == (0, "completed")
    assert time.monotonic() - started < 30
    pump = w._pump
    assert pump.unparsed_bytes > 0 and pump.lost_bytes == 0
    assert pump.parsed_bytes + pump.unparsed_bytes <= pump.queued_bytes  # a piece may be parsed at the close
    assert 0 < w.summary.loss_points < n
    os.close(fd)
    assert out.read_bytes().count(b"\n") == n
    msg = next(m for m in said if "were not parsed" in m)
    assert str(w.log_path) in msg and "costctl analyze --train-log" in msg
    assert f"{pump.unparsed_bytes:,} bytes" in msg


def test_the_oom_scan_skips_chunks_without_a_message_and_still_finds_one_split_in_two():
    from types import SimpleNamespace

    from costctl.lifecycle.oom_retry import OomScanner
    from costctl.watch.watcher import Watcher

    scanner = OomScanner()
    fed: list[str] = []

    def on_text(stream, text):
        fed.append(text)
        scanner.feed(stream, text)

    w = Watcher.__new__(Watcher)
    w.lifecycle = SimpleNamespace(on_text=on_text)
    w._oom_ctx = {}
    flood = "".join(f"step {i} loss: 0.5\n" for i in range(5000))
    w._scan_oom("stderr", flood + "RuntimeError: CUDA out of mem")
    assert sum(len(t) for t in fed) < 100 and scanner.event is None  # only the partial line
    w._scan_oom("stderr", "ory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity)\n" + flood)
    assert scanner.event is not None and scanner.event.requested_bytes == 2 * 2**30


def test_after_the_exit_the_parser_gets_the_sample_interval_less_the_end_reserve(monkeypatch):

    """The watch ends within one sample interval of its job: the parser's drain after the exit
    leaves END_RESERVE_S of it for the last tick, the run's close and the summary."""
    from datetime import timedelta
    from types import SimpleNamespace

    from costctl.watch import watcher as wmod

    asked: list[float] = []

    class _Pump:
        last_unparsed = None
        lost_bytes = 0

        def wait_idle(self, timeout_s: float) -> bool:
            return True

        def drain(self, timeout_s: float) -> int:
            asked.append(timeout_s)
            return 0

    now = [1000.0]  # a frozen monotonic clock
    monkeypatch.setattr(wmod.time, "monotonic", lambda: now[0])
    w = wmod.Watcher.__new__(wmod.Watcher)
    w._pump, w.job, w.say, w._parsers = _Pump(), None, print, {}
    for interval, want in ((1, 1 - wmod.END_RESERVE_S), (5, 5 - wmod.END_RESERVE_S), (0.2, 0.0)):
        w.settings = SimpleNamespace(watch=SimpleNamespace(sample_interval=timedelta(seconds=interval)))
        w._finish_parsing()
        assert asked[-1] == pytest.approx(want)
    # counted from the job's exit as the watch saw it (the relay's exit frame), not from now
    w.job = SimpleNamespace(child=SimpleNamespace(exited_monotonic=now[0] - 0.3, drain=lambda timeout: None))
    w.settings = SimpleNamespace(watch=SimpleNamespace(sample_interval=timedelta(seconds=5)))
    w._finish_parsing()
    assert asked[-1] == pytest.approx(5 - wmod.END_RESERVE_S - 0.3)
    assert 0 < wmod.END_RESERVE_S < 1


def test_the_parser_thread_runs_at_a_lower_priority_than_the_watch(tmp_path, monkeypatch):
    """A flood's parsing never takes a busy core from the job: on Linux the parser thread's
    niceness is the watch's plus PARSER_NICE (capped at 19); other threads keep theirs."""
    import sys

    import pytest

    from costctl.watch import pump as pmod

    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread niceness is Linux's")
    seen: list[int] = []

    def parse(stream, text, now):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return _parse(stream, text, now)

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    log = tmp_path / "run.log"
    log.write_bytes(b"1\n")
    pump = ParsePump(log, parse, lambda b: None, lambda: T0)
    pump.put_range("stdout", 0, 2)
    assert pump.drain(10) == 0
    pump.close()
    assert seen == [min(19, mine + pmod.PARSER_NICE)] and pmod.PARSER_NICE > 0
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_line_parser_gap_discards_both_sides_of_the_cut():
    from costctl.progress.lines import LineParser

    parser = LineParser()
    assert list(parser.feed_batch(b"loss: 1.2", T0).values) == []
    parser.gap()
    assert list(parser.feed_batch(b"34\nloss: 5.0\n", T0).values) == [5.0]


def test_the_parser_waits_for_its_points_to_be_taken_and_loses_nothing(tmp_path, monkeypatch):
    """Backpressure: at MAX_UNCONSUMED_POINTS points handed on and not taken, the parser asks
    for them to be taken (on_backlog) and waits; the rest stays queued (offsets), and is all
    parsed once the watch took them: memory bounded, nothing dropped."""
    from costctl.watch import pump as pmod

    monkeypatch.setattr(pmod, "MAX_UNCONSUMED_POINTS", 25)
    monkeypatch.setattr(pmod, "MAX_PIECE_BYTES", 20)  # 10 points a piece
    log = _Log(tmp_path / "run.log")
    got: list[PointBatch] = []
    asked = threading.Event()
    pump = ParsePump(log.path, _parse, got.append, lambda: T0, on_backlog=asked.set)
    data = "".join(f"{i}\n" for i in range(10)).encode() * 10  # 100 points, 200 bytes
    pump.put_range("stdout", log.write(data), len(data))
    assert asked.wait(5)
    assert not pump.wait_idle(0.2)  # it waits: nothing more is handed on while none is taken
    held = sum(len(b) for b in got)
    assert 25 <= held <= 35 and pump.unconsumed_points == held and pump.pending_bytes > 0
    taken = 0
    deadline = time.monotonic() + 10  # a hang guard only
    while taken < 100 and time.monotonic() < deadline:
        n = sum(len(b) for b in got)
        pump.consumed(n - taken)
        taken = n
        if taken < 100:
            time.sleep(0.01)
    assert pump.drain(5) == 0
    pump.close()
    assert [v for b in got for v in b.values] == [float(i % 10) for i in range(100)]
    assert pump.lost_bytes == 0


def test_a_new_on_backlog_is_asked_too(tmp_path, monkeypatch):
    """A parser waiting at the bound asks the on_backlog in force: one set while it waits (a
    taker that arrives later) is asked at once, not only the one it asked first (no-op here)."""
    from costctl.watch import pump as pmod

    monkeypatch.setattr(pmod, "MAX_UNCONSUMED_POINTS", 25)
    monkeypatch.setattr(pmod, "MAX_PIECE_BYTES", 20)
    log = _Log(tmp_path / "run.log")
    got: list[PointBatch] = []
    pump = ParsePump(log.path, _parse, got.append, lambda: T0, on_backlog=lambda: None)
    data = "".join(f"{i}\n" for i in range(10)).encode() * 10
    pump.put_range("stdout", log.write(data), len(data))
    assert not pump.wait_idle(0.3)  # waiting, not parsing on
    assert 25 <= sum(len(b) for b in got) <= 35
    bound = threading.Event()
    pump.on_backlog = bound.set
    assert bound.wait(5)
    taken = 0
    deadline = time.monotonic() + 10  # a hang guard only
    while taken < 100 and time.monotonic() < deadline:
        n = sum(len(b) for b in got)
        pump.consumed(n - taken)
        taken = n
        if taken < 100:
            time.sleep(0.01)
    assert pump.drain(5) == 0
    pump.close()
    assert [v for b in got for v in b.values] == [float(i % 10) for i in range(100)]


def test_a_small_range_is_parsed_inline_when_the_parser_is_idle_and_nothing_is_queued(tmp_path):
    """Sparse output (a line a second) is parsed by the output thread itself: no parser-thread
    wake-up per line. The same points, in order."""
    calls: list[str] = []
    got: list[PointBatch] = []

    def parse(stream, data, now):
        calls.append(threading.current_thread().name)
        return _parse(stream, data, now)

    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, parse, got.append, lambda: T0, inline_max_bytes=4096)
    for i in range(50):
        data = f"{i}\n".encode()
        pump.put_range("stdout", log.write(data), len(data))
        assert pump.idle()  # parsed before put_range returned
    assert set(calls) == {threading.current_thread().name} and len(calls) == 50
    assert [v for b in got for v in b.values] == [float(i) for i in range(50)]
    assert pump.parsed_bytes == pump.queued_bytes
    pump.close()


def test_a_big_range_or_a_busy_parser_still_goes_to_the_parser_thread(tmp_path):
    release = threading.Event()
    calls: list[str] = []
    got: list[PointBatch] = []

    def parse(stream, data, now):
        calls.append(threading.current_thread().name)
        if threading.current_thread().name == "costctl-parse":
            release.wait(10)
        return _parse(stream, data, now)

    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, parse, got.append, lambda: T0, inline_max_bytes=16)
    big = "".join(f"{i}\n" for i in range(100)).encode()  # over inline_max_bytes: queued
    pump.put_range("stdout", log.write(big), len(big))
    while not calls:  # the parser thread took it (and is held)
        time.sleep(0.001)
    pump.put_range("stdout", log.write(b"100\n"), 4)  # small, but the parser is busy: queued, in order
    assert pump.pending_bytes == 4
    release.set()
    assert pump.drain(10) == 0
    pump.close()
    assert set(calls) == {"costctl-parse"}
    assert [v for b in got for v in b.values] == [float(i) for i in range(101)]


def test_no_inline_parse_when_points_wait_to_be_taken(tmp_path, monkeypatch):
    from costctl.watch import pump as pmod

    calls: list[str] = []

    def parse(stream, data, now):
        calls.append(threading.current_thread().name)
        return _parse(stream, data, now)

    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, parse, lambda b: None, lambda: T0, inline_max_bytes=4096)
    monkeypatch.setattr(pmod, "MAX_UNCONSUMED_POINTS", 4097)  # one point short of the inline margin
    pump.put_range("stdout", log.write(b"1\n"), 2)
    assert calls == [threading.current_thread().name]
    pump.put_range("stdout", log.write(b"2\n"), 2)  # 1 point unconsumed: no room left for an inline piece
    assert pump.drain(10) == 0
    assert calls[-1] == "costctl-parse"
    pump.close()


def test_an_inline_parse_does_not_wake_the_parser_thread(tmp_path, monkeypatch):
    """The parser thread waits for work on its own condition: the inline path's "idle again"
    (for drain()/wait_idle()) is not a wake-up of the parser thread per output line."""
    import types

    from costctl.watch import pump as pmod

    wakes: list[str] = []

    class CountingCondition(threading.Condition):
        def wait(self, timeout=None):
            woke = super().wait(timeout)
            if woke and threading.current_thread().name == "costctl-parse":
                wakes.append("woke")
            return woke

    fake = types.SimpleNamespace(Condition=CountingCondition, RLock=threading.RLock, Thread=threading.Thread,
                                 current_thread=threading.current_thread, get_native_id=threading.get_native_id)
    monkeypatch.setattr(pmod, "threading", fake)
    log = _Log(tmp_path / "run.log")
    got: list[PointBatch] = []
    pump = ParsePump(log.path, _parse, got.append, lambda: T0, inline_max_bytes=4096)
    for i in range(20):
        data = f"{i}\n".encode()
        pump.put_range("stdout", log.write(data), len(data))
        time.sleep(0.002)  # the parser thread, had it been woken, is waiting again
    assert wakes == []
    big = "".join(f"{i}\n" for i in range(2000)).encode()  # over inline_max_bytes: the parser thread's
    pump.put_range("stdout", log.write(big), len(big))
    assert pump.drain(10) == 0
    assert wakes == ["woke"]
    pump.close()
    assert len([v for b in got for v in b.values]) == 2020
