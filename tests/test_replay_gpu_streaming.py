"""analyze's streamed GPU log equals the whole-file computation: the samples, per-GPU figures,
idle stretches, peers' verdicts and the whole analysis of a streamed log (open_gpu_log) equal
those computed from the kept sample list with the brute-force functions (stats.gpu_stats,
stretches.machine_stretches / gpu_stretches, peers.skypilot_autostop /
dstack_utilization_policy), on every corpus GPU log and on generated logs, whatever the block
size; the plot series stays bounded and keeps the extremes."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from costctl.config import Settings
from costctl.money import Money
from costctl.replay.analysis import AnalyzeOptions, analyze, to_dict
from costctl.replay.peers import DSTACK_SETTINGS, dstack_utilization_policy, skypilot_autostop
from costctl.replay.readers import open_gpu_log, read_gpu_log
from costctl.replay.stats import all_gpu_stats
from costctl.replay.streaming import DstackStream, PlotSeries, SkypilotStream, StretchStream
from costctl.replay.stretches import gpu_stretches, machine_stretches
from costctl.replay.timeline import nominal_interval

from replay_support import corpus_file
from decimal import Decimal

CORPUS_GPU = [
    "gpu_query_forgotten_idle.csv", "gpu_nvsmi_table_slurm_l40s.log", "gpu_query_rtx4090_vlm.csv",
    "gpu_query_utf16_crlf.csv", "gpu_query_repeated_header.csv", "gpu_query_2gpu_a6000.csv",
    "gpu_custom_elapsed_dcconv.csv", "wandb_events_system.jsonl",
]
BLOCKS = (5, 1 << 20)


def generated(tmp_path: Path, seed: int, rows: int = 2500) -> Path:
    """Two GPUs, busy/idle phases of random length, occasional [N/A], repeated timestamps,
    a gap, and CRLF line ends."""
    rng = random.Random(seed)
    t = datetime(2026, 1, 1)
    out = ["timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\r\n"]
    busy, left = True, 0
    for _ in range(rows):
        if left == 0:
            busy, left = not busy, rng.randint(5, 900)
        left -= 1
        for gpu in (0, 1):
            u = "[N/A]" if rng.random() < 0.002 else f"{rng.randint(20, 100) if busy and gpu == 0 else rng.choice((0, 0, 1, 3))} %"
            out.append(f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {gpu}, {u}, "
                       f"{rng.randint(100, 40000)} MiB, 49140 MiB\r\n")
        r = rng.random()
        t += timedelta(seconds=600) if r < 0.001 else timedelta(0) if r < 0.01 else timedelta(milliseconds=rng.choice((1000, 1001, 1003, 1250)))
    path = tmp_path / f"gen{seed}.csv"
    path.write_bytes("".join(out).encode("utf-8"))
    return path


def check(path: Path, settings: Settings, block: int) -> None:
    kept = read_gpu_log(path)
    streamed = open_gpu_log(path, block_chars=block)
    samples = kept.samples
    assert list(streamed.iter_samples()) == samples
    assert streamed.sample_count == len(samples) and streamed.gpu_indices == kept.gpu_indices
    assert list(streamed.scan.stats.values()) == all_gpu_stats(kept)
    interval = nominal_interval(samples)
    assert streamed.scan.interval_s == (interval.total_seconds() if len(samples) > 1 else streamed.scan.interval_s)
    cfg = settings.policies.idle
    brute = machine_stretches(samples, min_gpu_utilization=cfg.min_gpu_utilization,
                              min_cpu_utilization=cfg.min_cpu_utilization, sample_interval=interval)
    from costctl.policies import classify_sample

    stream = StretchStream(2 * interval, [], None, lambda s: True, machine=True)
    for s in streamed.iter_samples():
        stream.add(s.time, classify_sample(s, min_gpu_utilization=cfg.min_gpu_utilization,
                                           min_cpu_utilization=cfg.min_cpu_utilization).idle is True)
    assert stream.finish() == brute
    for index in kept.gpu_indices:
        one = StretchStream(2 * interval, [], index, lambda s: True, machine=False)
        for s in streamed.iter_samples():
            g = next((g for g in s.gpus if g.index == index), None)
            if g is not None:
                one.add(s.time, g.error is None and g.utilization is not None and g.utilization < cfg.min_gpu_utilization)
        assert one.finish() == gpu_stretches(samples, index, min_gpu_utilization=cfg.min_gpu_utilization,
                                             sample_interval=interval)
    sky = SkypilotStream(idle_minutes=5, min_gpu_utilization=cfg.min_gpu_utilization, job_span=None)
    dstack = [DstackStream(setting) for setting in DSTACK_SETTINGS]
    for s in streamed.iter_samples():
        sky.add(s)
        for d in dstack:
            d.add(s)
    assert sky.result() == skypilot_autostop(samples, idle_minutes=5, min_gpu_utilization=cfg.min_gpu_utilization)
    for d, setting in zip(dstack, DSTACK_SETTINGS):
        assert d.result() == dstack_utilization_policy(samples, min_gpu_utilization=setting.min_gpu_utilization,
                                                       time_window=setting.time_window, setting=setting)
    options = AnalyzeOptions(compare=True)
    rate = Money(Decimal("2.5"), "USD")
    assert to_dict(analyze(settings, gpu_log=streamed, rate=rate, options=options)) == \
        to_dict(analyze(settings, gpu_log=kept, rate=rate, options=options))


@pytest.mark.parametrize("name", CORPUS_GPU)
def test_corpus_streamed_equals_whole_file(name: str) -> None:
    for block in BLOCKS:
        check(corpus_file(name), Settings(), block)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_streamed_equals_whole_file(tmp_path: Path, seed: int) -> None:
    path = generated(tmp_path, seed)
    settings = Settings.model_validate({"policies": {"idle": {"time_window": "10m"}}})
    for block in (7, 1 << 20):
        check(path, settings, block)


def test_plot_series_is_bounded_and_keeps_the_extremes() -> None:
    rng = random.Random(5)
    plot = PlotSeries(64)
    t = datetime(2026, 1, 1)
    values = [rng.uniform(20, 80) for _ in range(100_000)]
    values[31_337], values[77_777] = 0.0, 100.0
    for k, v in enumerate(values):
        plot.add(t + timedelta(seconds=k), v)
    series = plot.series()
    assert len(series) <= 64 + 2
    assert [q[0] for q in series] == sorted(q[0] for q in series)
    assert min(v for _, v in series) == 0.0 and max(v for _, v in series) == 100.0
