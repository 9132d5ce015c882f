"""The watch, flood and start-up benchmarks run end to end at tiny sizes and end with one JSON
line holding their figures (the figures themselves are printed, not asserted: targets live in the
benchmarks, never in timed tests). Real watches in real time: the ``realtime`` group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.realtime


def _run(name: str, *args: str, timeout: float = 240) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bench_flood_small() -> None:
    figures = _run("bench_flood", "--lines", "20000", "--runs", "1")
    assert figures["lines"] == 20000 and figures["lines_out"] == 20000  # the passthrough is whole
    assert figures["ratio"] > 0 and figures["watcher_peak_rss_mb"] > 0 and figures["points_seen"] > 0


def test_bench_watch_small() -> None:
    figures = _run("bench_watch", "--seconds", "6", "--warmup", "2")
    text = json.dumps(figures)
    assert "cpu" in text and "rss" in text


def test_bench_start_small() -> None:
    figures = _run("bench_start", "--runs", "1")
    assert {"help", "gpus", "bill_empty_ledger"} <= set(figures["commands"])
    assert "sqlalchemy" not in figures["commands"]["help"]["heavy"]


def test_bench_gpu_log_small() -> None:
    figures = _run("bench_gpu_log", "--size", "200K", "--runs", "1")
    assert figures["analyze_rc"] == 0 and figures["compare_rc"] == 0
    assert figures["samples"] > 0 and figures["rows"] == 2 * figures["samples"]
    assert figures["analyze_peak_rss_mb"] > 0 and figures["analyze_s"] > 0
