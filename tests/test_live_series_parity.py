"""The live ``costctl watch`` reads a console log as ``costctl analyze`` does (issue 14's trial):
for the same bytes, fed (a) to ``costctl analyze --format json`` and (b) through the watch's
parse pump and output reader (:class:`~costctl.progress.output.OutputProgress`, what the
watcher wires) into a History and the divergence policy, the primary series (count, first,
last, min), the series watched, and the divergence decisions are the same.

Shapes: two named losses on one line (GANs), a YOLO-style column table with tqdm ``\\r``
refreshes, per-batch lines beside an epoch average, HF dicts with a NaN grad_norm three logs
in a row, an isolated NaN grad norm (fp16 loss scaling), Megatron's ``| grad norm: nan |``.
Real logs from tests/data/logs (see its SOURCES.md) and small written ones. Chunkings: the
pump's inline 4 KiB pieces, an odd split inside lines and ``\\r\\n`` pairs, and whole 256 KiB
pieces; both parser engines. One end-to-end test runs a real ``costctl watch`` on a job that
prints a persistent NaN grad norm.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.policies.divergence import DivergenceConfig, DivergencePolicy
from costctl.policies.history import History
from costctl.policies.plateau import PlateauConfig, PlateauPolicy
from costctl.progress import lines
from costctl.progress.batch import PointBatch
from costctl.progress.output import OutputProgress
from costctl.watch.pump import INLINE_MAX_BYTES, MAX_PIECE_BYTES, ParsePump
from helpers import REPO, costctl_cmd, costctl_env

LOGS = Path(__file__).parent / "data" / "logs"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def _gan(tmp_path: Path) -> Path:
    """Two named losses per line, with a plain ``loss:`` summary line now and then."""
    rows = []
    for e in range(1, 4):
        for b in range(0, 30):
            d, g = 0.69 - 0.001 * (e * 30 + b), 0.70 + 0.01 * math.sin(b)
            rows.append(f"[Epoch {e}/3] [Batch {b}/30] [D loss: {d:.4f}] [G loss: {g:.4f}]\n")
    path = tmp_path / "gan.log"
    path.write_text("".join(rows))
    return path


def _yolo(tmp_path: Path) -> Path:
    """YOLOv5's console table: header, then each epoch's row redrawn by tqdm with ``\\r``."""
    out = ["      Epoch   gpu_mem       box       obj       cls     total    labels  img_size\n"]
    for e in range(12):
        for k in range(1, 6):
            box, obj, cls = 0.08 - 0.002 * e + 0.001 * k, 0.03 + 0.0005 * k, 0.02 - 0.001 * e
            out.append(f"\r     {e}/11     3.35G   {box:.5f}   {obj:.5f}   {cls:.5f}   {box + obj + cls:.5f}"
                       f"        12       640: {k * 20}%|###| {k}/5 [00:0{k}<00:00,  2.1it/s]")
        out.append("\n               Class     Images     Labels          P          R     mAP@.5\n")
    path = tmp_path / "yolo.log"
    path.write_bytes("".join(out).encode())
    return path


def _hf(tmp_path: Path, grad_norms: list[str], name: str) -> Path:
    """HF Trainer dict lines (fp16 run) with the given grad_norm values."""
    rows = [f"{{'loss': {0.9 - 0.01 * i:.4f}, 'grad_norm': {g}, 'learning_rate': 2e-05, 'epoch': {0.1 * (i + 1):.2f}}}\n"
            for i, g in enumerate(grad_norms)]
    path = tmp_path / name
    path.write_text("".join(rows))
    return path


def analyzed(path: Path, loss: str | None = None) -> tuple[dict, list[dict]]:
    """``costctl analyze --format json``: the primary train series and the decisions."""
    args = ["analyze", "--train-log", str(path), "--format", "json"] + (["--loss", loss] if loss else [])
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(args)
    assert code == 0
    doc = json.loads(buf.getvalue())
    primary = [s for s in doc["train_log"]["series"] if s["primary"] and s["kind"] == "train"]
    return (primary[0] if primary else {}), doc["decisions"]


def live(path: Path, chunk: int, loss: str | None = None) -> tuple[dict, list, list, set]:
    """The same bytes through the watch's pump and output reader, then the policies: the
    primary train series' figures, the divergence and plateau decisions, the series seen."""
    out = OutputProgress(loss=loss)
    got: list[PointBatch] = []
    pump = ParsePump(path, out.parse, got.append, lambda: T0, on_gap=out.gap,
                     lines_seen=lambda: out.lines_seen, inline_max_bytes=INLINE_MAX_BYTES)
    size = path.stat().st_size
    for offset in range(0, size, chunk):
        pump.put_range("stdout", offset, min(chunk, size - offset))
    assert pump.close(60.0) == 0
    got.append(out.flush(T0))
    history = History(sample_interval=__import__("datetime").timedelta(seconds=1))
    divergence = DivergencePolicy(DivergenceConfig())
    plateau = PlateauPolicy(PlateauConfig())
    div, plat = [], []
    for batch in got:  # batch by batch, as ticks would
        history.add_batch(batch)
        history.add_grad_norms(out.take_grad_norms())
        div += divergence.decisions(history, T0)
        plat += plateau.decisions(history, T0)
    values, seen = [], set()
    for batch in got:
        for i in range(len(batch)):
            key = batch.keys[batch.series[i]]
            seen.add(key)
            if key[0] == "train":
                values.append(batch.values[i])
    finite = [v for v in values if math.isfinite(v)]
    figures = {"count": len(values), "first": values[0] if values else None,
               "last": values[-1] if values else None, "min": min(finite) if finite else None}
    return figures, div, plat, seen


def _text(v):
    return v if isinstance(v, str) or v is None else float(v)


CASES = {
    "gan_named_D_G": (lambda tmp: _gan(tmp), ("train", "D loss"), None),
    "gan_named_D_G_loss_G": (lambda tmp: _gan(tmp), ("train", "G loss"), "G loss"),
    "advgan_loss_D_loss_G_fake": (lambda tmp: LOGS / "advgan_named_losses_resnet56.log", ("train", "loss_D"), None),
    "yolo_table_tqdm_cr": (lambda tmp: _yolo(tmp), ("train", "total"), None),
    "yolo_table_real": (lambda tmp: LOGS / "yolov5_console_table_cots.log", ("train", "box"), None),
    "batch_and_epoch_average": (lambda tmp: LOGS / "pytorch_batch_and_epoch_average_resnet110.log", ("train", "Loss"), None),
    "bracket_epoch_batch": (lambda tmp: LOGS / "mnist_bracket_epoch_batch_loss.log", ("train", "loss"), None),
    "hf_grad_norm_nan_x3": (lambda tmp: LOGS / "hf_grad_norm_nan_then_loss_zero_modernbert_issue233.log", ("train", "loss"), None),
    "hf_grad_norm_nan_x3_written": (lambda tmp: _hf(tmp, ["1.2", "0.9", "nan", "nan", "nan", "0.8"], "hf3.log"), ("train", "loss"), None),
    "hf_isolated_fp16_nan": (lambda tmp: _hf(tmp, ["1.2", "inf", "0.9", "nan", "1.1", "0.7"], "hf1.log"), ("train", "loss"), None),
    "mmocr_isolated_grad_norm_nan": (lambda tmp: LOGS / "mmocr_isolated_grad_norm_nan_issue32.log", ("train", "loss"), None),
    "megatron_grad_norm_nan": (lambda tmp: LOGS / "megatron_grad_norm_nan_issue396.log", None, None),
}


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("chunk", [INLINE_MAX_BYTES, 777, MAX_PIECE_BYTES])
@pytest.mark.parametrize("case", sorted(CASES))
def test_live_reads_the_primary_series_and_divergence_as_analyze(tmp_path, monkeypatch, case, chunk, engine) -> None:
    if engine == "native" and lines._scan is None:
        pytest.skip("the C scanner is not built")
    monkeypatch.setattr(lines, "ENGINE", engine)
    # batch.native() caches what it finds on first use: a cache made under this engine must not
    # outlive the test (a later test in this worker would see the C helpers missing)
    from costctl.progress import batch as batch_mod

    monkeypatch.setattr(batch_mod, "_NATIVE", [])
    make, primary, loss = CASES[case]
    path = make(tmp_path)
    want, decisions = analyzed(path, loss)
    figures, div, plat, seen = live(path, chunk, loss)
    # the same primary series, and the policies saw no other train series
    assert {k for k in seen if k[0] == "train"} == ({primary} if primary else set())
    if primary is not None:
        assert want["name"] == primary[1]
        assert figures["count"] == want["count"]
        assert _text(figures["first"]) == pytest.approx(_text(want["first"]))
        assert _text(figures["last"]) == pytest.approx(_text(want["last"]))
        assert figures["min"] == pytest.approx(want["min"])
    else:
        assert not want
    # the same divergence decisions (grad-norm streaks and non-finite losses), same keys and reasons
    assert sorted((d.key, d.reason) for d in div) == sorted(
        (d["key"], d["reason"]) for d in decisions if d["policy"] == "divergence")
    # and the plateau rule fires at the same points of the same series
    assert sorted(d.key for d in plat) == sorted(d["key"] for d in decisions if d["policy"] == "plateau")


def test_the_shapes_give_the_expected_divergence_decisions(tmp_path) -> None:
    """What the parity above compares is not vacuous: persistent NaN grad norms are divergence,
    isolated ones are not."""
    _, div, _, _ = live(_hf(tmp_path, ["1.2", "0.9", "nan", "nan", "nan", "0.8"], "hf3.log"), INLINE_MAX_BYTES)
    assert [d.key for d in div] == ["divergence:grad_norm:2"]
    _, div, _, _ = live(_hf(tmp_path, ["1.2", "inf", "0.9", "nan", "1.1", "0.7"], "hf1.log"), INLINE_MAX_BYTES)
    assert div == []
    _, div, _, _ = live(LOGS / "megatron_grad_norm_nan_issue396.log", INLINE_MAX_BYTES)
    assert [d.key for d in div] == ["divergence:grad_norm:0"]


def test_a_real_watch_raises_divergence_on_a_persistent_nan_grad_norm(tmp_path) -> None:
    """A real ``costctl watch`` (sim provider, dry run) over a job printing HF dicts whose
    grad_norm stays NaN (the loss finite): the divergence decision is made live."""
    job = tmp_path / "job.py"
    job.write_text(
        "import sys\n"
        "for i, g in enumerate(['1.1', '0.9', 'nan', 'nan', 'nan', 'nan']):\n"
        "    print({'loss': 0.5 - 0.01 * i, 'grad_norm': float(g), 'learning_rate': 2e-05, 'epoch': 0.1 * (i + 1)},"
        " flush=True)\n"
    )
    env = costctl_env(tmp_path / "data")
    proc = subprocess.run(
        costctl_cmd("watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--", sys.executable, str(job)),
        env=env, cwd=REPO, capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    # the third NaN in a row (epoch 0.5) makes it divergence; the loss itself stayed finite
    assert "costctl divergence advice: grad_norm is NaN at epoch 0.5, 3 logged values in a row" in err, err[-2000:]


@pytest.mark.parametrize("block,flags", [
    (b"step 1 loss: 0.2\nstep 2 loss: 0.1\n", 0),  # the flood's shape: nothing more to read
    (b"[Epoch 1/200] [Batch 3/938] [D loss: 0.69] [G loss: 0.70]\n", 1),
    (b"loss_D: 0.405, loss_G_fake: 0.300\n", 1),
    (b"Epoch 4 | running_loss: 0.41 | kl_loss: 0.02\n", 1),
    (b"LoSS 1 LOSS 2\n", 1),
    (b"loss 1\rloss 2\n", 0),  # two lines (a tqdm redraw), one loss each
    (b"{'loss': 0.5, 'grad_norm': nan, 'epoch': 0.1}\n", 2),
    (b" iteration 5 | grad norm: nan |\n", 2),
    (b"      Epoch   gpu_mem       box       obj\n", 4),
    (b"Epoch [3/80], Step [100/600], Loss: 0.25\n", 0),
    # a loss an eval-side word names is not a second train loss (Keras, nanoGPT's eval line)
    (b"9595/9595 [====] - 1s - loss: 0.62 - acc: 0.41 - val_loss: 0.53 - val_acc: 0.5\n", 0),
    (b"step 100: train loss 3.4633, val loss 3.4987\n", 0),
    (b"Eval Loss 1 | TEST_LOSS 2 | loss 3\n", 0),
    (b"x_val_loss: 1\n", 1),  # "x_val" is no eval word: a joined train-side name
    (b"interval_loss 3\n", 1),
])
def test_the_c_scanner_hints_which_raw_blocks_need_the_python_readers(block, flags) -> None:
    """``series_hints`` (C) lets a flood of single-loss lines skip the Python readers; a block
    that may hold named losses, a grad norm or a table header is flagged."""
    from costctl.progress.console import series_hints

    if lines._scan is None or lines.ENGINE != "native":
        pytest.skip("the C scanner is not built")
    assert series_hints(block) == flags


@pytest.mark.parametrize("loss,first", [(None, "0.69"), ("G loss", "0.8"), ("nope", None)])
def test_a_real_watch_watches_the_series_loss_names(tmp_path, loss, first) -> None:
    """``costctl watch --loss NAME`` as ``costctl analyze --loss NAME``: the summary's loss is
    that series (by default the rule's: the first per-batch one, D loss, never G and D mixed);
    a name the output never shows is said."""
    job = tmp_path / "gan.py"
    job.write_text(
        "for b in range(5):\n"
        "    print(f'[Epoch 1/1] [Batch {b}/5] [D loss: {0.69 - 0.01 * b:.2f}] [G loss: {0.8 + 0.01 * b:.2f}]',"
        " flush=True)\n"
    )
    env = costctl_env(tmp_path / "data")
    proc = subprocess.run(
        costctl_cmd("watch", "--dry-run", "--on-exit", "leave", "--no-pty", *(["--loss", loss] if loss else []),
                    "--", sys.executable, str(job)),
        env=env, cwd=REPO, capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    if first is None:
        assert "--loss 'nope': the job's output showed no such train loss series (it has 'D loss', 'G loss')" in err
    else:
        assert f"loss first / best / last │ {first} /" in err, err[-2000:]
        assert "[5 points]" in err, err[-2000:]


def test_primary_series_cuts_batches_by_analyzes_rule_as_series_appear() -> None:
    """:class:`PrimarySeries`: the per-batch loss over an epoch average, a 'total' that appears
    later takes over (a move, recorded), ``--loss NAME`` passes nothing until NAME appears."""
    from costctl.progress.series import PrimarySeries

    def batch(*points):
        b = PointBatch()
        for kind, name, value in points:
            b.append(value, kind=kind, name=name)
        return b

    ps = PrimarySeries()
    cut = ps.cut(batch(("train", "average loss", 0.5), ("train", "loss", 0.6), ("eval", "val_loss", 0.7),
                       ("eval", "val loss", 0.8)))
    assert [(cut.keys[cut.series[i]], cut.values[i]) for i in range(len(cut))] == [
        (("train", "loss"), 0.6), (("eval", "val_loss"), 0.7)]
    cut = ps.cut(batch(("train", "loss", 0.4), ("train", "total_loss", 1.2)))
    assert list(cut.values) == [1.2]
    assert ps.changes == [("train", "loss", "total_loss")]
    wanted = PrimarySeries("G loss")
    assert not wanted.cut(batch(("train", "D loss", 0.7)))
    assert list(wanted.cut(batch(("train", "D loss", 0.7), ("train", "G loss", 0.9))).values) == [0.9]


@pytest.mark.parametrize("line,hinted", [
    ("loss: 0.62 - acc: 0.41 - val_loss: 0.53 - val_acc: 0.5", False),
    ("step 100: train loss 3.4633, val loss 3.4987", False),
    ("Eval Loss 1 | TEST_LOSS 2 | loss 3", False),
    ("[D loss: 0.69] [G loss: 0.70]", True),
    ("x_val_loss: 1", True),
    ("interval_loss 3", True),
    ("val_loss: 1 kl_loss: 2", True),
    ("loss_D: 0.405", True),
])
def test_the_python_hints_skip_eval_side_names_as_the_c_scanner_does(line, hinted) -> None:
    """The pure-Python reader's line hints (costctl.progress.named) leave out the lines whose
    only second loss is eval-side, as ``series_hints`` does; what they hint, named_losses decides."""
    from costctl.progress.named import _hints
    from costctl.progress.series import named_losses

    for text in (line + "\n", "x\n" + line + "\n"):
        assert bool(_hints(text)) == hinted, text
    if not hinted:
        assert named_losses(line) == []
