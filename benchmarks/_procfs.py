"""/proc readings shared by the benchmarks that watch a live costctl process (Linux only)."""

from __future__ import annotations


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
