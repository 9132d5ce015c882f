"""Lines past MAX_LINE_CHARS are skipped, and counted (LineParser.long_lines, TrainLog.long_lines,
``costctl analyze``'s output): the same count whatever the engine, the chunking or the reader."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from costctl.progress import LineParser
from costctl.progress.lines import MAX_LINE_CHARS, _scan, count_long_lines
from costctl.replay.readers import read_train_log

from helpers import costctl_env, run_costctl

ENGINES = ["python"] + (["native"] if _scan is not None else [])
M = MAX_LINE_CHARS


def _text() -> str:
    return ("iter 1: loss 2.5, time 1ms\n"
            + "iter 2: loss 2.0 " + "x" * (10 * M) + "\n"      # far too long
            + "y" * M + "\r"                                   # exactly the limit: kept
            + "z" * (M + 1) + "\r\n"                           # one over
            + "é" * (M // 2 + 1) + "\n"                        # bytes > M, characters <= M: kept
            + "é" * (M + 1) + "\n"                             # characters > M, bytes < 4 M
            + "iter 3: loss 1.5, time 1ms\n"
            + "w" * (3 * M))                                   # unfinished at the end, too long


def test_count_long_lines_counts_characters_not_bytes() -> None:
    text = _text() + "\n"
    assert count_long_lines(text) == 4
    assert count_long_lines(text.encode()) == 4
    assert count_long_lines("a\n" * 100_000) == 0
    assert count_long_lines("a" * (M + 1)) == 1 and count_long_lines("a" * M) == 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk", [None, 1 << 20, 65_537, 4096])
def test_the_parser_counts_every_skipped_line(engine: str, chunk: int | None) -> None:
    data = _text().encode()
    parser = LineParser(engine=engine)
    values = []
    pieces = [data] if chunk is None else [data[i:i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        values += list(parser.feed_batch(piece, None).values)
    values += list(parser.flush_batch(None).values)
    assert values == [2.5, 1.5]
    assert parser.long_lines == 4


def test_a_random_split_counts_the_same() -> None:
    rng = random.Random(3)
    data = _text().encode() * 2
    for engine in ENGINES:
        parser = LineParser(engine=engine)
        pos = 0
        while pos < len(data):
            step = rng.choice((1, 7, 4096, 70_000, 300_000))
            parser.feed_batch(data[pos:pos + step], None)
            pos += step
        parser.flush_batch(None)
        assert parser.long_lines == 8, engine


@pytest.mark.parametrize("streamed", [False, True])
def test_analyze_reads_and_says_the_count(tmp_path: Path, streamed: bool) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(_text().encode())
    log = read_train_log(path, streamed=streamed)
    assert log.count("train") == 2 and log.long_lines == 4
    proc = run_costctl("analyze", "--train-log", str(path), env=costctl_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert b"4 lines longer than 65,536 characters skipped" in proc.stdout
    proc = run_costctl("analyze", "--train-log", str(path), "--format", "json", env=costctl_env(tmp_path))
    assert json.loads(proc.stdout)["train_log"]["long_lines_skipped"] == 4
