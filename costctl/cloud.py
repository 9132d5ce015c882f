"""Binding costctl's settings to a provider adapter (through the registry, never by name).

A provider's table ``[providers.<name>]`` may hold named accounts::

    [providers.<name>]                 # the default account (and settings every account shares)
    base_url = "..."

    [providers.<name>.accounts.team]   # another account of the same provider
    credential_env = "TEAM_KEY"        # its credential's variable(s); or the credentials file's
                                       # [<name>.accounts.team] section
    timeout = 30                       # any key of the provider table, for this account only

``[instance] account`` picks the account a watch uses (default: the provider's default account).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from costctl_providers.base import Account, Provider
from costctl_providers.registry import get_provider, provider_class

from .clock import Clock
from .config import Settings
from .errors import ConfigError
from .i18n import _
from .paths import data_dir

#: The key of a provider table that holds its named accounts.
ACCOUNTS_KEY = "accounts"
#: Pass as ``account`` to :func:`open_provider` for the provider's default account explicitly.
DEFAULT_ACCOUNT = ""
#: The key of an account table naming its credential's environment variable(s).
CREDENTIAL_ENV_KEY = "credential_env"


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
    env = table.pop(CREDENTIAL_ENV_KEY, ())
    if isinstance(env, str):
        env = (env,)
    if not isinstance(env, (list, tuple)) or not all(isinstance(v, str) and v for v in env):
        raise ConfigError(_("[providers.{name}.accounts.{account}] credential_env must be a variable name "
                            "or a list of them").format(name=name, account=account))
    return Account(account, tuple(env)), table


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
