"""What ``costctl watch`` itself costs on a steady job: its own CPU time and memory.

The job (``python -c``) sleeps and prints one loss line a second for the whole measurement.
It runs under ``costctl watch --dry-run --on-exit leave --no-pty`` (the sim provider, no GPU:
the CPU of the job's tree stands in), sampling every second (``[watch] sample_interval = 1s``),
stdout and stderr to files. After ``--warmup`` seconds of start-up the benchmark reads, once a
second, from /proc:

* CPU: ``utime + stime`` of the watch process and of its costctl helper children (the job's
  output relay), plus the watch's reaped children (``cutime + cstime``: ``nvidia-smi`` calls and
  the like); NOT the job (the relay's own reaped-children counters, which hold the job, are
  left out);
* RSS of the watch process (VmRSS).

Figures, the LAST LINE one JSON object:

* ``cpu_percent``: the watcher's CPU over the measured ``seconds``, percent of ONE core
  (target <= 0.2); ``watch_cpu_percent`` / ``relay_cpu_percent`` its two parts;
* ``rss_start_mb``, ``rss_end_mb``, ``rss_max_mb``: VmRSS of the watch process in MB (2**20
  bytes) at the start and end of the measured window and its maximum (target <= 75, flat);
* ``startup_cpu_s``: CPU seconds the watch used before the window (imports, ledger, start-up);
* ``seconds``: the measured window (wall); ``relays``: helper processes counted.

Measured figures are noisy on a loaded machine (other processes steal the CPU; the figures are
CPU time, not wall time, so they are less affected); rerun for the record.

Usage::

    python benchmarks/bench_watch.py                  # 120 s
    python benchmarks/bench_watch.py --seconds 30     # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _procfs import NEUTRAL_CWD, costctl_env, ensure_bytecode, rss_mb  # benchmarks/ is the script's own folder

JOB = r"""
import sys, time
n = int(sys.argv[1])
for i in range(n):
    print(f"step {i} loss: {1.0 / (1 + i):.5f}", flush=True)
    time.sleep(1)
"""

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()


def cpu_s(pid: int, *, reaped: bool) -> float:
    """utime + stime (+ cutime + cstime when ``reaped``) of ``pid``, seconds (0 when gone)."""
    f = _stat(pid)
    if f is None:
        return 0.0
    # fields after "(comm)": state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14
    total = int(f[11]) + int(f[12])
    if reaped:
        total += int(f[13]) + int(f[14])
    return total / TICK




def helpers(pid: int) -> list[int]:
    """Direct children of ``pid`` that run costctl (the output relay), not the job."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = _stat(int(name))
        if f is None or int(f[1]) != pid:
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"costctl" in cmd:
            out.append(int(name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=120, help="measured window, seconds (default 120)")
    ap.add_argument("--warmup", type=int, default=10, help="start-up seconds left out (default 10)")
    args = ap.parse_args(argv)
    ensure_bytecode()
    with tempfile.TemporaryDirectory(prefix="costctl-bench-watch-") as d:
        tmp = Path(d)
        env = costctl_env(COSTCTL_DATA_DIR=str(tmp / "data"), COSTCTL_WATCH__SAMPLE_INTERVAL="1s")
        total = args.warmup + args.seconds + 5
        argv_ = [sys.executable, "-m", "costctl", "watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--",
                 sys.executable, "-c", JOB, str(total)]
        with open(tmp / "out", "wb") as fo, open(tmp / "err", "wb") as fe:
            proc = subprocess.Popen(argv_, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, cwd=NEUTRAL_CWD)
            pid = proc.pid
            time.sleep(args.warmup)
            relays = helpers(pid)
            w0 = cpu_s(pid, reaped=True)
            r0 = sum(cpu_s(r, reaped=False) for r in relays)
            t0 = time.monotonic()
            rss = [rss_mb(pid) or 0.0]
            while time.monotonic() - t0 < args.seconds:
                time.sleep(1)
                rss.append(rss_mb(pid) or 0.0)
            w1 = cpu_s(pid, reaped=True)
            r1 = sum(cpu_s(r, reaped=False) for r in relays)
            wall = time.monotonic() - t0
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        result = {
            "seconds": round(wall, 1),
            "cpu_percent": round(100 * ((w1 - w0) + (r1 - r0)) / wall, 3),
            "watch_cpu_percent": round(100 * (w1 - w0) / wall, 3),
            "relay_cpu_percent": round(100 * (r1 - r0) / wall, 3),
            "startup_cpu_s": round(w0, 2),
            "rss_start_mb": round(rss[0], 1), "rss_end_mb": round(rss[-1], 1), "rss_max_mb": round(max(rss), 1),
            "relays": len(relays),
        }
    print(f"watcher CPU {result['cpu_percent']}% of one core over {result['seconds']} s "
          f"(watch {result['watch_cpu_percent']}%, relay {result['relay_cpu_percent']}%); RSS "
          f"{result['rss_start_mb']} -> {result['rss_end_mb']} MB (max {result['rss_max_mb']})")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
