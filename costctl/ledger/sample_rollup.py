"""Telemetry retention: raw samples older than ``[ledger] sample_retention`` become per-minute rollups.

The ``samples`` table grows by one row per GPU (plus one CPU row) per tick: a year of one
8-GPU instance at 5 s is 57 M rows. Nothing needs them raw for long (the policies decide from
memory, a finished run keeps its own summary), so raw rows are kept for
``[ledger] sample_retention`` (default 168 h, seven days) and then rolled up into
``sample_minutes`` (:class:`~costctl.ledger.schema.SampleMinute`): one row per run, GPU (NULL:
the CPU row) and UTC minute, with the minute's sample count, readable (status ``ok``) count,
utilization sum/count/max (the mean is sum / count, exactly as ``AVG`` over the raw rows), max
memory used and total, power sum/count and the worst status (``error`` > ``unknown`` >
``absent`` > ``ok``). The raw rows are deleted in the same transaction. At 1 s sampling that is
60 times fewer rows; the figures per minute are exact (counts and maxima) or exactly the raw
sums (utilization, power).

Bounded work per call: :func:`compact_chunk` handles at most about ``max_rows`` raw rows (whole
minutes: a chunk ends on a minute boundary, so a minute is never split between two calls unless
it alone holds more than ``max_rows`` rows, then it is taken whole), in one short transaction,
so a watch can call it from its writer thread every few minutes and ``costctl db compact``
calls it until nothing is left. The raw rows are selected by ``DELETE ... RETURNING`` and only
the rows this transaction deleted are rolled up: two compactions at once (two watches on one
PostgreSQL ledger) never count a sample twice. Compaction is idempotent: a second pass finds
nothing older than the cutoff; a sample written late into a minute already rolled up gets a
second row for that minute at the next pass, and readers add the rows of a minute up (sums,
counts and maxima compose).

Fleet mode (``[ledger] central_url``): a pass handles only samples the central ledger has
(``max_id``: the telemetry cursor, :mod:`costctl.ledger.telemetry_sync`); the rest stay raw
until sent, however old.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from ..clock import ensure_utc
from .schema import Sample, SampleMinute

#: Raw rows per compaction call by default (one short transaction: tens of milliseconds).
DEFAULT_MAX_ROWS = 5_000

#: Status order, best first: a minute's ``status`` is the worst one seen.
STATUS_RANK = {"ok": 0, "absent": 1, "unknown": 2, "error": 3}

_MINUTE = timedelta(minutes=1)


def floor_minute(when: datetime) -> datetime:
    """The start of ``when``'s UTC minute (aware UTC)."""
    return ensure_utc(when).replace(second=0, microsecond=0)


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What one compaction pass did (or, dry, would do).

    Attributes:
        cutoff: raw samples before this minute boundary are due (``now - retention``, floored).
        samples: raw rows rolled up and deleted (dry: that would be).
        rollups: ``sample_minutes`` rows written (dry: that would be).
        run_ids: the distinct runs among them.
        first_minute / last_minute: the minutes covered (None when nothing was due).
        resume_at: where the next pass starts; None when nothing is left before the cutoff.
    """

    cutoff: datetime
    samples: int = 0
    rollups: int = 0
    run_ids: frozenset[str] = frozenset()
    first_minute: datetime | None = None
    last_minute: datetime | None = None
    resume_at: datetime | None = None

    @property
    def done(self) -> bool:
        """True when no raw sample before the cutoff is left after this pass."""
        return self.resume_at is None


_COLUMNS = ("run_id", "gpu_index", "time", "utilization", "memory_used_bytes", "memory_total_bytes", "power_w",
            "status", "source", "error")


def rollup_rows(rows: list[Any]) -> list[dict[str, Any]]:
    """``sample_minutes`` rows (column names as keys) from raw sample rows (tuples in
    :data:`_COLUMNS` order), one per (run, gpu index, minute), in first-seen order."""
    groups: dict[tuple[str, int | None, datetime], dict[str, Any]] = {}
    for run_id, gpu_index, time, util, mem, mem_total, power, status, source, error in rows:
        minute = floor_minute(time)
        key = (run_id, gpu_index, minute)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "run_id": run_id, "gpu_index": gpu_index, "minute": minute, "samples": 0, "ok_samples": 0,
                "utilization_sum": None, "utilization_count": 0, "utilization_max": None,
                "memory_used_max": None, "memory_total_max": None, "power_sum": None, "power_count": 0,
                "status": status, "source": source, "error": None,
            }
        g["samples"] += 1
        if STATUS_RANK.get(status, 3) > STATUS_RANK.get(g["status"], 3):
            g["status"] = status
        if error is not None and g["error"] is None:
            g["error"] = error
        if status != "ok":
            continue
        g["ok_samples"] += 1
        if util is not None:
            g["utilization_sum"] = util if g["utilization_sum"] is None else g["utilization_sum"] + util
            g["utilization_count"] += 1
            if g["utilization_max"] is None or util > g["utilization_max"]:
                g["utilization_max"] = util
        if mem is not None and (g["memory_used_max"] is None or mem > g["memory_used_max"]):
            g["memory_used_max"] = mem
        if mem_total is not None and (g["memory_total_max"] is None or mem_total > g["memory_total_max"]):
            g["memory_total_max"] = mem_total
        if power is not None:
            g["power_sum"] = power if g["power_sum"] is None else g["power_sum"] + power
            g["power_count"] += 1
    return list(groups.values())


def compact_chunk(session: Session, *, now: datetime, retention: timedelta, max_rows: int = DEFAULT_MAX_ROWS,
                  dry_run: bool = False, start: datetime | None = None, max_id: int | None = None) -> CompactResult:
    """Roll up one chunk of raw samples older than ``now - retention`` (see the module
    docstring) in ``session``'s transaction (the caller commits; a dry run only reads).

    Args:
        now: aware UTC.
        retention: how long raw samples are kept (> 0).
        max_rows: about how many raw rows this pass handles (whole minutes), >= 1.
        dry_run: count what would be done; read only.
        start: handle only samples at or after this time (a dry run's ``resume_at``).
        max_id: handle only samples whose id is at most this (fleet mode: the telemetry
            cursor, so raw samples not sent to the central ledger yet are kept).
    """
    if retention <= timedelta(0):
        raise ValueError(f"retention must be positive, not {retention}")
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, not {max_rows}")
    cutoff = floor_minute(now - retention)
    t = Sample.__table__
    sent = (t.c.id <= max_id,) if max_id is not None else ()
    first = select(func.min(t.c.time)).where(t.c.time < cutoff, *sent)
    if start is not None:
        first = first.where(t.c.time >= start)
    lo = session.scalar(first)
    if lo is None:
        return CompactResult(cutoff)
    lo_minute = floor_minute(lo)
    beyond = session.scalar(select(t.c.time).where(t.c.time >= lo_minute, t.c.time < cutoff, *sent)
                            .order_by(t.c.time).offset(max_rows).limit(1))
    if beyond is None:
        hi = cutoff
    else:
        hi = max(floor_minute(beyond), lo_minute + _MINUTE)
    where = (t.c.time >= lo_minute, t.c.time < hi, *sent)
    cols = [t.c[name] for name in _COLUMNS]
    if dry_run:
        raw = session.execute(select(*cols).where(*where)).all()
    else:
        raw = session.execute(t.delete().where(*where).returning(*cols)).all()
    rollups = rollup_rows(raw)
    if rollups and not dry_run:
        session.execute(insert(SampleMinute.__table__), rollups)
    minutes = [r["minute"] for r in rollups]
    return CompactResult(
        cutoff=cutoff, samples=len(raw), rollups=len(rollups), run_ids=frozenset(r["run_id"] for r in rollups),
        first_minute=min(minutes) if minutes else None, last_minute=max(minutes) if minutes else None,
        resume_at=hi if hi < cutoff else None,
    )


__all__ = ["CompactResult", "DEFAULT_MAX_ROWS", "STATUS_RANK", "compact_chunk", "floor_minute", "rollup_rows"]
