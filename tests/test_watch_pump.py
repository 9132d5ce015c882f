"""The parser thread between the job's output and the tick (costctl.watch.pump)."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone

from costctl.progress.batch import PointBatch
from costctl.watch.pump import ParsePump

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _parse(stream, text, now):
    batch = PointBatch()
    for line in text.splitlines():
        batch.append(float(line))
    return batch


def test_texts_are_parsed_in_order_in_big_pieces_off_the_output_thread():
    got: list[PointBatch] = []
    calls: list[str] = []

    def parse(stream, text, now):
        calls.append(threading.current_thread().name)
        return _parse(stream, text, now)

    pump = ParsePump(parse, got.append, lambda: T0)
    for i in range(1000):
        pump.put("stdout", f"{i}\n")
    assert pump.drain(10) == 0
    pump.close()
    values = [v for b in got for v in b.values]
    assert values == [float(i) for i in range(1000)]
    assert set(calls) == {"costctl-parse"} and len(calls) < 1000  # joined into pieces


def test_drain_gives_up_at_its_deadline_and_counts_what_it_dropped():
    release = threading.Event()
    got: list[PointBatch] = []

    def slow(stream, text, now):
        release.wait(5)
        return _parse(stream, text, now)

    pump = ParsePump(slow, got.append, lambda: T0)
    pump.put("stdout", "1\n")
    while pump.pending_chars:  # wait until the first piece is being parsed
        pass
    pump.put("stderr", "2\n3\n")
    assert pump.drain(0.05) == 4 and pump.dropped_chars == 4
    release.set()
    pump.close(5)
    assert [v for b in got for v in b.values] == [1.0]


def test_a_watch_ends_soon_after_a_flooding_job_even_with_a_slow_parser(tmp_path, monkeypatch):
    """The parser cannot keep up: after the job's exit the watch gives it one sample interval,
    drops the rest (counted) and ends; the passthrough got every byte."""
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
    started = time.monotonic()
    code, status = drive(w, clock, step_s=1, max_real_s=60)
    assert (code, status) == (0, "completed")
    assert time.monotonic() - started < 30
    assert w._pump.dropped_chars > 0
    assert 0 < w.summary.loss_points < n
    os.close(fd)
    assert out.read_bytes().count(b"\n") == n


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


def test_after_the_exit_the_parser_gets_the_sample_interval_less_the_end_reserve():
    """The watch ends within one sample interval of its job: the parser's drain after the exit
    leaves END_RESERVE_S of it for the last tick, the run's close and the summary."""
    from datetime import timedelta
    from types import SimpleNamespace

    from costctl.watch import watcher as wmod

    asked: list[float] = []

    class _Pump:
        def drain(self, timeout_s: float) -> int:
            asked.append(timeout_s)
            return 0

    w = wmod.Watcher.__new__(wmod.Watcher)
    w._pump, w.job, w.say = _Pump(), None, print
    for interval, want in ((1, 1 - wmod.END_RESERVE_S), (5, 5 - wmod.END_RESERVE_S), (0.2, 0.0)):
        w.settings = SimpleNamespace(watch=SimpleNamespace(sample_interval=timedelta(seconds=interval)))
        w._finish_parsing()
        assert asked[-1] == want
    assert 0 < wmod.END_RESERVE_S < 1


def test_the_parser_thread_runs_at_a_lower_priority_than_the_watch(monkeypatch):
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
    pump = ParsePump(parse, lambda b: None, lambda: T0)
    pump.put("stdout", "1\n")
    assert pump.drain(10) == 0
    pump.close()
    assert seen == [min(19, mine + pmod.PARSER_NICE)] and pmod.PARSER_NICE > 0
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_text_dropped_on_a_full_queue_never_joins_two_lines_into_a_false_one(monkeypatch):
    """A queue overflow drops text mid-line: the parser is told of the gap before the next
    text, so 'step 1 loss: 1.2' + (dropped) + '34\\n...' is not read as loss 1.234."""
    from costctl.progress.lines import LineParser
    from costctl.watch import pump as pump_module

    monkeypatch.setattr(pump_module, "MAX_PENDING_CHARS", 51)  # 30 queued + 21 after the gap
    release = threading.Event()
    parser = LineParser()
    got: list[PointBatch] = []

    def parse(stream, text, now):
        release.wait(5)
        return parser.feed_batch(text, now)

    pump = ParsePump(parse, got.append, lambda: T0, on_gap=lambda stream: parser.gap())
    pump.put("stdout", "step 1 loss: 0.5\nstep 2 loss: 1.2")  # parsed (held by release)
    while pump.pending_chars:
        pass
    pump.put("stdout", "x" * 30)               # queued
    pump.put("stdout", "9" * 30)               # dropped: over the bound -> a gap
    pump.put("stdout", "34\nstep 3 loss: 0.25\n")  # after the gap: its first line is discarded
    release.set()
    assert pump.drain(5) == 0
    pump.close(5)
    values = [v for b in got for v in b.values]
    assert values == [0.5, 0.25] and pump.dropped_chars == 30


def test_line_parser_gap_discards_both_sides_of_the_cut():
    from costctl.progress.lines import LineParser

    parser = LineParser()
    assert list(parser.feed_batch(b"loss: 1.2", T0).values) == []
    parser.gap()
    assert list(parser.feed_batch(b"34\nloss: 5.0\n", T0).values) == [5.0]
