"""A job that floods its output with loss lines: its time alone vs under ``costctl watch``.

The job (``python -c``) prints ``--lines`` short lines ``step N loss: X`` as fast as it can
(X a noisy plateau, so the plateau rule fires in a few long episodes). Each run times

* the job alone, its stdout into a file;
* the job under ``costctl watch --dry-run --on-exit leave --no-pty`` (the sim provider, 1 s
  sampling, a fresh data dir), costctl's own stdout and stderr into files (pipes, not a pty).

Figures (medians over ``--runs`` unless said otherwise), the LAST LINE one JSON object:

* ``alone_s``: wall seconds of the job alone;
* ``watch_s``: wall seconds of the whole ``costctl watch`` (start-up to exit);
* ``ratio``: ``watch_s / alone_s`` (target <= 1.5);
* ``job_s``: wall seconds of the job itself under the watch (its own first to last line);
* ``exit_to_end_s``: seconds from the job's last line to the watch's exit (target <= 1 sample
  interval, 1 s);
* ``watcher_peak_rss_mb``: the largest resident set of the watch process, MB (2**20 bytes),
  sampled every 20 ms from /proc (max over runs; target <= 150); ``relay_peak_rss_mb`` the
  same for the job's output relay;
* ``lines_out``: lines that reached costctl's stdout file (must equal ``lines``);
* ``identical``: costctl's stdout file is byte for byte the job's output alone (every run; must
  be true);
* ``startup_s``: seconds from the start of ``costctl watch`` to the job's first line (its
  own interpreter's start included, as in ``alone_s``);
* ``points_seen``: progress points the watch parsed (its summary's count, last run), to compare
  with ``lines`` (every line is a loss point: they are equal when nothing was left unparsed);
* ``unparsed_bytes`` / ``unparsed_lines``: what the watch said it had not parsed by its end
  (one sample interval after the job's exit; it stays in the run log), last run; 0 when
  nothing was left;
* ``progress_rows``: rows in the ledger's ``progress`` table (and ``progress_buckets`` when
  that table exists); ``decision_rows``: decision rows per policy.

Measured figures are noisy on a loaded machine: compare ratios, and rerun.

Usage::

    python benchmarks/bench_flood.py                      # 2 M lines, 3 runs
    python benchmarks/bench_flood.py --lines 200000 --runs 1
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _procfs import NEUTRAL_CWD, costctl_env, ensure_bytecode, rss_mb as _rss_mb  # benchmarks/ is the script's own folder

JOB = r"""
import random, sys, time
n = int(sys.argv[1])
w = sys.stdout.write
r = random.Random(1)
t0 = time.time()
for i in range(n):
    w(f"step {i} loss: {0.5 + 0.1 * r.random():.4f}\n")
sys.stdout.flush()
with open(sys.argv[2], "w") as fh:
    fh.write(f"{t0} {time.time()}")
"""




def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    data = fh.read()
                if int(data[data.rindex(b")") + 2:].split()[1]) == pid:
                    out.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return out


class PeakRss(threading.Thread):
    """Largest RSS of a process and (separately) of its direct children (the relay), MB."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.child_peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        n = 0
        kids: list[int] = []
        while not self.done.is_set():
            rss = _rss_mb(self.pid)
            if rss is None:
                break
            self.peak = max(self.peak, rss)
            if n % 25 == 0:
                kids = _children(self.pid)
            for kid in kids:
                self.child_peak = max(self.child_peak, _rss_mb(kid) or 0.0)
            n += 1
            time.sleep(0.02)


def run_alone(lines: int, tmp: Path) -> float:
    out = tmp / "alone.out"
    times = tmp / "alone.times"
    start = time.monotonic()
    with open(out, "wb") as fh:
        subprocess.run([sys.executable, "-c", JOB, str(lines), str(times)], stdout=fh, check=True)
    return time.monotonic() - start


def run_watched(lines: int, tmp: Path, run: int) -> dict:
    data = tmp / f"data{run}"
    out, err, times = tmp / f"watch{run}.out", tmp / f"watch{run}.err", tmp / f"watch{run}.times"
    env = costctl_env(COSTCTL_DATA_DIR=str(data), COSTCTL_WATCH__SAMPLE_INTERVAL="1s")
    argv = [sys.executable, "-m", "costctl", "watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--",
            sys.executable, "-c", JOB, str(lines), str(times)]
    start = time.monotonic()
    start_wall = time.time()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, cwd=NEUTRAL_CWD)
        peak = PeakRss(proc.pid)
        peak.start()
        code = proc.wait()
        ended = time.time()
    wall = time.monotonic() - start
    peak.done.set()
    peak.join(1)
    if code != 0:
        raise SystemExit(f"costctl watch exited with {code}: {err.read_text()[-2000:]}")
    t0, t1 = (float(x) for x in times.read_text().split())
    text = re.sub(r"[│┃|]", " ", err.read_text())
    text = re.sub(r"\s+", " ", text)
    seen = re.search(r"\[(\d+) points\]", text)
    left = re.search(r"([\d,]+) bytes \((?:about )?([\d,]+) lines\) of the job's output were not parsed", text)
    unparsed = (int(left.group(1).replace(",", "")), int(left.group(2).replace(",", ""))) if left else (0, 0)
    with open(out, "rb") as fh:
        lines_out = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    db = sqlite3.connect(data / "costctl.db")
    rows = {"progress": db.execute("select count(*) from progress").fetchone()[0]}
    try:
        rows["progress_buckets"] = db.execute("select count(*) from progress_buckets").fetchone()[0]
    except sqlite3.Error:
        pass
    decisions = dict(db.execute("select policy, count(*) from decisions group by policy").fetchall())
    db.close()
    return {"watch_s": wall, "job_s": t1 - t0, "exit_to_end_s": ended - t1, "startup_s": t0 - start_wall,
            "unparsed_bytes": unparsed[0], "unparsed_lines": unparsed[1], "rss": peak.peak,
            "relay_rss": peak.child_peak, "lines_out": lines_out,
            "identical": filecmp.cmp(out, tmp / "alone.out", shallow=False),
            "points_seen": int(seen.group(1)) if seen else None, "rows": rows, "decisions": decisions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=2_000_000, help="loss lines the job prints (default 2 000 000)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each; medians are reported (default 3)")
    args = ap.parse_args(argv)
    ensure_bytecode()
    alone, watched = [], []
    with tempfile.TemporaryDirectory(prefix="costctl-flood-") as d:
        tmp = Path(d)
        for run in range(args.runs):
            a = run_alone(args.lines, tmp)
            w = run_watched(args.lines, tmp, run)
            alone.append(a)
            watched.append(w)
            print(f"run {run + 1}: alone {a:.2f}s, under watch {w['watch_s']:.2f}s "
                  f"(x{w['watch_s'] / a:.2f}; the job itself {w['job_s']:.2f}s; watch ended "
                  f"{w['exit_to_end_s']:.2f}s after the job; start-up {w['startup_s']:.2f}s), watcher peak RSS "
                  f"{w['rss']:.0f} MB, points {w['points_seen']} of {args.lines} lines (unparsed at the end: "
                  f"{w['unparsed_lines']} lines, {w['unparsed_bytes']} bytes), rows {w['rows']}, "
                  f"decisions {w['decisions']}", flush=True)
    med = statistics.median
    last = watched[-1]
    result = {
        "lines": args.lines, "runs": args.runs,
        "alone_s": round(med(alone), 3), "watch_s": round(med(w["watch_s"] for w in watched), 3),
        "ratio": round(med(w["watch_s"] / a for w, a in zip(watched, alone)), 3),
        "job_s": round(med(w["job_s"] for w in watched), 3),
        "exit_to_end_s": round(med(w["exit_to_end_s"] for w in watched), 3),
        "startup_s": round(med(w["startup_s"] for w in watched), 3),
        "watcher_peak_rss_mb": round(max(w["rss"] for w in watched), 1),
        "relay_peak_rss_mb": round(max(w["relay_rss"] for w in watched), 1),
        "lines_out": last["lines_out"], "identical": all(w["identical"] for w in watched),
        "points_seen": last["points_seen"], "unparsed_lines": last["unparsed_lines"],
        "unparsed_bytes": last["unparsed_bytes"],
        "progress_rows": last["rows"], "decision_rows": last["decisions"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
