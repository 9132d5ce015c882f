"""Reader for Weights & Biases system-metrics streams (``wandb-events.jsonl``, or the same
records exported with ``run.history(stream="events")`` as JSON lines).

Keys read per GPU ``N`` (wandb's system monitor, see ``wandb/sdk/internal/system/assets/gpu.py``):
``system.gpu.N.gpu`` (utilization, %), ``system.gpu.N.memoryAllocatedBytes`` (bytes, newer
clients; the older ``memoryAllocated`` is a percentage of the card and gives no byte count),
``system.gpu.N.powerWatts`` (W). Time is ``_timestamp`` (Unix seconds, UTC).
``system.cpu`` is the whole machine's CPU in percent of all cores, not the watched process
tree's, so it is not used as the CPU signal (the replay's CPU signal stays ABSENT).
"""

from __future__ import annotations

import math
import re
from typing import Any
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..i18n import _
from ..jsonio import loads
from ..numbers import finite, parse_count
from ..records import GpuReading, TelemetrySample
from .gpu_log import GpuLog, make_sample, recorded_fields
from .textio import iter_lines
from .times import TIME_MAX, TIME_MIN, from_unix

_KEY = re.compile(r"^system\.gpu\.(\d+)\.(\w+)$")


def looks_like_wandb(first_record: dict) -> bool:
    """True if a JSON-lines record carries wandb's ``system.gpu.N.*`` keys."""
    return any(_KEY.match(k) for k in first_record)


def _float(value: object, *, low: float = 0.0, high: float = math.inf) -> float | None:
    """A JSON number (not a bool, not text) finite and within ``low .. high``, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return finite(value, low=low, high=high)


def record_to_sample(record: dict) -> TelemetrySample | None:
    """One wandb system record -> a sample, or None if it has no time (or one outside
    :data:`~costctl.replay.times.TIME_MIN` .. :data:`~costctl.replay.times.TIME_MAX`) or no GPU key.

    Ranges: utilization 0-100 %, memory 0 to 2**63 - 1 bytes, watts finite and 0 or more, a GPU
    index 0 to 2**63 - 1; a value out of its range is no reading (None), a key with an index out
    of range is left out."""
    ts = _float(record.get("_timestamp"), low=-math.inf)
    when = from_unix(ts) if ts is not None else None
    if when is None:
        return None
    per_gpu: dict[int, dict[str, object]] = {}
    for key, value in record.items():
        m = _KEY.match(key) if isinstance(key, str) else None
        index = parse_count(m.group(1)) if m else None
        if index is not None:
            per_gpu.setdefault(index, {})[m.group(2)] = value  # type: ignore[union-attr]
    if not per_gpu:
        return None
    readings = []
    for index, vals in per_gpu.items():
        used = _float(vals.get("memoryAllocatedBytes"), high=2.0**63 - 1024)
        readings.append(
            GpuReading(
                index=index,
                utilization=_float(vals.get("gpu"), high=100.0),
                memory_used_bytes=int(used) if used is not None else None,
                power_w=_float(vals.get("powerWatts")),
            )
        )
    return make_sample(when, readings, "wandb")


def read_wandb_system(path: Path) -> GpuLog:
    """Read a wandb system-metrics JSON-lines file; unparseable lines are counted in ``skipped``.

    Raises:
        UsageError: unreadable file.
    """
    counts = {"skipped": 0}
    samples = list(iter_wandb_lines(iter_lines(path), counts))
    skipped = counts["skipped"]
    return GpuLog("wandb-system", samples, path=path, fields=recorded_fields(samples), skipped=skipped)


def iter_wandb_lines(lines: Iterable[str], counts: dict[str, Any] | None = None) -> Iterator[TelemetrySample]:
    """:func:`read_wandb_system`'s samples one at a time from the file's lines;
    ``counts["skipped"]`` counts unparseable lines as it reads."""
    counts = counts if counts is not None else {}
    counts["skipped"] = 0
    for line_no, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        try:
            record = loads(line)
        except ValueError as exc:  # not JSON, or nested past the parser's limit (jsonio)
            counts["skipped"] += 1
            if "first_skip" not in counts:
                counts["first_skip"] = _("line {line}: not a JSON record ({error})").format(line=line_no,
                                                                                           error=str(exc)[:80])
            continue
        sample = record_to_sample(record) if isinstance(record, dict) else None
        if sample is None:
            counts["skipped"] += 1
            if "first_skip" not in counts:
                counts["first_skip"] = _("line {line}: expected a record with _timestamp (Unix seconds within the "
                                         "years {first}-{last}) and system.gpu.N.* keys").format(
                    line=line_no, first=TIME_MIN.year, last=TIME_MAX.year - 1)
        else:
            yield sample
