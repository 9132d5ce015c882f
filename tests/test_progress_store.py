"""Bounded progress storage (costctl.ledger.progress_store): what the ledger keeps at volume.

The store is checked against a plain point-by-point model of its rule (first N points of each
series and interval, non-finite points up to N more, the interval's last point; the rest summed
up exactly), whatever the chunking; a 1 M-point run through a real ledger (SQLite file and
PostgreSQL) leaves a bounded number of rows whose figures are exact.
"""

from __future__ import annotations

import math
import random
from array import array
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from costctl.ledger.progress_store import ProgressRows, ProgressStore, series_summaries, stored_points
from costctl.ledger.schema import Progress, ProgressBucket
from costctl.progress.batch import NO_INT, PointBatch
from costctl.records import ProgressPoint

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()
NAN, INF = float("nan"), float("inf")


def special(v: float) -> str | None:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# ---------------------------------------------------------------------- the rule, point by point

def model(points, feeds: int, interval: float, n: int, now_of):
    """The store's rule, one point at a time: ``points`` are (key, value, step, time, feed),
    ``now_of(feed)`` the ``now`` of feed number ``feed`` (of ``feeds``). Returns (kept points in order, buckets as dicts)."""
    kept, buckets = [], []
    open_ = {}  # key -> dict(bucket, seen, nf, rest: list, pending)

    def close(key):
        st = open_.pop(key, None)
        if st is None:
            return
        if st["pending"] is not None:
            kept.append(st["pending"])
        rest = st["rest"]
        if rest:
            finite = [p[1] for p in rest if math.isfinite(p[1])]
            buckets.append({
                "key": key, "start": st["bucket"] * interval, "count": len(rest),
                "nan": sum(math.isnan(p[1]) for p in rest), "posinf": sum(p[1] == INF for p in rest),
                "neginf": sum(p[1] == -INF for p in rest), "min": min(finite) if finite else None,
                "max": max(finite) if finite else None, "first": rest[0], "last": rest[-1],
            })

    by_feed = {}
    for p in points:
        by_feed.setdefault(p[4], []).append(p)
    for feed in range(feeds):
        for p in by_feed.get(feed, []):
            key, value, step, t, _ = p
            b = math.floor((t if not math.isnan(t) else now_of(feed)) / interval)
            st = open_.get(key)
            if st is not None and b > st["bucket"]:
                close(key)
                st = None
            if st is None:
                st = open_[key] = {"bucket": b, "seen": 0, "nf": 0, "rest": [], "pending": None}
            finite = math.isfinite(value)
            if st["seen"] < n or (not finite and st["nf"] < n):
                if st["seen"] >= n:
                    st["nf"] += 1
                if st["pending"] is not None:
                    st["rest"].append(st["pending"])
                    st["pending"] = None
                kept.append(p)
            else:
                if st["pending"] is not None:
                    st["rest"].append(st["pending"])
                st["pending"] = p
            st["seen"] += 1
        now = now_of(feed)
        for k in [k for k, st in open_.items() if st["bucket"] < math.floor(now / interval)]:
            close(k)
    for k in list(open_):
        close(k)
    return kept, buckets


def feed_all(store: ProgressStore, feeds, now_of) -> ProgressRows:
    out = ProgressRows()
    for i, batch in enumerate(feeds):
        out.extend(store.add(batch, now_of(i)))
    out.extend(store.flush())
    return out


@pytest.mark.parametrize("seed", range(12))
def test_store_follows_the_rule_point_by_point_whatever_the_chunking(seed):
    rng = random.Random(seed)
    interval, n = rng.choice([(10.0, 3), (60.0, 20), (5.0, 1), (30.0, 7)])
    keys = [("train", "loss"), ("eval", "eval_loss"), ("train", "aux")][: rng.randint(1, 3)]
    feeds, points = [], []
    t = T0 + rng.random() * 100
    for feed in range(rng.randint(1, 40)):
        batch = PointBatch()
        shared = rng.random() < 0.5  # one read time for the whole chunk (the usual case)
        for _ in range(rng.choice([0, 1, 2, 5, 50, 300])):
            key = rng.choice(keys)
            r = rng.random()
            value = NAN if r < 0.04 else INF if r < 0.06 else -INF if r < 0.07 else rng.uniform(-5, 5)
            if not shared:
                t += rng.choice([0.0, 0.01, 0.5, 3.0, 17.0])
            pt = NAN if rng.random() < 0.03 else t
            step = rng.choice([None, len(points)])
            batch.append(value, kind=key[0], name=key[1], step=step, time=pt)
            points.append((key, value, NO_INT if step is None else step, pt, feed))
        feeds.append(batch)
        t += rng.choice([0.0, 1.0, 5.0, interval, 3 * interval])

    feeds_now: list[float] = []
    clock = T0
    for batch in feeds:
        known = [x for x in batch.times if not math.isnan(x)]
        clock = max([clock, *known])
        feeds_now.append(clock)
    store = ProgressStore(interval_s=interval, points_per_interval=n)
    rows = feed_all(store, feeds, feeds_now.__getitem__)
    want_kept, want_buckets = model(points, len(feeds), interval, n, feeds_now.__getitem__)

    got = [(rows.points.keys[s], v, st, tm) for s, v, st, tm in
           zip(rows.points.series, rows.points.values, rows.points.steps, rows.points.times)]
    assert len(got) == len(want_kept)
    for key in keys:  # in order within each series (across series, closing order is free)
        mine = [g[1:] for g in got if g[0] == key]
        theirs = [w[1:4] for w in want_kept if w[0] == key]
        assert len(mine) == len(theirs)
        for (gv, gs, gt), (wv, ws, wt) in zip(mine, theirs):
            assert same(gv, wv) and gs == ws and same(gt, wt)
    assert len(rows.buckets) == len(want_buckets)
    for b, w in zip(sorted(rows.buckets, key=lambda b: (b.start, b.kind, b.name)),
                    sorted(want_buckets, key=lambda w: (w["start"], *w["key"]))):
        assert (b.kind, b.name) == w["key"] and b.start == w["start"] and b.count == w["count"]
        assert (b.nan_count, b.posinf_count, b.neginf_count) == (w["nan"], w["posinf"], w["neginf"])
        assert (None if math.isnan(b.vmin) else b.vmin) == w["min"]
        assert (None if math.isnan(b.vmax) else b.vmax) == w["max"]
        assert same(b.first_value, w["first"][1]) and b.first_step == w["first"][2]
        assert same(b.last_value, w["last"][1]) and b.last_step == w["last"][2]
    # nothing is lost: rows + bucket counts = every point
    assert len(rows.points) + sum(b.count for b in rows.buckets) == len(points) == store.points_seen


def test_a_sparse_run_keeps_every_point_and_writes_no_bucket(ledger):
    run = _run(ledger)
    store = ProgressStore()
    points = [ProgressPoint(time=datetime.fromtimestamp(T0 + 10 * i, UTC), value=1 / (i + 1), step=i)
              for i in range(500)]
    for i in range(0, 500, 7):
        ledger.record_progress(run, store.add(points[i:i + 7], points[min(i + 6, 499)].time))
    ledger.record_progress(run, store.flush())
    with ledger.session() as s:
        assert s.scalar(select(func.count(ProgressBucket.id))) == 0
        rows = s.scalars(select(Progress).order_by(Progress.id)).all()
    assert [(r.step, r.value, r.time) for r in rows] == [(p.step, p.value, p.time) for p in points]


# ---------------------------------------------------------------------- a 1 M-point run

def _run(ledger) -> str:
    pk = ledger.ensure_instance("sim", "i-1", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                price_per_hour=None, currency="USD")
    return ledger.start_run(pk, started_at=datetime.fromtimestamp(T0, UTC), command=None, log_path=None, host="h")


CHUNK, CHUNKS, SECONDS_PER_CHUNK = 10_000, 100, 5.0


def million_points():
    """100 chunks of 10 k points, one read time per chunk (5 s apart): 1 M points over 500 s,
    a decreasing noisy loss with 60 non-finite values at known steps."""
    rng = random.Random(7)
    specials = {rng.randrange(CHUNK * CHUNKS): rng.choice([NAN, INF, -INF]) for _ in range(60)}
    for c in range(CHUNKS):
        base = c * CHUNK
        values = array("d", (2.0 / (1 + (base + i) * 1e-5) + rng.random() * 0.01 for i in range(CHUNK)))
        for step, v in specials.items():
            if base <= step < base + CHUNK:
                values[step - base] = v
        t = T0 + c * SECONDS_PER_CHUNK
        yield t, PointBatch(keys=[("train", "loss")], series=array("i", bytes(4 * CHUNK)), values=values,
                            steps=array("q", range(base, base + CHUNK)), epochs=array("d", [NAN]) * CHUNK,
                            totals=array("q", [NO_INT]) * CHUNK, times=array("d", [t]) * CHUNK), specials


def test_a_million_points_leave_a_bounded_exact_record(ledger):
    run = _run(ledger)
    n = 20
    store = ProgressStore(interval_s=60.0, points_per_interval=n)
    count = nan = posinf = neginf = 0
    lo, hi = INF, -INF
    first = last = None
    specials = {}
    for t, batch, specials in million_points():
        ledger.record_progress(run, store.add(batch, t))
        for v in batch.values:
            if math.isfinite(v):
                lo, hi = min(lo, v), max(hi, v)
        count += len(batch)
        first = first if first is not None else batch.values[0]
        last = batch.values[-1]
    ledger.record_progress(run, store.flush())
    nan = sum(math.isnan(v) for v in specials.values())
    posinf = sum(v == INF for v in specials.values())
    neginf = sum(v == -INF for v in specials.values())
    intervals = math.floor((T0 + (CHUNKS - 1) * SECONDS_PER_CHUNK) / 60) - math.floor(T0 / 60) + 1
    bound = intervals * (2 * n + 2)  # per series and interval: N first, N non-finite, the last, a bucket
    with ledger.session() as s:
        rows = s.scalar(select(func.count(Progress.id)))
        buckets = s.scalar(select(func.count(ProgressBucket.id)))
        summary = series_summaries(s, run)[("train", "loss")]
        stored = stored_points(s, run)
    assert count == 1_000_000 and intervals == 9
    assert rows + buckets <= bound == 378
    assert summary.count == count and summary.rows == rows
    assert (summary.nan, summary.posinf, summary.neginf) == (nan, posinf, neginf)
    assert summary.min == lo and summary.max == hi
    assert summary.first.value == first and summary.first.step == 0
    assert summary.last.value == last and summary.last.step == count - 1
    # every non-finite point is a row, with its step
    kept = {step: v for step, v in zip(stored.steps, stored.values) if not math.isfinite(v)}
    assert set(kept) == set(specials) and all(same(kept[k], specials[k]) for k in specials)
    # the decimated series is in order and holds each interval's first points
    assert list(stored.steps) == sorted(stored.steps)
    assert store.points_seen == count and store.rows_emitted == rows + buckets


def test_a_nan_flood_is_counted_exactly_and_stays_bounded(ledger):
    """A job that prints only NaN: beyond the cap per interval the NaNs are counted, with the
    first and last one's step and time; the record stays bounded."""
    run = _run(ledger)
    n = 5
    store = ProgressStore(interval_s=10.0, points_per_interval=n)
    total = 0
    for c in range(40):  # 40 chunks of 2,000 NaNs, 1 s apart: 4 intervals
        t = T0 - T0 % 10 + c
        batch = PointBatch()
        for i in range(2_000):
            batch.append(NAN, step=total + i, time=t)
        total += 2_000
        ledger.record_progress(run, store.add(batch, t))
    ledger.record_progress(run, store.flush())
    with ledger.session() as s:
        rows = s.scalar(select(func.count(Progress.id)))
        buckets = s.scalars(select(ProgressBucket).order_by(ProgressBucket.start_at)).all()
        summary = series_summaries(s, run)[("train", "loss")]
    assert len(buckets) == 4 and rows == 4 * (2 * n + 1)
    assert summary.count == summary.nan == total and summary.min is None and summary.max is None
    assert all(b.first_special == "nan" and b.min is None for b in buckets)
    assert buckets[0].first_step == 2 * n and buckets[-1].last_step == total - 2
    assert math.isnan(summary.last.value) and summary.last.step == total - 1


def test_record_progress_takes_points_a_batch_and_store_rows(ledger):
    run = _run(ledger)
    when = datetime.fromtimestamp(T0, UTC)
    ledger.record_progress(run, [ProgressPoint(time=when, value=INF, step=1)])
    batch = PointBatch()
    batch.append(-INF, kind="eval", name="eval_loss", step=2, epoch=0.5, total=10, time=T0 + 1)
    batch.append(0.25, time=NAN)
    ledger.record_progress(run, batch)
    ledger.record_progress(run, ProgressRows())
    with ledger.session() as s:
        rows = s.scalars(select(Progress).order_by(Progress.id)).all()
    assert [(r.kind, r.name, r.value, r.step, r.epoch, r.total, r.time) for r in rows] == [
        ("train", "loss", INF, 1, None, None, when),
        ("eval", "eval_loss", -INF, 2, 0.5, 10, when + timedelta(seconds=1)),
        ("train", "loss", 0.25, None, None, None, None),
    ]
    with pytest.raises(ValueError):
        ledger.record_progress(run, [ProgressPoint(time=datetime(2026, 1, 1), value=1.0)])


def test_store_arguments_are_checked():
    with pytest.raises(ValueError):
        ProgressStore(interval_s=0)
    with pytest.raises(ValueError):
        ProgressStore(points_per_interval=0)
    with pytest.raises(ValueError):
        ProgressStore().add(PointBatch(), datetime(2026, 1, 1))


def test_the_writer_thread_writes_store_rows_and_retention_passes(ledger):
    """The watch's path: store rows and a retention pass go through the LedgerWriter."""
    from costctl.ledger.writer import LedgerWriter
    from costctl.records import SignalStatus, TelemetrySample

    run = _run(ledger)
    store = ProgressStore(interval_s=10.0, points_per_interval=2)
    writer = LedgerWriter(ledger, say=lambda text: None)
    try:
        batch = PointBatch()
        for i in range(100):
            batch.append(1.0 / (i + 1), step=i, time=T0)
        first = writer.record_progress(run, store.add(batch, T0))
        writer.record_progress(run, store.flush())
        writer.record_samples(run, [TelemetrySample(time=datetime.fromtimestamp(T0, UTC), cpu_percent=5.0,
                                                    cpu_status=SignalStatus.OK)])
        done = writer.compact(datetime.fromtimestamp(T0, UTC) + timedelta(days=8), timedelta(days=7))
        assert writer.flush(10).pending == 0
        assert first.result(10) is None and done.result(10).samples == 1
    finally:
        writer.close(10)
    with ledger.session() as s:
        summary = series_summaries(s, run)[("train", "loss")]
    assert summary.count == 100 and summary.rows == 3 and summary.min == 1 / 100 and summary.max == 1.0


def test_non_finite_points_after_the_caps_are_counted_in_bulk_with_the_right_first_and_last():
    """Both caps used up by the previous chunk (no point pending): the next chunk, NaN/inf
    included, is counted in bulk; its first point opens the rest, its last is stored."""
    store = ProgressStore(interval_s=1000.0, points_per_interval=1)
    one = PointBatch()
    one.append(1.0, step=0, time=T0)
    one.append(NAN, step=1, time=T0)  # the first point and one non-finite: both caps used
    two = PointBatch()
    for step, v in enumerate([-INF, 5.0, INF, NAN, 2.0, 7.0], start=2):
        two.append(v, step=step, time=T0)
    rows = store.add(one, T0)
    rows.extend(store.add(two, T0))
    rows.extend(store.flush())
    assert list(rows.points.steps) == [0, 1, 7]
    (b,) = rows.buckets
    assert (b.count, b.kept, b.nan_count, b.posinf_count, b.neginf_count) == (5, 3, 1, 1, 1)
    assert (b.vmin, b.vmax, b.first_value, b.first_step, b.last_value, b.last_step) == (2.0, 5.0, -INF, 2, 2.0, 6)
