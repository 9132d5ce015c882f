"""analyze's streaming read: per-kind figures equal summarize() over the kept list, the plot
series stays bounded and keeps the extremes, and a replay sees every point in the old order."""

from __future__ import annotations

import math
import random
from pathlib import Path

from costctl.progress.batch import PointBatch
from costctl.records import ProgressPoint
from costctl.replay.loss_stats import LossStream, summarize
from costctl.replay.train_log import read_console

from replay_support import corpus_file


def _points(n: int, seed: int = 3) -> list[ProgressPoint]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = 3.0 / (1 + i / 50) + rng.random() * 0.2
        if i % 997 == 5:
            v = math.nan
        if i == n // 3:
            v = 50.0  # a spike the plot must keep
        out.append(ProgressPoint(time=None, value=v, step=i if i % 13 else None, epoch=i / 100))
    return out


def _facts(summary) -> tuple:
    """A LossSummary comparable with NaN values inside (NaN != NaN)."""
    return tuple(None if v is None else _key(v) if isinstance(v, ProgressPoint) else v
                 for v in (getattr(summary, f) for f in summary.__slots__))


def test_stream_summary_equals_summarize_and_plot_is_bounded() -> None:
    points = _points(20_000)
    stream = LossStream(max_plot=256)
    for start in range(0, len(points), 1000):
        stream.add_batch(PointBatch.from_points(points[start : start + 1000]), {0})
    assert _facts(stream.summary()) == _facts(summarize(points))
    plot = stream.plot_points()
    assert len(plot) <= 256
    finite = [p for p in points if math.isfinite(p.value)]
    values = [p.value for p in plot]
    assert max(values) == 50.0 and min(values) == min(p.value for p in finite)
    steps = [p.epoch for p in plot]
    assert steps == sorted(steps)  # in file order
    assert not stream.all_steps


def test_stream_small_series_keeps_every_point() -> None:
    points = _points(100)
    stream = LossStream(max_plot=4096)
    for p in points:
        stream.add(p)
    assert _facts(stream.summary()) == _facts(summarize(points))
    assert [p.epoch for p in stream.plot_points()] == [p.epoch for p in points if math.isfinite(p.value)]


def _key(p: ProgressPoint) -> tuple:
    return (p.kind, p.name, repr(p.value), p.step, p.epoch, p.total)


def test_streamed_console_log_matches_the_kept_one(tmp_path: Path) -> None:
    text = corpus_file("hf_stdout_cpt_cmd.txt").read_text(encoding="utf-8", errors="replace")
    path = tmp_path / "big.log"
    path.write_text(text * 40 + "".join(f"iter {i}: loss {3 / (i + 1):.5f}, time 1ms\n" for i in range(5000)))
    kept = read_console(path)
    streamed = read_console(path, streamed=True, max_plot=64)
    for kind in ("train", "eval"):
        assert streamed.count(kind) == kept.count(kind) > 0
        assert _facts(streamed.summary_of(kind)) == _facts(kept.summary_of(kind))
    assert len(streamed.train) <= 64 and len(streamed.eval) <= 64
    assert streamed.x_axis == kept.x_axis and streamed.oom == kept.oom and streamed.summary == kept.summary
    assert [_key(p) for p in streamed.iter_points()] == [_key(p) for p in kept.points]
    assert [_key(p) for p in streamed.materialized().points] == [_key(p) for p in kept.points]
