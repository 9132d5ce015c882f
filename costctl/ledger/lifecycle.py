"""Read-side queries for lifecycle actions: waste per run, spot exposure, GPU use per run.

Money is Decimal per currency, never added across currencies; intervals are clipped to the
half-open window ``[since, until)`` like the charges in :mod:`.queries`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from ..clock import ensure_utc
from ..money import cost_of
from . import tables
from .engine import Reader

# SQLAlchemy Core only (no ORM): ``costctl bill`` runs these on a plain connection.
CHARGES, INSTANCES, SAMPLES = tables.charges, tables.instances, tables.samples
SAMPLE_MINUTES, WASTE = tables.sample_minutes, tables.waste

#: Waste reasons that count as a preemption (with notice / seen after the fact).
PREEMPTION_REASONS = ("preemption", "preempted")


@dataclass(frozen=True, slots=True)
class Waste:
    """Waste of one run in one currency: ``seconds`` of paid time lost and its ``amount``."""

    seconds: float
    amount: Decimal


def waste_by_run(session: Reader, since: datetime | None = None,
                 until: datetime | None = None) -> dict[tuple[str, str], Waste]:
    """``{(run_id, currency): Waste}`` for waste rows clipped to ``[since, until)``."""
    since = ensure_utc(since) if since else None
    until = ensure_utc(until) if until else None
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    amounts: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for w in session.execute(select(WASTE)):
        if w.end_at == w.start_at:  # an instant: counted where it happened
            if (since is not None and w.start_at < since) or (until is not None and w.start_at >= until):
                continue
            lo = hi = w.start_at
        else:
            lo = max(w.start_at, since) if since else w.start_at
            hi = min(w.end_at, until) if until else w.end_at
            if hi <= lo:
                continue
        key = (w.run_id, w.currency)
        seconds[key] += (hi - lo).total_seconds()
        amounts[key] += cost_of(w.rate_per_hour, hi - lo)
    return {k: Waste(seconds[k], amounts[k]) for k in seconds}


@dataclass(frozen=True, slots=True)
class SpotExposure:
    """Charged seconds on spot instances and the preemptions recorded on them."""

    charged_s: float
    preemptions: int

    @property
    def mtbf_s(self) -> float | None:
        """Observed mean time between preemptions, seconds (None before the first one)."""
        return self.charged_s / self.preemptions if self.preemptions else None


def spot_exposure(session: Reader) -> SpotExposure:
    """Everything the ledger has seen on spot instances (for the observed preemption rate)."""
    spot = select(INSTANCES.c.id).where(INSTANCES.c.billing == "spot")
    charged = sum(((c.end_at - c.start_at).total_seconds()
                   for c in session.execute(select(CHARGES.c.start_at, CHARGES.c.end_at)
                                            .where(CHARGES.c.instance_pk.in_(spot)))), 0.0)
    count = session.scalar(select(func.count(WASTE.c.id)).where(
        WASTE.c.instance_pk.in_(spot), WASTE.c.reason.in_(PREEMPTION_REASONS))) or 0
    return SpotExposure(charged, int(count))


@dataclass(frozen=True, slots=True)
class GpuUse:
    """GPU telemetry of one run: peak memory used on any one GPU and that GPU model's total
    (bytes), mean utilization (percent) over all readable GPU samples, and how many there were."""

    peak_memory_bytes: int | None
    memory_total_bytes: int | None
    mean_utilization: float | None
    samples: int


def gpu_use_by_run(session: Reader) -> dict[str, GpuUse]:
    """:class:`GpuUse` per run that has readable GPU samples (status ``ok``), raw ones and
    those already rolled up per minute (``sample_minutes``) together."""
    raw = (
        select(SAMPLES.c.run_id, func.max(SAMPLES.c.memory_used_bytes), func.max(SAMPLES.c.memory_total_bytes),
               func.sum(SAMPLES.c.utilization), func.count(SAMPLES.c.utilization), func.count(SAMPLES.c.id))
        .where(SAMPLES.c.gpu_index.is_not(None), SAMPLES.c.status == "ok")
        .group_by(SAMPLES.c.run_id)
    )
    rolled = (
        select(SAMPLE_MINUTES.c.run_id, func.max(SAMPLE_MINUTES.c.memory_used_max),
               func.max(SAMPLE_MINUTES.c.memory_total_max), func.sum(SAMPLE_MINUTES.c.utilization_sum),
               func.sum(SAMPLE_MINUTES.c.utilization_count), func.sum(SAMPLE_MINUTES.c.ok_samples))
        .where(SAMPLE_MINUTES.c.gpu_index.is_not(None), SAMPLE_MINUTES.c.ok_samples > 0)
        .group_by(SAMPLE_MINUTES.c.run_id)
    )
    acc: dict[str, list[Any]] = {}
    for run_id, peak, total, util_sum, util_n, count in (*session.execute(raw), *session.execute(rolled)):
        a = acc.setdefault(run_id, [None, None, 0.0, 0, 0])
        if peak is not None and (a[0] is None or peak > a[0]):
            a[0] = peak
        if total is not None and (a[1] is None or total > a[1]):
            a[1] = total
        a[2] += float(util_sum or 0.0)
        a[3] += int(util_n or 0)
        a[4] += int(count or 0)
    return {run_id: GpuUse(int(peak) if peak is not None else None, int(total) if total is not None else None,
                           util_sum / util_n if util_n else None, count)
            for run_id, (peak, total, util_sum, util_n, count) in acc.items()}


__all__ = ["GpuUse", "PREEMPTION_REASONS", "SpotExposure", "Waste", "gpu_use_by_run", "spot_exposure",
           "waste_by_run"]
