"""``costctl analyze --gpu-log --compare`` on nvidia-smi logs whose timestamps repeat: is the cost
per row the same as a log with distinct times, and the same at any size (near-linear)?

Issue 17: "a 300 k-row log with repeating timestamps plus --compare ran past 180 s". A replay
spreads equal times by a microsecond, and every windowed figure (the idle window, dstack's
``time_window``, the stretches) then holds many samples in a tiny span; anything that rescans a
window per sample would be quadratic there. Shapes generated (one GPU, ``index`` column,
utilization busy/idle in 50-minute / 25-minute cycles by row count):

* ``distinct``: one row per second (the control);
* ``same``: every row at one timestamp;
* ``bursts``: 100 rows per second;
* ``replayed``: the first half's timestamps again (a log appended to itself: times go back).

Each shape is run at ``--rows`` / 4, / 2 and ``--rows`` rows (``costctl analyze --gpu-log FILE
--compare --format json`` as a subprocess, stdout discarded). Figures (the last line is one JSON
object), per shape and size: ``wall_s``, ``cpu_s`` (user + system of the child, from
``os.wait4``: steadier than wall time on a loaded machine); per shape ``us_per_row`` (the CPU
of the second half's rows: (cpu(n) - cpu(n/2)) / (n/2), start-up excluded), ``growth`` = that
marginal cost over the one between n/4 and n/2 (1.0: linear; 2.0: quadratic) and
``vs_distinct`` = ``us_per_row`` / the ``distinct`` control's. Nothing is asserted: it is a
measurement.

Usage::

    python benchmarks/bench_repeated_times.py                    # 300,000 rows, every shape
    python benchmarks/bench_repeated_times.py --rows 40000 --shapes same,distinct
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _procfs beside it, also when loaded by path

from _procfs import NEUTRAL_CWD, costctl_env, ensure_bytecode  # noqa: E402

HEADER = "timestamp, index, name, utilization.gpu [%], memory.total [MiB], memory.used [MiB]\n"
SHAPES = ("distinct", "same", "bursts", "replayed")
#: rows busy, then idle, in each cycle (at one row a second: 50 min busy, 25 min idle).
BUSY, IDLE = 3000, 1500


def second_of(shape: str, i: int, rows: int) -> int:
    """The second (from the log's start) of row ``i`` of ``rows`` in ``shape``."""
    if shape == "same":
        return 0
    if shape == "bursts":
        return i // 100
    if shape == "replayed":
        return i % max(1, rows // 2)
    return i


def write_log(path: Path, shape: str, rows: int) -> None:
    """Write ``rows`` rows of ``shape`` (see the module docstring) to ``path``."""
    t0 = datetime(2026, 1, 1)
    with path.open("w", encoding="utf-8", newline="") as fh:
        fh.write(HEADER)
        for start in range(0, rows, 10_000):
            lines = []
            for i in range(start, min(rows, start + 10_000)):
                t = t0 + timedelta(seconds=second_of(shape, i, rows))
                util = 80 if i % (BUSY + IDLE) < BUSY else 0
                lines.append(f"{t:%Y/%m/%d %H:%M:%S}.000, 0, NVIDIA RTX A6000, {util} %, 49140 MiB, "
                             f"{20000 if util else 15} MiB\n")
            fh.write("".join(lines))


def run(path: Path) -> tuple[float, float, int]:
    """``(wall seconds, user + system CPU seconds, exit status)`` of one ``costctl analyze``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "costctl", "analyze", "--gpu-log", str(path), "--compare",
                             "--format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=costctl_env(), cwd=NEUTRAL_CWD)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def main(argv: list[str] | None = None) -> dict:
    """Generate the logs, time ``costctl analyze --compare`` on each; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="rows at the full size (default 300000)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    args = parser.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}: expected {', '.join(SHAPES)}")
    ensure_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="costctl-bench-times-"))
    figures: dict = {"rows": args.rows}
    try:
        n4, n2, n = args.rows // 4, args.rows // 2, args.rows
        for shape in shapes:
            cpu_at = {}
            for rows in (n4, n2, n):
                path = tmp / f"{shape}-{rows}.csv"
                write_log(path, shape, rows)
                wall, cpu, rc = run(path)
                cpu_at[rows] = cpu
                figures[f"{shape}_{rows}"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rc": rc}
                print(f"{shape:9} {rows:>9,} rows: {wall:8.2f} s wall {cpu:8.2f} s CPU  exit {rc}", flush=True)
                path.unlink()
            late = (cpu_at[n] - cpu_at[n2]) / (n - n2)
            early = (cpu_at[n2] - cpu_at[n4]) / (n2 - n4)
            figures[f"{shape}_us_per_row"] = round(late * 1e6, 1)
            figures[f"{shape}_growth"] = round(late / early, 2) if early > 0 else None
            print(f"{shape:9} {late * 1e6:7.1f} us/row (rows n/2..n), growth {figures[f'{shape}_growth']}", flush=True)
        if "distinct" in shapes:
            base = figures["distinct_us_per_row"]
            for shape in shapes:
                figures[f"{shape}_vs_distinct"] = round(figures[f"{shape}_us_per_row"] / base, 2) if base else None
        print(json.dumps(figures, sort_keys=True))
        return figures
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
