"""The OOM recognizer on the corpus's verbatim CUDA out-of-memory messages (SOURCES.md, section E)."""

from __future__ import annotations

from pathlib import Path

import pytest

from costctl.replay.oom import find_oom, match_oom, size_to_bytes
from costctl.replay.readers import read_train_log

from replay_support import corpus_file, renamed_copy

MiB, GiB = 2**20, 2**30

# line: (tried, total) exactly as SOURCES.md's table states them
EXPECTED = {
    1: ("12.50 MiB", "10.92 GiB"),
    2: ("20.00 MiB", "5.80 GiB"),
    3: ("2.87 GiB", "14.76 GiB"),
    4: ("20.00 MiB", "1.96 GiB"),
    5: ("16.00 MiB", "3.94 GiB"),
    6: ("128.00 MiB", "44.99 GiB"),
    7: ("1.70 GiB", "6.00 GiB"),
    8: ("32.00 MiB", "4.00 GiB"),
    10: ("55.57 GiB", "12.00 GiB"),
    11: ("64.00 MiB", "8.00 GiB"),
    12: ("20.00 MiB", "4.00 GiB"),
    13: ("22.00 MiB", "23.65 GiB"),
    14: ("22.78 GiB", "31.47 GiB"),
    17: ("20.00 MiB", "15.48 GiB"),
    18: ("546.00 MiB", "15.77 GiB"),
    19: ("124.68 GiB", "95.22 GiB"),
}


def _bytes(text: str) -> int:
    number, unit = text.split()
    return size_to_bytes(number, unit)


def test_every_message_is_an_oom_with_sizes() -> None:
    lines = corpus_file("oom_messages_from_issues.txt").read_text().splitlines()
    assert len(lines) == 19
    events = find_oom(lines)
    assert len(events) == 16
    assert {e.line_number for e in events} == set(EXPECTED)
    for event in events:
        tried, total = EXPECTED[event.line_number]
        assert event.requested_bytes == _bytes(tried), event.line_number
        assert event.total_bytes == _bytes(total), event.line_number
        assert event.gpu_index == 0


def test_context_lines_are_not_oom_events() -> None:
    lines = corpus_file("oom_messages_from_issues.txt").read_text().splitlines()
    assert match_oom(lines[8]) is None  # line 9: the traceback line before line 10
    assert lines[14] == "" and match_oom(lines[14]) is None  # line 15: blank
    assert match_oom(lines[15]) is None  # line 16: "During handling of the above exception..."


def test_shapes_of_the_messages() -> None:
    lines = corpus_file("oom_messages_from_issues.txt").read_text().splitlines()
    by_line = {e.line_number: e for e in find_oom(lines)}
    assert by_line[2].exception == "RuntimeError"  # "RuntimeError:CUDA out of memory" (no space)
    assert by_line[4].exception is None  # a fragment starting at "Tried to allocate"
    assert by_line[6].exception == "torch.cuda.OutOfMemoryError"
    assert by_line[7].total_bytes == 6 * GiB and by_line[7].free_bytes == 0  # "capacty" (sic), 0 bytes free
    assert by_line[10].requested_bytes > by_line[10].total_bytes  # larger than the card
    assert by_line[14].exception == "torch.OutOfMemoryError"  # 2.5+ name
    assert by_line[18].exception == "torch.OutOfMemoryError"  # behind vLLM's log prefix
    assert by_line[19].exception is None  # no exception name at all
    assert by_line[1].requested_bytes == 13107200  # 12.50 MiB, exactly


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: out of memory",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,3,224,224]",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes.",
    ],
)
def test_other_frameworks_out_of_memory(line: str) -> None:
    event = match_oom(line)
    assert event is not None


def test_xla_size_in_bytes() -> None:
    event = match_oom("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes.")
    assert event is not None and event.requested_bytes == GiB


@pytest.mark.parametrize(
    "line",
    ["loss: 0.123 - memory: 2990", "Allocated memory 12 GiB", "{'loss': 1.2, 'memory': 2990}", ""],
)
def test_ordinary_lines_are_not_oom(line: str) -> None:
    assert match_oom(line) is None


def test_console_reader_reports_oom_with_line_numbers(tmp_path: Path) -> None:
    copy = renamed_copy(corpus_file("oom_messages_from_issues.txt"), tmp_path, "job.out")
    log = read_train_log(copy)
    assert [e.line_number for e in log.oom] == sorted(EXPECTED)
    assert log.oom[0].requested_bytes == int(12.5 * MiB)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: cuda OUT OF Memory. Tried to allocate",  # the case-blind recognizers
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64]",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1 bytes.",
        "torch.OutOfMemoryError",
        "Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity)",
    ],
)
def test_the_prefilter_lets_every_oom_message_through(line: str) -> None:
    from costctl.replay.oom import _RECOGNIZERS, may_hold_oom, oom_in

    assert any(p.search(line) for p in _RECOGNIZERS)
    assert may_hold_oom(line) and may_hold_oom(f"step 1 loss: 0.5\n{line}\nstep 2") and oom_in(line)


def test_the_prefilter_passes_every_corpus_oom_message_and_stops_a_flood() -> None:
    from costctl.replay.oom import _RECOGNIZERS, may_hold_oom, oom_in

    for line in corpus_file("oom_messages_from_issues.txt").read_text().splitlines():
        if any(p.search(line) for p in _RECOGNIZERS):
            assert may_hold_oom(line), line
    flood = "".join(f"step {i} loss: 0.5 - memory: 2990 Allocated memory\n" for i in range(1000))
    assert not may_hold_oom(flood) and not oom_in(flood)


def test_memory_in_use_is_read_from_both_pytorch_formats() -> None:
    lines = corpus_file("oom_messages_from_issues.txt").read_text().splitlines()
    by_line = {e.line_number: e for e in find_oom(lines)}
    # <= 2.0: "X already allocated; ... Y reserved in total by PyTorch" (before 1.5: "Y cached")
    assert by_line[2].allocated_bytes == _bytes("4.36 GiB") and by_line[2].reserved_bytes == _bytes("4.63 GiB")
    assert by_line[1].allocated_bytes == _bytes("8.57 MiB") and by_line[1].reserved_bytes == _bytes("4.68 MiB")
    # >= 2.1: "X is allocated by PyTorch, and Z is reserved by PyTorch but unallocated": reserved = X + Z
    assert by_line[7].allocated_bytes == _bytes("2.93 GiB")
    assert by_line[7].reserved_bytes == _bytes("2.93 GiB") + _bytes("2.30 GiB")
    # vLLM's line has "with 46.00 MiB allocated in private pools" between the two
    assert by_line[18].allocated_bytes == _bytes("13.73 GiB")
    assert by_line[18].reserved_bytes == _bytes("13.73 GiB") + _bytes("736.86 MiB")
    for event in by_line.values():
        assert event.allocated_bytes is not None and event.reserved_bytes is not None, event.line_number
    assert match_oom("RuntimeError: CUDA error: out of memory").allocated_bytes is None  # type: ignore[union-attr]
