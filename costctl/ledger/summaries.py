"""A run's summary, written once when it ends (:meth:`costctl.ledger.Ledger.finish_run`).

The card, GPU count and billing mode of its instance at that moment, the price it ran with
(the rate and currency of its newest charge, else the instance's price), its GPU use (peak
memory on any one GPU and that GPU's total, in bytes; mean utilization in percent, over its
readable GPU samples: ONE aggregate query over that run's samples, by the index on
``samples(run_id, time)``) and its progress points. ``costctl bill`` and the underuse advice
read these columns, never the samples, and a past run keeps the card it ran on after its
instance row changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from decimal import Decimal

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from .schema import Charge, Instance, Progress, ProgressBucket, Run, Sample, SampleMinute


@dataclass(frozen=True, slots=True)
class RunUse:
    """GPU use of one run (given by the caller, or measured from its samples): peak memory
    used on any one GPU and that GPU's total (bytes), mean utilization (percent: the busiest
    GPU's own mean, so an idle GPU beside a busy one does not halve it), the number
    of readable GPU samples, and the progress points it reported."""

    peak_memory_bytes: int | None = None
    memory_total_bytes: int | None = None
    mean_utilization: float | None = None
    gpu_samples: int | None = None
    points: int | None = None


def measured_use(session: Session, run_id: str) -> RunUse:
    """:class:`RunUse` of ``run_id`` from its readable GPU samples (status ``ok``) together with
    the per-minute rollups of the samples already compacted (``sample_minutes``: a run longer
    than ``[ledger] sample_retention`` has both), and its points: progress rows plus the points
    summed into ``progress_buckets``. Four aggregate queries, each by the run's index."""
    # one grouped query per table: per GPU, its peak and total memory, utilization sum and count,
    # and samples (raw samples and the minute rollups of compacted ones together)
    per_gpu: dict[int, list[float]] = {}
    peaks: list[int] = []
    totals: list[int] = []
    count = 0
    for index, peak, total, u_sum, u_n, n in session.execute(
            select(Sample.gpu_index, func.max(Sample.memory_used_bytes), func.max(Sample.memory_total_bytes),
                   func.sum(Sample.utilization), func.count(Sample.utilization), func.count())
            .where(Sample.run_id == run_id, Sample.gpu_index.is_not(None), Sample.status == "ok")
            .group_by(Sample.gpu_index)):
        _fold(per_gpu, peaks, totals, index, peak, total, u_sum, u_n)
        count += int(n or 0)
    for index, peak, total, u_sum, u_n, n in session.execute(
            select(SampleMinute.gpu_index, func.max(SampleMinute.memory_used_max),
                   func.max(SampleMinute.memory_total_max), func.sum(SampleMinute.utilization_sum),
                   func.sum(SampleMinute.utilization_count), func.sum(SampleMinute.ok_samples))
            .where(SampleMinute.run_id == run_id, SampleMinute.gpu_index.is_not(None))
            .group_by(SampleMinute.gpu_index)):
        _fold(per_gpu, peaks, totals, index, peak, total, u_sum, u_n)
        count += int(n or 0)
    # the busiest GPU's mean, as the watch's summary takes it (RunSummary.busiest_gpu_utilization)
    means = [total_u / n for total_u, n in per_gpu.values() if n]
    mean = max(means) if means else None
    points = session.scalar(select(func.count()).select_from(Progress).where(Progress.run_id == run_id)) or 0
    bucketed = session.scalar(select(func.sum(ProgressBucket.count)).where(ProgressBucket.run_id == run_id)) or 0
    return RunUse(max(peaks) if peaks else None, max(totals) if totals else None, mean, count,
                  int(points) + int(bucketed))


def _fold(per_gpu: dict[int, list[float]], peaks: list[int], totals: list[int], index: Any, peak: Any,
          total: Any, u_sum: Any, u_n: Any) -> None:
    """Add one GPU's grouped row to the per-GPU utilization sums and the memory lists."""
    acc = per_gpu.setdefault(int(index), [0.0, 0])
    acc[0] += float(u_sum or 0)
    acc[1] += int(u_n or 0)
    if peak is not None:
        peaks.append(int(peak))
    if total is not None:
        totals.append(int(total))


def summarize(session: Session, run_id: str, use: RunUse | None = None) -> None:
    """Write ``run_id``'s summary (inside the caller's transaction); ``use`` fields left None
    are measured (:func:`measured_use`)."""
    run = session.execute(select(Run.instance_pk).where(Run.id == run_id)).first()
    if run is None:
        return
    inst = session.execute(select(Instance.gpu, Instance.gpu_count, Instance.billing, Instance.price_per_hour,
                                  Instance.currency).where(Instance.id == run.instance_pk)).one()
    newest = session.execute(select(Charge.rate_per_hour, Charge.currency).where(Charge.run_id == run_id)
                             .order_by(Charge.end_at.desc()).limit(1)).first()
    given = use or RunUse()
    if None in (given.peak_memory_bytes, given.memory_total_bytes, given.mean_utilization, given.gpu_samples,
                given.points):
        measured = measured_use(session, run_id)
        given = RunUse(*(g if g is not None else m for g, m in zip(
            (given.peak_memory_bytes, given.memory_total_bytes, given.mean_utilization, given.gpu_samples,
             given.points),
            (measured.peak_memory_bytes, measured.memory_total_bytes, measured.mean_utilization,
             measured.gpu_samples, measured.points))))
    price: Decimal | None = newest.rate_per_hour if newest else inst.price_per_hour
    session.execute(update(Run).where(Run.id == run_id).values(
        gpu=inst.gpu, gpu_count=inst.gpu_count, billing=inst.billing, price_per_hour=price,
        price_currency=newest.currency if newest else inst.currency,
        peak_memory_bytes=given.peak_memory_bytes, memory_total_bytes=given.memory_total_bytes,
        mean_utilization=given.mean_utilization, gpu_samples=given.gpu_samples, points=given.points))


__all__ = ["RunUse", "measured_use", "summarize"]
