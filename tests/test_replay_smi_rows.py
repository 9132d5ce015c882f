"""The fast nvidia-smi CSV row reader (:mod:`costctl.replay.smi_rows`) gives the samples and
skip counts of the general per-row path (``smi_parse.iter_rows`` + ``reading_from_row``),
on the corpus and on cells off nvidia-smi's usual shapes."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from costctl.errors import UsageError
from costctl.replay.gpu_smi_csv import _Grouper, infer_columns, iter_smi_lines
from costctl.replay.smi_rows import iter_cells, time_of
from costctl.replay.textio import iter_lines
from costctl.telemetry import smi_parse
from costctl.telemetry.smi_parse import SmiParseError, SmiRow

from replay_support import corpus_file


def _reference(lines: Iterable[str], columns: Sequence[str] | None = None) -> tuple[list, int]:
    """The per-row path as it was before the fast reader: the oracle."""
    given = smi_parse.columns_for(columns) if columns else None
    grouper = _Grouper("nvidia-smi-csv")
    out, skipped, inferred = [], 0, None
    for row in smi_parse.iter_rows(lines, given):
        if not row.columns:
            if inferred is None:
                inferred = infer_columns(row.cells)
            row = SmiRow(row.line_no, inferred, row.cells)
        if not any(c.field == "timestamp" for c in row.columns):
            raise UsageError("no timestamp column")
        try:
            when = time_of(row.get("timestamp"), row.line_no)
            reading = smi_parse.reading_from_row(row)
        except SmiParseError:
            skipped += 1
            continue
        identity = None
        for field in ("index", "uuid", "pci.bus_id"):
            cell = row.get(field)
            if cell is not None and not smi_parse.is_missing(cell):
                identity = f"{field}={cell}"
                break
        grouper.add(when, identity, reading, has_index=row.get("index") is not None)
        out.extend(grouper.drain())
    grouper.flush()
    out.extend(grouper.drain())
    return out, skipped


def _fast(lines: Iterable[str], columns: Sequence[str] | None = None) -> tuple[list, int]:
    counts: dict[str, int] = {}
    samples = list(iter_smi_lines(lines, columns=columns, counts=counts))
    return samples, counts["skipped"]


@pytest.mark.parametrize("name", ["gpu_query_forgotten_idle.csv", "gpu_query_rtx4090_vlm.csv",
                                  "gpu_query_utf16_crlf.csv", "gpu_query_repeated_header.csv",
                                  "gpu_query_2gpu_a6000.csv"])
def test_corpus_logs_read_the_same(name: str) -> None:
    path = corpus_file(name)
    assert _fast(iter_lines(path)) == _reference(iter_lines(path))


ODD = """timestamp, index, name, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]
2026/01/01 00:00:00.000, 0, NVIDIA A100, GPU-a, 97 %, 7650 MiB, 81920 MiB, 33.09 W
2026/01/01 00:00:00.001, 1, NVIDIA A100, GPU-b, [N/A], [N/A], 81920 MiB, [Not Supported]
2026/01/01 00:00:01.000, 0, "NVIDIA A100, SXM", GPU-a, 97.5%, 1.5 GiB, 80 GiB, 3309 mW
2026/01/01 00:00:01.001, [N/A], N/A, GPU-b, +5 %, 1e3 MiB, 81920, 250
2026/01/01 00:00:02.000, 0, NVIDIA A100, GPU-a, 12 W, 7650 MiB, 81920 MiB, 30 W
2026/01/01 00:00:02.001, 1, NVIDIA A100, GPU-b, 5 %, 7650 XB, 81920 MiB, 30 W
2026/01/01 00:00:03.000, 0, NVIDIA A100, GPU-a, 5 %, 7650 MiB
2026/13/01 00:00:03.000, 0, NVIDIA A100, GPU-a, 5 %, 7650 MiB, 81920 MiB, 30 W
2026/01/01 00:00:04, 0, NVIDIA A100, GPU-a, abc, 7650 MiB, 81920 MiB, 30 W
2026/01/01 00:00:05.5, x, NVIDIA A100, GPU-a, 5 %, 7650 MiB, 81920 MiB, 30 W

2026/01/01 00:00:06.000, 0, "NVIDIA
A100", GPU-a, 6 %, 7650 MiB, 81920 MiB, 30 W
timestamp, uuid, utilization.gpu [%], utilization.gpu [%]
2026/01/01 00:00:07.000, GPU-a, 1 %, 2 %
timestamp, pci.bus_id, utilization.gpu, memory.used [KiB], power.draw.instant [W], power.draw.average [W]
2026/01/01 00:00:08.000, 00000000:3B:00.0, 7, 1024, [N/A], 40 W
2026/01/01 00:00:08.000, 00000000:3C:00.0, 7\x00, 1024 KiB, 41 W, 40 W
"""


def test_odd_cells_read_the_same() -> None:
    lines = ODD.splitlines(keepends=True)
    fast, reference = _fast(lines), _reference(lines)
    assert fast == reference
    assert reference[1] > 5 and len(reference[0]) >= 3  # the oracle does skip and read


def test_headerless_and_given_columns_read_the_same() -> None:
    rows = "2026/01/01 00:00:00.000, 0, NVIDIA A100, 97 %, 40000 MiB, 301.5 W\n" * 3
    assert _fast(rows.splitlines(True)) == _reference(rows.splitlines(True))
    bare = "2026/01/01 00:00:00.000, 97, 40000\n2026/01/01 00:00:05.000, 3, 40000\n"
    cols = ["timestamp", "utilization.gpu", "memory.used"]
    assert _fast(bare.splitlines(True), cols) == _reference(bare.splitlines(True), cols)
    with pytest.raises(UsageError):
        _fast(["index, utilization.gpu [%]\n", "0, 5 %\n"])


def test_random_cells_read_the_same() -> None:
    rng = random.Random(7)
    cells = ["0", "1", "97 %", "97%", "97.25 %", "[N/A]", "", "N/A", "-3 %", "1e2 %", " 5 %", "7650 MiB",
             "7650MiB", "1.5 GiB", "12 W", "12.5 W", "900 mW", "x", "5 XB", '"4, 5"', "NVIDIA A100", "unknown"]
    out = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"]
    for i in range(3000):
        stamp = f"2026/01/01 00:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randint(0, 999):03d}"
        row = [stamp] + [rng.choice(cells) for _ in range(rng.choice((4, 5, 5, 5, 6)))]
        out.append(", ".join(row) + rng.choice(("\n", "\r\n")))
    assert _fast(out) == _reference(out)


def test_cells_match_the_csv_module(tmp_path: Path) -> None:
    text = '1, b ,c\n"x, y", z\n\n , \n2,"multi\nline",r\n'
    lines = text.splitlines(keepends=True)
    got = [cells for _, cells in iter_cells(lines)]
    assert got == [list(r.cells) for r in smi_parse.iter_rows(lines, smi_parse.parse_header("f1,f2,f3"))]
    assert [n for n, _ in iter_cells(lines)] == [1, 2, 5]


def test_repeated_rows_and_a_full_cache_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from costctl.replay import smi_rows

    monkeypatch.setattr(smi_rows, "_CACHE_MAX", 16)  # the caches fill and clear many times
    monkeypatch.setattr(smi_rows, "_ROWS_MAX", 8)
    rng = random.Random(11)
    out = ["timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"]
    for i in range(4000):
        stamp = f"2026/01/01 {i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000"
        for gpu in (0, 1):
            util = rng.choice(("0 %", "0 %", "[N/A]", f"{rng.randint(0, 40)} %", "x %"))
            out.append(f"{stamp}, {gpu}, {util}, {rng.choice((15, 15, 20000))} MiB, {rng.choice(('30 W', '[N/A]'))}\n")
    assert _fast(out) == _reference(out)
