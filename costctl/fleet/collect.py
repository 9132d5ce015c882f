"""Reading the fleet: every configured provider account, concurrently, and the ledger.

Which accounts: for each configured provider (``[instance] provider``, then each
``[providers.<name>]`` table; :func:`costctl.cloud.configured_providers`), its default account
and each named account (``[providers.<name>.accounts.<account>]``). The default account is
left out when the provider has named accounts and no credential of its own, as ``costctl
instances`` does; otherwise an account that cannot be read — a bad table, a missing or
rejected credential, HTTP 500, a timeout, an answer that is no instance list, even an adapter's
own bug — is an :class:`~costctl.fleet.model.AccountRead` with its one-line error, never left
out. Accounts are read at the same time (at most :data:`MAX_WORKERS` at once), each with its
adapter's own timeout and retry rule (``timeout``, ``retries``, ``retry_deadline`` of its table).

The ledger (``database_url``, else the data dir's SQLite file) is read once, for the listed
instances only (:func:`~costctl.ledger.instance_view.instance_records`). A default ledger that
does not exist yet holds nothing: every instance is unwatched. A ledger that cannot be read (a
configured one that is missing, a server that does not answer) is one line in the report, and
every guard is then unknown.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ..clock import Clock, RealClock
from ..errors import CostctlError
from ..i18n import _
from ..redaction import Redactor, share_with_adapters
from .model import AccountRead, FleetReport, build_report

if TYPE_CHECKING:
    from costctl_providers.base import Instance

    from ..config import Settings
    from ..ledger.instance_view import InstanceRecord

log = logging.getLogger("costctl.fleet")

#: Accounts read at the same time at most (each read is one or a few HTTP calls that wait).
MAX_WORKERS = 8


def fleet_accounts(settings: Settings) -> list[tuple[str, str | None, str | None]]:
    """``(provider, account, error)`` for every account to ask, in order: per configured
    provider its default account (``account`` None) and each named account; ``error`` is the
    one line of a provider whose ``accounts`` table is malformed (asked as its default
    account, which then reads as that error)."""
    from ..cloud import account_names, configured_providers

    found: list[tuple[str, str | None, str | None]] = []
    for name in configured_providers(settings):
        try:
            named = account_names(settings, name)
        except CostctlError as exc:
            found.append((name, None, exc.message))
            continue
        found.extend([(name, None, None), *((name, acct, None) for acct in named)])
    return found


def _internal(exc: BaseException) -> str:
    return _("internal error in the adapter: {error}: {detail}").format(error=type(exc).__name__, detail=exc)


def read_account(settings: Settings, provider: str, account: str | None, *, clock: Clock,
                 has_named: bool = False) -> AccountRead | None:
    """What ``provider``'s ``account`` (None: its default account) answers to a listing.

    Returns:
        its :class:`AccountRead` (instances, or the error line), or None for a default account
        left out (``has_named``: the provider has named accounts, and this one no credential).
        Never raises for the account's own failure: that is the read's ``error``.
    """
    from ..cloud import DEFAULT_ACCOUNT, checked_instance, open_provider

    notes: list[str] = []
    try:
        prov = open_provider(settings, provider, clock=clock, account=account or DEFAULT_ACCOUNT)
        if account is None and has_named and not prov.has_credential():
            return None
        listed = prov.list_instances()
        instances, skipped, duplicates = unique_instances(checked_instance(inst, notes.append) for inst in listed)
    except CostctlError as exc:
        return AccountRead(provider, account, error=exc.message)
    except Exception as exc:  # noqa: BLE001 - one account's bug must not hide the others
        log.debug("reading %s account %s failed", provider, account, exc_info=True)
        return AccountRead(provider, account, error=_internal(exc))
    if skipped:
        notes.append(_("{provider}: {count} listed item(s) without an instance id skipped: nothing could address "
                       "them").format(provider=provider, count=skipped))
    if duplicates:
        notes.append(_("{provider}: instance id(s) {ids} listed more than once; each shown once and flagged, and the "
                       "patrol does not act on them").format(provider=provider, ids=", ".join(duplicates)))
    return AccountRead(provider, account, instances, notes=tuple(notes), skipped=skipped, duplicates=duplicates)


def unique_instances(listed: Iterable[Instance]) -> tuple[tuple[Instance, ...], int, tuple[str, ...]]:
    """A listing made addressable: ``(instances, skipped, duplicate ids)`` — items without an id
    (empty text) are skipped and counted; an id listed again keeps its first item and is named
    once in the duplicate ids, in listing order."""
    kept: dict[str, Instance] = {}
    skipped = 0
    duplicates: list[str] = []
    for inst in listed:
        if not inst.id or not inst.id.strip():
            skipped += 1
        elif inst.id in kept:
            if inst.id not in duplicates:
                duplicates.append(inst.id)
        else:
            kept[inst.id] = inst
    return tuple(kept.values()), skipped, tuple(duplicates)


def read_accounts(settings: Settings, *, clock: Clock | None = None, workers: int = MAX_WORKERS,
                  limit_s: float | None = None) -> list[AccountRead]:
    """Every account of :func:`fleet_accounts`, read concurrently (``workers`` at once), in
    that order; default accounts left out (see :func:`read_account`) are not in the list.

    ``limit_s`` (seconds; None: none): an account that has not answered by then is an
    :class:`AccountRead` whose error says so, and the call returns without waiting for it (its
    thread ends with the adapter's own timeout): ``costctl serve`` never waits on a provider
    that hangs. With a limit every account has its own thread (``workers`` is not applied)."""
    clock = clock or RealClock()
    asked = fleet_accounts(settings)
    named = {provider for provider, account, _error in asked if account is not None}

    def one(item: tuple[str, str | None, str | None]) -> AccountRead | None:
        provider, account, error = item
        if error is not None:
            return AccountRead(provider, account, error=error)
        return read_account(settings, provider, account, clock=clock, has_named=provider in named)

    if not asked:
        return []
    if limit_s is None:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(asked))), thread_name_prefix="fleet") as pool:
            results = list(pool.map(one, asked))
        return [r for r in results if r is not None]
    pool = ThreadPoolExecutor(max_workers=len(asked), thread_name_prefix="fleet")
    try:
        futures = [pool.submit(one, item) for item in asked]
        wait(futures, timeout=limit_s)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    late = _("no answer within {seconds:g} seconds (the limit of one fleet read)")
    timed = [f.result() if f.done() else AccountRead(provider, account, error=late.format(seconds=limit_s))
             for f, (provider, account, _error) in zip(futures, asked)]
    return [r for r in timed if r is not None]


def read_ledger(settings: Settings, keys: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], InstanceRecord], str | None]:
    """The ledger's records of ``keys`` (``(provider, instance id)``) and None, or ``({}, the
    error line)`` when the ledger cannot be read. The default ledger not created yet is empty,
    not an error; a configured ``database_url`` whose SQLite file is missing is."""
    from ..ledger.engine import MissingLedgerError, configured_url
    from ..ledger.instance_view import instance_records
    from ..ledger.reader import LedgerReader

    try:
        reader = LedgerReader.open(configured_url(settings.database_url, settings.data_dir))
    except MissingLedgerError as exc:
        if settings.database_url is None:
            return {}, None
        return {}, exc.message
    except CostctlError as exc:
        return {}, exc.message
    try:
        with reader, reader.connection() as conn:
            return instance_records(conn, keys), None
    except CostctlError as exc:
        return {}, exc.message


def masked(read: AccountRead, redactor: Redactor) -> AccountRead:
    """``read`` with its error and notes passed through ``redactor``: a provider's error may echo a
    credential, its own account's or another's (a shared proxy, a copied key), whole or cut."""
    if read.error is None and not read.notes:
        return read
    return replace(read, error=redactor.optional(read.error), notes=tuple(redactor.text(n) for n in read.notes))


def collect(settings: Settings, *, clock: Clock | None = None,
            accounts: Callable[..., list[AccountRead]] = read_accounts, **kwargs: Any) -> FleetReport:
    """The :class:`~costctl.fleet.model.FleetReport` of the configured fleet now: the accounts
    (:func:`read_accounts`), the ledger (:func:`read_ledger`), the time from ``clock`` (default
    real time) once both are read, and the guard lag of ``[fleet] guard_lag`` (default from
    ``[watch] sample_interval`` and ``[ledger] sync_interval``: :meth:`costctl.config.FleetConfig.lag`).
    Every error and note in it is masked (:func:`masked`) with every secret the settings and the
    environment know (:func:`costctl.redaction.known_secrets`: each account of each provider) and
    the secret shapes of :mod:`costctl.redaction`: what ``costctl fleet``, ``costctl patrol`` and
    ``costctl serve`` print of it never shows a credential."""
    clock = clock or RealClock()
    redactor = Redactor.of(settings)
    share_with_adapters(redactor.secrets)  # masked before an adapter cuts a provider's answer short
    reads = [masked(read, redactor) for read in accounts(settings, clock=clock, **kwargs)]
    keys = {(read.provider, inst.id) for read in reads for inst in read.instances}
    records, ledger_error = read_ledger(settings, keys) if keys else ({}, None)
    ledger_error = redactor.optional(ledger_error)
    lag = settings.fleet.lag(settings.watch.sample_interval, settings.ledger.sync_interval)
    return build_report(reads, records, now=clock.now(), guard_lag=lag, ledger_error=ledger_error)


__all__ = ["MAX_WORKERS", "collect", "fleet_accounts", "masked", "read_account", "read_accounts", "read_ledger",
           "unique_instances"]
