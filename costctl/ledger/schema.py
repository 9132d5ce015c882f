"""The ledger's ORM classes (SQLAlchemy 2 declarative, ``Mapped``), mapped onto the Core tables
of :mod:`costctl.ledger.tables` (``__table__``: the columns, keys, indexes and constraints are
defined there, once; a read path that needs no ORM objects uses those tables alone).

Everything that costs or saves money leaves a row here:

* ``instances`` — what is paid for: one row per (provider, provider's instance id).
* ``runs`` — one ``costctl watch`` session on an instance (id: uuid4 hex).
* ``samples`` — telemetry: one row per GPU per tick, plus one row per tick with
  ``gpu_index`` NULL for the CPU of the watched process tree (percent of one core).
* ``sample_minutes`` — telemetry older than ``[ledger] sample_retention``, rolled up per run,
  GPU (NULL: the CPU row) and UTC minute by :meth:`costctl.ledger.db.Ledger.compact`
  (:mod:`costctl.ledger.sample_rollup`); the raw rows are deleted as they are rolled up.
* ``progress`` — loss values parsed from the job. Non-finite losses (NaN, +/-inf) are kept
  exactly: ``value`` is NULL and ``value_special`` holds ``"nan"``, ``"inf"`` or ``"-inf"``
  (SQLite turns a NaN REAL into NULL, so a plain float column would lose them). At volume
  these are a bounded sample of the points (:mod:`costctl.ledger.progress_store`).
* ``progress_buckets`` — per series and interval, the exact count, non-finite counts, min,
  max, first and last of the points that ``progress`` does not hold (a chatty job's);
  rows plus buckets add up to every point (:mod:`costctl.ledger.progress_store`).
* ``charges`` — spend intervals ``[start_at, end_at)`` at ``rate_per_hour`` (currency units
  per instance-hour) in ``currency``, with their length as integer microseconds
  (``duration_us``, summable in SQL). The amount is never stored: it is
  ``rate_per_hour * duration_us / 3_600_000_000`` (:func:`costctl.money.cost_of`), exact and
  unrounded, multiplied in Python. Intervals of one instance never overlap (see
  :mod:`costctl.ledger.accrual`).
* ``charge_rollups`` — the charged microseconds per run (so per instance) and UTC 15-minute
  bucket, rate and currency, kept in the accrual's own transaction: what ``costctl bill`` sums
  (:mod:`costctl.ledger.queries`) instead of the charges.
* ``decisions`` — what a policy concluded and what the executor did, with evidence (JSON).
* ``checkpoints`` — checkpoint requests and their outcomes (saved, timed out, job exited).
* ``waste`` — paid intervals whose work was lost (last checkpoint → preemption); a share of
  the charges, never added to them.
* ``stop_events`` — the history of each stop: every state a stop decision went through
  (requested, sent, confirmed, gone, self-stop sent, failed), with its attempt count and time.
* ``outbox`` — fleet mode: the rows changed since they were last sent to the central ledger
  (:mod:`costctl.ledger.outbox`). In a central ledger, ``decisions``, ``checkpoints``,
  ``waste`` and ``stop_events`` rows carry ``origin_id``, their id in the writing watch's
  ledger (unique with ``run_id``); so do ``samples``, ``progress`` and ``progress_buckets``
  (a partial unique index: only central rows have one).
* ``sync_cursors`` — fleet mode: per telemetry table, the highest local id sent to the
  central ledger (:mod:`costctl.ledger.telemetry_sync`).

Money columns are :class:`~costctl.ledger.types.DecimalText`; times are
:class:`~costctl.ledger.types.UTCDateTime` (aware UTC). The Alembic migrations in
``alembic/versions`` create exactly these tables; a test checks they match.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import DeclarativeBase, Mapped, relationship

from ..money import cost_of
from . import tables
from .tables import BigId, NAMING_CONVENTION


class Base(DeclarativeBase):
    """Declarative base of the ledger; ``Base.metadata`` (:data:`costctl.ledger.tables.metadata`)
    is Alembic's target metadata."""

    metadata = tables.metadata


class Instance(Base):
    """A rented machine. ``price_per_hour`` is per instance-hour (all GPUs), in ``currency``;
    ``billing`` is ``on-demand``, ``spot`` or ``prepaid``."""

    __table__ = tables.instances

    id: Mapped[int]
    provider: Mapped[str]
    provider_instance_id: Mapped[str]
    gpu: Mapped[str | None]
    gpu_count: Mapped[int]
    billing: Mapped[str]
    price_per_hour: Mapped[Decimal | None]
    currency: Mapped[str]
    region: Mapped[str | None]
    created_at: Mapped[datetime]

    runs: Mapped[list[Run]] = relationship(back_populates="instance")


class Run(Base):
    """One watch session. ``status`` is free text set by the watcher (``running`` until
    :meth:`Ledger.finish_run`); ``last_seen_at`` moves with every accrual, so a run whose
    watch was killed still shows how far it got. ``host`` and ``pid`` name the watch process,
    so a later watch on that host can close the run as ``lost`` once that process is gone."""

    __table__ = tables.runs

    id: Mapped[str]
    instance_pk: Mapped[int]
    command: Mapped[list[str] | None]
    host: Mapped[str | None]
    log_path: Mapped[str | None]
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    last_seen_at: Mapped[datetime]
    exit_code: Mapped[int | None]
    status: Mapped[str]
    pid: Mapped[int | None]
    #: The end of the run's newest charge (kept by the accrual), None before any.
    charged_until: Mapped[datetime | None]
    # The run's summary, written by :meth:`Ledger.finish_run` (NULL while the run is open;
    # ``billing`` NOT NULL marks a summarized run): the card and price it ran with, whatever
    # the instance row says later, and its GPU use, so the bill never reads the samples.
    gpu: Mapped[str | None]
    gpu_count: Mapped[int | None]
    billing: Mapped[str | None]
    #: Per instance-hour, in ``price_currency``: the rate of the run's newest charge, else the
    #: instance's price at the run's end.
    price_per_hour: Mapped[Decimal | None]
    price_currency: Mapped[str | None]
    #: Bytes: the most memory used on any one GPU, and that GPU's total (readable samples only).
    peak_memory_bytes: Mapped[int | None]
    memory_total_bytes: Mapped[int | None]
    #: Percent: the mean utilization over the readable GPU samples; ``gpu_samples`` their count.
    mean_utilization: Mapped[float | None]
    gpu_samples: Mapped[int | None]
    #: Progress points (loss values) the run reported.
    points: Mapped[int | None]
    #: A resumed run (``costctl watch --resume``): the run it continues and the checkpoint it
    #: resumed from (None for a fresh start). ``costctl bill --by chain`` follows these links.
    continues_run_id: Mapped[str | None]
    resumed_from: Mapped[str | None]
    #: How the run was watched: :data:`costctl.ledger.tables.RUN_MODES` (``dry-run``: stops recorded, nothing
    #: stopped; ``advise-only``: every stop recorded as advice), None for a watch that guards.
    mode: Mapped[str | None]

    instance: Mapped[Instance] = relationship(back_populates="runs")


class Sample(Base):
    """One telemetry reading. ``gpu_index`` NULL is the CPU row (``utilization`` then is the
    watched process tree's CPU in percent of one core, so it may exceed 100). ``status`` is a
    :class:`costctl.records.SignalStatus` value; ``error`` says why a GPU could not be read."""

    __table__ = tables.samples

    id: Mapped[int]
    run_id: Mapped[str]
    time: Mapped[datetime]
    gpu_index: Mapped[int | None]
    utilization: Mapped[float | None]
    memory_used_bytes: Mapped[int | None]
    memory_total_bytes: Mapped[int | None]
    power_w: Mapped[float | None]
    status: Mapped[str]
    source: Mapped[str]
    error: Mapped[str | None]


_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class Progress(Base):
    """One loss value. Read and write it through :attr:`value` (a float, NaN/inf included);
    the columns are ``value`` (finite floats) and ``value_special`` (non-finite ones)."""

    __table__ = tables.progress

    id: Mapped[int]
    run_id: Mapped[str]
    time: Mapped[datetime | None]
    step: Mapped[int | None]
    epoch: Mapped[float | None]
    total: Mapped[int | None]
    kind: Mapped[str]
    name: Mapped[str]
    value_finite: Mapped[float | None] = tables.progress.c.value
    value_special: Mapped[str | None]

    @property
    def value(self) -> float:
        """The loss as a float (NaN and +/-inf round-trip)."""
        if self.value_special is not None:
            return _SPECIAL_FLOATS[self.value_special]
        assert self.value_finite is not None
        return self.value_finite

    @value.setter
    def value(self, number: float) -> None:
        number = float(number)
        if math.isfinite(number):
            self.value_finite, self.value_special = number, None
        else:
            self.value_finite = None
            self.value_special = "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")


class SampleMinute(Base):
    """Telemetry of one run, one GPU (``gpu_index`` NULL: the CPU row, percent of one core) and
    one UTC minute ``[minute, minute + 60 s)``, rolled up from raw ``samples`` rows older than
    ``[ledger] sample_retention`` (:mod:`costctl.ledger.sample_rollup`).

    ``samples`` counts every raw row of the minute, ``ok_samples`` those with status ``ok``;
    ``status`` is the worst status seen (``error`` > ``unknown`` > ``absent`` > ``ok``) and
    ``error`` the first error text. The figures are over the readable (status ``ok``) readings
    that had the value: utilization (percent) as a sum and a count (the mean is
    ``utilization_sum / utilization_count``, see :attr:`utilization_mean`) and a max; memory used
    and total as maxima (bytes); board power (watts) as a sum and a count. Sums and counts
    compose: a minute rolled up in two passes (raw rows that came in late) may have two rows,
    and every reader adds them up.
    """

    __table__ = tables.sample_minutes

    id: Mapped[int]
    run_id: Mapped[str]
    gpu_index: Mapped[int | None]
    minute: Mapped[datetime]
    samples: Mapped[int]
    ok_samples: Mapped[int]
    utilization_sum: Mapped[float | None]
    utilization_count: Mapped[int]
    utilization_max: Mapped[float | None]
    memory_used_max: Mapped[int | None]
    memory_total_max: Mapped[int | None]
    power_sum: Mapped[float | None]
    power_count: Mapped[int]
    status: Mapped[str]
    source: Mapped[str]
    error: Mapped[str | None]

    @property
    def utilization_mean(self) -> float | None:
        """Mean utilization (percent) over the minute's readable readings; None without any."""
        if not self.utilization_count or self.utilization_sum is None:
            return None
        return self.utilization_sum / self.utilization_count

    @property
    def power_mean(self) -> float | None:
        """Mean board power (watts) over the minute's readable readings; None without any."""
        if not self.power_count or self.power_sum is None:
            return None
        return self.power_sum / self.power_count


def _special_value(finite: float | None, special: str | None) -> float | None:
    if special is not None:
        return _SPECIAL_FLOATS[special]
    return finite


class ProgressBucket(Base):
    """The progress points of one series (``kind``, ``name``) of one run in one interval
    ``[start_at, end_at)`` that are *not* stored as ``progress`` rows, summed up exactly; written
    only for intervals where the job printed more than ``progress`` keeps
    (:mod:`costctl.ledger.progress_store`). Rows and buckets never overlap.

    ``count`` is the number of those points and ``kept`` the number of the interval's points
    stored as rows (the interval had ``count + kept``), so a series has ``count(progress rows) +
    sum(count)`` points; ``nan_count``, ``posinf_count``, ``neginf_count`` count their non-finite
    values; ``min``/``max`` are over their finite values (NULL when there were none);
    ``first_*``/``last_*`` are the first and last of them in arrival order (value as in
    ``progress``: ``*_value`` finite, or ``*_special`` ``"nan"``/``"inf"``/``"-inf"``; step,
    time), ``last_epoch``/``last_total`` the last one's. The interval's own first and last points
    are always rows.
    """

    __table__ = tables.progress_buckets

    id: Mapped[int]
    run_id: Mapped[str]
    kind: Mapped[str]
    name: Mapped[str]
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    count: Mapped[int]
    kept: Mapped[int]
    nan_count: Mapped[int]
    posinf_count: Mapped[int]
    neginf_count: Mapped[int]
    min: Mapped[float | None]
    max: Mapped[float | None]
    first_value: Mapped[float | None]
    first_special: Mapped[str | None]
    first_step: Mapped[int | None]
    first_time: Mapped[datetime | None]
    last_value: Mapped[float | None]
    last_special: Mapped[str | None]
    last_step: Mapped[int | None]
    last_time: Mapped[datetime | None]
    last_epoch: Mapped[float | None]
    last_total: Mapped[int | None]

    @property
    def first(self) -> float:
        """The interval's first loss (NaN/inf round-trip)."""
        value = _special_value(self.first_value, self.first_special)
        assert value is not None
        return value

    @property
    def last(self) -> float:
        """The interval's last loss (NaN/inf round-trip)."""
        value = _special_value(self.last_value, self.last_special)
        assert value is not None
        return value


class Charge(Base):
    """Spend over ``[start_at, end_at)`` at ``rate_per_hour`` (per instance-hour) in
    ``currency``; ``duration_us`` is ``end_at - start_at`` in integer microseconds (exact).
    Use :attr:`amount` for the money (unrounded)."""

    __table__ = tables.charges

    id: Mapped[int]
    run_id: Mapped[str]
    instance_pk: Mapped[int]
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    rate_per_hour: Mapped[Decimal]
    currency: Mapped[str]
    duration_us: Mapped[int]

    @property
    def amount(self) -> Decimal:
        """``rate_per_hour * (end_at - start_at) / 3600``, unrounded, in :attr:`currency`."""
        return cost_of(self.rate_per_hour, self.end_at - self.start_at)


class ChargeRollup(Base):
    """Charged microseconds of one run (on ``instance_pk``) inside one UTC 15-minute bucket
    ``[bucket_s, bucket_s + 900)`` (``bucket_s``: POSIX seconds, a multiple of 900) at
    ``rate_per_hour`` in ``currency``. ``first_us``/``last_us`` (POSIX microseconds) are the
    earliest charged instant and the latest charge end inside the bucket. Maintained by the
    accrual in its own transaction (a charge spanning buckets is split at their boundaries),
    so ``SUM(duration_us)`` over the rows of a window equals the charges' time exactly."""

    __table__ = tables.charge_rollups

    run_id: Mapped[str]
    bucket_s: Mapped[int]
    rate_per_hour: Mapped[Decimal]
    currency: Mapped[str]
    instance_pk: Mapped[int]
    duration_us: Mapped[int]
    first_us: Mapped[int]
    last_us: Mapped[int]


class DecisionRow(Base):
    """A policy decision (:class:`costctl.records.Decision`) and its ``outcome`` (what the
    executor did, e.g. ``"stopped"``, ``"hook failed: ..."``); ``dry_run`` marks decisions
    that were only simulated. ``key`` identifies the event (``Decision.key``). A decision of
    ``costctl patrol`` has no run: ``run_id`` is NULL and ``instance_pk`` names its instance."""

    __table__ = tables.decisions

    id: Mapped[int]
    run_id: Mapped[str | None]
    time: Mapped[datetime]
    policy: Mapped[str]
    action: Mapped[str]
    reason: Mapped[str]
    evidence: Mapped[dict[str, Any]]
    outcome: Mapped[str | None]
    dry_run: Mapped[bool]
    key: Mapped[str | None]
    #: ``origin_id`` (fleet mode) is written by the central merge's Core statements only, and
    #: ``instance_pk`` (a ``costctl patrol`` decision's instance) by
    #: :meth:`~costctl.ledger.db.Ledger.record_decision`'s: a watch's INSERT names neither, so
    #: a ledger at an older revision still takes it.
    __mapper_args__ = {"exclude_properties": ["origin_id", "instance_pk"]}


class CheckpointRow(Base):
    """A checkpoint request and its outcome (:class:`costctl.checkpoint.CheckpointAttempt`).

    ``reason`` says why it was asked for (``preemption``, ``periodic``, ``downsize``...);
    ``outcome`` is NULL while pending, then ``saved``, ``acknowledged``, ``timed-out`` or
    ``job-exited``; ``saved_at`` is the checkpoint file's time, ``save_s`` seconds from the
    request to it; ``path``/``size_bytes`` the checkpoint found; ``save_duration_s`` the save's
    own duration per the job's acknowledgement record (its start to end), seconds."""

    __table__ = tables.checkpoints

    id: Mapped[int]
    run_id: Mapped[str]
    reason: Mapped[str]
    requested_at: Mapped[datetime]
    deadline: Mapped[datetime]
    signal: Mapped[str | None]
    outcome: Mapped[str | None]
    completed_at: Mapped[datetime | None]
    saved_at: Mapped[datetime | None]
    save_s: Mapped[float | None]
    path: Mapped[str | None]
    size_bytes: Mapped[int | None]
    save_duration_s: Mapped[float | None]
    #: ``origin_id`` (fleet mode) is written by the central merge's Core statements only.
    __mapper_args__ = {"exclude_properties": ["origin_id"]}


class WasteRow(Base):
    """Money paid for work that was lost: ``[start_at, end_at)`` of an instance at
    ``rate_per_hour`` in ``currency`` (e.g. from the last checkpoint to a preemption).
    ``reason`` is ``preemption`` (notice), ``preempted`` (no notice) or another event name.
    These seconds are also in ``charges``: waste is a share of the spend, never added to it.
    Use :attr:`amount` for the money (unrounded)."""

    __table__ = tables.waste

    id: Mapped[int]
    run_id: Mapped[str]
    instance_pk: Mapped[int]
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    rate_per_hour: Mapped[Decimal]
    currency: Mapped[str]
    reason: Mapped[str]
    detail: Mapped[str | None]
    #: ``origin_id`` (fleet mode) is written by the central merge's Core statements only.
    __mapper_args__ = {"exclude_properties": ["origin_id"]}

    @property
    def amount(self) -> Decimal:
        """``rate_per_hour * (end_at - start_at) / 3600``, unrounded, in :attr:`currency`."""
        return cost_of(self.rate_per_hour, self.end_at - self.start_at)


class StopEventRow(Base):
    """One step of a stop (:class:`costctl.stopping.StopEvent`): the ``state`` it reached
    (``requested``, ``sent``, ``confirmed``, ``gone``, ``self-stop sent``, ``failed``), the number
    of stop requests sent so far (``attempt``), when, and what was seen (``detail``: the
    provider's status, an error, the self-stop command). ``decision_id`` is the stop decision it
    belongs to (NULL when that decision could not be stored). ``run_id`` is NULL for a stop of
    ``costctl patrol``, whose decision names the instance."""

    __table__ = tables.stop_events

    id: Mapped[int]
    run_id: Mapped[str | None]
    decision_id: Mapped[int | None]
    time: Mapped[datetime]
    state: Mapped[str]
    attempt: Mapped[int]
    detail: Mapped[str | None]
    #: ``origin_id`` (fleet mode) is written by the central merge's Core statements only.
    __mapper_args__ = {"exclude_properties": ["origin_id"]}


__all__ = ["BigId", "Base", "Instance", "Run", "Sample", "SampleMinute", "Progress", "ProgressBucket", "Charge", "ChargeRollup",
           "DecisionRow", "CheckpointRow", "WasteRow", "StopEventRow", "NAMING_CONVENTION"]
