"""PointBatch: columns round-trip to ProgressPoint, keys re-index on extend."""

import math
from datetime import UTC, datetime

from costctl.progress.batch import NO_INT, PointBatch
from costctl.records import ProgressPoint

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_round_trip_points():
    points = [
        ProgressPoint(time=T, value=2.5, step=10, total=100),
        ProgressPoint(time=None, value=float("nan"), kind="eval", name="eval_loss", epoch=1.5),
        ProgressPoint(time=T, value=float("inf"), step=None),
    ]
    batch = PointBatch.from_points(points)
    assert len(batch) == 3 and batch.keys == [("train", "loss"), ("eval", "eval_loss")]
    back = list(batch.points())
    assert back[0] == points[0]
    assert back[1].time is None and math.isnan(back[1].value) and back[1].epoch == 1.5
    assert back[1].kind == "eval" and back[1].name == "eval_loss" and back[1].step is None
    assert back[2] == points[2]
    assert batch.steps[1] == NO_INT and math.isnan(batch.epochs[0])


def test_extend_reindexes_keys():
    a = PointBatch()
    a.append(1.0, kind="eval", name="val_loss")
    b = PointBatch()
    b.append(2.0)
    b.append(3.0, kind="eval", name="val_loss")
    a.extend(b)
    assert [(p.kind, p.name, p.value) for p in a.points()] == [
        ("eval", "val_loss", 1.0), ("train", "loss", 2.0), ("eval", "val_loss", 3.0)]
    assert not PointBatch() and bool(a)


def test_negative_step_is_absent():
    batch = PointBatch()
    batch.append(1.0, step=-3, total=-1)
    assert batch.point(0).step is None and batch.point(0).total is None
