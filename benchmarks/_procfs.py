"""Process readings shared by the benchmarks that run or watch a costctl process (Linux only):
``/proc`` RSS of a live process, a child's wall time and peak RSS, and ``--size`` parsing."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

#: The working directory of the costctl processes a benchmark starts: never the checkout, where
#: ``python -m costctl`` would import the source tree instead of the installed package (whose C
#: scanner was built by ``pip install``; a non-editable install leaves none in the tree).
NEUTRAL_CWD = tempfile.gettempdir()


#: The packages costctl installs (``pip install`` compiles their bytecode at install time).
PACKAGES = ("costctl", "costctl_providers", "costctl_alembic")


def costctl_env(**extra: str) -> dict[str, str]:
    """The environment of a costctl process a benchmark starts: the caller's, less every
    ``COSTCTL_*`` variable and ``PYTHONDONTWRITEBYTECODE`` (an installed costctl has its bytecode
    cached: see :func:`ensure_bytecode`), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def ensure_bytecode(python: str = sys.executable) -> None:
    """Compile the bytecode of the costctl packages that ``python`` imports from
    :data:`NEUTRAL_CWD`, as ``pip install`` does at install time. An editable install under
    ``PYTHONDONTWRITEBYTECODE=1`` has none, and every costctl start would then compile ~70
    modules from source (~0.15 s), which no installed costctl pays."""
    find = ("import importlib.util as u, os, sys\n"
            "for n in sys.argv[1:]:\n"
            "    s = u.find_spec(n)\n"
            "    if s is not None and s.submodule_search_locations: print(*s.submodule_search_locations, sep='\\n')")
    out = subprocess.run([python, "-c", find, *PACKAGES], cwd=NEUTRAL_CWD, capture_output=True, text=True, check=True)
    dirs = [d for d in out.stdout.splitlines() if d]
    if dirs:
        subprocess.run([python, "-m", "compileall", "-q", *dirs], cwd=NEUTRAL_CWD, check=True,
                       stdout=subprocess.DEVNULL)


def rss_mb(pid: int) -> float | None:
    """Resident set size of ``pid`` in MB (2**20 bytes) from ``/proc/PID/status`` ``VmRSS``;
    None when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_child(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, float, int]:
    """Run ``cmd`` to its end, stdout and stderr discarded (``env``: :func:`costctl_env` when None).

    Returns:
        ``(wall seconds, peak RSS in MiB, exit status)``: the peak is the child's own
        ``ru_maxrss`` (KiB on Linux) from ``os.wait4``, not its children's.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=costctl_env() if env is None else dict(env), cwd=NEUTRAL_CWD)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_maxrss / 1024, proc.returncode


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    """``1G``, ``500M``, ``64K`` or a byte count -> bytes (decimal units).

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    m = _SIZE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size like 1G, 500M, 64K or bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
