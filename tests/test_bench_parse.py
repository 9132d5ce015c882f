"""The parse benchmark runs end to end on a small size (figures are printed, not asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_parse.py"


def test_bench_parse_small_run(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_parse", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    figures = bench.main(["--size", "300K"])
    out = capsys.readouterr().out
    assert "reader (feed_batch, " in out and "points/s" in out
    assert "grep -c loss:" in out
    last = json.loads(out.strip().splitlines()[-1])
    assert last == figures and last["points"] > 1000 and last["analyze_rc"] == 0
    assert last["analyze_peak_rss_mb"] > 0 and "ratio_to_grep" in last
    assert last["engine"] == bench._lines.ENGINE
    python = bench.main(["--size", "100K", "--no-analyze", "--engine", "python"])
    assert python["engine"] == "python" and python["points"] > 300
    general = bench.main(["--size", "100K", "--no-analyze", "--mix", "general"])
    assert general["mix"] == "general" and last["mix"] == "console" and general["points"] > 1000
    assert bench.parse_size("1G") == 10**9 and bench.parse_size("64K") == 64_000
