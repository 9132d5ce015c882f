"""The reader benchmark script runs end to end on a small size (figures are printed, not asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_readers.py"


def test_bench_readers_small_run(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_readers", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--size", "300K"])
    out = capsys.readouterr().out
    assert "costctl iter_console:" in out and "lines/s" in out
    assert "grep -c loss:" in out
    assert bench.parse_size("1G") == 10**9 and bench.parse_size("64K") == 64_000
