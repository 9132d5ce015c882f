"""The parse benchmark runs end to end on a small size (figures are printed, not asserted)."""

from __future__ import annotations

import importlib.util
import re
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
    assert "reader (the watch's, " in out and "points/s" in out
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


def test_the_benchmarks_share_one_child_runner() -> None:
    """bench_parse and bench_gpu_log measure their ``costctl analyze`` child with
    ``benchmarks/_procfs.run_child`` (one copy of the wall / peak-RSS / exit-status code)."""
    import sys

    spec = importlib.util.spec_from_file_location("_procfs", BENCH.parent / "_procfs.py")
    assert spec is not None and spec.loader is not None
    procfs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(procfs)
    took, rss, rc = procfs.run_child([sys.executable, "-c", "b = bytearray(64 << 20); raise SystemExit(3)"])
    assert rc == 3 and rss >= 60 and took > 0
    assert procfs.parse_size("1.5M") == 1_500_000
    for name in ("bench_parse.py", "bench_gpu_log.py"):
        source = (BENCH.parent / name).read_text()
        imported = re.search(r"^from _procfs import (.*)$", source, re.M)
        assert imported and "run_child" in imported.group(1) and "wait4(" not in source


def test_benchmarks_start_costctl_as_installed(monkeypatch) -> None:
    """The costctl processes a benchmark starts get none of the caller's ``COSTCTL_*`` variables
    and no ``PYTHONDONTWRITEBYTECODE`` (an installed costctl has its bytecode: without it every
    start compiles the package from source), and every benchmark that starts one says so."""
    spec = importlib.util.spec_from_file_location("_procfs", BENCH.parent / "_procfs.py")
    assert spec is not None and spec.loader is not None
    procfs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(procfs)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("COSTCTL_DATABASE_URL", "sqlite:////nowhere/user.db")
    env = procfs.costctl_env(COSTCTL_DATA_DIR="/tmp/x")
    assert "PYTHONDONTWRITEBYTECODE" not in env and "COSTCTL_DATABASE_URL" not in env
    assert env["COSTCTL_DATA_DIR"] == "/tmp/x" and env["PATH"]
    for name in ("bench_watch.py", "bench_flood.py", "bench_parse.py", "bench_gpu_log.py", "bench_notice.py",
                 "bench_bill.py"):
        source = (BENCH.parent / name).read_text()
        assert "ensure_bytecode()" in source and "os.environ.items()" not in source, name
