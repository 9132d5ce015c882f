"""Read-side queries on a job's chain of runs (a run and the runs that resumed it, linked by
``runs.continues_run_id``): the saves it measured, its preemptions, the checkpoints it saved,
and its runs still open.

SQLAlchemy Core on a :class:`~costctl.ledger.engine.Reader` (a session or a connection).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from ..clock import ensure_utc
from . import tables
from .engine import Reader
from .lifecycle import PREEMPTION_REASONS
from .queries import chain_roots

RUNS, CHECKPOINTS, WASTE = tables.runs, tables.checkpoints, tables.waste


def chain_run_ids(session: Reader, run_id: str) -> list[str]:
    """Every run of ``run_id``'s chain (``run_id`` included), oldest first."""
    roots = chain_roots(session)
    root = roots.get(run_id, run_id)
    members = {r for r, top in roots.items() if top == root} | {root, run_id}
    rows = session.execute(select(RUNS.c.id).where(RUNS.c.id.in_(sorted(members)))
                           .order_by(RUNS.c.started_at, RUNS.c.id))
    return [str(r.id) for r in rows]


@dataclass(frozen=True, slots=True)
class ChainSave:
    """One checkpoint saved by a run of the chain: ``seconds`` the save took and how it was
    measured (``"record"``: the job's acknowledgement record, start to end; ``"request"``: from
    the request to the checkpoint, which includes the wait for the job's safe point)."""

    run_id: str
    seconds: float
    measured_by: str


def chain_saves(session: Reader, run_ids: Iterable[str], *, limit: int = 50) -> list[ChainSave]:
    """The newest ``limit`` saves (outcome ``saved``) of the runs ``run_ids``, oldest first."""
    ids = sorted(set(run_ids))
    if not ids:
        return []
    ck = CHECKPOINTS
    rows = session.execute(
        select(ck.c.run_id, ck.c.save_duration_s, ck.c.save_s)
        .where(ck.c.run_id.in_(ids), ck.c.outcome == "saved")
        .order_by(ck.c.requested_at.desc(), ck.c.id.desc()).limit(limit)).all()
    saves = []
    for r in reversed(rows):
        if r.save_duration_s is not None and r.save_duration_s > 0:
            saves.append(ChainSave(str(r.run_id), float(r.save_duration_s), "record"))
        elif r.save_s is not None and r.save_s > 0:
            saves.append(ChainSave(str(r.run_id), float(r.save_s), "request"))
    return saves


def chain_preemptions(session: Reader, run_ids: Iterable[str]) -> int:
    """How many preemptions (waste rows of a preemption) the runs ``run_ids`` recorded."""
    ids = sorted(set(run_ids))
    if not ids:
        return 0
    return int(session.scalar(select(func.count(WASTE.c.id)).where(
        WASTE.c.run_id.in_(ids), WASTE.c.reason.in_(PREEMPTION_REASONS))) or 0)


def saved_checkpoint_paths(session: Reader, command: Sequence[str] | None, *, scan: int = 200,
                           limit: int = 200) -> list[str]:
    """Paths of the checkpoints saved (outcome ``saved``) by the chains of the newest ``scan``
    runs of ``command``, newest first, each once (at most ``limit``): where ``--resume`` looks
    besides ``[checkpoint] path`` (a job may acknowledge a save anywhere). Empty without a
    command."""
    if not command:
        return []
    wanted = list(command)
    same = [str(r.id) for r in session.execute(select(RUNS.c.id, RUNS.c.command)
                                               .order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc()).limit(scan))
            if r.command == wanted]
    if not same:
        return []
    roots = chain_roots(session)
    tops = {roots.get(r, r) for r in same}
    ids = {r for r, top in roots.items() if top in tops} | tops | set(same)
    ck = CHECKPOINTS
    paths: list[str] = []
    for r in session.execute(select(ck.c.path).where(ck.c.run_id.in_(sorted(ids)), ck.c.outcome == "saved",
                                                     ck.c.path.is_not(None))
                             .order_by(ck.c.requested_at.desc(), ck.c.id.desc()).limit(limit * 4)):
        if r.path not in paths:
            paths.append(r.path)
        if len(paths) >= limit:
            break
    return paths


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run not ended: its id, the watch's host and pid, its heartbeat (``last_seen_at``,
    aware UTC), its status and its log (for the relay's state)."""

    run_id: str
    host: str | None
    pid: int | None
    last_seen_at: datetime
    status: str
    log_path: str | None


def open_runs_of(session: Reader, *, command: Sequence[str] | None, run_ids: Iterable[str] = ()) -> list[OpenRun]:
    """The runs not ended whose command is ``command`` or whose id is in ``run_ids``, newest first."""
    ids = set(run_ids)
    rows = session.execute(select(RUNS.c.id, RUNS.c.host, RUNS.c.pid, RUNS.c.last_seen_at, RUNS.c.status,
                                  RUNS.c.log_path, RUNS.c.command)
                           .where(RUNS.c.ended_at.is_(None)).order_by(RUNS.c.started_at.desc()))
    wanted = list(command) if command else None
    return [OpenRun(str(r.id), r.host, r.pid, ensure_utc(r.last_seen_at), r.status, r.log_path)
            for r in rows if str(r.id) in ids or (wanted is not None and r.command == wanted)]


__all__ = ["ChainSave", "OpenRun", "chain_preemptions", "chain_run_ids", "chain_saves", "open_runs_of",
           "saved_checkpoint_paths"]
