"""costctl.progress.lines: the loss shapes training jobs print, what must not be taken for a
loss, and the live chunk re-assembly (split lines, CRLF, tqdm's \\r, ANSI codes, huge lines)."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone

import pytest

from costctl.errors import UsageError
from costctl.progress import LineParser, parse_epoch_header, parse_line
from costctl.progress.lines import MAX_LINE_CHARS, compile_loss_regex

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _facts(points):
    return [(p.kind, p.name, p.value, p.step, p.epoch, p.total) for p in points]


@pytest.mark.parametrize(
    "line,expected",
    [
        ("loss: 0.123", [("train", "loss", 0.123, None, None, None)]),
        ("loss=0.123", [("train", "loss", 0.123, None, None, None)]),
        ("Loss 0.123", [("train", "Loss", 0.123, None, None, None)]),
        ("LOSS = 1e-3", [("train", "LOSS", 0.001, None, None, None)]),
        ("train/loss: 0.5, val/loss: 0.7",
         [("train", "train/loss", 0.5, None, None, None), ("eval", "val/loss", 0.7, None, None, None)]),
        # Hugging Face Trainer
        ("{'loss': 1.1409, 'grad_norm': 2.757542133331299, 'learning_rate': 1.817850637522769e-05, 'epoch': 0.91}",
         [("train", "loss", 1.1409, None, 0.91, None)]),
        ("{'eval_loss': 0.6597685217857361, 'eval_rouge-1': 46.5406, 'eval_runtime': 2725.7664, 'epoch': 1.0}",
         [("eval", "eval_loss", 0.6597685217857361, None, 1.0, None)]),
        ('{"loss": 0.25, "step": 120, "epoch": 2}', [("train", "loss", 0.25, 120, 2.0, None)]),
        # transformers 5.x: values printed as strings (f"{v:.4g}")
        ("{'loss': '0.695', 'grad_norm': '1.21', 'learning_rate': '4.9e-05', 'epoch': '0.1'}",
         [("train", "loss", 0.695, None, 0.1, None)]),
        ("{'eval_loss': '0.6598', 'eval_runtime': '2726', 'epoch': '1'}", [("eval", "eval_loss", 0.6598, None, 1.0, None)]),
        ("{'loss': 'inf', 'grad_norm': 'nan', 'epoch': '0.2', 'step': '40'}",
         [("train", "loss", math.inf, 40, 0.2, None)]),
        # a quote opened and not closed (or closed by the other quote): no value
        ("{'loss': '0.695, 'epoch': '0.1'}", []),
        ("{'loss': \"0.695', 'epoch': 0.1}", []),
        # a stale tqdm bar in front of the dict (SLURM log): its count is not the dict's step
        (" 21%|██        | 100/471 [00:36<02:13,  2.79it/s]{'loss': 0.6879, 'grad_norm': 3.1, 'epoch': 0.06}",
         [("train", "loss", 0.6879, None, 0.06, None)]),
        # Keras
        ("9595/9595 [==============================] - 1s - loss: 0.6242 - acc: 0.6295 - val_loss: 0.5265 - val_acc: 0.7470",
         [("train", "loss", 0.6242, None, None, None), ("eval", "val_loss", 0.5265, None, None, None)]),
        ("469/469 ━━━━━━━━━━━━━━━━━━━━ 3s 6ms/step - accuracy: 0.9155 - loss: 0.2936 - val_accuracy: 0.9577 - val_loss: 0.1416",
         [("train", "loss", 0.2936, None, None, None), ("eval", "val_loss", 0.1416, None, None, None)]),
        # nanoGPT
        ("iter 100: loss 2.3456, time 1440.31ms, mfu 0.01%", [("train", "loss", 2.3456, 100, None, None)]),
        ("step 500: train loss 2.3000, val loss 2.4000", [("eval", "val loss", 2.4, 500, None, None)]),
        # scikit-learn MLP verbose
        ("Iteration 5, loss = 0.42", [("train", "loss", 0.42, 5, None, None)]),
        # epoch k/N
        ("epoch 3/80 loss: 0.1234", [("train", "loss", 0.1234, None, 3.0, 80)]),
        ("Epoch [3/80], Step [100/600], Loss: 0.2500",
         [("train", "Loss", 0.25, 1300, 3.0, 48000)]),  # per-epoch steps made global
        ("epoch 7/120 val_loss: 0.2345", [("eval", "val_loss", 0.2345, None, 7.0, 120)]),
        # tqdm postfix and description
        ("  5%|▌         | 50/1000 [00:10<03:10,  4.99it/s, loss=2.31]", [("train", "loss", 2.31, 50, None, 1000)]),
        ("Epoch 0:  50%|█████     | 25/50 [00:01<00:01, 20.00it/s, v_num=0, train_loss=0.345]",
         [("train", "train_loss", 0.345, None, 0.0, None)]),  # the bar counts within the epoch
        # detectron2 console
        ("eta: 0:10:00  iter: 19  total_loss: 2.725  loss_cls: 0.6  loss_box_reg: 0.1  lr: 0.0001",
         [("train", "total_loss", 2.725, 19, None, None)]),
        ("loss: tensor(0.6931, grad_fn=<NllLossBackward0>)", [("train", "loss", 0.6931, None, None, None)]),
        ("Epoch 4 | running_loss: 0.41 | kl_loss: 0.02", [("train", "running_loss", 0.41, None, 4.0, None)]),
        ("Validation Loss: 0.52", [("eval", "Validation Loss", 0.52, None, None, None)]),
        ("{'train_loss': 0.3, 'val_loss': 0.4, 'epoch': 2}",
         [("train", "train_loss", 0.3, None, 2.0, None), ("eval", "val_loss", 0.4, None, 2.0, None)]),
    ],
)
def test_shapes(line: str, expected: list) -> None:
    assert _facts(parse_line(line)) == expected
    assert all(p.time is None for p in parse_line(line))


@pytest.mark.parametrize(
    "line,kind,name,sign",
    [
        ("loss: nan", "train", "loss", 0),
        ("loss=NaN", "train", "loss", 0),
        ("iter 425: loss nan, time 1440.31ms, mfu 0.01%", "train", "loss", 0),
        ("loss: inf", "train", "loss", 1),
        ("loss: -inf", "train", "loss", -1),
        ("val_loss: Infinity", "eval", "val_loss", 1),
        ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}", "train", "loss", 0),
    ],
)
def test_divergent_values_are_points(line: str, kind: str, name: str, sign: int) -> None:
    [point] = parse_line(line)
    assert (point.kind, point.name, point.finite) == (kind, name, False)
    if sign == 0:
        assert math.isnan(point.value)
    else:
        assert point.value == sign * math.inf


@pytest.mark.parametrize(
    "line",
    [
        "lr=0.001",
        "loss_scale: 65536",
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
        "train_runtime: 187.9766",
        "prediction_loss_only=False,",
        "{'train_runtime': 64358.151, 'train_samples_per_second': 0.511, 'train_loss': 0.4479398911550831, 'epoch': 10.0}",
        "  train_loss               =      0.4479",  # HF's "***** train metrics *****" block
        "  eval_loss                =      0.4917",
        "loss: abc",
        "loss: ",
        "losses: 0.3",
        "test_loss: 0.31",
        "kl_loss: 0.02  recon_loss: 0.5",  # components, not the loss
        "{'predict_loss': 0.5, 'predict_runtime': 3.0}",
        "Training loss did not improve more than tol=0.000100 for two consecutive epochs. Stopping.",
        "Epoch 00001: val_loss improved from inf to 0.52652, saving model to weights.h5",
        "Map: 100%|██████████| 67349/67349 [00:03<00:00, 19000.00 examples/s]",
        "loss: 0.12abc",
        "\x00\x01\xff loss \ufffd\ufffd",
        "",
    ],
)
def test_not_a_loss(line: str) -> None:
    assert parse_line(line) == []


def test_binary_junk_never_raises() -> None:
    junk = bytes(range(256)).decode("latin-1") * 50 + "loss" + bytes(range(128, 256)).decode("utf-8", "replace")
    parser = LineParser()
    assert parser.feed(junk, T0) + parser.flush(T0) == []


def test_ansi_colours_and_cursor_codes_are_stripped() -> None:
    line = "\x1b[2K\x1b[1;32mepoch 2/10\x1b[0m \x1b[33mloss:\x1b[0m \x1b[1m0.5\x1b[0m \x1b]0;title\x07"
    assert _facts(parse_line(line)) == [("train", "loss", 0.5, None, 2.0, 10)]


def test_chunks_split_anywhere_give_the_same_points() -> None:
    text = ("Epoch 1/3\r\n"
            "  1/10 [==>....] - ETA: 1s - loss: 0.9\r"
            "10/10 [==========] - 1s - loss: 0.8 - val_loss: 0.85\r\n"
            "iter 7: loss 2.5, time 1ms\n"
            "\x1b[32m{'loss': 0.7, 'epoch': 0.5}\x1b[0m\r\n"
            " 50%|█████     | 5/10 [00:01<00:01, 5.0it/s, loss=1.25]\r"
            " 60%|██████    | 6/10 [00:01<00:01, 5.0it/s, loss=1.125]\r\n"
            "Iteration 9, loss = 0.33")
    parser = LineParser()
    whole = parser.feed(text, T0) + parser.flush(T0)
    expected = [("train", "loss", 0.9, None, 1.0, 3), ("train", "loss", 0.8, None, 1.0, 3),
                ("eval", "val_loss", 0.85, None, 1.0, 3), ("train", "loss", 2.5, 7, 1.0, None),
                ("train", "loss", 0.7, None, 0.5, None), ("train", "loss", 1.25, 5, 1.0, 10),
                ("train", "loss", 1.125, 6, 1.0, 10), ("train", "loss", 0.33, 9, 1.0, None)]
    assert _facts(whole) == expected
    for size in (1, 2, 3, 5, 7, 64):
        parser = LineParser()
        pieces = [parser.feed(text[i : i + size], T0) for i in range(0, len(text), size)]
        assert _facts([p for piece in pieces for p in piece] + parser.flush(T0)) == expected, size
    for cut in range(len(text) + 1):  # every single split point
        parser = LineParser()
        got = parser.feed(text[:cut], T0) + parser.feed(text[cut:], T0) + parser.flush(T0)
        assert _facts(got) == expected, cut


def test_crlf_counts_once_even_split_across_chunks() -> None:
    parser = LineParser()
    parser.feed("loss: 1\r", T0)
    parser.feed("\nloss: 2\r\n", T0)
    parser.feed("\r\n", T0)  # an empty line of its own
    assert parser.lines_seen == 3
    parser = LineParser()
    parser.feed("a\rb\nc\r\nd", T0)
    assert parser.lines_seen == 3
    parser.flush(T0)
    assert parser.lines_seen == 4


def test_a_line_is_parsed_when_its_end_arrives_with_that_time() -> None:
    parser = LineParser()
    assert parser.feed("iter 5: loss 2.1", T0) == []
    later = T0 + timedelta(seconds=3)
    [point] = parser.feed("0, time 1ms\n", later)
    assert (point.value, point.step, point.time) == (2.10, 5, later)
    assert parser.feed("loss: 0.5", later) == []
    [last] = parser.flush(later)
    assert last.value == 0.5
    assert parser.flush(later) == []


def test_tqdm_carriage_return_updates_each_count() -> None:
    parser = LineParser()
    bars = "".join(f"\r{p:3d}%|{'█' * (p // 10):10}| {p * 10}/1000 [00:{p:02d}<01:00, 9.9it/s, loss={3 - p / 100:.2f}]"
                   for p in (5, 10, 15))
    points = parser.feed(bars, T0) + parser.flush(T0)
    assert [(p.step, p.total, p.value) for p in points] == [(50, 1000, 2.95), (100, 1000, 2.9), (150, 1000, 2.85)]


def test_keras_epoch_header_gives_the_epoch_of_following_lines() -> None:
    assert parse_epoch_header("Epoch 2/10") == (2, 10)
    assert parse_epoch_header("Epoch 3") == (3, None)
    assert parse_epoch_header("Epoch 2/10 loss: 0.5") is None
    parser = LineParser()
    points = parser.feed("Epoch 2/10\n9595/9595 [====] - 1s - loss: 0.4 - val_loss: 0.5\n", T0)
    assert _facts(points) == [("train", "loss", 0.4, None, 2.0, 10), ("eval", "val_loss", 0.5, None, 2.0, 10)]
    # an epoch on the line itself wins over the header's
    assert _facts(parser.feed("epoch 9/12 loss: 0.3\n", T0)) == [("train", "loss", 0.3, None, 9.0, 12)]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_huge_lines_are_skipped_with_bounded_memory(engine: str) -> None:
    from costctl.progress import lines

    if engine == "native" and lines._scan is None:
        pytest.skip("the C extension costctl.progress._scan is not built")
    parser = LineParser(engine=engine)
    # the pending line is held as text (characters) or, natively, as bytes (<= 4 a character)
    bound = MAX_LINE_CHARS if engine == "python" else lines._MAX_LINE_BYTES
    started = time.perf_counter()
    block = "x" * 4096
    for _ in range(256):  # 1 MiB without a newline, as a stuck progress bar might write
        assert parser.feed(block, T0) == []
        assert sum(len(p) for p in parser._pending) <= bound
    points = parser.feed(" loss: 9.9\nloss: 0.3\n", T0)
    assert [p.value for p in points] == [0.3]  # the 1 MiB line (which ended in a loss) is dropped whole
    assert time.perf_counter() - started < 2.0
    assert parse_line("loss: 0.1 " + "y" * MAX_LINE_CHARS) == []


def test_custom_regex_named_groups() -> None:
    parser = LineParser(r"it=(?P<step>\d+) obj=(?P<loss>\S+)(?: heldout=(?P<eval_loss>\S+))?")
    points = parser.feed("it=3 obj=0.75\nit=4 obj=nan heldout=0.9\nloss: 0.1\n", T0)
    assert [(p.kind, p.step, p.value) for p in points][:2] == [("train", 3, 0.75), ("train", 4, points[1].value)]
    assert math.isnan(points[1].value)
    assert [(p.kind, p.value) for p in points[2:]] == [("eval", 0.9)]  # built-in shapes are off


def test_custom_regex_with_one_group() -> None:
    parser = LineParser(r"perplexity-ish (\S+)")
    assert [p.value for p in parser.feed("perplexity-ish 12.5\nperplexity-ish abc\n", T0)] == [12.5]


@pytest.mark.parametrize("pattern,fragment", [("loss: (\\d+", "not a valid regular expression"),
                                              ("a(b)(c)", "no group named 'loss'"),
                                              ("plain", "no group named 'loss'")])
def test_bad_custom_regex_is_a_usage_error_naming_it(pattern: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        LineParser(pattern)
    assert pattern in str(info.value) and fragment in str(info.value)
    assert info.value.exit_code == 2
    with pytest.raises(UsageError):
        compile_loss_regex(pattern)


@pytest.mark.realtime  # a throughput bound in real seconds
def test_prefilter_keeps_the_cost_of_ordinary_lines_low() -> None:
    noise = "".join(f"[rank0] step time {i}ms, throughput 1234 samples/s, lr=3e-4\n" for i in range(100_000))
    parser = LineParser()
    started = time.perf_counter()
    for i in range(0, len(noise), 65536):
        assert parser.feed(noise[i : i + 65536], T0) == []
    noise_s = time.perf_counter() - started
    assert parser.lines_seen == 100_000
    # 100k lines (~6 MB) in well under a second on any machine that runs the suite
    assert noise_s < 1.5, noise_s
