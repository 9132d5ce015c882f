"""Every GPU log of the corpus read by costctl's replay readers; the facts SOURCES.md states for
each file are asserted as SOURCES.md states them (its rounding). A renamed copy reads the same."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl.records import SignalStatus
from costctl.replay.formats import detect_file
from costctl.replay.gpu_log import GpuLog
from costctl.replay.readers import read_gpu_log
from costctl.replay.stats import gpu_stats

from replay_support import corpus_file, renamed_copy

MIB = 2**20


def _read(name: str) -> GpuLog:
    return read_gpu_log(corpus_file(name))


def _hms(when: datetime | None) -> str:
    assert when is not None
    return when.strftime("%H:%M:%S")


def test_forgotten_idle_csv() -> None:
    log = _read("gpu_query_forgotten_idle.csv")
    assert log.format == "nvidia-smi-csv"
    st = gpu_stats(log, 0)
    assert st.samples == 1639
    assert round(st.interval_s, 1) == 15.0
    assert (_hms(st.start), _hms(st.end)) == ("01:07:37", "07:57:08")
    assert round(st.span_s) == 24572 and round(st.span_s / 3600, 1) == 6.8
    assert round(st.mean_utilization, 2) == 6.01
    assert st.zero_samples == 1437
    run = st.longest_zero_run
    assert run is not None and run.count == 1295
    assert (run.first + 1, run.last + 1) == (345, 1639)  # rows 345..1639 (1-based data rows)
    assert (_hms(run.start), _hms(run.end)) == ("02:33:37", "07:57:08")
    assert round(run.seconds) == 19411 and round(run.seconds / 3600, 1) == 5.4
    assert st.trailing_zero_samples == run.count  # runs to the end of the file
    tail = [g.memory_used_bytes for _, g in log.readings(0)[run.first:]]
    assert set(tail) == {1047 * MIB}  # memory held at 1047 MiB for the whole idle tail
    assert st.memory_used_max == 71162 * MIB
    # memory.used comes before utilization.gpu in this query: not swapped
    first = log.samples[0]
    assert first.gpus[0].memory_used_bytes == 17092 * MIB and first.gpus[0].utilization == 0


def test_nvidia_smi_table_slurm_l40s() -> None:
    log = _read("gpu_nvsmi_table_slurm_l40s.log")
    assert log.format == "nvidia-smi-table"
    st = gpu_stats(log, 0)
    assert st.samples == 100
    assert (_hms(st.start), _hms(st.end)) == ("19:00:23", "19:11:55")
    times = [s.time for s in log.samples]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    assert all(59 <= g <= 61 for g in gaps[:10])  # cadence 60 s for the first 11 snapshots
    fast = [t for t in times if t >= datetime(2024, 10, 29, 19, 11, 46, tzinfo=timezone.utc)]
    assert len(fast) == 89 and (fast[-1] - fast[0]).total_seconds() <= 10  # ~10 snapshots per second
    utils = [g.utilization for _, g in log.readings(0)]
    assert utils[1:4] == [93, 93, 100]  # snapshots 2-4
    assert all(u == 0 for i, u in enumerate(utils) if i not in (1, 2, 3))
    assert round(st.mean_utilization, 2) == 2.86
    run = st.longest_zero_run
    assert run is not None and run.count == 96 and (run.first + 1, run.last + 1) == (5, 100)
    assert (_hms(run.start), _hms(run.end), run.seconds) == ("19:04:24", "19:11:55", 451.0)
    assert st.trailing_zero_samples == 96  # runs to the end of the saved file
    g = log.samples[0].gpus[0]
    assert g.name == "NVIDIA L40S" and g.memory_total_bytes == 46068 * MIB and g.power_w == 32
    assert g.processes == ()  # "No running processes found"
    busy = log.samples[1].gpus[0]
    assert busy.processes == (3794277,) and busy.memory_used_bytes == 11948 * MIB


def test_rtx4090_vlm_csv() -> None:
    log = _read("gpu_query_rtx4090_vlm.csv")
    st = gpu_stats(log, 0)
    assert st.samples == 2000
    assert round(st.interval_s, 3) == 1.003
    long_gaps = st.gaps_over(1.5 * st.interval_s, log)
    assert len(long_gaps) == 67  # 67 gaps of ~3.9 s ...
    assert round(statistics.median(long_gaps), 1) == 3.9
    assert st.samples / len(long_gaps) == pytest.approx(32, abs=3)  # ... one every ~32 samples
    assert round(st.max_gap_s, 1) == 7.3
    assert (_hms(st.start), _hms(st.end), round(st.span_s)) == ("15:36:53", "16:13:37", 2204)
    assert round(st.mean_utilization, 2) == 84.01
    assert st.zero_samples == 52
    run = st.longest_zero_run
    assert run is not None and run.count == 9 and (_hms(run.start), _hms(run.end)) == ("15:50:20", "15:50:28")
    assert (st.memory_used_min, st.memory_used_max) == (1121 * MIB, 18141 * MIB)
    g = log.samples[0].gpus[0]
    assert g.name == "NVIDIA GeForce RTX 4090" and g.power_w == 33.09


def test_utf16_crlf_csv() -> None:
    path = corpus_file("gpu_query_utf16_crlf.csv")
    raw = path.read_bytes()
    assert raw[:2] == b"\xff\xfe" and b"\r\x00\n\x00" in raw  # UTF-16LE with BOM and CRLF, as saved
    log = read_gpu_log(path)
    st = gpu_stats(log, 0)
    assert st.samples == 434
    assert round(st.interval_s, 3) == 1.012
    assert (_hms(st.start), _hms(st.end), round(st.span_s)) == ("03:59:40", "04:06:58", 438)
    assert round(st.mean_utilization, 2) == 27.46
    assert st.zero_samples == 151
    run = st.longest_zero_run
    assert run is not None and run.count == 49 and (_hms(run.start), _hms(run.end)) == ("04:04:12", "04:05:00")
    assert (st.memory_used_min, st.memory_used_max, st.memory_total) == (300 * MIB, 10611 * MIB, 11264 * MIB)


def test_repeated_header_csv() -> None:
    path = corpus_file("gpu_query_repeated_header.csv")
    lines = path.read_text().splitlines()
    assert len(lines) == 448 and sum(ln.startswith("timestamp,") for ln in lines) == 224
    log = read_gpu_log(path)
    assert log.skipped == 0
    st = gpu_stats(log, 0)
    assert st.samples == 224
    assert round(st.interval_s, 2) == 1.03
    assert (_hms(st.start), _hms(st.end), round(st.span_s)) == ("18:56:56", "19:00:45", 229)
    assert round(st.mean_utilization, 2) == 24.37
    assert (st.min_utilization, st.max_utilization) == (1, 42)
    assert st.zero_samples == 0 and st.longest_zero_run is None
    assert (st.memory_used_min, st.memory_used_max) == (557 * MIB, 890 * MIB)


def test_two_gpu_csv_split_by_index_never_averaged() -> None:
    log = _read("gpu_query_2gpu_a6000.csv")
    assert log.gpu_indices == [0, 1]
    assert sum(len(s.gpus) for s in log.samples) == 946  # 946 rows
    gpu0, gpu1 = gpu_stats(log, 0), gpu_stats(log, 1)
    assert gpu0.samples == gpu1.samples == 473
    assert round(gpu0.interval_s, 1) == 1.0
    assert (_hms(gpu0.start), _hms(gpu0.end), round(gpu0.span_s)) == ("12:23:29", "12:31:28", 479)
    assert round(gpu0.mean_utilization, 2) == 91.04
    assert (gpu0.min_utilization, gpu0.max_utilization) == (29, 100)
    assert gpu0.memory_used_min == gpu0.memory_used_max == 25073 * MIB
    assert round(gpu1.mean_utilization, 2) == 0.01
    assert gpu1.zero_samples == 470 and gpu1.max_utilization == 1
    assert gpu1.memory_used_max == 15 * MIB
    run = gpu1.longest_zero_run
    assert run is not None and run.count == 272 and (_hms(run.start), _hms(run.end)) == ("12:25:23", "12:29:58")
    assert gpu1.trailing_zero_samples == 76
    # the average of both GPUs would be 45.52 %: each sample keeps two separate readings instead
    both = [g.utilization for s in log.samples for g in s.gpus]
    assert round(sum(both) / len(both), 2) == 45.52
    assert all(len(s.gpus) == 2 for s in log.samples)


def test_custom_elapsed_csv_with_two_line_power_field() -> None:
    path = corpus_file("gpu_custom_elapsed_dcconv.csv")
    assert len(path.read_text().splitlines()) == 271  # 270 physical lines + header
    log = read_gpu_log(path)
    assert log.format == "gpu-csv" and log.relative
    st = gpu_stats(log, 0)
    assert st.samples == 135
    assert round(st.interval_s, 2) == 0.25
    start = datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert round((st.start - start).total_seconds(), 2) == 0.08
    assert round((st.end - start).total_seconds(), 2) == 34.10
    assert round(st.mean_utilization, 2) == 18.44 and st.max_utilization == 23
    assert st.zero_samples == 7 and st.longest_zero_run is not None and st.longest_zero_run.count == 3
    readings = [g for _, g in log.readings(0)]
    assert (readings[0].memory_used_bytes, readings[-1].memory_used_bytes) == (472 * MIB, 2676 * MIB)
    assert readings[0].memory_total_bytes == 49140 * MIB
    assert readings[0].power_w == 26.11  # the quoted value "26.11\n0" is one field


def test_custom_elapsed_csv_placed_at_start_time() -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    log = read_gpu_log(corpus_file("gpu_custom_elapsed_dcconv.csv"), start=start)
    assert log.samples[0].time == datetime(2026, 3, 1, 12, 0, 0, 80000, tzinfo=timezone.utc)


def test_wandb_system_metrics() -> None:
    log = _read("wandb_events_system.jsonl")
    assert log.format == "wandb-system"
    st = gpu_stats(log, 0)
    assert st.samples == 18
    assert st.interval_s == 30
    gaps = [(b.time - a.time).total_seconds() for a, b in zip(log.samples, log.samples[1:])]
    assert 3 in gaps  # the 3 s gap SOURCES.md mentions (it is the last one in file order)
    assert round(st.mean_utilization, 2) == 4.96
    assert (st.min_utilization, st.max_utilization) == (3.87, 7.13)
    assert st.zero_samples == 0
    # _runtime 28 -> 515 s: the same span as the _timestamps (1582070941 -> 1582071428 = 487 s)
    assert st.span_s == 515 - 28
    sample = log.samples[0]
    assert sample.cpu_status is SignalStatus.ABSENT  # system.cpu is machine-wide, not the job's tree
    assert sample.gpus[0].power_w == 27.79


GPU_FILES = [
    ("gpu_query_forgotten_idle.csv", "nvidia-smi-csv"),
    ("gpu_nvsmi_table_slurm_l40s.log", "nvidia-smi-table"),
    ("gpu_query_rtx4090_vlm.csv", "nvidia-smi-csv"),
    ("gpu_query_utf16_crlf.csv", "nvidia-smi-csv"),
    ("gpu_query_repeated_header.csv", "nvidia-smi-csv"),
    ("gpu_query_2gpu_a6000.csv", "nvidia-smi-csv"),
    ("gpu_custom_elapsed_dcconv.csv", "gpu-csv"),
    ("wandb_events_system.jsonl", "wandb-system"),
]


@pytest.mark.parametrize(("name", "fmt"), GPU_FILES)
def test_renamed_copy_reads_the_same(name: str, fmt: str, tmp_path: Path) -> None:
    original = corpus_file(name)
    copy = renamed_copy(original, tmp_path, "training.log")  # a misleading name
    assert detect_file(copy) == fmt
    a, b = read_gpu_log(original), read_gpu_log(copy)
    assert a.format == b.format == fmt
    assert a.samples == b.samples


@pytest.mark.parametrize(("name", "fmt"), GPU_FILES)
def test_replayed_signals_are_only_the_recorded_ones(name: str, fmt: str) -> None:
    log = read_gpu_log(corpus_file(name))
    for s in log.samples:
        assert s.gpu_status is SignalStatus.OK
        assert s.cpu_status is SignalStatus.ABSENT and s.cpu_percent is None
        assert s.ssh_status is SignalStatus.ABSENT
    assert "utilization" in log.fields

