"""Synthetic telemetry traces for the idle-fraction tests, drawn with a seeded RNG (the same
samples on every run), and a replay of one policy over samples on a simulated clock."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from costctl.clock import SimClock
from costctl.policies import History
from costctl.records import Decision, GpuReading, ProgressPoint, SignalStatus, TelemetrySample

T0 = datetime(2026, 5, 4, 13, 0, tzinfo=timezone.utc)


def sample(t: datetime, gpu: float | None, cpu: float | None = 1.0, **rest) -> TelemetrySample:  # type: ignore[no-untyped-def]
    """One sample: one GPU (None: its reading is missing), the CPU (None: signal absent)."""
    return TelemetrySample(
        time=t, gpus=(GpuReading(index=0, utilization=gpu),), gpu_status=SignalStatus.OK,
        cpu_percent=cpu, cpu_status=SignalStatus.OK if cpu is not None else SignalStatus.ABSENT,
        source="synthetic", **rest)


def open_notebook(seed: int = 15, *, hours: float = 2.5, interval_s: float = 2.0,
                  start: datetime = T0) -> list[TelemetrySample]:
    """A notebook left open (issue 15): ``hours`` at ``interval_s``; a 40-65 % spike of 2-4 s
    every 2-5 minutes, the rest at 0 % but for a few 1-4 % readings (about 94 % of the samples
    read 0 %), the CPU quiet (0-3 % of one core), no SSH session counted, no progress."""
    rng = random.Random(seed)
    n = int(hours * 3600 / interval_s) + 1
    gpu = [float(rng.randint(1, 4)) if rng.random() < 0.05 else 0.0 for _ in range(n)]
    t = rng.uniform(120, 300)
    while t < n * interval_s:
        length = rng.uniform(2, 4)
        level = float(rng.randint(40, 65))
        k = int(t // interval_s)
        for j in range(k, min(n, k + max(1, round(length / interval_s)))):
            gpu[j] = level
        t += rng.uniform(120, 300)
    cpu = [round(rng.uniform(0, 3), 1) for _ in range(n)]
    return [sample(start + timedelta(seconds=k * interval_s), gpu[k], cpu[k]) for k in range(n)]


def data_loading_job(seed: int = 16, *, hours: float = 2.0, interval_s: float = 2.0,
                     start: datetime = T0) -> list[TelemetrySample]:
    """A job starved by its data loader: the GPU runs a 2-4 s burst at 85-99 % every 40-80 s
    and idles at 0-2 % between (about 95 % of the samples), while the loader's worker
    processes keep the CPU at 250-400 % of one core."""
    rng = random.Random(seed)
    n = int(hours * 3600 / interval_s) + 1
    gpu = [float(rng.randint(0, 2)) for _ in range(n)]
    t = rng.uniform(40, 80)
    while t < n * interval_s:
        k = int(t // interval_s)
        for j in range(k, min(n, k + max(1, round(rng.uniform(2, 4) / interval_s)))):
            gpu[j] = float(rng.randint(85, 99))
        t += rng.uniform(40, 80)
    cpu = [round(rng.uniform(250, 400), 1) for _ in range(n)]
    return [sample(start + timedelta(seconds=k * interval_s), gpu[k], cpu[k]) for k in range(n)]


def with_jupyter(samples: list[TelemetrySample], activity: Callable[[TelemetrySample], tuple], *,
                 status: SignalStatus = SignalStatus.OK) -> list[TelemetrySample]:
    """``samples`` with the Jupyter signal: ``activity(sample) -> (last_activity, busy_kernels)``."""
    out = []
    for s in samples:
        last, busy = activity(s)
        out.append(replace(s, jupyter_status=status, jupyter_last_activity=last, jupyter_busy_kernels=busy))
    return out


def replay(policy, samples: Iterable[TelemetrySample], *, interval_s: float,  # type: ignore[no-untyped-def]
           progress: Iterable[ProgressPoint] = (), progress_source: bool = False,
           child_running: bool | None = None) -> list[Decision]:
    """Evaluate ``policy`` at every sample time on a simulated clock (progress points added when
    their time comes); every NEW decision (by key), in order."""
    samples = list(samples)
    points = sorted(progress, key=lambda p: p.time)
    history = History(sample_interval=timedelta(seconds=interval_s), started_at=samples[0].time,
                      progress_source=progress_source, child_running=child_running)
    history.keep_at_least(policy.retention(history.sample_interval))
    clock = SimClock(samples[0].time)
    fired: list[Decision] = []
    keys: set[str] = set()
    k = 0
    for s in samples:
        clock.set(s.time)
        while k < len(points) and points[k].time <= s.time:
            history.add_progress(points[k])
            k += 1
        history.add_sample(s)
        decision = policy.evaluate(history, clock.now())
        if decision is not None and decision.key not in keys:
            keys.add(decision.key)
            fired.append(decision)
    return fired
