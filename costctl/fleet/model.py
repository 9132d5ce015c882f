"""The fleet's rows, computed by pure functions from what the accounts and the ledger said.

:func:`build_report` takes what each provider account answered (:class:`AccountRead`: its
instances, or the one line saying why it could not be read), what the ledger knows of those
instances (:class:`~costctl.ledger.instance_view.InstanceRecord`), the time and the guard lag,
and returns a :class:`FleetReport`: one :class:`FleetRow` per instance, every account with its
outcome. Nothing here reads a clock, a provider or a database, so ``costctl fleet`` renders it
and a policy sweep (``costctl patrol``) can filter the same rows.

Terms:

* **uptime** — seconds since the provider last started the instance, by the provider's own
  times (:meth:`~costctl_providers.base.Instance.running_seconds`).
* **provider spend** — the current session by the provider's figures: its price per hour ×
  uptime (none of the adapters' APIs reports a per-instance total); None where either is
  unreported.
* **ledger spend** — every charge this ledger recorded for the instance, per currency.
* **guard** — :func:`guard_of`: guarded when a run of this ledger on the instance has not ended,
  its watch stops (not dry-run, not advise-only) and its heartbeat is at most the guard lag old.
* **stopped price** — what the instance costs per hour while stopped (its disk), where the
  adapter can tell; for a stopped instance with a known stop time, the storage spend since.
* **utilization** — the provider's instantaneous GPU (and CPU) reading; None is unreported and
  never means idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING

from ..clock import ensure_utc
from ..i18n import _
from ..money import Money, cost_of

from costctl_providers.base import Status

if TYPE_CHECKING:  # the adapters' records and the ledger's: types only
    from costctl_providers.base import Instance

    from ..ledger.instance_view import Heartbeat, InstanceRecord


class GuardState(str, Enum):
    """Whether anything in this ledger watches an instance, and whether it would stop it."""

    #: a run not ended, of a watch that stops, with a heartbeat within the lag
    GUARDED = "guarded"
    #: only dry-run or advise-only watches have a heartbeat within the lag: nothing stops it
    NOT_STOPPING = "not-stopping"
    #: runs not ended, but no heartbeat within the lag (a watch killed, or its ledger writes behind)
    STALE = "stale"
    #: no run of this ledger on the instance has stayed open
    UNWATCHED = "unwatched"
    #: the ledger could not be read: nobody can tell
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Guard:
    """An instance's guard.

    Attributes:
        state: :class:`GuardState`.
        run_id: the run that decides it (the newest heartbeat among those counted), or None.
        heartbeat_age: ``now - last_seen_at`` of that run (0 for a heartbeat stamped ahead of
            ``now`` by a clock that runs fast), None without a run.
        mode: that run's mode (None: a watch that stops; ``"dry-run"``, ``"advise-only"``).
        host: the machine of that run's watch, when recorded.
    """

    state: GuardState
    run_id: str | None = None
    heartbeat_age: timedelta | None = None
    mode: str | None = None
    host: str | None = None

    @property
    def guarded(self) -> bool:
        """True only for :attr:`GuardState.GUARDED`."""
        return self.state is GuardState.GUARDED


def guard_words(guard: Guard, age: str) -> str:
    """``guard`` in the words every view of the fleet uses (``costctl fleet``'s GUARD cell, the
    dashboard's fleet table), in the current language; ``age`` is the heartbeat's age as that
    view writes durations (``0:00:36``, ``36s``)."""
    if guard.state is GuardState.GUARDED:
        return _("guarded (heartbeat {age} ago)").format(age=age)
    if guard.state is GuardState.NOT_STOPPING:
        return _("watched, never stops ({mode}; heartbeat {age} ago)").format(mode=guard.mode, age=age)
    if guard.state is GuardState.STALE:
        return _("unguarded: heartbeat {age} ago").format(age=age)
    if guard.state is GuardState.UNKNOWN:
        return _("unknown (ledger unreadable)")
    return _("unguarded")


def guard_of(record: InstanceRecord | None, *, now: datetime, lag: timedelta) -> Guard:
    """The guard of an instance from its ledger record (None: the ledger never recorded it).

    Rule: of the record's runs not ended, those whose heartbeat (``last_seen_at``) is at most
    ``lag`` before ``now`` count; if one of them is of a watch that stops (``mode`` None) the
    instance is GUARDED by the newest such run; else if any counts it is NOT_STOPPING; else
    with runs not ended it is STALE (the newest heartbeat's age said); else UNWATCHED.

    Args:
        record: the ledger's record of the instance.
        now: aware; the time the fleet was read.
        lag: the guard lag (positive).
    """
    runs: Sequence[Heartbeat] = record.open_runs if record is not None else ()
    if not runs:
        return Guard(GuardState.UNWATCHED)
    now = ensure_utc(now)

    def age(beat: Heartbeat) -> timedelta:
        return max(timedelta(0), now - ensure_utc(beat.last_seen_at))

    newest_first = sorted(runs, key=lambda b: ensure_utc(b.last_seen_at), reverse=True)
    fresh = [b for b in newest_first if age(b) <= lag]
    stopping = [b for b in fresh if b.mode is None]
    if stopping:
        state, beat = GuardState.GUARDED, stopping[0]
    elif fresh:
        state, beat = GuardState.NOT_STOPPING, fresh[0]
    else:
        state, beat = GuardState.STALE, newest_first[0]
    return Guard(state, beat.run_id, age(beat), beat.mode, beat.host)


@dataclass(frozen=True)
class AccountRead:
    """What one provider account answered.

    Attributes:
        provider: the adapter's name.
        account: the named account (``[providers.<provider>.accounts.<account>]``), None for the
            provider's default account.
        instances: its instances (prices already checked at the boundary), empty on error.
        error: one line saying why it could not be read (HTTP 500, a rejected key, a timeout, an
            answer that is no instance list, a bad config table...), None when it was read.
        notes: lines about what was read but not used (a refused price, items skipped).
        skipped: listed items without an id, left out (nothing could address them).
        duplicates: ids the listing gave more than once (each shown once, from its first item).
    """

    provider: str
    account: str | None
    instances: tuple[Instance, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    skipped: int = 0
    duplicates: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the account was read."""
        return self.error is None


@dataclass(frozen=True)
class FleetRow:
    """One instance of the fleet.

    Attributes:
        provider, account: where it is rented (account None: the provider's default account).
        instance: the adapter's record (id, GPU and count, status, billing, price per
            instance-hour in its currency, utilization, stopped price; see
            :class:`~costctl_providers.base.Instance`).
        uptime_s: seconds since the provider last started it (None: unknown).
        provider_spend: price per hour × uptime, in the instance's currency (None: unknown).
        ledger_spend: this ledger's charges of the instance, per currency (empty: none).
        guard: :class:`Guard`.
        stopped_s: seconds since the provider stopped it, for a stopped instance whose stop
            time the provider gives (None otherwise).
        stopped_spend: stopped price per hour × ``stopped_s`` (None unless both are known).
        duplicate: the account's listing gave this id more than once (its status may conflict:
            the patrol does not act on it).
    """

    provider: str
    account: str | None
    instance: Instance
    uptime_s: Decimal | None
    provider_spend: Money | None
    ledger_spend: Mapping[str, Decimal]
    guard: Guard
    stopped_s: Decimal | None = None
    stopped_spend: Money | None = None
    duplicate: bool = False

    @property
    def price(self) -> Money | None:
        """The price per instance-hour with its currency (None: the provider did not say)."""
        inst = self.instance
        return Money(inst.price_per_hour, inst.currency) if inst.price_per_hour is not None else None

    @property
    def stopped_price(self) -> Money | None:
        """What the instance costs per hour while stopped, with its currency (None: unknown)."""
        inst = self.instance
        return Money(inst.stopped_price_per_hour, inst.currency) if inst.stopped_price_per_hour is not None else None


@dataclass(frozen=True)
class FleetReport:
    """The fleet at one moment.

    Attributes:
        now: aware UTC; when it was read.
        guard_lag: the lag the guard was judged with.
        accounts: every account asked, in order, with its outcome.
        rows: one per instance of the accounts that were read, in account order, then in the
            order the provider listed them.
        ledger_error: one line when the ledger could not be read (every guard is then
            UNKNOWN and no ledger spend is shown), else None.
    """

    now: datetime
    guard_lag: timedelta
    accounts: tuple[AccountRead, ...]
    rows: tuple[FleetRow, ...]
    ledger_error: str | None = None

    @property
    def failed(self) -> tuple[AccountRead, ...]:
        """The accounts that could not be read."""
        return tuple(a for a in self.accounts if not a.ok)

    @property
    def all_failed(self) -> bool:
        """True when accounts were asked and none could be read."""
        return bool(self.accounts) and len(self.failed) == len(self.accounts)


#: Statuses whose GPU the provider bills: uptime runs until now (:meth:`~costctl_providers.base.Instance.running_seconds`).
BILLED = frozenset({Status.STARTING, Status.RUNNING, Status.STOPPING})


def _session_times(provider: str) -> bool:
    """Whether ``provider``'s adapter says a stopped instance's ``started_at`` .. ``stopped_at``
    is its last session (:attr:`~costctl_providers.base.Provider.stopped_session_times`)."""
    from costctl_providers.registry import provider_class

    try:
        return bool(getattr(provider_class(provider), "stopped_session_times", False))
    except Exception:  # noqa: BLE001 - an unknown adapter says nothing
        return False


def _seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def row_of(read: AccountRead, inst: Instance, record: InstanceRecord | None, *, now: datetime, lag: timedelta,
           ledger_readable: bool = True) -> FleetRow:
    """The :class:`FleetRow` of ``inst`` (listed by ``read``'s account) with the ledger's
    ``record`` of it (None: never recorded), at ``now`` (aware) under guard lag ``lag``;
    ``ledger_readable`` False: the guard is UNKNOWN and the ledger spend empty."""
    now = ensure_utc(now)
    uptime = inst.running_seconds(now)
    if inst.status not in BILLED and not _session_times(read.provider):
        uptime = None  # the provider does not say its start and stop times bound one session
    spend = Money(cost_of(inst.price_per_hour, uptime), inst.currency) \
        if uptime is not None and inst.price_per_hour is not None else None
    stopped_s = stopped_spend = None
    if inst.status is Status.STOPPED and inst.stopped_at is not None:
        stopped_s = max(Decimal(0), _seconds(now - ensure_utc(inst.stopped_at)))
        if inst.stopped_price_per_hour is not None:
            stopped_spend = Money(cost_of(inst.stopped_price_per_hour, stopped_s), inst.currency)
    if ledger_readable:
        guard = guard_of(record, now=now, lag=lag)
        ledger_spend: Mapping[str, Decimal] = dict(record.spend) if record is not None else {}
    else:
        guard, ledger_spend = Guard(GuardState.UNKNOWN), {}
    return FleetRow(read.provider, read.account, inst, uptime, spend, ledger_spend, guard, stopped_s, stopped_spend,
                    duplicate=inst.id in read.duplicates)


def build_report(reads: Iterable[AccountRead], records: Mapping[tuple[str, str], InstanceRecord], *,
                 now: datetime, guard_lag: timedelta, ledger_error: str | None = None) -> FleetReport:
    """The :class:`FleetReport` of ``reads`` (every account asked, in order) with the ledger's
    ``records`` (``{(provider, instance id): record}``, as
    :func:`~costctl.ledger.instance_view.instance_records` returns them) at ``now`` (aware).

    Raises:
        ValueError: ``guard_lag`` is not positive.
    """
    if guard_lag <= timedelta(0):
        raise ValueError(f"guard_lag must be positive, got {guard_lag}")
    accounts = tuple(reads)
    readable = ledger_error is None
    rows = tuple(row_of(read, inst, records.get((read.provider, inst.id)), now=now, lag=guard_lag,
                        ledger_readable=readable)
                 for read in accounts for inst in read.instances)
    return FleetReport(ensure_utc(now), guard_lag, accounts, rows, ledger_error)


__all__ = ["AccountRead", "FleetReport", "FleetRow", "Guard", "GuardState", "build_report", "guard_of", "guard_words", "row_of"]
