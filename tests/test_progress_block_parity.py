"""Parity: the block reader (``LineParser.feed_batch``) gives exactly the points of the old
per-line parser (frozen in ``legacy_lines.py``) on every corpus file and on a synthetic log
holding every shape, whatever the chunking (text or raw bytes split mid UTF-8 sequence)."""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import pytest

import legacy_lines
from costctl.progress.batch import PointBatch
from costctl.progress.lines import MAX_LINE_CHARS, LineParser, candidate_lines
from helpers import CORPUS

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

SYNTHETIC = (
    "Epoch 1/3\r\n"
    "  1/10 [==>....] - ETA: 1s - loss: 0.9\r"
    "10/10 [==========] - 1s 104us/step - loss: 0.8123 - acc: 0.6 - val_loss: 0.85 - val_acc: 0.6\r\n"
    "iter 100: loss 2.3456, time 1440.31ms, mfu 0.01%\n"
    "step 500: train loss 2.1000, val loss 2.2000\n"
    "{'loss': 0.12, 'grad_norm': 1.1, 'learning_rate': 2e-05, 'epoch': 0.5}\n"
    "{'loss': '0.1234', 'epoch': 0.6}\n"
    "{'eval_loss': 0.66, 'eval_runtime': 1.2, 'epoch': 1.0}\n"
    "{'train_runtime': 10.0, 'train_loss': 0.4479, 'epoch': 3.0}\n"
    "  train_loss               =     0.4479\n"
    "\x1b[32m{'loss': 0.7, 'epoch': 0.5}\x1b[0m\r\n"
    " 50%|█████     | 5/10 [00:01<00:01, 5.0it/s, loss=1.25]\r"
    " 60%|██████    | 6/10 [00:01<00:01, 5.0it/s, loss=1.125]\r\n"
    "Epoch 0:  50%|█████     | 25/50 [00:01<00:01, loss=0.5, v_num=1]\n"
    "Iteration 9, loss = 0.33\n"
    "Epoch [3/80], Step [100/600], Loss: 0.25\n"
    "Epoch 4 | running_loss: 0.41 | kl_loss: 0.02\n"
    "epoch 3/80 loss: 0.1234\n"
    "EPOCH 5/9\n"
    "TOTAL LOSS: 3.5 STEP 4\n"
    "LoSS: 1.0\n"
    "loss: nan\nloss=inf\nLoss -inf\nloss: abc\nloss_scale: 65536\nlr=0.001 loss=1e-3\n"
    "train/loss: 0.1 global_step 12/100\n"
    "validation loss: 0.9 eval_loss 0.8\n"
    "test loss: 0.5\n"
    "\x1b[2K\x1b[1;32mepoch 2/10\x1b[0m \x1b[33mloss:\x1b[0m \x1b[1m0.5\x1b[0m \x1b]0;title\x07\n"
    "ﬁnal loss: 0.3 ſtep 4\n"
    "naïve lоss 1.0 (cyrillic o) loss=0.2\n"
    + "x" * (MAX_LINE_CHARS + 10) + " loss: 9.9\n"
    + "x" * MAX_LINE_CHARS + "\n"
    + "loss: 1." + "5" * (MAX_LINE_CHARS - 8) + "\n"
    "Epoch 7\n"
    "\n\r\r\n\n"
    "[2026-01-01 10:00:00] INFO worker: nothing to see here\n"
    "Iteration 10, loss = 0.31"
)


def _key(p) -> tuple:
    return (p.kind, p.name, repr(p.value), p.step, p.epoch, p.total, p.time)


def _legacy(text: str, loss_regex: str | None = None) -> tuple[list[tuple], int]:
    parser = legacy_lines.LineParser(loss_regex)
    points = parser.feed(text, T0) + parser.flush(T0)
    return [_key(p) for p in points], parser.lines_seen


def _block(pieces, loss_regex: str | None = None) -> tuple[list[tuple], int]:
    parser = LineParser(loss_regex)
    batch = PointBatch()
    for piece in pieces:
        batch.extend(parser.feed_batch(piece, T0))
    batch.extend(parser.flush_batch(T0))
    return [_key(p) for p in batch.points()], parser.lines_seen


def _chunks(data, size: int):
    return [data[i : i + size] for i in range(0, len(data), size)]


def _corpus_texts() -> list[str]:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus {CORPUS} not there")
    return sorted(p.name for p in CORPUS.iterdir() if p.is_file())


@pytest.mark.parametrize("name", _corpus_texts() if CORPUS.is_dir() else ["(no corpus)"])
def test_corpus_file_parity(name: str) -> None:
    if not CORPUS.is_dir():
        pytest.skip("no corpus")
    data = (CORPUS / name).read_bytes()
    text = data.decode("utf-8", errors="replace")
    expected = _legacy(text)
    assert _block([data]) == expected
    assert _block([text]) == expected
    for size in ((1, 3) if len(data) < 16384 else (61,)) + (4093, 1 << 20):
        assert _block(_chunks(data, size)) == expected, size


def test_synthetic_parity_every_shape() -> None:
    expected, lines = _legacy(SYNTHETIC)
    assert len(expected) > 20 and lines > 40  # the log does hold points
    for data in (SYNTHETIC, SYNTHETIC.encode()):
        for size in ((1,) if isinstance(data, bytes) else (2, 5)) + (7, 64, 4096, len(data)):
            assert _block(_chunks(data, size)) == (expected, lines), (type(data), size)


def test_random_splits_parity() -> None:
    rng = random.Random(13)
    data = (SYNTHETIC * 3).encode()
    expected = _legacy(data.decode())
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(data)), 12))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        assert _block(pieces) == expected


def test_custom_regex_parity() -> None:
    regex = r"step (?P<step>\d+).*?(?P<loss>[\d.]+)"
    data = SYNTHETIC + "\nstep 12 my metric 0.5\n"
    expected = _legacy(data, regex)
    assert expected[0]
    for size in (1, 13, len(data)):
        assert _block(_chunks(data, size), regex) == expected


def test_utf8_split_mid_sequence_is_decoded_whole() -> None:
    data = "é loss: 0.5 ✓\n".encode() * 3
    for size in (1, 2, 3):
        points, _ = _block(_chunks(data, size))
        assert [p[2] for p in points] == ["0.5"] * 3


def test_candidates_skip_junk_lines() -> None:
    text = "junk line\nloss: 1\nmore junk\r  epoch 2\r\nLOSS=3 loss=4\n"
    spans = candidate_lines(text)
    assert [text[a:b] for a, b in spans] == ["loss: 1", "  epoch 2", "LOSS=3 loss=4"]


def test_times_column_is_posix_seconds() -> None:
    parser = LineParser()
    batch = parser.feed_batch(b"loss: 1\n", T0)
    assert batch.times[0] == T0.timestamp()
    batch = parser.feed_batch(b"loss: 2\n", 12.5)
    assert batch.times[0] == 12.5
    assert math.isnan(parser.feed_batch("loss: 3\n", None).times[0])


@pytest.mark.parametrize("line", [
    "{'loss': 0.1234, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.5}",
    "{'loss': -3, 'grad_norm': 0, 'learning_rate': 1.0e-4, 'epoch': 2}",
    "iter 100: loss 2.3456, time 1440.31ms, mfu 0.01%",
    "iter 0: loss 10.9876, time 3ms, mfu -100.00%",
])
def test_fast_paths_equal_the_general_parse(line: str) -> None:
    from costctl.progress import lines

    fast = lines._parse_fast(line)
    assert fast is not None
    assert [tuple(map(repr, p)) for p in fast] == [tuple(map(repr, p)) for p in lines._parse_raw(line)]
    assert _legacy("Epoch 2/9\n" + line + "\n") == _block(["Epoch 2/9\n" + line + "\n"])


@pytest.mark.parametrize("line", [
    "{'loss': nan, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.5}",
    # an overflowing literal is no number (issue 17): only the general parse decides
    "{'loss': 1e999, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 1e999}",
    "iter 1: loss 1e400, time 3ms, mfu 1.00%",
    "{'loss': 0.1, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.5, 'step': 3}",
    "iter 100: loss 2.3456, time 1440.31ms, mfu 0.01% val_loss 3.0",
    "iter 100: loss nan, time 1440.31ms, mfu 0.01%",
])
def test_fast_paths_leave_other_shapes_to_the_general_parse(line: str) -> None:
    from costctl.progress import lines

    assert lines._parse_fast(line) is None
    assert _legacy(line + "\n") == _block([line + "\n"])


BLOCK_FAST_LINES = [
    "{'loss': 0.1234, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.5}",
    "iter 100: loss 2.3456, time 1440.31ms, mfu 0.01%",
    "  10%|#         | 10/100 [00:10<00:10, 9.9it/s, loss=0.110]",
    "  0%|          | 0/100 [00:00<?, 1.25s/it, loss=1e-3]",
    "9595/9595 [==============================] - 1s - loss: 0.6200 - acc: 0.6295 - val_loss: 0.5300 - val_acc: 0.7470",
    "10/10 [==========] - 1s 104us/step - loss: 0.8123 - acc: 0.6",
    "step 500: train loss 2.1000, val loss 2.2000",
    "loss: 0.5",
    "loss=-3",
    "Epoch 3/10",
]
BLOCK_NEAR_LINES = [
    "{'loss': 0.1, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.5, 'step': 3}",
    "iter 100: loss 2.3456, time 1440.31ms, mfu 0.01% val_loss 3.0",
    "Epoch 0:  10%|#         | 10/100 [00:10<00:10, 9.9it/s, loss=0.110]",
    " 10%|█         | 10/100 [00:10<00:10, 9.9it/s, loss=0.110]",
    "9595/9595 [=====] - 1s - loss: 0.62 - acc: 0.63 - val_loss: 0.53 - val_top5: 0.9",
    "\x1b[32mloss: 0.5\x1b[0m",
    "loss: 0.5 step 3",
    "Epoch 3/10 - loss: 0.2",
    "Epoch 3",
]


def _block_kinds(line: str) -> list[bool]:
    from costctl.progress import lines

    return [not row[-1] for row in lines._BLOCK_RE.findall("\n" + line + "\n")]


@pytest.mark.parametrize("line", BLOCK_FAST_LINES)
def test_block_shapes_are_read_in_place_and_equal_the_legacy_parse(line: str) -> None:
    assert _block_kinds(line) == [True]  # a strict shape: the per-line parser is not called
    for context in ("", "Epoch 2/9\n", "Epoch 4\n"):
        text = f"noise\n{context}{line}\r{line}\r\n{line}\n{context}{line}\n"
        assert _block([text]) == _legacy(text), context
        assert _block([text.encode()[i : i + 7] for i in range(0, len(text.encode()), 7)]) == _legacy(text)


@pytest.mark.parametrize("line", BLOCK_NEAR_LINES)
def test_near_block_shapes_go_to_the_per_line_parser(line: str) -> None:
    assert _block_kinds(line) == [False]
    text = f"Epoch 2/9\n{line}\n{line}\r\n"
    assert _block([text]) == _legacy(text)


@pytest.mark.parametrize("window", [1, 40, 97, 4096])
def test_block_windows_give_the_same_points(window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from costctl.progress import lines

    monkeypatch.setattr(lines, "_WINDOW", window)
    text = "\n".join(BLOCK_FAST_LINES + BLOCK_NEAR_LINES) + "\r\n" + SYNTHETIC
    text = text * 3
    assert _block([text]) == _legacy(text)
    assert _block([text.encode()]) == _legacy(text)
