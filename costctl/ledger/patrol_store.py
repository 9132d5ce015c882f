"""What ``costctl patrol`` keeps in the ledger: its observations, and its decisions per instance.

* **Observations** (``patrol_observations``): one row per listed instance per sweep (status, GPU
  and CPU utilization or NULL), written in one executemany; read back per instance over a
  window; deleted past the retention.
* **Decisions**: a patrol's decisions have no run (``run_id`` NULL) and name their instance
  (``instance_pk``): a mark (``action = "mark"``, ``policy = "patrol:<name>"``, outcome
  ``marked`` until the mark is ``acted`` on or ``cleared``), the action it led to (``stop`` /
  ``release``, outcome ``stop requested`` and then what the provider confirmed), a warning, and
  a snooze given with ``costctl snooze --instance`` (``action = "snooze"``, ``policy =
  "patrol"``).
* **The claim** (:func:`claim`): the one transaction that re-reads an instance's patrol
  decisions and records a new one, so that two patrols against one ledger never record the same
  mark or act on one mark twice. On PostgreSQL it first takes ``pg_try_advisory_xact_lock`` on
  the instance's key (:func:`lock_key`; another patrol holding it means that one is deciding:
  this one leaves the instance alone); on SQLite the transaction starts with ``BEGIN
  IMMEDIATE``, which takes the database file's write lock before the re-read, so the claims of
  every process on that file run one after the other (a second waits, up to the busy timeout,
  and then re-reads what the first recorded).

Core statements (no ORM) on the :class:`~costctl.ledger.db.Ledger`'s sessions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, insert, select, update

from ..clock import ensure_utc
from ..i18n import _
from ..records import Decision
from . import tables

if TYPE_CHECKING:
    from .db import Ledger

#: Instance keys per ``IN (...)`` list (far below SQLite's and PostgreSQL's bound-variable limits).
CHUNK = 400
#: ``decisions.policy`` of a snooze given for patrol and of the patrol's own warnings.
PATROL_POLICY = "patrol"
#: Mark outcomes (machine words, compared by code).
MARKED, ACTED, CLEARED = "marked", "acted", "cleared"

OBS = tables.patrol_observations
DEC = tables.decisions
INST = tables.instances
RUNS = tables.runs

#: An instance as the patrol names it: ``(provider, the provider's instance id)``.
Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Observation:
    """One stored reading of one instance.

    Attributes:
        time: aware UTC.
        status: the normalized status word (``running``, ``stopped``...).
        gpu_utilization / cpu_utilization: percent as the provider reported it; None when the
            listing carried no reading (counted as busy by the idle filter).
    """

    time: datetime
    status: str
    gpu_utilization: float | None = None
    cpu_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class PatrolDecision:
    """A decision of the patrol on one instance, as stored.

    Attributes:
        id: the decision's id.
        time: aware UTC.
        policy: ``patrol:<name>`` or ``patrol``.
        action: the :class:`~costctl.records.Action` value.
        outcome: what was done (``marked``, ``acted``, ``cleared``, ``stop requested``...).
        key: the decision's key ("" when none).
        evidence: its evidence.
    """

    id: int
    time: datetime
    policy: str
    action: str
    outcome: str | None
    key: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def lock_key(provider: str, instance_id: str) -> int:
    """The advisory-lock key of an instance: the first 8 bytes of BLAKE2b of
    ``patrol:<provider>:<instance id>`` as a signed 64-bit integer (PostgreSQL's ``bigint``)."""
    digest = hashlib.blake2b(f"patrol:{provider}:{instance_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# ----------------------------------------------------------------------------- observations


def record_observations(ledger: Ledger, rows: Sequence[dict[str, Any]]) -> None:
    """Store observations: ``rows`` of ``{"provider", "instance_id", "account", "time" (aware),
    "status", "gpu_utilization", "cpu_utilization"}``, one executemany.

    Raises:
        LedgerError: the database cannot be written.
    """
    if not rows:
        return
    cleaned = [dict(r, time=ensure_utc(r["time"])) for r in rows]
    with ledger.batch(_("record the patrol's observations")) as s:
        s.connection().execute(insert(OBS), cleaned)


def prune_observations(ledger: Ledger, before: datetime) -> int:
    """Delete observations older than ``before`` (aware); returns how many.

    Raises:
        LedgerError: the database cannot be written.
    """
    with ledger.batch(_("delete old patrol observations")) as s:
        result = s.connection().execute(delete(OBS).where(OBS.c.time < ensure_utc(before)))
        return int(result.rowcount or 0)


def observations(conn: Any, keys: Collection[Key], since: datetime) -> dict[Key, list[Observation]]:
    """The observations of ``keys`` at or after ``since`` (aware), oldest first, per key (a key
    without any is absent)."""
    found: dict[Key, list[Observation]] = {}
    by_provider: dict[str, list[str]] = {}
    for provider, iid in sorted(set(keys)):
        by_provider.setdefault(provider, []).append(iid)
    for provider, ids in by_provider.items():  # (provider, instance_id, time): the index's own order
        for chunk in _chunks(ids):
            stmt = (select(OBS.c.instance_id, OBS.c.time, OBS.c.status, OBS.c.gpu_utilization, OBS.c.cpu_utilization)
                    .where(OBS.c.provider == provider, OBS.c.instance_id.in_(chunk),
                           OBS.c.time >= ensure_utc(since))
                    .order_by(OBS.c.time, OBS.c.id))
            for iid, when, status, gpu, cpu in conn.execute(stmt):
                found.setdefault((provider, iid), []).append(Observation(ensure_utc(when), status, gpu, cpu))
    return found


# ----------------------------------------------------------------------------- what the ledger knows


def watched(conn: Any, keys: Collection[Key]) -> set[Key]:
    """The ``keys`` a run of this ledger ever ran on (a watch of this ledger knew them)."""
    wanted = set(keys)
    found: set[Key] = set()
    ids = sorted({iid for _p, iid in wanted})
    for chunk in _chunks(ids):
        stmt = (select(INST.c.provider, INST.c.provider_instance_id).distinct()
                .join(RUNS, RUNS.c.instance_pk == INST.c.id)
                .where(INST.c.provider_instance_id.in_(chunk)))
        for provider, iid in conn.execute(stmt):
            if (provider, iid) in wanted:
                found.add((provider, iid))
    return found


def _instance_pks(conn: Any, keys: Collection[Key]) -> dict[int, Key]:
    wanted = set(keys)
    pks: dict[int, Key] = {}
    ids = sorted({iid for _p, iid in wanted})
    for chunk in _chunks(ids):
        for pk, provider, iid in conn.execute(select(INST.c.id, INST.c.provider, INST.c.provider_instance_id)
                                              .where(INST.c.provider_instance_id.in_(chunk))):
            if (provider, iid) in wanted:
                pks[pk] = (provider, iid)
    return pks


def _decision(row: Any) -> PatrolDecision:
    return PatrolDecision(id=row.id, time=ensure_utc(row.time), policy=row.policy, action=str(row.action),
                          outcome=row.outcome, key=row.key or "", evidence=dict(row.evidence or {}))


def patrol_decisions(conn: Any, keys: Collection[Key]) -> dict[Key, list[PatrolDecision]]:
    """Every patrol decision (no run, an instance named) of ``keys``, newest first, per key."""
    pks = _instance_pks(conn, keys)
    found: dict[Key, list[PatrolDecision]] = {}
    for chunk in _chunks(sorted(pks)):
        stmt = (select(DEC.c.id, DEC.c.instance_pk, DEC.c.time, DEC.c.policy, DEC.c.action, DEC.c.outcome,
                       DEC.c.key, DEC.c.evidence)
                .where(DEC.c.run_id.is_(None), DEC.c.instance_pk.in_(chunk))
                .order_by(DEC.c.time.desc(), DEC.c.id.desc()))
        for row in conn.execute(stmt):
            found.setdefault(pks[row.instance_pk], []).append(_decision(row))
    return found


def open_marks(conn: Any) -> list[tuple[Key, PatrolDecision]]:
    """Every patrol mark still ``marked``, with its instance, oldest first (a sweep clears the
    marks of instances gone from a provider it read: these are not among the instances it lists)."""
    stmt = (select(DEC.c.id, DEC.c.time, DEC.c.policy, DEC.c.action, DEC.c.outcome, DEC.c.key, DEC.c.evidence,
                   INST.c.provider, INST.c.provider_instance_id)
            .join(INST, INST.c.id == DEC.c.instance_pk)
            .where(DEC.c.run_id.is_(None), DEC.c.action == "mark", DEC.c.outcome == MARKED)
            .order_by(DEC.c.time, DEC.c.id))
    return [((row.provider, row.provider_instance_id), _decision(row)) for row in conn.execute(stmt)]


def instance_pk(conn: Any, key: Key) -> int | None:
    """The ledger's key of the instance ``key``, None when the ledger has no row for it."""
    return conn.execute(select(INST.c.id).where(INST.c.provider == key[0],
                                                INST.c.provider_instance_id == key[1])).scalar()


# ----------------------------------------------------------------------------- the claim


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """What the provider listed about an instance, for its ``instances`` row when the ledger
    has none yet (:meth:`~costctl.ledger.db.Ledger.ensure_instance`)."""

    gpu: str | None
    gpu_count: int
    billing: str
    price_per_hour: Decimal | None
    currency: str
    region: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """What :func:`claim` did.

    Attributes:
        decision_id: the decision recorded, None when nothing was.
        instance_pk: the instance's key in the ledger (None when nothing was recorded and the
            ledger had none).
        refused: why nothing was recorded (one line: another patrol holds the instance, or the
            re-read found it decided already), None when recorded.
        busy: another patrol held the instance's advisory lock (PostgreSQL).
    """

    decision_id: int | None
    instance_pk: int | None
    refused: str | None = None
    busy: bool = False


#: Decides from the instance's patrol decisions as re-read inside the claim (newest first)
#: whether to go on: None to record, else the line saying why not.
Check = Callable[[list[PatrolDecision]], str | None]


def claim(ledger: Ledger, key: Key, facts: InstanceFacts, decision: Decision, *, outcome: str,
          check: Check, settle: tuple[int, str, dict[str, Any]] | None = None) -> Claim:
    """In one transaction: take the instance's lock, re-read its patrol decisions, ask ``check``,
    and record ``decision`` (with ``outcome``) for the instance, settling the mark ``settle``
    (``(decision id, new outcome, evidence to add)``) in the same transaction, only when that
    mark's outcome is still ``marked``.

    The lock: ``pg_try_advisory_xact_lock(lock_key(provider, id))`` on PostgreSQL, held until
    the transaction ends (a patrol that does not get it refuses, ``busy``); SQLite's write lock
    (the transaction starts with ``BEGIN IMMEDIATE``) elsewhere.

    Raises:
        LedgerError: the database cannot be read or written (nothing is recorded).
    """
    provider, instance_id = key
    with ledger.batch(_("record the patrol's decision")) as s:
        conn = s.connection()
        if not _locked(conn, key):
            return Claim(None, None, _("another patrol is deciding on this instance now"), busy=True)
        pk = instance_pk(conn, key)
        history = patrol_decisions(conn, [key]).get(key, []) if pk is not None else []
        why_not = check(history)
        if why_not is not None:
            return Claim(None, pk, why_not)
        if settle is not None:
            mark_id, mark_outcome, mark_evidence = settle
            row = conn.execute(select(DEC.c.outcome, DEC.c.evidence).where(DEC.c.id == mark_id)).first()
            if row is None or row.outcome != MARKED:
                return Claim(None, pk, _("mark {mark} was settled meanwhile ({outcome})").format(
                    mark=mark_id, outcome=row.outcome if row is not None else "-"))
        if pk is None:
            pk = ledger.ensure_instance(provider, instance_id, gpu=facts.gpu, gpu_count=facts.gpu_count,
                                        billing=facts.billing, price_per_hour=facts.price_per_hour,
                                        currency=facts.currency, region=facts.region)
        decision_id = ledger.record_decision(None, decision, outcome=outcome, instance_pk=pk)
        if settle is not None:
            conn.execute(update(DEC).where(DEC.c.id == settle[0]).values(
                outcome=settle[1], evidence={**dict(row.evidence or {}), **settle[2]}))
        return Claim(decision_id, pk)


def _locked(conn: Any, key: Key) -> bool:
    """Take the instance's patrol lock for the rest of the transaction on ``conn``: True when
    held. PostgreSQL: ``pg_try_advisory_xact_lock(lock_key(provider, id))`` (False when another
    transaction holds it); elsewhere the transaction's own write lock holds it (SQLite's
    ``BEGIN IMMEDIATE``): True."""
    if conn.dialect.name != "postgresql":
        return True
    return bool(conn.execute(select(func.pg_try_advisory_xact_lock(lock_key(*key)))).scalar())


def take_over(ledger: Ledger, key: Key, decision_id: int, *, expected_owner: Any, owner: dict[str, Any],
              evidence: dict[str, Any]) -> str | None:
    """Take over a stop or release still under way whose owner is gone, in one transaction under
    the instance's lock (as :func:`claim`): re-read the decision, and only when its outcome is
    still ``stop requested`` and its ``owner`` evidence is still ``expected_owner`` (no heartbeat
    since), set its owner to ``owner`` and append ``evidence`` to its ``resumed`` list. Returns
    None when taken over, else why not (one line).

    Raises:
        LedgerError: the database cannot be read or written (nothing is changed).
    """
    with ledger.batch(_("record the patrol's decision")) as s:
        conn = s.connection()
        if not _locked(conn, key):
            return _("another patrol is deciding on this instance now")
        row = conn.execute(select(DEC.c.outcome, DEC.c.evidence).where(DEC.c.id == decision_id)).first()
        if row is None or row.outcome != "stop requested":
            return _("decision {decision} ended meanwhile ({outcome})").format(
                decision=decision_id, outcome=row.outcome if row is not None else "-")
        stored = dict(row.evidence or {})
        if stored.get("owner") != expected_owner:
            return _("decision {decision} is driven by a live patrol").format(decision=decision_id)
        resumed = [*list(stored.get("resumed") or []), evidence]
        conn.execute(update(DEC).where(DEC.c.id == decision_id).values(
            evidence={**stored, "owner": owner, "resumed": resumed}))
        return None


def record_snooze(ledger: Ledger, key: Key, decision: Decision) -> int | None:
    """Record a patrol snooze (``decision``: action ``snooze``, policy :data:`PATROL_POLICY`,
    evidence ``until``) for the instance ``key``; None when the ledger has no row for it (the
    patrol records an instance when it first marks or warns about it).

    Raises:
        LedgerError: the database cannot be written.
    """
    with ledger.batch(_("record a snooze")) as s:
        pk = instance_pk(s.connection(), key)
        if pk is None:
            return None
        return ledger.record_decision(None, decision, outcome="snoozed", instance_pk=pk)


def settle_mark(ledger: Ledger, mark_id: int, outcome: str, evidence: dict[str, Any]) -> bool:
    """Set a mark's outcome (``cleared``...) and add ``evidence``, only while it is still
    ``marked``; False when another patrol settled it first.

    Raises:
        LedgerError: the database cannot be written.
    """
    with ledger.batch(_("record the patrol's decision")) as s:
        conn = s.connection()
        row = conn.execute(select(DEC.c.outcome, DEC.c.evidence).where(DEC.c.id == mark_id)).first()
        if row is None or row.outcome != MARKED:
            return False
        conn.execute(update(DEC).where(DEC.c.id == mark_id, DEC.c.outcome == MARKED).values(
            outcome=outcome, evidence={**dict(row.evidence or {}), **evidence}))
        return True


def beat_if_owner(ledger: Ledger, decision_id: int, owner: dict[str, Any],
                  same: Callable[[Any, Any], bool]) -> bool:
    """Record ``owner``'s new heartbeat on the stop ``decision_id`` only while ``same(stored
    owner, owner)`` holds and the stop is still under way, in one transaction: True when
    recorded; False when another patrol took the stop over (or it ended), and then nothing is
    written (a patrol that slept through a take-over never writes itself back as the owner).

    Raises:
        LedgerError: the database cannot be read or written.
    """
    with ledger.batch(_("record the patrol's decision")) as s:
        conn = s.connection()
        row = conn.execute(select(DEC.c.outcome, DEC.c.evidence).where(DEC.c.id == decision_id)).first()
        if row is None or row.outcome != "stop requested":
            return False
        stored = dict(row.evidence or {})
        if not same(stored.get("owner"), owner):
            return False
        conn.execute(update(DEC).where(DEC.c.id == decision_id).values(evidence={**stored, "owner": owner}))
        return True


def still_owner(ledger: Ledger, decision_id: int, owner: dict[str, Any], same: Callable[[Any, Any], bool]) -> bool:
    """Whether the stop ``decision_id`` is still under way and driven by ``owner`` (one read).

    Raises:
        LedgerError: the database cannot be read.
    """
    with ledger.session() as s:
        row = s.execute(select(DEC.c.outcome, DEC.c.evidence).where(DEC.c.id == decision_id)).first()
    return row is not None and row.outcome == "stop requested" and same(dict(row.evidence or {}).get("owner"), owner)


def add_evidence(ledger: Ledger, decision_id: int, evidence: dict[str, Any]) -> None:
    """Add ``evidence`` keys to a stored decision, its outcome unchanged.

    Raises:
        LedgerError: no such decision, or the database cannot be written.
    """
    with ledger.batch(_("record the patrol's decision")) as s:
        conn = s.connection()
        row = conn.execute(select(DEC.c.evidence).where(DEC.c.id == decision_id)).first()
        if row is None:
            from ..errors import LedgerError

            raise LedgerError(_("no decision {decision} in the ledger").format(decision=decision_id))
        conn.execute(update(DEC).where(DEC.c.id == decision_id).values(evidence={**dict(row.evidence or {}),
                                                                                 **evidence}))


__all__ = ["ACTED", "CHUNK", "CLEARED", "Check", "Claim", "InstanceFacts", "Key", "MARKED", "Observation", "open_marks",
           "PATROL_POLICY", "PatrolDecision", "add_evidence", "beat_if_owner", "claim", "instance_pk", "lock_key", "observations",
           "patrol_decisions", "prune_observations", "record_observations", "record_snooze", "settle_mark",
           "still_owner", "take_over", "watched"]
