"""Read-side queries for ``costctl serve``: the runs still open, their newest readings, how long
they have read idle, and the decisions and failed stops, counted and listed.

SQLAlchemy Core only (no ORM), like :mod:`.queries`: every statement is an aggregate or a
``LIMIT``-ed read down an index (``ix_samples_run_id_time``, ``ix_progress_run_id_time``,
``ix_decisions_run_id_time``), so a scrape costs a few statements per open run, never a pass
over the samples or the charges. Money is not read here: spend comes from :mod:`.queries`
(:func:`~costctl.ledger.queries.bill_by_instance`, :func:`~costctl.ledger.queries.run_page`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select

from ..clock import ensure_utc
from . import tables
from .engine import Reader

RUNS, INSTANCES, SAMPLES = tables.runs, tables.instances, tables.samples
SAMPLE_MINUTES, PROGRESS = tables.sample_minutes, tables.progress
DECISIONS, STOP_EVENTS = tables.decisions, tables.stop_events

#: ``stop_events.state`` of a stop that ended without the provider confirming it
#: (:class:`costctl.stopping.StopState` ``FAILED``; the ledger sits below the stop machine).
STOP_FAILED = "failed"
#: ``samples.status`` values of a signal that should be there but could not be read: busy,
#: never idle (DESIGN.md, "Idle"); ``absent`` (no such signal on the machine) is no signal.
UNREADABLE = ("unknown", "error")
#: A minute rollup's readings span up to this after its ``minute``.
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run not ended (``runs.ended_at`` NULL), with its instance.

    ``last_seen_at`` is its heartbeat (aware UTC; every accrual moves it); ``mode`` ``dry-run``,
    ``advise-only`` or None (a watch that stops)."""

    run_id: str
    instance_pk: int
    provider: str
    instance_id: str
    gpu: str | None
    started_at: datetime
    last_seen_at: datetime
    status: str
    mode: str | None

    def heartbeat_age_s(self, now: datetime) -> float:
        """Seconds from the heartbeat to ``now`` (aware), never negative."""
        return max(0.0, (ensure_utc(now) - self.last_seen_at).total_seconds())


def open_runs(session: Reader) -> list[OpenRun]:
    """Every run not ended, newest first (one statement over ``runs`` joined to ``instances``)."""
    rows = session.execute(
        select(RUNS.c.id, RUNS.c.instance_pk, INSTANCES.c.provider, INSTANCES.c.provider_instance_id,
               INSTANCES.c.gpu, RUNS.c.gpu.label("run_gpu"), RUNS.c.started_at, RUNS.c.last_seen_at, RUNS.c.status,
               RUNS.c.mode)
        .join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk)
        .where(RUNS.c.ended_at.is_(None)).order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc()))
    return [OpenRun(str(r.id), int(r.instance_pk), r.provider, r.provider_instance_id, r.run_gpu or r.gpu,
                    ensure_utc(r.started_at), ensure_utc(r.last_seen_at), r.status, r.mode) for r in rows]


@dataclass(frozen=True, slots=True)
class Reading:
    """A run's newest readable reading of one signal: ``gpu_index`` (None: the CPU of the job's
    process tree), ``utilization`` in percent (GPU: 0-100; CPU: percent of one core, may exceed
    100) and when it was read (aware UTC)."""

    gpu_index: int | None
    utilization: float
    time: datetime


def newest_readings(session: Reader, run_ids: Collection[str]) -> dict[str, list[Reading]]:
    """``{run_id: [Reading]}``: each run's newest ``ok`` raw sample per GPU and for its CPU, GPUs by
    index then the CPU. Two statements: the newest time per (run, GPU) grouped, then those rows.
    Runs whose raw samples were all rolled up (older than ``[ledger] sample_retention``) have none."""
    if not run_ids:
        return {}
    ok = and_(SAMPLES.c.run_id.in_(sorted(run_ids)), SAMPLES.c.status == "ok", SAMPLES.c.utilization.is_not(None))
    index = func.coalesce(SAMPLES.c.gpu_index, -1)
    newest = (select(SAMPLES.c.run_id, index.label("gpu"), func.max(SAMPLES.c.time).label("time"))
              .where(ok).group_by(SAMPLES.c.run_id, index).subquery("newest"))
    rows = session.execute(
        select(SAMPLES.c.run_id, SAMPLES.c.gpu_index, SAMPLES.c.utilization, SAMPLES.c.time)
        .join(newest, and_(newest.c.run_id == SAMPLES.c.run_id, newest.c.gpu == index,
                           newest.c.time == SAMPLES.c.time))
        .where(ok))
    out: dict[str, dict[int | None, Reading]] = {}
    for run_id, gpu, util, time in rows:
        out.setdefault(str(run_id), {})[gpu] = Reading(gpu, float(util), ensure_utc(time))
    return {run_id: sorted(per.values(), key=lambda r: (r.gpu_index is None, r.gpu_index or 0))
            for run_id, per in out.items()}


@dataclass(frozen=True, slots=True)
class IdleReading:
    """How long a run has read idle: from ``since`` (the end of its newest busy reading, else its
    first reading) to ``until`` (its newest reading), both aware UTC."""

    since: datetime
    until: datetime

    @property
    def seconds(self) -> float:
        """``until - since`` in seconds, never negative."""
        return max(0.0, (self.until - self.since).total_seconds())


def _busy_sample(min_gpu: float, min_cpu: float) -> Any:
    """SQL: a raw sample that makes its tick busy (a reading at or over its threshold, or a signal
    that should be there but could not be read)."""
    s = SAMPLES.c
    return or_(s.status.in_(UNREADABLE),
               and_(s.status == "ok", or_(s.utilization.is_(None),
                                          and_(s.gpu_index.is_not(None), s.utilization >= min_gpu),
                                          and_(s.gpu_index.is_(None), s.utilization >= min_cpu))))


def _busy_minute(min_gpu: float, min_cpu: float) -> Any:
    """SQL: a minute rollup with a busy reading in it (as :func:`_busy_sample`, by its maximum)."""
    m = SAMPLE_MINUTES.c
    return or_(m.status.in_(UNREADABLE), m.ok_samples < m.samples,
               and_(m.ok_samples > 0, or_(m.utilization_count < m.ok_samples,
                                          and_(m.gpu_index.is_not(None), m.utilization_max >= min_gpu),
                                          and_(m.gpu_index.is_(None), m.utilization_max >= min_cpu))))


def idle_readings(session: Reader, run_ids: Collection[str], *, min_gpu_utilization: float,
                  min_cpu_utilization: float) -> dict[str, IdleReading]:
    """``{run_id: IdleReading}`` for the runs with any reading of a present signal.

    A tick is busy when any GPU reads at or over ``min_gpu_utilization`` (percent), the CPU of
    the job's tree at or over ``min_cpu_utilization`` (percent of one core), or a present signal
    could not be read; a training-log point (``progress``) is busy too. These are the idle
    policy's thresholds and rules (:mod:`costctl.policies.idle`) over what the ledger holds:
    SSH sessions and Jupyter activity are not recorded, so a run can read idle here while its
    watch still counts an SSH session as busy. Rolled-up minutes (past ``[ledger]
    sample_retention``) count as busy through the end of the minute when any reading in them was.

    Per run, each statement walks down an index from the newest row and stops at the first match
    (``ORDER BY time DESC LIMIT 1``): the cost is the length of the idle stretch, not the run's.
    """
    out: dict[str, IdleReading] = {}
    busy_s, busy_m = _busy_sample(min_gpu_utilization, min_cpu_utilization), \
        _busy_minute(min_gpu_utilization, min_cpu_utilization)
    present = SAMPLES.c.status != "absent"
    m_present = SAMPLE_MINUTES.c.status != "absent"
    for run_id in sorted(run_ids):
        s_run, m_run = SAMPLES.c.run_id == run_id, SAMPLE_MINUTES.c.run_id == run_id

        def newest(where: Any, *, minutes: bool = False) -> datetime | None:
            col = SAMPLE_MINUTES.c.minute if minutes else SAMPLES.c.time
            value = session.scalar(select(col).where(where).order_by(col.desc()).limit(1))
            return None if value is None else ensure_utc(value) + (MINUTE if minutes else timedelta(0))

        def oldest(where: Any, *, minutes: bool = False) -> datetime | None:
            col = SAMPLE_MINUTES.c.minute if minutes else SAMPLES.c.time
            value = session.scalar(select(col).where(where).order_by(col.asc()).limit(1))
            return None if value is None else ensure_utc(value)

        until = newest(and_(s_run, present)) or newest(and_(m_run, m_present), minutes=True)
        if until is None:
            continue
        busy = [t for t in (newest(and_(s_run, busy_s)), newest(and_(m_run, busy_m), minutes=True),
                            session.scalar(select(PROGRESS.c.time).where(PROGRESS.c.run_id == run_id,
                                                                         PROGRESS.c.time.is_not(None))
                                           .order_by(PROGRESS.c.time.desc()).limit(1)))
                if t is not None]
        if busy:
            since = min(max(ensure_utc(t) for t in busy), until)
        else:
            firsts = [t for t in (oldest(and_(m_run, m_present), minutes=True), oldest(and_(s_run, present)))
                      if t is not None]
            since = min(firsts) if firsts else until
        out[run_id] = IdleReading(since, until)
    return out


@dataclass(frozen=True, slots=True)
class NewestLoss:
    """A run's newest training-log point of a train series: its series name, value (None when
    non-finite: ``special`` says which, ``nan``/``inf``/``-inf``), step and time (aware UTC or None)."""

    name: str
    value: float | None
    special: str | None
    step: int | None
    time: datetime | None


def newest_losses(session: Reader, run_ids: Collection[str]) -> dict[str, NewestLoss]:
    """``{run_id: NewestLoss}``: per run, its newest ``train`` progress row (by time, then id),
    one ``LIMIT 1`` read down ``ix_progress_run_id_time`` each."""
    out: dict[str, NewestLoss] = {}
    p = PROGRESS.c
    for run_id in sorted(run_ids):
        row = session.execute(
            select(p.name, p.value, p.value_special, p.step, p.time)
            .where(p.run_id == run_id, p.kind == "train").order_by(p.time.desc(), p.id.desc()).limit(1)).first()
        if row is not None:
            out[run_id] = NewestLoss(row.name, row.value, row.value_special, row.step,
                                     ensure_utc(row.time) if row.time is not None else None)
    return out


def decision_counts(session: Reader) -> dict[tuple[str, str], int]:
    """``{(policy, action): decisions recorded}`` over the whole ledger (one grouped statement)."""
    return {(policy, action): int(n) for policy, action, n in session.execute(
        select(DECISIONS.c.policy, DECISIONS.c.action, func.count()).group_by(DECISIONS.c.policy,
                                                                             DECISIONS.c.action))}


def stop_failures(session: Reader) -> int:
    """How many stops ended failed (``stop_events`` rows in state :data:`STOP_FAILED`: one per
    stop that the provider never confirmed) over the whole ledger."""
    return int(session.scalar(select(func.count()).select_from(STOP_EVENTS)
                              .where(STOP_EVENTS.c.state == STOP_FAILED)) or 0)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A recorded decision as it was stored, with its run's instance and, for a stop, the final
    state of the stop it started (None for advice, or a stop with no events). A decision of
    ``costctl patrol`` has no run (``run_id`` None) and names its instance itself.

    ``reason``, ``evidence`` and ``outcome`` are as recorded: they may carry a secret that the
    watch saw (a URL in an error): redact before showing them."""

    decision_id: int
    time: datetime
    run_id: str | None
    provider: str
    instance_id: str
    policy: str
    action: str
    reason: str
    evidence: Any
    outcome: str | None
    dry_run: bool
    stop_state: str | None


def recent_decisions(session: Reader, *, limit: int = 50) -> list[DecisionRecord]:
    """The newest ``limit`` decisions, newest first, with their stops' final states (two
    statements: the decisions joined to their runs' instances, or a patrol decision's own
    instance, then their stops' events)."""
    rows = session.execute(
        select(DECISIONS.c.id, DECISIONS.c.time, DECISIONS.c.run_id, INSTANCES.c.provider,
               INSTANCES.c.provider_instance_id, DECISIONS.c.policy, DECISIONS.c.action, DECISIONS.c.reason,
               DECISIONS.c.evidence, DECISIONS.c.outcome, DECISIONS.c.dry_run)
        .outerjoin(RUNS, RUNS.c.id == DECISIONS.c.run_id)
        .join(INSTANCES, INSTANCES.c.id == func.coalesce(RUNS.c.instance_pk, DECISIONS.c.instance_pk))
        .order_by(DECISIONS.c.time.desc(), DECISIONS.c.id.desc()).limit(limit)).all()
    ids = [int(r.id) for r in rows if r.action in ("stop", "release")]
    states: dict[int, str] = {}
    if ids:
        for decision_id, state in session.execute(
                select(STOP_EVENTS.c.decision_id, STOP_EVENTS.c.state).where(STOP_EVENTS.c.decision_id.in_(ids))
                .order_by(STOP_EVENTS.c.time, STOP_EVENTS.c.id)):
            states[int(decision_id)] = state  # the last one wins
    return [DecisionRecord(int(r.id), ensure_utc(r.time), str(r.run_id) if r.run_id is not None else None,
                           r.provider, r.provider_instance_id,
                           r.policy, r.action, r.reason, r.evidence, r.outcome, bool(r.dry_run), states.get(int(r.id)))
            for r in rows]


__all__ = ["DecisionRecord", "IdleReading", "NewestLoss", "OpenRun", "Reading", "STOP_FAILED", "decision_counts",
           "idle_readings", "newest_losses", "newest_readings", "open_runs", "recent_decisions", "stop_failures"]
