"""Binding costctl's settings to a provider adapter (through the registry, never by name).

A provider's table ``[providers.<name>]`` may hold named accounts::

    [providers.<name>]                 # the default account (and settings every account shares)
    base_url = "..."

    [providers.<name>.accounts.team]   # another account of the same provider
    credential_env = "TEAM_KEY"        # its credential's variable(s); or the credentials file's
                                       # [<name>.accounts.team] section
    timeout = 30                       # any key of the provider table, for this account only

``[instance] account`` picks the account a watch uses (default: the provider's default account).

Prices a provider reports are checked here, at the boundary (:func:`checked_price`): a negative,
absurd (over 10^9 per hour) or non-finite price is refused with a message naming the provider,
the instance and the price, so that the caller uses the configured fallback, shows nothing, or
refuses; such a price is never charged or stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from costctl_providers.base import Account, Instance, Offer, Provider
from costctl_providers.registry import get_provider, provider_class

from .clock import Clock
from .config import Settings
from .errors import ConfigError
from .i18n import _
from .money import AMOUNT_ALLOWED, AmountError, bounded_amount
from .paths import data_dir

#: The key of a provider table that holds its named accounts.
ACCOUNTS_KEY = "accounts"
#: Pass as ``account`` to :func:`open_provider` for the provider's default account explicitly.
DEFAULT_ACCOUNT = ""
#: The key of an account table naming its credential's environment variable(s).
CREDENTIAL_ENV_KEY = "credential_env"


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=255)]
"""An environment variable's name (POSIX: letters, digits and ``_``, not starting with a digit)."""


class AccountKeys(BaseModel):
    """The key of an account table (``[providers.<name>.accounts.<account>]``) that costctl
    reads itself: ``credential_env``, a variable name or a list of them (first set wins; none:
    only the credentials file's ``[<name>.accounts.<account>]`` section). The account's other
    keys are the provider table's, for this account, and its adapter checks them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    credential_env: tuple[EnvName, ...] = ()

    @field_validator("credential_env", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value


def account_tables(settings: Settings, name: str) -> dict[str, dict[str, Any]]:
    """``[providers.<name>.accounts.*]``: account name -> its table, in file order.

    Raises:
        ConfigError: ``accounts`` (or one account) is not a table.
    """
    raw = dict(settings.providers.get(name, {})).get(ACCOUNTS_KEY, {})
    if not isinstance(raw, Mapping):
        raise ConfigError(_("[providers.{name}] accounts must be a table of [providers.{name}.accounts.<name>] tables")
                          .format(name=name))
    tables: dict[str, dict[str, Any]] = {}
    for acct, table in raw.items():
        if not isinstance(table, Mapping):
            raise ConfigError(_("[providers.{name}.accounts] {account} must be a table").format(name=name, account=acct))
        tables[str(acct)] = dict(table)
    return tables


def account_names(settings: Settings, name: str) -> list[str]:
    """The named accounts of provider ``name`` (empty when it has only its default account)."""
    return list(account_tables(settings, name))


def _account(settings: Settings, name: str, account: str | None) -> tuple[Account | None, dict[str, Any]]:
    if account is None:
        return None, {}
    tables = account_tables(settings, name)
    if account not in tables:
        if tables:
            raise ConfigError(_("provider {name} has no account {account!r} (no [providers.{name}.accounts.{account}] "
                                "table; configured: {known})").format(name=name, account=account, known=", ".join(tables)))
        raise ConfigError(_("provider {name} has no account {account!r} (no [providers.{name}.accounts.{account}] "
                            "table; configured: none)").format(name=name, account=account))
    table = dict(tables[account])
    try:
        keys = AccountKeys.model_validate({CREDENTIAL_ENV_KEY: table.pop(CREDENTIAL_ENV_KEY, ())})
    except ValidationError:
        raise ConfigError(_("[providers.{name}.accounts.{account}] credential_env must be a variable name "
                            "or a list of them").format(name=name, account=account)) from None
    return Account(account, keys.credential_env), table


def configured_providers(settings: Settings) -> list[str]:
    """``[instance] provider`` first, then each ``[providers.*]`` table, without repeats: the
    providers ``costctl instances`` and ``costctl fleet`` go across."""
    names = [settings.instance.provider]
    for name in settings.providers:
        if name not in names:
            names.append(name)
    return names


def _instance_seed(settings: Settings) -> dict[str, Any]:
    inst = settings.instance
    seed = {key: getattr(inst, key) for key in inst.model_fields_set}
    seed["currency"] = inst.currency
    return seed


def provider_config(settings: Settings, name: str, account: str | None = None) -> dict[str, Any]:
    """The config table for provider ``name`` (and ``account``): ``[providers.<name>]`` without
    its ``accounts``, overlaid by the account's table; when ``name`` is ``[instance] provider``,
    the adapter's :meth:`~costctl_providers.base.Provider.config_from_instance` seeds keys the
    table does not set (the simulated provider takes its GPU and price from ``[instance]``).

    Raises:
        ConfigError: unknown provider or account.
    """
    table = dict(settings.providers.get(name, {}))
    table.pop(ACCOUNTS_KEY, None)
    table.update(_account(settings, name, account)[1])
    if name == settings.instance.provider:
        seeds = getattr(provider_class(name), "config_from_instance", None)
        for key, value in (seeds(_instance_seed(settings)) if callable(seeds) else {}).items():
            table.setdefault(key, value)
    return table


def default_account(settings: Settings, name: str) -> str | None:
    """The account used when none is asked for: ``[instance] account`` for the configured
    provider, else the provider's default account (None)."""
    return settings.instance.account if name == settings.instance.provider else None


def open_provider(
    settings: Settings, name: str | None = None, *, clock: Clock | None = None, account: str | None = None,
) -> Provider:
    """Construct provider ``name`` (default ``[instance] provider``) for ``account`` (default
    :func:`default_account`; :data:`DEFAULT_ACCOUNT` for the provider's default account) from
    the settings.

    Raises:
        ConfigError: unknown provider or account, or a bad ``[providers.<name>]`` table.
    """
    name = name or settings.instance.provider
    account = account if account is not None else default_account(settings, name)
    account = account or None  # "" (DEFAULT_ACCOUNT): the default account, whatever [instance] says
    acct = _account(settings, name, account)[0]
    table = provider_config(settings, name, account)
    return get_provider(name, table, data_dir=data_dir(settings.data_dir), clock=clock, account=acct)


class PriceRefused(AmountError):
    """A price a provider reported that costctl refuses (negative, over 10^9 per hour, not a
    finite number); its message names the provider, the instance or offer, and the price."""


def checked_price(provider: str, price: object, currency: str, *, instance: str | None = None,
                  offer: str | None = None) -> Decimal | None:
    """A price per instance-hour as ``provider`` reported it for ``instance`` (or for
    ``offer``), checked at the boundary: the amount (kept to 10 decimals, see
    :func:`costctl.money.bounded_amount`), or None when it reported no price.

    Raises:
        PriceRefused: the price is negative, over 10^9 (``currency`` per hour) or not a finite
            number: ``"vastai reported a price of -0.5 USD per hour for instance 312; expected
            an amount of money from 0 to 1000000000, like 2.5 or "2.50""``.
    """
    if price is None:
        return None
    try:
        return bounded_amount(price)
    except AmountError:
        shown = str(price) if len(str(price)) <= 40 else str(price)[:37] + "..."
        if offer is not None:
            message = (f"{provider} reported a price of {shown} {currency} per hour for offer {offer}; "
                       f"expected {AMOUNT_ALLOWED}")
        else:
            message = (f"{provider} reported a price of {shown} {currency} per hour for instance {instance}; "
                       f"expected {AMOUNT_ALLOWED}")
        raise PriceRefused(message, price) from None


def checked_instance(inst: Instance, say: Callable[[str], None]) -> Instance:
    """``inst`` as a listing shows it: a price (or spot bid) :func:`checked_price` refuses is
    said (``say``, one line) and dropped (None: shown as unknown), never used; so is each value
    the adapter dropped at its boundary (``inst.refused``: a price of ``"NaN"``, a utilization of
    250)."""
    for note in inst.refused:
        say(f"costctl: {note}; refused, shown as unknown")
    changes: dict[str, Decimal | None] = {}
    for name in ("price_per_hour", "bid_per_hour"):
        try:
            changes[name] = checked_price(inst.provider, getattr(inst, name), inst.currency, instance=inst.id)
        except PriceRefused as exc:
            say(f"costctl: {exc.message}; refused, shown as unknown")
            changes[name] = None
    return dataclasses.replace(inst, **changes)


def checked_offers(offers: Iterable[Offer], say: Callable[[str], None]) -> list[Offer]:
    """The ``offers`` whose price :func:`checked_price` accepts and that have at least one GPU;
    each one left out is said (``say``, one line)."""
    kept: list[Offer] = []
    for offer in offers:
        try:
            price = checked_price(offer.provider, offer.price_per_hour, offer.currency, offer=offer.id)
        except PriceRefused as exc:
            say(f"costctl: {exc.message}; the offer is left out")
            continue
        if price is None or offer.gpu_count < 1:
            say(f"costctl: {offer.provider} reported offer {offer.id} with {offer.gpu_count} GPUs; the offer is left out")
            continue
        kept.append(dataclasses.replace(offer, price_per_hour=price))
    return kept
