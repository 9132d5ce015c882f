"""Reader for the plain ``nvidia-smi`` dashboard printed in a loop (``while true; do nvidia-smi;
sleep 60; done > gpu_usage.log`` or ``nvidia-smi -l``).

Each snapshot starts with nvidia-smi's date line (``Tue Oct 29 19:00:23 2024``, local time
without a zone; taken as UTC). Per GPU, two table rows are read::

    |   0  NVIDIA L40S                    On  |   00000000:4A:00.0 Off |                    0 |
    | N/A   53C    P0            305W /  350W |   11948MiB /  46068MiB |     93%      Default |

giving index, name, power draw (W), memory used/total (MiB -> bytes) and GPU-Util (%). The
"Processes" table, when printed, gives each GPU's PIDs (``No running processes found`` -> none).
``N/A`` in a cell is unknown (None). Snapshots printed within the same second keep the same
(1 s resolution) time and remain separate samples.
"""

from __future__ import annotations

import math
import re
from typing import Any
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..i18n import _
from ..numbers import finite, parse_count
from ..records import GpuReading, TelemetrySample
from .gpu_log import MIB, GpuLog, make_sample, recorded_fields
from .textio import iter_lines
from .times import TIME_MAX, TIME_MIN, in_range

_DATE = re.compile(
    r"^\s*((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r"\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+\d{4})\s*$"
)
_GPU_ROW = re.compile(r"^\|\s*(\d+)\s+(.*?)\s+(?:On|Off|N/A)\s*\|")
_PAIR = re.compile(r"(\S+)\s*/\s*(\S+)\s*$")
_MEM_PAIR = re.compile(r"(\S+?)\s*/\s*(\S+)")
_PROC_ROW = re.compile(r"^\|\s+(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+(?:C|G|C\+G|M|M\+C)\s")
_UNIT_NUMBER = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z%]*)$")

SNIFF_MARKERS = ("NVIDIA-SMI", "GPU-Util")
#: Longer lines are not the dashboard's (its lines are about 90 characters): skipped unread.
_MAX_LINE_CHARS = 4096


def looks_like_table(head: str) -> bool:
    """True if ``head`` contains nvidia-smi's dashboard (banner and the GPU-Util column)."""
    return all(m in head for m in SNIFF_MARKERS)


def _number(cell: str, unit: str, high: float = math.inf) -> float | None:
    """The number of a cell in ``unit`` (``305W``, ``93%``), finite and within ``0 .. high``, else None."""
    m = _UNIT_NUMBER.match(cell.strip())
    if not m or (m.group(2) and m.group(2) != unit):
        return None
    return finite(m.group(1), low=0.0, high=high)


def _mib(cell: str) -> int | None:
    """A ``11948MiB`` cell in bytes (0 to 2**63 - 1), else None."""
    value = _number(cell, "MiB")
    return int(value * MIB) if value is not None and value * MIB < 2.0**63 else None


def _parse_date(text: str) -> datetime | None:
    """The snapshot's date line as aware UTC, or None outside the years a replay computes with
    (:data:`~costctl.replay.times.TIME_MIN` .. :data:`~costctl.replay.times.TIME_MAX`)."""
    try:
        when = datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return when if in_range(when) else None


class _Snapshot:
    __slots__ = ("time", "gpus", "procs", "saw_process_table")

    def __init__(self, time: datetime | None) -> None:
        self.time = time
        self.gpus: list[dict] = []
        self.procs: dict[int, list[int]] = {}
        self.saw_process_table = False

    def sample(self) -> TelemetrySample:
        readings = []
        for g in self.gpus:
            procs = tuple(self.procs.get(g["index"], ())) if self.saw_process_table else None
            readings.append(GpuReading(processes=procs, **g))
        return make_sample(self.time, readings, "nvidia-smi-table")


def _why(snap: _Snapshot, line_no: int) -> str:
    """Why the snapshot whose date is on line ``line_no`` gave no sample."""
    if snap.time is None:
        return _("line {line}: a date outside the years {first}-{last} (expected nvidia-smi's date line, e.g. "
                 "Tue Oct 29 19:00:23 2024)").format(line=line_no, first=TIME_MIN.year, last=TIME_MAX.year - 1)
    return _("the snapshot dated on line {line}: no GPU row read (expected '|   0  NAME ... |' and its usage "
             "row)").format(line=line_no)


def parse_table_lines(lines: Iterable[str]) -> tuple[list[TelemetrySample], int]:
    """Samples from the dashboard's lines, and the number of snapshots that had no readable GPU row.

    A snapshot with no date line before it cannot be placed in time and is counted as skipped.

    Raises:
        UsageError: snapshots without date lines.
    """
    counts = {"skipped": 0}
    samples = list(iter_table_lines(lines, counts))
    return samples, counts["skipped"]


def iter_table_lines(lines: Iterable[str], counts: dict[str, Any] | None = None) -> Iterator[TelemetrySample]:
    """:func:`parse_table_lines`' samples one at a time; ``counts["skipped"]`` set as it reads.

    Raises:
        UsageError: as :func:`parse_table_lines`.
    """
    counts = counts if counts is not None else {}
    samples: list[TelemetrySample] = []  # closed snapshots not yet handed over
    produced = False
    skipped = counts["skipped"] = 0
    snap: _Snapshot | None = None
    pending: dict | None = None
    undated = False
    line_no = snap_line = 0
    for raw in lines:
        if len(raw) > _MAX_LINE_CHARS:
            line_no += 1
            continue  # no line of the dashboard is this long (and its regexes stay linear)
        line = raw.rstrip("\r\n")
        line_no += 1
        m = _DATE.match(line)
        if m:
            if snap is not None:
                if snap.gpus and snap.time is not None:
                    produced = True
                    yield snap.sample()
                else:
                    skipped += 1
                    counts["skipped"] = skipped
                    if "first_skip" not in counts:
                        counts["first_skip"] = _why(snap, snap_line)
            snap = _Snapshot(_parse_date(m.group(1)))
            snap_line = line_no
            pending = None
            continue
        if snap is None:
            undated = undated or bool(_GPU_ROW.match(line))
            continue
        if pending is not None:
            cells = line.split("|")
            pending_row, pending = pending, None
            if len(cells) >= 4:
                power = _PAIR.search(cells[1].strip())
                mem = _MEM_PAIR.search(cells[2])
                util_tok = cells[3].split()
                pending_row["power_w"] = _number(power.group(1), "W") if power else None
                if mem:
                    pending_row["memory_used_bytes"] = _mib(mem.group(1))
                    pending_row["memory_total_bytes"] = _mib(mem.group(2))
                pending_row["utilization"] = _number(util_tok[0], "%", 100.0) if util_tok else None
                snap.gpus.append(pending_row)
            continue
        gm = _GPU_ROW.match(line)
        if gm and not snap.saw_process_table:
            index = parse_count(gm.group(1))
            if index is not None:  # an index past int64 is no GPU row
                pending = {"index": index, "name": gm.group(2).strip() or None}
            continue
        if "Processes:" in line:
            snap.saw_process_table = True
            continue
        if snap.saw_process_table:
            pm = _PROC_ROW.match(line)
            gpu, pid = (parse_count(pm.group(1)), parse_count(pm.group(2))) if pm else (None, None)
            if gpu is not None and pid is not None:
                snap.procs.setdefault(gpu, []).append(pid)
    if snap is not None:
        if snap.gpus and snap.time is not None:
            produced = True
            yield snap.sample()
        else:
            skipped += 1
            counts["skipped"] = skipped
            if "first_skip" not in counts:
                counts["first_skip"] = _why(snap, snap_line)
    if not produced and undated:
        raise UsageError(
            _("nvidia-smi table without date lines: cannot place snapshots in time "
              "(print them with plain `nvidia-smi`, which starts each with the date)")
        )
    del samples


def read_smi_table(path: Path) -> GpuLog:
    """Read a looped ``nvidia-smi`` dashboard log.

    Raises:
        UsageError: unreadable file, or snapshots without date lines.
    """
    samples, skipped = parse_table_lines(iter_lines(path))
    return GpuLog("nvidia-smi-table", samples, path=path, fields=recorded_fields(samples), skipped=skipped)
