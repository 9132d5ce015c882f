"""The parser thread between the job's output and the tick (costctl.watch.pump)."""

from __future__ import annotations

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
