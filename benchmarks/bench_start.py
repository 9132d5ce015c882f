"""Start-up time of costctl's commands, whole process, with what each one imports.

Each command runs as a fresh ``python -m costctl ...`` process (this interpreter), output to
/dev/null, in a temporary directory that is also its working directory, ``COSTCTL_DATA_DIR``
and ``XDG_{CONFIG,DATA,CACHE,STATE}_HOME`` (no user config, no ``COSTCTL_*`` from outside).
The commands, with issue 13's targets:

* ``help``: ``costctl --help`` (target <= 0.3 s);
* ``gpus``: ``costctl gpus`` (target <= 0.4 s);
* ``bill_no_ledger``: ``costctl bill`` before any ledger exists (target <= 0.5 s);
* ``bill_empty_ledger``: ``costctl bill`` on an empty ledger already at the newest revision
  (made once beforehand with ``costctl db upgrade``; target <= 0.5 s);

and, for scale, the floor: ``python_pass`` (``python -c pass``) and ``import_typer``
(``python -c 'import typer'``). Each is run ``--runs`` times (default 7) after one warm-up run
(which writes the ``.pyc`` files an installed package has: ``PYTHONDONTWRITEBYTECODE`` is
dropped); wall time from spawn to exit (``time.perf_counter``). Then each runs once more under
``python -X importtime`` and its 10 imports with the largest cumulative time are printed
(microseconds, nesting shown by indentation), with the number of modules it imported.

Last line, one JSON object::

    {"runs": 7, "python": "3.11.2",
     "commands": {"help": {"median_s": 0.14, "min_s": 0.13, "cpu_median_s": 0.13, "modules": 261,
                           "heavy": [], "target_s": 0.3, "met": true}, ...}}

``median_s``/``min_s``: seconds (wall, whole process); ``cpu_median_s``: median CPU seconds
(user + system) of the process, steadier than wall time on a loaded machine; ``modules``: modules the process
imported (lines of ``-X importtime``, site included); ``heavy``: which of sqlalchemy, alembic,
mako, requests, psutil, apscheduler, costctl_providers and pydantic it imported; ``target_s``
and ``met`` (median within target) only for the costctl commands. A measurement, not a test:
nothing is asserted. Figures on a machine shared with other work are noisy; compare medians.

Usage::

    python benchmarks/bench_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _procfs beside it, also when loaded by path
from _procfs import costctl_env, ensure_bytecode  # noqa: E402

HEAVY = ("sqlalchemy", "alembic", "mako", "requests", "psutil", "apscheduler", "costctl_providers", "pydantic")
TARGETS_S = {"help": 0.3, "gpus": 0.4, "bill_no_ledger": 0.5, "bill_empty_ledger": 0.5}


def isolated_env(home: Path) -> dict[str, str]:
    """The environment a run gets: the caller's, less ``COSTCTL_*``, with every costctl and XDG
    directory inside ``home``."""
    env = costctl_env(COSTCTL_DATA_DIR=str(home))  # an installed costctl has its bytecode cached
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache"),
                     ("XDG_STATE_HOME", "state")):
        (home / sub).mkdir(exist_ok=True)
        env[var] = str(home / sub)
    return env


def time_runs(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system, from ``wait4``) of ``runs`` runs of ``argv``
    (after one warm-up run); each must exit 0."""
    wall, cpu = [], []
    for i in range(runs + 1):
        with tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            elapsed = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                err.seek(0)
                raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.read().decode(errors='replace')}")
        if i:  # the first run warms the file cache and writes the .pyc files
            wall.append(elapsed)
            cpu.append(usage.ru_utime + usage.ru_stime)
    return wall, cpu


def import_profile(argv: list[str], env: dict[str, str], cwd: Path) -> list[tuple[int, int, str]]:
    """``(self_us, cumulative_us, name)`` for every import of one ``-X importtime`` run of
    ``argv`` (``argv[0]`` is this interpreter); ``name`` keeps its indentation (nesting)."""
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        first, cumulative_us, name = line.split("|", 2)  # "import time: SELF | CUMULATIVE |   name"
        rows.append((int(first.split(":", 1)[1]), int(cumulative_us), name[1:].rstrip()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (default 7)")
    args = parser.parse_args()
    py = sys.executable
    ensure_bytecode(py)
    costctl = [py, "-m", "costctl"]
    with tempfile.TemporaryDirectory(prefix="bench_start_") as tmp:
        bare, ledger = Path(tmp) / "bare", Path(tmp) / "ledger"
        bare.mkdir()
        ledger.mkdir()
        bare_env, ledger_env = isolated_env(bare), isolated_env(ledger)
        subprocess.run([*costctl, "db", "upgrade"], env=ledger_env, cwd=ledger, check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        cases = {
            "python_pass": ([py, "-c", "pass"], bare_env, bare),
            "import_typer": ([py, "-c", "import typer"], bare_env, bare),
            "help": ([*costctl, "--help"], bare_env, bare),
            "gpus": ([*costctl, "gpus"], bare_env, bare),
            "bill_no_ledger": ([*costctl, "bill"], bare_env, bare),
            "bill_empty_ledger": ([*costctl, "bill"], ledger_env, ledger),
        }
        figures: dict[str, dict] = {}
        for name, (argv, env, cwd) in cases.items():
            times, cpu = time_runs(argv, env, cwd, args.runs)
            profile = import_profile(argv, env, cwd)
            loaded = {row[2].strip() for row in profile}
            heavy = [m for m in HEAVY if m in loaded]
            entry: dict = {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
                           "cpu_median_s": round(statistics.median(cpu), 4), "modules": len(profile),
                           "heavy": heavy}
            if name in TARGETS_S:
                entry["target_s"] = TARGETS_S[name]
                entry["met"] = entry["median_s"] <= TARGETS_S[name]
            figures[name] = entry
            shown = " ".join(argv[1:]) if argv[:3] != costctl else "costctl " + " ".join(argv[3:])
            print(f"{name}: {shown}")
            print(f"  median {entry['median_s']:.3f} s, min {entry['min_s']:.3f} s over {args.runs} runs "
                  f"(CPU {entry['cpu_median_s']:.3f} s); "
                  f"{entry['modules']} modules imported; heavy: {', '.join(heavy) or 'none'}"
                  + (f"; target {entry['target_s']} s {'met' if entry['met'] else 'NOT met'}" if "target_s" in entry else ""))
            print("  top imports by cumulative time (us):")
            for self_us, cumulative_us, module in sorted(profile, key=lambda r: -r[1])[:10]:
                print(f"    {cumulative_us:>9} {self_us:>8}  {module}")
    print(json.dumps({"runs": args.runs, "python": platform.python_version(), "commands": figures}))


if __name__ == "__main__":
    main()
