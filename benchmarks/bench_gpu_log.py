"""``costctl analyze --gpu-log`` on a generated nvidia-smi query CSV: wall time, throughput and peak RSS.

Writes a synthetic two-GPU ``nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,
utilization.memory,memory.total,memory.used,memory.free --format=csv -l 1`` log (the layout of
the corpus's ``gpu_query_2gpu_a6000.csv``; default 50 MB; cached in the temporary directory with
``--keep`` and reused by the next run of the same size): GPU 0 busy (30-100 %) for 50 minutes,
then both GPUs idle for 25 minutes, repeated; GPU 1 always idle; 1.000-1.005 s between snapshots
(millisecond timestamps, as nvidia-smi writes them). Then it runs ``costctl analyze --gpu-log
FILE --format json`` (and, unless ``--no-compare``, the same with ``--compare``) as a
subprocess, stdout discarded, ``--runs`` times each, and takes the median.

Figures (the last line is one JSON object): ``size_bytes``; ``rows`` (CSV data rows);
``samples`` (snapshots); ``analyze_s`` (median wall seconds); ``analyze_mb_s`` (MB/s, 10^6
bytes); ``analyze_samples_per_s``; ``analyze_peak_rss_mb`` (MiB, the largest ``ru_maxrss`` of
the child over the runs, via ``os.wait4``; issue 13's target: <= 200 at 1 GB);
``compare_s`` / ``compare_peak_rss_mb`` (the same with ``--compare``); ``analyze_rc`` /
``compare_rc`` (exit status). Nothing is asserted: it is a measurement; absolute times depend
on the machine's load.

Usage::

    python benchmarks/bench_gpu_log.py                  # 50 MB, 3 runs
    python benchmarks/bench_gpu_log.py --size 1G --runs 1
    python benchmarks/bench_gpu_log.py --keep           # keep (and reuse) the generated file
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _procfs beside it, also when loaded by path

from _procfs import ensure_bytecode, parse_size, run_child  # noqa: E402

HEADER = ("timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.total [MiB], "
          "memory.used [MiB], memory.free [MiB]\n")
#: snapshots busy, then idle, in each cycle (1 s apart: 50 min busy, 25 min idle).
BUSY, IDLE = 3000, 1500


def write_log(path: Path, size: int, seed: int = 0) -> tuple[int, int]:
    """Write about ``size`` bytes of the two-GPU log to ``path``; returns ``(rows, snapshots)``."""
    rng = random.Random(seed)
    t = datetime(2026, 1, 1)
    step = timedelta(milliseconds=1)
    written = rows = snaps = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        fh.write(HEADER)
        written += len(HEADER)
        while written < size:
            lines = []
            for _ in range(1000):
                busy = snaps % (BUSY + IDLE) < BUSY
                stamp = f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}"
                for gpu in (0, 1):
                    util = rng.randint(30, 100) if busy and gpu == 0 else 0
                    used = 20000 + rng.randint(0, 5000) if util else 15
                    lines.append(f"{stamp}, {gpu}, NVIDIA RTX A6000, {util} %, {util // 2} %, 49140 MiB, "
                                 f"{used} MiB, {49140 - used} MiB\n")
                rows += 2
                snaps += 1
                t += 1000 * step + rng.randint(0, 5) * step
            text = "".join(lines)
            fh.write(text)
            written += len(text)
    return rows, snaps


def _analyze(path: Path, *extra: str) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and exit status of one ``costctl analyze`` on ``path``."""
    return run_child([sys.executable, "-m", "costctl", "analyze", "--gpu-log", str(path), "--format", "json", *extra])


def _measure(path: Path, runs: int, *extra: str) -> tuple[float, float, int]:
    results = [_analyze(path, *extra) for _ in range(runs)]
    return (statistics.median(r[0] for r in results), max(r[1] for r in results),
            next((r[2] for r in results if r[2] != 0), 0))


def main(argv: list[str] | None = None) -> dict:
    """Generate (or reuse) the log, time ``costctl analyze`` on it; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("50M"), help="log size (default 50M)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (median; default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file (and reuse a kept one)")
    parser.add_argument("--no-compare", action="store_true", help="skip the --compare run")
    args = parser.parse_args(argv)
    ensure_bytecode()
    cache = Path(tempfile.gettempdir()) / "costctl-bench-gpu-log"
    tmp = cache if args.keep else Path(tempfile.mkdtemp(prefix="costctl-bench-"))
    tmp.mkdir(exist_ok=True)
    path = tmp / f"gpu-{args.size}.csv"
    try:
        t0 = time.perf_counter()
        rows, snaps = write_log(path, args.size) if not path.exists() else (None, None)
        if rows is None:
            with path.open("rb") as fh:
                rows = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 22), b"")) - 1
            snaps = rows // 2
            print(f"log: reusing {path}")
        else:
            print(f"log: {path} written in {time.perf_counter() - t0:.1f} s")
        size = path.stat().st_size
        took, rss, rc = _measure(path, args.runs)
        print(f"costctl analyze --gpu-log:  {took:8.2f} s  {size / took / 1e6:6.2f} MB/s  {snaps / took:10,.0f} samples/s"
              f"  peak RSS {rss:.1f} MiB (target <= 200 at 1 GB)  exit {rc}  ({size / 1e6:.1f} MB, {snaps:,} samples)")
        figures: dict = {"size_bytes": size, "rows": rows, "samples": snaps, "analyze_s": round(took, 2),
                         "analyze_mb_s": round(size / took / 1e6, 3), "analyze_samples_per_s": round(snaps / took),
                         "analyze_peak_rss_mb": round(rss, 1), "analyze_rc": rc}
        if not args.no_compare:
            took_c, rss_c, rc_c = _measure(path, args.runs, "--compare")
            print(f"  ... --compare:            {took_c:8.2f} s  peak RSS {rss_c:.1f} MiB  exit {rc_c}")
            figures.update(compare_s=round(took_c, 2), compare_peak_rss_mb=round(rss_c, 1), compare_rc=rc_c)
        print(json.dumps(figures, sort_keys=True))
        return figures
    finally:
        if args.keep:
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
