"""``costctl analyze``'s per-block fast paths equal the point-by-point rules they replace.

* ``LossStream`` (figures and plot runs per column chunk) against a point-by-point reference
  (the loop it replaced), on mixed-kind blocks with NaN/inf, ties and signed zeros;
* ``PlateauTracker.step_many`` (runs of not-better values counted in bulk) against the
  value-by-value ReduceLROnPlateau rule, fire tuples included;
* ``PointBatch.mask_of``/``cut``/``take`` against a plain filter;
* the one-read replay (``read_console(replay=LossReplay)``) against ``replay_loss`` over
  ``iter_batches()``, with the eval points kept as records, as columns, or read again;

each with the C helpers and with the pure-Python fallbacks (``batch._NATIVE`` = [None]).
"""

from __future__ import annotations

import math
import random
from array import array
from pathlib import Path

import pytest

from costctl.config import Settings
from costctl.policies.plateau import PlateauTracker
from costctl.progress import batch as batch_mod
from costctl.progress.batch import PointBatch
from costctl.records import ProgressPoint
from costctl.replay import train_log as train_log_mod
from costctl.replay.engine import LossReplay, replay_loss
from costctl.replay.loss_stats import LossStream, summarize
from costctl.replay.train_log import _may_hold_oom, read_console


@pytest.fixture(params=["native", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the C helpers (skipped where not built) and with the Python fallbacks."""
    if request.param == "python":
        monkeypatch.setattr(batch_mod, "_NATIVE", [None])
    elif batch_mod.native() is None:
        pytest.skip("the C extension is not built")
    return request.param


# -- a point-by-point LossStream (the loop the chunked one replaced) ----------------------------
class _Reference:
    def __init__(self, max_plot: int) -> None:
        self.max_plot, self.count, self.buckets, self.width, self.fill = max(4, max_plot), 0, [], 1, 0
        self.points: list[ProgressPoint] = []

    def add(self, p: ProgressPoint) -> None:
        self.count += 1
        self.points.append(p)
        if not math.isfinite(p.value):
            return
        pos, v = self.count, p.value
        if self.fill == 0:
            self.buckets.append([p, p, pos, pos])
        else:
            b = self.buckets[-1]
            if v < b[0].value:
                b[0], b[2] = p, pos
            elif v > b[1].value:
                b[1], b[3] = p, pos
        self.fill += 1
        if self.fill >= self.width:
            self.fill = 0
            if 2 * len(self.buckets) > self.max_plot:
                merged = []
                for a, b in zip(self.buckets[0::2], self.buckets[1::2] + [None]):
                    if b is not None:
                        low = a if a[0].value <= b[0].value else b
                        high = a if a[1].value >= b[1].value else b
                        a = [low[0], high[1], low[2], high[3]]
                    merged.append(a)
                self.buckets, self.width = merged, self.width * 2

    def plot(self) -> list[ProgressPoint]:
        out = []
        for low, high, lp, hp in self.buckets:
            out.extend([low] if lp == hp else (low, high) if lp < hp else (high, low))
        return out


def _key(p: ProgressPoint | None) -> tuple | None:
    return None if p is None else (p.kind, p.name, repr(p.value), p.step, p.epoch, p.total)


def _facts(summary) -> tuple:
    return tuple(_key(v) if isinstance(v, ProgressPoint) else v for v in (getattr(summary, f) for f in summary.__slots__))


def _mixed_blocks(rng: random.Random, n: int, ties: bool) -> list[PointBatch]:
    blocks, i = [], 0
    while i < n:
        b = PointBatch()
        for _ in range(rng.randint(1, 3000)):
            v = float(rng.randint(0, 4)) if ties else 3.0 / (1 + i / 50) + rng.random() * 0.3
            r = rng.random()
            if r < 0.02:
                v = rng.choice([math.nan, math.inf, -math.inf])
            elif r < 0.025:
                v = rng.choice([0.0, -0.0])
            kind = "train" if rng.random() < 0.85 else "eval"
            b.append(v, kind=kind, name="loss" if kind == "train" else rng.choice(["eval_loss", "val loss"]),
                     step=i if rng.random() > 0.001 else None, epoch=i / 100)
            i += 1
        blocks.append(b)
    return blocks


@pytest.mark.parametrize("seed", range(12))
def test_chunked_loss_stream_equals_the_point_by_point_loop(engine: str, seed: int) -> None:
    rng = random.Random(seed)
    max_plot = rng.choice([4, 16, 256])
    blocks = _mixed_blocks(rng, rng.choice([50, 5000, 40_000]), ties=seed % 3 == 0)
    for kind in ("train", "eval"):
        stream, ref = LossStream(max_plot=max_plot), _Reference(max_plot)
        for b in blocks:
            stream.add_batch(b, b.series_of_kind(kind))
            for p in b.points():
                if p.kind == kind:
                    ref.add(p)
        assert stream.count == len(ref.points) > 0
        assert _facts(stream.summary()) == _facts(summarize(ref.points))
        assert [_key(p) for p in stream.plot_points()] == [_key(p) for p in ref.plot()]
        assert stream.all_steps == all(p.step is not None for p in ref.points)


def test_a_loss_that_falls_below_zero_is_a_significant_improvement(engine: str) -> None:
    """A new low after a running minimum of exactly 0.0 (a loss that goes negative: an ELBO, a
    contrastive loss) is an improvement without bound, never a division by zero (both paths,
    streamed and whole)."""
    stream = LossStream()
    b = PointBatch()
    for v in (0.5, 0.0, -1.0, -1.001):
        b.append(v, step=len(b))
    stream.add_batch(b)
    summary = stream.summary()
    assert summary.min is not None and summary.min.value == -1.001
    assert summary.last_improvement is not None and summary.last_improvement.value == -1.0
    whole = summarize([ProgressPoint(time=p.time, value=p.value, step=p.step) for p in b.points()])
    assert _facts(whole) == _facts(summary)


# -- plateau: bulk runs against the value-by-value rule ------------------------------------------
class _Watched(PlateauTracker):
    """The rule value by value, noting whether each value was better (``is_better``)."""

    better = False

    def is_better(self, a: float, best: float) -> bool:
        self.better = super().is_better(a, best)
        return self.better


def _rule_fires(values: list[float], **kw) -> list[tuple]:
    """ReduceLROnPlateau value by value (PlateauTracker.step), with each fire's
    (index, improved since the previous fire, best, current)."""
    t = _Watched(**kw)
    out = []
    improved = True
    for i, v in enumerate(values):
        fired = t.step(v)
        improved = improved or t.better
        if fired:
            out.append((i, improved, repr(t.best), repr(t.last_value)))
            improved = False
    return out


@pytest.mark.parametrize("seed", range(40))
def test_plateau_bulk_runs_fire_where_the_rule_does(engine: str, seed: int) -> None:
    rng = random.Random(seed)
    kw = dict(mode=rng.choice(["min", "max"]), threshold=rng.choice([0.0, 1e-4, 0.05]),
              threshold_mode=rng.choice(["rel", "abs"]), patience=rng.choice([0, 2, 10]),
              cooldown=rng.choice([0, 0, 3]), smoothing=rng.choice([0.0, 0.0, 0.5]))
    n = rng.choice([30, 3000, 20_000])
    values = []
    for i in range(n):
        v = 2.0 * math.exp(-i / (n / 4)) + rng.gauss(0, 0.02) if seed % 2 else float(rng.randint(0, 3))
        if rng.random() < 0.005:
            v = rng.choice([math.nan, math.inf, -math.inf])
        values.append(v)
    expected = _rule_fires(values, **kw)
    tracker, got, pos = PlateauTracker(**kw), [], 0
    while pos < n:
        chunk = values[pos:pos + rng.choice([1, 11, 500, 8000])]
        fires = tracker.step_many(array("d", chunk) if rng.random() < 0.7 else chunk)
        got += [(pos + k, imp, repr(best), repr(cur)) for k, imp, best, cur in fires]
        pos += len(chunk)
    assert got == expected
    reference = PlateauTracker(**kw)
    for v in values:
        reference.step(v)
    assert (tracker.num_bad_epochs, tracker.cooldown_counter, tracker.last_epoch, repr(tracker.best)) == (
        reference.num_bad_epochs, reference.cooldown_counter, reference.last_epoch, repr(reference.best))


# -- column cuts ---------------------------------------------------------------------------------
def test_mask_cut_and_take_equal_a_plain_filter(engine: str) -> None:
    rng = random.Random(5)
    b = PointBatch()
    for i in range(5000):
        b.append(rng.random(), kind=rng.choice(["train", "eval"]), name=rng.choice(["a", "b", "c"]),
                 step=i if i % 7 else None, epoch=i / 10, total=10_000, time=float(i))
    for kind in ("train", "eval"):
        wanted = b.series_of_kind(kind)
        mask = b.mask_of(wanted)
        assert mask is not None and list(mask) == [1 if s in wanted else 0 for s in b.series]
        cut = b.cut(mask)
        expected = [p for p in b.points() if p.kind == kind]
        assert [_key(p) + (p.time,) for p in cut.points()] == [_key(p) + (p.time,) for p in expected]
        assert list(batch_mod.take(b.values, mask)) == [p.value for p in expected]
    assert b.mask_of(set(range(len(b.keys)))) is None  # every key wanted: no cut
    assert b.mask_of(set()) == bytes(len(b))


def test_oom_prefilter_finds_the_words_in_any_text(engine: str) -> None:
    assert _may_hold_oom("x\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert _may_hold_oom("é ResourceExhaustedError: OOM when allocating tensor")
    assert _may_hold_oom("\udcff cannot allocate")
    assert not _may_hold_oom("é loss 0.5\n" * 1000)


# -- the one-read replay ---------------------------------------------------------------------------
def _console_log(path: Path, n: int) -> None:
    rng = random.Random(9)
    lines = []
    for i in range(n):
        v = 1.0 + rng.random() * 0.1 if i > n // 4 else 3.0 - i / n
        if i == n // 2:
            lines.append(f"step {i}: loss nan\n")
        lines.append(f"{{'loss': {v:.4f}, 'epoch': {i / 100:.2f}}}\n")
        if i % 7 == 0:
            lines.append(f"{{'eval_loss': {v + 0.1 + rng.random() * 0.05:.4f}, 'epoch': {i / 100:.2f}}}\n")
        if i % 13 == 0:
            lines.append("some noise: loading data ...\n")
    path.write_text("".join(lines))


@pytest.mark.parametrize("eval_store", ["records", "columns", "reread"])
def test_replay_fed_during_the_read_equals_the_replay_over_a_second_read(
        engine: str, eval_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if eval_store != "records":
        monkeypatch.setattr(train_log_mod, "_EVAL_KEEP", 10)
    if eval_store == "reread":
        monkeypatch.setattr(train_log_mod, "_EVAL_CUTS_BYTES", 1000)
    monkeypatch.setattr(train_log_mod, "_READ_CHUNK", 1 << 14)  # many blocks
    path = tmp_path / "train.log"
    _console_log(path, 30_000)
    settings = Settings()
    plain = read_console(path, streamed=True)
    expected = replay_loss(settings, plain.iter_batches())
    fed = LossReplay(settings)
    log = read_console(path, streamed=True, replay=fed)
    assert log.train_replay is fed
    assert (log._eval_kept is not None, log._eval_cuts is not None) == {
        "records": (True, False), "columns": (False, True), "reread": (False, False)}[eval_store]
    for batch in log.iter_batches(kinds=("eval",)):
        fed.add(batch)
    got = fed.run
    assert len(expected.decisions) > 2 and got.evaluations == expected.evaluations
    assert [(d.policy, d.key, d.reason, d.evidence) for d in got.decisions] == [
        (d.policy, d.key, d.reason, d.evidence) for d in expected.decisions]
    assert [p.value for p in log.iter_points() if p.kind == "eval"] == [
        p.value for p in plain.iter_points() if p.kind == "eval"]
