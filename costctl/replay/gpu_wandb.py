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

import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from ..records import GpuReading, TelemetrySample
from .gpu_log import GpuLog, make_sample, recorded_fields
from .textio import iter_lines

_KEY = re.compile(r"^system\.gpu\.(\d+)\.(\w+)$")


def looks_like_wandb(first_record: dict) -> bool:
    """True if a JSON-lines record carries wandb's ``system.gpu.N.*`` keys."""
    return any(_KEY.match(k) for k in first_record)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def record_to_sample(record: dict) -> TelemetrySample | None:
    """One wandb system record -> a sample, or None if it has no time or no GPU key."""
    ts = _float(record.get("_timestamp"))
    if ts is None:
        return None
    per_gpu: dict[int, dict[str, object]] = {}
    for key, value in record.items():
        m = _KEY.match(key)
        if m:
            per_gpu.setdefault(int(m.group(1)), {})[m.group(2)] = value
    if not per_gpu:
        return None
    readings = []
    for index, vals in per_gpu.items():
        used = _float(vals.get("memoryAllocatedBytes"))
        readings.append(
            GpuReading(
                index=index,
                utilization=_float(vals.get("gpu")),
                memory_used_bytes=int(used) if used is not None else None,
                power_w=_float(vals.get("powerWatts")),
            )
        )
    return make_sample(datetime.fromtimestamp(ts, tz=timezone.utc), readings, "wandb")


def read_wandb_system(path: Path) -> GpuLog:
    """Read a wandb system-metrics JSON-lines file; unparseable lines are counted in ``skipped``.

    Raises:
        UsageError: unreadable file.
    """
    counts = {"skipped": 0}
    samples = list(iter_wandb_lines(iter_lines(path), counts))
    skipped = counts["skipped"]
    return GpuLog("wandb-system", samples, path=path, fields=recorded_fields(samples), skipped=skipped)


def iter_wandb_lines(lines: Iterable[str], counts: dict[str, int] | None = None) -> Iterator[TelemetrySample]:
    """:func:`read_wandb_system`'s samples one at a time from the file's lines;
    ``counts["skipped"]`` counts unparseable lines as it reads."""
    counts = counts if counts is not None else {}
    counts["skipped"] = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            counts["skipped"] += 1
            continue
        sample = record_to_sample(record) if isinstance(record, dict) else None
        if sample is None:
            counts["skipped"] += 1
        else:
            yield sample
