"""Run a command several times while other processes keep every core busy.

Checks that the test suite does not depend on a free CPU: the suite (default selection) must
pass every time while each core runs a busy loop at normal priority.

Usage::

    python benchmarks/under_load.py --runs 3 -- pytest -q -p no:cacheprovider

Figures (last line, JSON): ``runs`` (each ``{"rc": exit status, "seconds": wall time}``),
``load_processes`` (busy loops, one per core by default), ``all_passed`` (bool). Exit status 0
when every run exited 0, else 1.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time


def _spin(stop: mp.Event) -> None:  # pragma: no cover - runs in the load processes
    x = 0
    while not stop.is_set():
        for _ in range(200_000):
            x = (x * 31 + 7) % 1_000_003


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run the command (default 3)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2,
                        help="busy processes to keep running (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    stop = mp.Event()
    loaders = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.load)]
    for proc in loaders:
        proc.start()
    runs = []
    try:
        for i in range(args.runs):
            started = time.monotonic()
            rc = subprocess.call(command)
            runs.append({"rc": rc, "seconds": round(time.monotonic() - started, 1)})
            print(f"under_load: run {i + 1}/{args.runs}: exit {rc} in {runs[-1]['seconds']} s", file=sys.stderr)
    finally:
        stop.set()
        for proc in loaders:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    passed = all(r["rc"] == 0 for r in runs)
    print(json.dumps({"runs": runs, "load_processes": args.load, "all_passed": passed}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
