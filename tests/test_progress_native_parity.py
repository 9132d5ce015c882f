"""Parity of the two block-reader engines (``costctl.progress.lines.ENGINE``): the native C
scanner (``costctl.progress._scan``) and the pure-Python reader each give, column for column,
the batch of the old per-line parser frozen in ``legacy_lines.py`` (keys in order, every column,
NaN equal to NaN, -0.0 apart from 0.0) and the same ``lines_seen``, on the corpus, on
bench_parse's generated block, on junk, binary and over-long lines, and under fuzzed chunk
splits and line mixtures (Hypothesis). A native test is skipped, with its reason, where the
extension is not built; with ``CI=true`` the build itself is asserted."""

from __future__ import annotations

import importlib.util
import math
import os
import random
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import legacy_lines
from costctl.errors import UsageError
from costctl.progress import lines
from costctl.progress.batch import PointBatch
from helpers import CORPUS
from test_progress_block_parity import BLOCK_FAST_LINES, BLOCK_NEAR_LINES, SYNTHETIC

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NATIVE_BUILT = lines._scan is not None
ENGINES = [
    "python",
    pytest.param("native", marks=pytest.mark.skipif(not NATIVE_BUILT, reason="costctl.progress._scan not built (no C compiler at install)")),
]
needs_native = pytest.mark.skipif(not NATIVE_BUILT, reason="costctl.progress._scan not built (no C compiler at install)")

# Lines that exercise the edges of the native shapes: number conversion (overflow, underflow,
# subnormals, -0, the digit bounds), near misses of every shape, escapes, control bytes.
EDGE_LINES = [
    "loss: 1e400", "loss: -1e400", "loss: 1e-400", "loss: 4.9e-324", "loss: 2.2250738585072011e-308",
    "loss: -0", "loss: -0.0", "loss=0.1e9999", "loss: 1e99999", "loss: 0.30000000000000004441",
    "loss: " + "9" * 30, "loss: " + "9" * 31, "loss: 1." + "1" * 30, "loss: 1." + "1" * 31,
    "loss: 1e-", "loss: 1e+", "loss: 1.", "loss: .5", "loss: +1", "loss:  1", "loss:1", "loss=1 ", "loss: 1e5x",
    "loss: nan", "loss: inf", "loss = 2", "LOSS: 2", "loss: 1E5",
    "iter 1: loss 1, time 1ms, mfu 1%", "iter " + "1" * 18 + ": loss 1.5, time 1ms, mfu 1%",
    "iter " + "1" * 19 + ": loss 1.5, time 1ms, mfu 1%", "iter 1: loss 1.5, time 1.ms, mfu 1%",
    "iter 1: loss 1.5, time 1.5ms, mfu -0.5%", "iter 1: loss 1.5, time 1.5ms, mfu --0.5%",
    "{'loss': 1e-3, 'grad_norm': 1, 'learning_rate': 1, 'epoch': -1e999}",
    "{'loss': 1, 'grad_norm': 1, 'learning_rate': 1, 'epoch': 1}x",
    "{'loss': 1, 'grad_norm': 1, 'learning_rate': 1, 'epoch': 1e5}",
    "{'loss': '0.695', 'grad_norm': '1.21', 'learning_rate': '4.9e-05', 'epoch': '0.1'}",
    "{'loss': '0.695, 'epoch': '0.1'}", "{'loss': \"0.695', 'epoch': 0.1}", "{'loss': 'tensor(0.5', 'epoch': '1e999'}",
    "{'eval_loss': '0.66', 'eval_runtime': '1.2', 'epoch': '1.0', 'step': '12'}", "{'loss': '', 'epoch': '1'}",
    "{\"loss\": \"nan\", \"grad_norm\": \"inf\"}", "{'a': 'b', 'loss': '1'}", "{'loss': '1'x, 'epoch': 2}",
    "        1%|| 1/2 [1<1, 1it/s, loss=1]", "         1%|| 1/2 [1<1, 1it/s, loss=1]",
    "1000%|| 1/2 [1<1, 1it/s, loss=1]", "1%|" + "#" * 100 + "| 1/2 [1:2:3<1, 1s/it, loss=1]",
    "1%|" + "#" * 101 + "| 1/2 [1<1, 1it/s, loss=1]", "1%|| 1/2 [1:2:3:4<1, 1it/s, loss=1]",
    "1%|| 1/2 [12345<1, 1it/s, loss=1]", "1%|| 1/2 [1<" + "?" * 12 + ", 1it/s, loss=1]",
    "1%|| 1/2 [1<" + "?" * 13 + ", 1it/s, loss=1]", "1%|| 1/2 [1<1, 1.it/s, loss=1]",
    "1/2 [] - 1s - loss: 1", "1/2 [" + "=" * 201 + "] - 1s - loss: 1", "1/2 [=] - 1s 5ms/step - loss: 1 - acc: 1",
    "1/2 [=] - 1s 5xs/step - loss: 1", "1/2 [=] - 1s - loss: 1 - acc: x", "1/2 [=] - 1s - loss: 1 - val_loss: 2 - val_acc: 3",
    "1/2 [=] - 1s - loss: 1 - val_loss: 2 - val_acc: x", "1/2 [=] - 1s - loss: 1 - acc: 1 - val_loss: 2",
    "step 1 loss: 0.5", "step 1 loss: nan", "step 1 loss:0.5", "step 1 loss: 0.5 ", "step " + "1" * 18 + " loss: 1",
    "step " + "1" * 19 + " loss: 1", "step 1/2 loss: 1", "step 1  loss: 1", "step 1 loss: 1e400", "step 1 loss: -2.5e-3",
    "step 1: train loss 1, val loss 2", "step 1: train loss x, val loss 2", "step 1: train loss 1, val loss 2 ",
    "Epoch 1/2", "Epoch 0/0", "Epoch " + "1" * 18 + "/2", "Epoch " + "1" * 19 + "/2", "Epoch 3", "EPOCH 4/5",
    "  epoch 6 / 7 ", "Epoch [8/9]:", "\x1b[1mEpoch 5/6\x1b[0m", "epoch\t7", "Epoch 2/3 x", "Epoch\x082/3",
    "lo\x08ss: 1", "l\x00oss: 2", "loss:\x001", "\x1b[2Kloss: 3", "loss: 4\x1b[0m", "\x1b]0;loss: 5\x07",
    " 50%|█████     | 5/10 [00:01<00:01, 5.0it/s, loss=1.25]", "Epoch 0:  50%|█████▌    | 25/50 [00:01<00:01, loss=0.5, v_num=1]",
    "━━━━╸━━ 3/9 loss: 2", "loss:█1", "loss █ 1", "█loss 1", "{'l█': 1, 'loss': 2}", "  train_█ = 1", "  train_x = █",
    "step 5: train loss █, val loss 2", "▟ loss 1 ■ loss 2", "\x1b]0;█\x07loss 3", "\x1b[█loss 4", "Epoch █ loss 1",
    "naïve loss: 6", "loss: ７", "lоss: 8 (cyrillic)", "\ufeffloss: 9", "poch", "POCH OSS", "oss",
]


def _cols(batch: PointBatch) -> tuple:
    return (
        list(batch.keys), list(batch.series), [repr(v) for v in batch.values], list(batch.steps),
        [repr(e) for e in batch.epochs], list(batch.totals), [repr(t) for t in batch.times],
    )


def _legacy(text: str) -> tuple[tuple, int]:
    parser = legacy_lines.LineParser()
    points = parser.feed(text, T0) + parser.flush(T0)
    return _cols(PointBatch.from_points(points)), parser.lines_seen


def _read(pieces, engine: str) -> tuple[tuple, int]:
    parser = lines.LineParser(engine=engine)
    batch = PointBatch()
    for piece in pieces:
        batch.extend(parser.feed_batch(piece, T0))
    batch.extend(parser.flush_batch(T0))
    return _cols(batch), parser.lines_seen


def _chunks(data, size: int):
    return [data[i : i + size] for i in range(0, len(data), size)]


def _check(data: bytes | str, splits=(None,)) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    expected = _legacy(text)
    for engine in ("python", "native") if NATIVE_BUILT else ("python",):
        for size in splits:
            pieces = [data] if size is None else _chunks(data, size)
            assert _read(pieces, engine) == expected, (engine, size)


def test_ci_builds_the_native_engine() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("CI is not 'true': a machine without a C compiler may run the pure-Python engine")
    assert lines.ENGINE == "native", "the C extension costctl.progress._scan was not built"


def test_engine_choice() -> None:
    assert lines.ENGINE in ("native", "python")
    assert lines.LineParser(engine="python").engine == "python"
    with pytest.raises(UsageError):
        lines.LineParser(engine="fortran")
    if NATIVE_BUILT:
        assert lines.LineParser(engine="native").engine == "native"
    else:
        with pytest.raises(UsageError):
            lines.LineParser(engine="native")


def test_env_var_forces_the_python_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTCTL_PARSER", "python")
    assert lines._select_engine() == ("python", None)
    monkeypatch.setenv("COSTCTL_PARSER", "")
    assert lines._select_engine()[0] == ("native" if NATIVE_BUILT else "python")


def _corpus_names() -> list[str]:
    return sorted(p.name for p in CORPUS.iterdir() if p.is_file()) if CORPUS.is_dir() else ["(no corpus)"]


@pytest.mark.parametrize("name", _corpus_names())
def test_corpus_parity_both_engines(name: str) -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus {CORPUS} not there")
    data = (CORPUS / name).read_bytes()
    _check(data, (None, 4093, 1 << 16))
    _check(data.decode("utf-8", "replace"))


def _bench_module():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_parse.py"
    spec = importlib.util.spec_from_file_location("bench_parse_for_parity", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_block_parity_both_engines() -> None:
    block, _ = _bench_module().make_block(random.Random(7), lines=3000)
    expected = _legacy(block)
    assert len(expected[0][2]) > 2000  # the block does hold points
    _check(block.encode(), (None, 997, 65536))
    _check(block)


def test_bench_general_block_parity_both_engines() -> None:
    block, _ = _bench_module().make_general_block(random.Random(11), lines=3000)
    expected = _legacy(block)
    assert len(expected[0][2]) > 2500 and len(expected[0][0]) > 5  # points, of several series
    _check(block.encode(), (None, 1009, 65536))
    _check(block)


def test_synthetic_and_edge_lines_parity() -> None:
    text = "\n".join(BLOCK_FAST_LINES + BLOCK_NEAR_LINES + EDGE_LINES) + "\r\n" + SYNTHETIC
    _check(text.encode(), (None, 1, 7, 64))
    _check(text, (None, 5))
    for context in ("", "Epoch 2/9\n", "Epoch 4\n", "EPOCH 5/6\n"):
        for line in EDGE_LINES:
            _check(f"{context}{line}\n{line}\rloss: 1\r\n{line}".encode())


def test_junk_binary_and_long_lines_parity() -> None:
    rng = random.Random(5)
    junk = bytes(rng.randrange(256) for _ in range(200_000))
    long_line = b"x" * (lines.MAX_LINE_CHARS - 8) + b" loss: 1"
    long_utf8 = "é" * (lines.MAX_LINE_CHARS - 9) + " loss: 2"  # 2 bytes a character, fits in characters
    too_long = "é" * lines.MAX_LINE_CHARS + " loss: 3"
    huge = b"y" * (lines._MAX_LINE_BYTES + 10) + b" loss: 4"
    data = b"\n".join([
        junk, long_line, long_utf8.encode(), too_long.encode(), huge, b"loss: 5",
        b"\xe2\x82 loss: 6", b"loss: 7\xff", b"\xc3", b"\xf0\x9f\x98 oss", b"{'loss': 8\x80}",
        b"Epoch 1/2\xe2", b"loss: 9\x00", junk[:5000] + b"loss: 10",
    ]) + b"\r\n" + junk[:3000]
    _check(data, (None, 1000, 4096, 70_001))


def test_split_utf8_and_crlf_across_chunks() -> None:
    data = "é loss: 0.5 ✓\r\nloss: 1\r\rEpoch 2/3\r\n\nloss: 2\r".encode() * 5
    _check(data, (None, 1, 2, 3))


@needs_native
def test_str_with_lone_surrogates_turns_python() -> None:
    text = "loss: 1\nbad \udcff loss: 2\nloss: 3\n"
    parser = lines.LineParser(engine="native")
    batch = parser.feed_batch(b"loss: 0\nlo", T0)
    batch.extend(parser.feed_batch(text, T0))
    batch.extend(parser.flush_batch(T0))
    assert parser.engine == "python"
    assert _cols(batch) == _legacy("loss: 0\nlo" + text)[0]


@needs_native
def test_gap_then_flush_native_equals_python() -> None:
    def run(engine: str) -> tuple:
        parser = lines.LineParser(engine=engine)
        batch = parser.feed_batch(b"loss: 1\nloss: 2", T0)
        parser.gap()
        batch.extend(parser.feed_batch(b"5\nloss: 3\nloss: 4\xe2", T0))
        batch.extend(parser.flush_batch(T0))
        return _cols(batch), parser.lines_seen

    assert run("native") == run("python")
    assert [float(v) for v in run("native")[0][2]] == [1.0, 3.0, 4.0]  # "loss: 4\\ufffd" reads


@needs_native
def test_scan_releases_the_gil_and_is_thread_safe() -> None:
    block, _ = _bench_module().make_block(random.Random(3), lines=2000)
    data = block.encode()
    expected = _read([data], "native")
    results: list = []

    def work() -> None:
        results.append(_read(_chunks(data, 8191), "native"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


@needs_native
def test_scan_rejects_bad_arguments() -> None:
    scan, merge = lines._scan.scan, lines._scan.merge
    with pytest.raises(ValueError):
        scan(b"loss: 1\n", 9, float("nan"), -1, 100)
    with pytest.raises(ValueError):
        merge(b"x" * 39, (0, 1, 2), b"", b"", b"", b"", b"", b"")
    with pytest.raises(ValueError):  # side positions past the strict points
        merge(b"", (0, 1, 2), b"\0" * 4, b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\1" + b"\0" * 7)


_POOL = BLOCK_FAST_LINES + BLOCK_NEAR_LINES + EDGE_LINES + SYNTHETIC.splitlines()[:40]
_line = st.one_of(
    st.sampled_from(_POOL),
    st.text(alphabet=st.sampled_from("loss: epochEPOCH0123456789.-e=/[]{}'|%#, \x1b\té"), max_size=40),
    st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.tuples(_line, st.sampled_from(["\n", "\r", "\r\n", "\n\n"])), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
    as_bytes=st.booleans(),
    tail=st.booleans(),
)
def test_fuzzed_mixtures_and_splits(parts, cuts, as_bytes: bool, tail: bool) -> None:
    text = "".join(line + end for line, end in parts)
    if tail and parts:
        text += parts[0][0]  # a last line without its line end
    data = text.encode("utf-8", "surrogatepass") if as_bytes else text
    text = data.decode("utf-8", "replace") if as_bytes else text
    cuts = sorted({c for c in cuts if 0 < c < len(data)})
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])] if data else []
    expected = _legacy(text)
    assert _read(pieces, "python") == expected
    if NATIVE_BUILT:
        assert _read(pieces, "native") == expected


_digits = st.text(alphabet="0123456789", min_size=1, max_size=32)


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    sign=st.sampled_from(["", "-"]), whole=_digits, frac=st.one_of(st.just(""), _digits),
    exp=st.one_of(st.just(""), st.tuples(st.sampled_from(["", "-", "+"]), st.integers(0, 9999)).map(lambda t: f"e{t[0]}{t[1]}")),
)
def test_native_numbers_convert_as_float(sign: str, whole: str, frac: str, exp: str) -> None:
    number = sign + whole + ("." + frac if frac else "") + exp
    text = f"loss: {number}\n"
    native = _read([text.encode()], "native")[0]
    assert native == _legacy(text)[0]
    if len(whole) <= 30 and len(frac) <= 30:  # the strict shape's digit bounds
        # an overflowing literal (1e400) is no number (issue 17): no point, never an inf
        assert native[2] == ([] if math.isinf(float(number)) else [repr(float(number))])


def test_cli_reads_a_log_the_same_with_costctl_parser_python(tmp_path: Path) -> None:
    """COSTCTL_PARSER is costctl's own variable (the config does not refuse it) and the
    analyze report is the same with either engine."""
    from helpers import costctl_env, run_costctl

    log = tmp_path / "train.log"
    log.write_text("Epoch 1/2\n" + "".join(f"iter {i}: loss {3 - i / 100:.4f}, time 5.0ms, mfu 1.00%\n" for i in range(80))
                   + "".join(f"Epoch [2/2], Step [{i}/80], Loss: {2 - i / 100:.4f} val_loss={2.5 - i / 90:.3f}\n"
                             f"\x1b[1m{{'epoch': 1.{i:02d}, 'loss': {2 - i / 99:.4f}, 'step': {80 + i}}}\x1b[0m\n"
                             for i in range(1, 80)))
    outs = []
    for engine in ("python", "") if NATIVE_BUILT else ("python",):
        env = costctl_env(tmp_path / "data", COSTCTL_PARSER=engine)
        proc = run_costctl("analyze", "--train-log", str(log), "--format", "json", env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        outs.append(proc.stdout)
    assert len(set(outs)) == 1 and b"loss" in outs[0]


# -- the general loss-line grammar, read in C (lines._parse_raw's rules) -----------------------
# Lines of the shapes the native scanner reads with the general grammar (not strict shapes),
# and their near misses: each must give the points of the per-line parser exactly.
GENERAL_LINES = [
    "iter 100: loss 2.31", "step 5 loss=0.3", "Epoch [3/80], Step [100/600], Loss: 0.1234",
    "train_loss: 0.5 val_loss: 0.6", "\x1b[32mINFO\x1b[0m step 3 \x1b[1mloss\x1b[0m=0.4 lr=3e-4",
    "{'epoch': 1.5, 'Loss': 0.3, 'step': 7}", "{'loss': '0.1234', 'grad_norm': '1.1', 'epoch': '0.5'}",
    "{\"eval_loss\": 0.66, \"eval_runtime\": 1.2, \"epoch\": 1.0}", "{'train_runtime': 10.0, 'train_loss': 0.44}",
    "{'loss': 1, 'loss': 2, 'LOSS': 3, 'val/loss': 4, 'global_step': 9.7}", "{'step': -3.5, 'loss': 1}",
    "{'step': -0.5, 'loss': 1}", "{'step': nan, 'iter': 4, 'loss': 1}",
    "{'step': -1e30, 'loss': 1}", "{'epoch': inf, 'loss': 1}", "{'x': 1} loss: 2", "{'eval_acc': 0.9} loss=3",
    "{'loss' : tensor(0.5, device='cuda:0')}", "{'loss': tensor( 7)}", "{'" + "k" * 81 + "': 1, 'loss': 2}",
    "{'" + "k" * 80 + "': 1, 'loss': 2}", "{''loss': 1}", "{'a': 'b', 'loss': 0.5}", "{'loss\": 0.5}",
    "{'loss': 0.5x}", "{'loss': .5e-3}", "{'loss': 5.}", "{'loss': +inf, 'epoch': -nan}",
    "Epoch 0: 50%|###| 25/50 [00:01<00:01, loss=0.5, v_num=1]", "  5%|#    | 50/1000 [00:10<03:10, 5.0it/s, loss=2.31]",
    "|5/10 [?, loss=1]", "| 5 /10 [1 loss=1", "|5/10  [x loss=1", "Epoch 4 | running_loss: 0.41 | kl_loss: 0.02",
    "epoch 3/80 loss: 0.1234", "epoch 3/80. loss: 1", "epoch 3. loss 1", "epoch 1.5.3 loss 1", "epoch 1.5/3. loss 1",
    "Epoch [0/80], Step [100/600], Loss: 1", "Epoch [3/0], Step [1/6], Loss: 1", "Epoch [3/8], Step [7/6], Loss: 1",
    "Epoch [2.5/8], Step [3/6], Loss: 1", "step " + "1" * 19 + " loss 1", "step " + "1" * 18 + "/" + "1" * 19 + " loss 1", "epoch " + "7" * 25 + " loss 1",
    "Iteration 5, loss = 0.42", "iteration: 5 loss 1", "iterations 5 loss 1", "global_step=12 loss: 1",
    "xstep 5 loss 1", "step#[ 7 loss 1", "step 5.5 loss 1", "step 5/6. loss 1", "step 5 / 6 loss 1", "STEP: [3] LOSS 2",
    "TOTAL LOSS: 3.5 STEP 4", "train/loss: 0.1 global_step 12/100", "validation loss: 0.9 eval_loss 0.8",
    "test loss: 0.5", "predict_loss 1 loss 2", "dev-loss=1 train.loss=2", "trainingloss 1 valloss 2",
    "totaloss 1", "mean__loss 1", "avg  loss 1", "batch_loss:\t0.5", "loss\t=\t1", "loss:nan", "loss: NaN",
    "loss: -Infinity", "loss: infinit", "loss: info", "loss: 0.12abc", "loss: 0.12 abc", "loss: 1e", "loss: 1e5x",
    "loss: 1.e5", "loss: .e5", "loss: +.5", "loss: tensor(0.5", "loss: tensor(x) loss 2", "loss:: 1", "loss 1:",
    "loss= :1", "loss_scale: 65536", "lr=0.001 loss=1e-3", "loss: " + "3" * 40, "loss: 1." + "2" * 400,
    "xloss: 1", "loss_x: 1", "loss1: 2", "val loss 1 train loss 2 val loss 3 train loss 4",
    "step 500: train loss 2.3, val loss 2.4", "  step 5: TRAIN LOSS x,, val loss 2", "step 5: train loss ,, val loss 2",
    "step 5: train loss 1 , val loss 2", "step 5: train loss 1,\tval loss 2",
    "  train_loss               =     0.4479", "  eval_loss = 1 2", "  train_loss\t = 1", "   train_loss = 1",
    "  TEST_x  =  y  ", "  predict_loss =", "\x1b[2K\x1b[1;32mepoch 2/10\x1b[0m \x1b[33mloss:\x1b[0m \x1b[1m0.5\x1b[0m \x1b]0;title\x07",
    "\x1b]0;t\x1b\\loss 1", "\x1b]0;t loss 1", "\x1b(Bloss 1", "\x1bMloss 2", "\x1b[loss 3", "\x1b[1;2 loss 4",
    "lo\x1b[0mss: 5", "lo\x08ss: 6", "loss:\x0b7", "loss:\x1c 8", "loss\x7f: 9", "\tloss: 10",
    " 50%|█████     | 5/10 [00:01<00:01, 5.0it/s, loss=1.25]", "Epoch 0:  50%|█████▌    | 25/50 [00:01<00:01, loss=0.5, v_num=1]",
    "━━━━╸━━ 3/9 loss: 2", "loss:█1", "loss █ 1", "█loss 1", "{'l█': 1, 'loss': 2}", "  train_█ = 1", "  train_x = █",
    "step 5: train loss █, val loss 2", "▟ loss 1 ■ loss 2", "\x1b]0;█\x07loss 3", "\x1b[█loss 4", "Epoch █ loss 1",
    "naïve loss: 6", "loss: ７", "ﬁnal loss: 0.3 ſtep 4", "Epoch 2 oss", "POCH 3 loss 1", "OSS 1",
]

_word = st.sampled_from([
    "", "train", "Training", "TOTAL", "average", "avg", "mean", "Running", "epoch", "batch", "validation", "valid",
    "VAL", "evaluation", "eval", "dev", "test", "predict", "x", "lr", "kl", "global",
])
_sep = st.sampled_from(["", " ", "_", "/", ".", "-", "__", "\t"])
_loss_word = st.sampled_from(["loss", "Loss", "LOSS", "lOsS", "loss_scale", "losses", "oss"])
_conn = st.sampled_from([":", "=", " ", ": ", " = ", "\t", "", "  :  ", ":\t", "::", " #", "= ="])
_num = st.one_of(
    st.builds(lambda s, a, b, e: s + a + b + e, st.sampled_from(["", "-", "+"]),
              st.text("0123456789", max_size=4), st.sampled_from(["", ".", ".5", ".25", ".0001"]),
              st.sampled_from(["", "e5", "E-3", "e+400", "e", "e-", "e99999"])),
    st.sampled_from(["nan", "NaN", "-nan", "inf", "-Infinity", "+inf", "infinit", "tensor(0.5", "tensor( 1e-3)",
                     "TENSOR(2)", "0.12abc", "abc", "1_0", "1" * 20, "9" * 19, "0" * 17 + "5", "'0.5'", "\"1\""]),
)
_counter = st.builds(
    lambda kw, conn, n, tot, tail: kw + conn + n + tot + tail,
    st.sampled_from(["step", "Step", "STEP", "global_step", "iter", "Iteration", "iterations", "epoch", "Epoch",
                     "EPOCH", "xstep", "Epoch [", "Step ["]),
    st.sampled_from(["", " ", ": ", "=", "#", " [", ":[ ", "\t", " : ", "::"]),
    st.sampled_from(["0", "1", "3", "5", "12", "600", "1.5", "2.", "1" * 19, "7" * 18]),
    st.sampled_from(["", "/80", "/600", " / 10", "/0", "/" + "9" * 19, "/5.", "/"]),
    st.sampled_from(["", "]", ".", ",", "]:", "x"]),
)
_bar = st.builds(lambda p, b, n, t, g: f"{p}%|{b}| {n}/{t} {g}", st.sampled_from(["5", " 50", "100"]),
                 st.sampled_from(["###", "█████▌    ", "   ", "━━╸"]), st.sampled_from(["1", "25", "1" * 19]), st.sampled_from(["50", "10"]),
                 st.sampled_from(["[00:01<00:01, ", "[?", " [x", "["]))
_dict_item = st.builds(lambda q1, k, q2, c, v: f"{q1}{k}{q2}{c}{v}", st.sampled_from(["'", '"']),
                       st.sampled_from(["loss", "Loss", "train_loss", "total_loss", "eval_loss", "val_loss",
                                        "validation_loss", "valid_loss", "eval/loss", "val/loss", "step",
                                        "global_step", "iteration", "iter", "epoch", "train_runtime", "Train_x_runtime", "trainer_runtime",
                                        "eval_runtime", "learning_rate", "grad_norm", "x y"]),
                       st.sampled_from(["'", '"']), st.sampled_from([": ", ":", " : ", ": \t", " "]), _num)
_dict = st.builds(lambda items, pre, post: pre + "{" + ", ".join(items) + "}" + post,
                  st.lists(_dict_item, min_size=1, max_size=5), st.sampled_from(["", "  ", "INFO "]),
                  st.sampled_from(["", " loss: 1", "\x1b[0m"]))
_loss_frag = st.builds(lambda w, s, l, c, v: w + s + l + c + v, _word, _sep, _loss_word, _conn, _num)
_ansi = st.sampled_from(["", "\x1b[0m", "\x1b[1;32m", "\x1b[2K", "\x1b]0;t\x07", "\x1b]0;t", "\x1b(B", "\x1bM",
                         "\x1b[", "\x08", "\x00", "\x7f", "\t", "\x0c", "é", "█", "▌  ", "━╸", "■", "ſ", "K"])
_frag = st.one_of(_loss_frag, _loss_frag, _counter, _bar, _ansi,
                  st.sampled_from(["step 5: train loss 1.0, val loss 2.0", "  train_loss = 0.4", "  eval_x  =  1 ",
                                   "|", "{", "{'", "junk", "0.12abc", "v_num=1]"]))
_small = st.sampled_from(["0", "1", "2", "3", "6", "10", "2.5"])
_nanogpt = st.builds(lambda lead, st_, n, a, v1, sep, b, v2, tail: f"{lead}{st_} {n}: {a} {v1}{sep}{b} {v2}{tail}",
                     st.sampled_from(["", " ", "\t", "x"]), st.sampled_from(["step", "STEP", "Step"]),
                     st.sampled_from(["5", "500", ""]), st.sampled_from(["train loss", "Train Loss", "train  loss"]),
                     _num, st.sampled_from([", ", ",, ", " , ", ",\t", ",", ",  ", " ", "; ", ". "]),
                     st.sampled_from(["val loss", "VAL LOSS", "val_loss"]), _num, st.sampled_from(["", " loss 3"]))
_epoch_step = st.builds(lambda e, et, s_, stt, tail: f"Epoch [{e}/{et}], Step [{s_}/{stt}]{tail}",
                        _small, _small, _small, _small,
                        st.sampled_from([", Loss: 0.25", " loss 1", ", val_loss=2 train_loss=3", ", Loss: x"]))
_general_line = st.one_of(
    _dict, _nanogpt, _epoch_step,
    st.builds(lambda fs, j: j.join(fs), st.lists(_frag, min_size=1, max_size=6),
              st.sampled_from(["", " ", ", ", " | ", "\t", " - ", "  "])),
)


def _outcome(read, *args):
    """``read(*args)``, or the name of the error it raises (none is expected: a step past
    int64 is read as no step, see test_a_step_past_int64_keeps_its_loss)."""
    try:
        return read(*args)
    except OverflowError:
        return "OverflowError"


def _engines_agree(text: str, pieces) -> None:
    expected = _outcome(_legacy, text)
    assert _outcome(_read, pieces, "python") == expected
    if NATIVE_BUILT:
        assert _outcome(_read, pieces, "native") == expected


# Steps past int64: the per-line parser's int is unbounded, the int64 column is not.
OVERFLOW_LINES = [
    "{'step': 1e30, 'loss': 1}", "step " + "9" * 19 + " loss 1", "Epoch [3/8] Step [" + "9" * 19 + "/6] Loss: 1",
    "Epoch [9999999999/9999999999], Step [999999999/999999999], Loss: 1",
]


def test_general_grammar_lines_parity() -> None:
    for context in ("", "Epoch 2/9\n", "Epoch 4\n", "EPOCH 5/6\n"):
        text = context + "\n".join(GENERAL_LINES) + "\n"
        _check(text.encode(), (None, 13))
        for line in GENERAL_LINES:
            _check(f"{context}{line}\n{line}\r\x1b[1m{line}\x1b[0m\r\n{line}".encode())
        for line in OVERFLOW_LINES:
            data = f"{context}loss: 1\n{line}\n".encode()
            _engines_agree(data.decode(), [data])


@needs_native
def test_general_grammar_is_read_in_c() -> None:
    """The general shapes (ASCII, and tqdm's bar characters) give their points from the scan
    itself: no line is handed back to Python; other non-ASCII and over-long numbers are."""
    plain = [line for line in GENERAL_LINES if line.isascii() or set(line) & set("█▌")]
    plain = [line for line in plain if "9" * 19 not in line and "1" * 19 not in line
             and "2" * 400 not in line and "7" * 25 not in line]
    data = ("\n".join(plain) + "\n").encode()
    _, points, hands, *_ = lines._scan.scan(data, 0, float("nan"), -1, lines._MAX_LINE_BYTES, lines.MAX_LINE_CHARS)
    assert len(points) // 40 >= 80 and [h[1] for h in hands] == []
    for line in ("naïve loss: 6", "step " + "1" * 19 + " loss 1", "loss: 1." + "2" * 400, *OVERFLOW_LINES):
        hands = lines._scan.scan((line + "\n").encode(), 0, float("nan"), -1, 1 << 18, 65536)[2]
        assert [h[1] for h in hands] == [line]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.tuples(_general_line, st.sampled_from(["\n", "\r", "\r\n"])), min_size=1, max_size=25),
    context=st.sampled_from(["", "Epoch 2/9\n", "Epoch 3\n"]),
    cut=st.integers(min_value=0, max_value=2000),
)
def test_fuzzed_general_grammar_parity(parts, context: str, cut: int) -> None:
    text = context + "".join(line + end for line, end in parts)
    data = text.encode("utf-8")
    pieces = [data[:cut], data[cut:]] if 0 < cut < len(data) else [data]
    _engines_agree(text, pieces)


def test_more_series_names_than_the_native_table_parity() -> None:
    """Past _scan.c's GEN_MAX_NAMES (1024) distinct names in one scan, lines go to Python: the
    same series, in the same order."""
    names = []
    for i in range(1100):
        case = iter(range(14))  # the letters of the name, one bit each
        names.append("".join(ch if ch == "_" else ch.upper() if i >> next(case) & 1 else ch for ch in "validation_loss"))
    text = "".join(f"{name}: {i}.5 step {i}\n" for i, name in enumerate(names)) + "val_loss: 1\n"
    expected = _legacy(text)
    assert len(expected[0][0]) == 1101
    _check(text.encode(), (None, 4096))


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_step_past_int64_keeps_its_loss(engine: str) -> None:
    """A step no int64 column (or ledger) holds is no step: the loss is kept, nothing raises."""
    if engine == "native" and not NATIVE_BUILT:
        pytest.skip("the native scanner is not built")
    for line in OVERFLOW_LINES:
        (_, _, values, steps, *_), _ = _read([f"{line}\n".encode()], engine)
        assert values == ["1.0"], line
        assert all(s == -1 or 0 <= s < 2**63 for s in steps), line
    (_, _, _, steps, *_), _ = _read([b"{'step': 1e30, 'loss': 1}\n"], engine)
    assert steps == [-1]
    assert lines.parse_line("{'step': 1e30, 'loss': 1}")[0].step is None
