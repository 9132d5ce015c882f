"""The idle policy on real recorded nvidia-smi logs from the corpus (read here with csv)."""

from __future__ import annotations

import csv
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costctl.clock import SimClock
from costctl.config import IdleConfig
from costctl.policies import History, IdlePolicy
from costctl.records import GpuReading, SignalStatus, TelemetrySample

from replay_support import corpus_file  # noqa: E402 - skips, or fails under CI, when absent


def _time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)


def _pct(text: str) -> float:
    return float(text.strip().removesuffix("%").strip())


def _need(name: str) -> Path:
    return corpus_file(name)


def _replay(samples: list[TelemetrySample], interval_s: float, window: str) -> list:
    history = History(sample_interval=timedelta(seconds=interval_s))
    policy = IdlePolicy(IdleConfig(time_window=window, min_gpu_utilization=5))
    clock = SimClock(samples[0].time)
    fired, keys = [], set()
    for sample in samples:
        clock.set(sample.time)
        history.add_sample(sample)
        decision = policy.evaluate(history, clock.now())
        if decision is not None and decision.key not in keys:
            keys.add(decision.key)
            fired.append(decision)
    return fired


def test_forgotten_instance_stops_30_minutes_into_the_final_idle_stretch() -> None:
    rows = list(csv.reader(_need("gpu_query_forgotten_idle.csv").open()))[1:]
    samples = [TelemetrySample(time=_time(r[0]), gpus=(GpuReading(index=0, utilization=_pct(r[2])),),
                               gpu_status=SignalStatus.OK, source="replay") for r in rows]
    assert len(samples) == 1639  # SOURCES.md
    fired = _replay(samples, 15.0, "30m")
    # The final idle stretch starts right after the last sample at or above 5 %.
    last_busy = max(i for i, s in enumerate(samples) if s.gpus[0].utilization >= 5)
    stretch_start = samples[last_busy + 1].time
    assert stretch_start == datetime(2026, 2, 2, 2, 33, 37, 502000, tzinfo=timezone.utc)  # "from 02:33:37.5"
    expected_stop = next(s.time for s in samples if s.time - stretch_start >= timedelta(minutes=30))
    # Exactly one decision: the 26-minute pause mid-run does not reach a 30-minute window.
    assert len(fired) == 1
    assert fired[0].time == expected_stop
    assert fired[0].evidence["idle_since"] == "2026-02-02T02:33:37.502000Z"
    # ... but a shorter window does stop inside that pause, which shows the pause is really there.
    assert len(_replay(samples, 15.0, "20m")) == 2


def test_two_gpu_log_one_idle_gpu_keeps_the_machine_busy() -> None:
    rows = list(csv.reader(_need("gpu_query_2gpu_a6000.csv").open()))[1:]
    by_time: dict[str, dict[int, float]] = defaultdict(dict)
    order: list[str] = []
    for r in rows:
        # GPU 0 and GPU 1 rows share a timestamp to within a few ms: group by whole second.
        key = r[0].strip()[:19]
        if key not in by_time:
            order.append(key)
        by_time[key][int(r[1])] = _pct(r[3])
    both = [TelemetrySample(time=datetime.strptime(k, "%Y/%m/%d %H:%M:%S").replace(tzinfo=timezone.utc),
                            gpus=tuple(GpuReading(index=i, utilization=u) for i, u in sorted(by_time[k].items())),
                            gpu_status=SignalStatus.OK, source="replay") for k in order]
    assert all(len(s.gpus) == 2 for s in both)
    # costctl's rule: all GPUs must be idle -> GPU 0 trains the whole time -> never idle.
    assert _replay(both, 1.0, "60s") == []
    # Watching GPU 1 alone (what dstack's any-GPU rule effectively does) finds it idle.
    only_gpu1 = [TelemetrySample(time=s.time, gpus=(s.gpus[1],), gpu_status=SignalStatus.OK) for s in both]
    fired = _replay(only_gpu1, 1.0, "60s")
    assert fired and fired[0].evidence["max_gpu_utilization"]["1"] < 5
