"""nvidia-smi CSV primitives, on hand-written cells and on the real logs in the corpus.

The expected figures for the corpus files are the ones SOURCES.md documents for each file.
"""

from __future__ import annotations

import os

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from statistics import mean

import pytest

from costctl.telemetry.smi_parse import (
    Column,
    SmiParseError,
    columns_for,
    decode_text,
    is_header,
    is_missing,
    iter_rows,
    parse_column,
    parse_header,
    parse_memory_bytes,
    parse_percent,
    parse_timestamp,
    parse_watts,
    reading_from_row,
    split_row,
)

from helpers import CORPUS  # noqa: E402
MiB = 1024**2

needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir() and os.environ.get("CI") != "true", reason=f"corpus not found at {CORPUS}"
)


def load(name: str) -> list:
    text = decode_text((CORPUS / name).read_bytes())
    return list(iter_rows(text.splitlines()))


# -- values -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cell", ["[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU is lost]", "N/A", "", "  [N/A] "]
)
def test_missing_values_are_none_never_zero(cell):
    assert is_missing(cell)
    assert parse_percent(cell) is None
    assert parse_memory_bytes(cell) is None
    assert parse_watts(cell) is None


def test_values_with_and_without_units():
    assert parse_percent("95 %") == 95.0
    assert parse_percent("95") == 95.0
    assert parse_percent("0 %") == 0.0
    assert parse_memory_bytes("7650 MiB") == 7650 * MiB
    assert parse_memory_bytes("7650") == 7650 * MiB  # nounits: nvidia-smi prints MiB
    assert parse_memory_bytes("2 GiB") == 2 * 1024**3
    assert parse_memory_bytes("512", unit="KiB") == 512 * 1024
    assert parse_watts("33.09 W") == pytest.approx(33.09)
    assert parse_watts("33.09") == pytest.approx(33.09)
    assert parse_watts("33090 mW") == pytest.approx(33.09)


@pytest.mark.parametrize(
    "fn, cell",
    [(parse_percent, "95 MiB"), (parse_percent, "ninety"), (parse_memory_bytes, "7 parsecs"),
     (parse_watts, "12 %"), (parse_percent, "1.2.3 %")],
)
def test_garbage_values_raise_a_parse_error(fn, cell):
    with pytest.raises(SmiParseError, match="'"):
        fn(cell)


def test_headers_columns_and_rows():
    assert parse_column("utilization.gpu [%]") == Column("utilization.gpu", "%")
    assert parse_column(" memory.used [MiB]") == Column("memory.used", "MiB")
    assert parse_column("index") == Column("index", None)
    header = "timestamp, index, name, utilization.gpu [%], power.draw [W]"
    assert is_header(split_row(header))
    assert parse_header(header)[-1] == Column("power.draw", "W")
    assert not is_header(split_row("2024/11/23 12:23:29.950, 0, NVIDIA RTX A6000, 92 %, 33 W"))
    assert not is_header(split_row("0, NVIDIA H100 80GB HBM3, GPU-1b2c, 0, 1, 81559, 69.5"))
    assert split_row("0, NVIDIA RTX A6000,  92 %") == ["0", "NVIDIA RTX A6000", "92 %"]
    assert columns_for(["utilization.gpu", "memory.used", "power.draw", "name"]) == (
        Column("utilization.gpu", "%"), Column("memory.used", "MiB"),
        Column("power.draw", "W"), Column("name", None),
    )


def test_noheader_nounits_rows_become_readings():
    out = (
        "0, NVIDIA H100 80GB HBM3, GPU-1b2c, 97, 71234, 81559, 612.30\n"
        "1, NVIDIA H100 80GB HBM3, GPU-9f00, [N/A], 4, 81559, [Not Supported]\n"
    )
    columns = columns_for(
        ["index", "name", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw"]
    )
    g0, g1 = (reading_from_row(r) for r in iter_rows(out.splitlines(), columns))
    assert (g0.index, g0.name, g0.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-1b2c")
    assert g0.utilization == 97.0 and g0.memory_used_bytes == 71234 * MiB
    assert g0.memory_total_bytes == 81559 * MiB and g0.power_w == pytest.approx(612.3)
    assert g0.error is None
    assert g1.index == 1 and g1.utilization is None and g1.power_w is None
    assert g1.error == "utilization.gpu reads [N/A]"  # unknown utilization counts as busy


def test_row_with_wrong_cell_count_raises_with_line_number():
    rows = list(iter_rows(["index, utilization.gpu [%]", "0, 5 %", "1"]))
    assert reading_from_row(rows[0]).utilization == 5.0
    with pytest.raises(SmiParseError, match="line 3"):
        reading_from_row(rows[1])


def test_timestamps_are_naive_local_times():
    assert parse_timestamp("2026/02/02 01:07:37.100") == datetime(2026, 2, 2, 1, 7, 37, 100000)
    assert parse_timestamp("[N/A]") is None
    with pytest.raises(SmiParseError):
        parse_timestamp("02.02.2026 01:07")


def test_decode_text_handles_utf16_boms_and_utf8():
    text = "timestamp, utilization.gpu [%]\r\n2026/08/01 03:59:40.361, 100 %\r\n"
    for data in (
        b"\xff\xfe" + text.encode("utf-16-le"),
        b"\xfe\xff" + text.encode("utf-16-be"),
        text.encode("utf-16-le"),  # no BOM
        b"\xef\xbb\xbf" + text.encode(),
        text.encode(),
    ):
        assert decode_text(data) == text


# -- real logs --------------------------------------------------------------------------------
@needs_corpus
def test_two_gpus_interleaved_split_by_index():
    by_index: dict[int, list] = defaultdict(list)
    for row in load("gpu_query_2gpu_a6000.csv"):
        by_index[reading_from_row(row).index].append(reading_from_row(row))
    assert sorted(by_index) == [0, 1]
    assert len(by_index[0]) == len(by_index[1]) == 473
    assert mean(r.utilization for r in by_index[0]) == pytest.approx(91.04, abs=0.005)
    assert mean(r.utilization for r in by_index[1]) == pytest.approx(0.01, abs=0.005)
    assert {r.memory_used_bytes for r in by_index[0]} == {25073 * MiB}
    assert {r.memory_total_bytes for r in by_index[1]} == {49140 * MiB}
    assert by_index[0][0].name == "NVIDIA RTX A6000"


@needs_corpus
def test_repeated_header_before_every_row():
    rows = load("gpu_query_repeated_header.csv")
    readings = [reading_from_row(r) for r in rows]
    assert len(readings) == 224
    assert mean(r.utilization for r in readings) == pytest.approx(24.37, abs=0.005)
    assert min(r.utilization for r in readings) == 1 and max(r.utilization for r in readings) == 42
    used = [r.memory_used_bytes // MiB for r in readings]
    assert (min(used), max(used)) == (557, 890)
    assert rows[0].get("pci.bus_id") == "00000000:01:00.0"


@needs_corpus
def test_utf16_crlf_windows_log():
    raw = (CORPUS / "gpu_query_utf16_crlf.csv").read_bytes()
    assert raw[:2] == b"\xff\xfe"
    rows = load("gpu_query_utf16_crlf.csv")
    readings = [reading_from_row(r) for r in rows]
    assert len(readings) == 434
    assert mean(r.utilization for r in readings) == pytest.approx(27.46, abs=0.005)
    assert sum(r.utilization == 0 for r in readings) == 151
    assert {r.memory_total_bytes for r in readings} == {11264 * MiB}
    times = [parse_timestamp(r.get("timestamp")) for r in rows]
    assert (times[-1] - times[0]).total_seconds() == pytest.approx(438, abs=1)


@needs_corpus
def test_forgotten_instance_log_memory_before_utilization():
    rows = load("gpu_query_forgotten_idle.csv")
    readings = [reading_from_row(r) for r in rows]
    assert len(readings) == 1639
    assert mean(r.utilization for r in readings) == pytest.approx(6.01, abs=0.005)
    assert sum(r.utilization == 0 for r in readings) == 1437
    assert readings[-1].memory_used_bytes == 1047 * MiB
    times = [parse_timestamp(r.get("timestamp")) for r in rows]
    assert (times[1] - times[0]).total_seconds() == pytest.approx(15.0, abs=0.01)
    assert (times[-1] - times[0]).total_seconds() == pytest.approx(24572, abs=1)


@needs_corpus
def test_rtx4090_log_with_power_and_no_index():
    readings = [reading_from_row(r) for r in load("gpu_query_rtx4090_vlm.csv")]
    assert len(readings) == 2000
    assert {r.index for r in readings} == {0}
    assert mean(r.utilization for r in readings) == pytest.approx(84.01, abs=0.005)
    assert readings[0].power_w == pytest.approx(33.09)
    assert readings[0].name == "NVIDIA GeForce RTX 4090"


@needs_corpus
def test_quoted_value_spanning_two_lines_is_one_record():
    rows = load("gpu_custom_elapsed_dcconv.csv")
    assert len(rows) == 135
    assert rows[0].columns[0] == Column("elapsed_sec", None)
    assert rows[0].get("power_w") == "26.11\n0"
    assert rows[1].line_no == 4  # header on line 1, first record on lines 2-3
