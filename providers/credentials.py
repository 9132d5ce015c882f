"""Provider credentials: the provider's usual environment variable, or a credentials file.

Lookup for one provider, first hit wins:

1. the environment variables the adapter declares (its ``credential_env``, e.g.
   ``VAST_API_KEY``, ``RUNPOD_API_KEY``, ``AUTODL_TOKEN`` — the names the providers' own CLIs and
   docs use), first set wins; there is no central table, so a new adapter's variable works as
   soon as the adapter declares it;
2. the credentials file: ``credentials_file`` in the provider's config table, else
   ``<data dir>/credentials.toml``. It is TOML with one table per provider::

       [vastai]
       api_key = "..."

       [autodl]
       token = "..."
       console_token = "..."   # opt-in web console JWT (see the autodl adapter)

   A named account (``[providers.vastai.accounts.team]`` in costctl.toml) reads its own
   section, ``[vastai.accounts.team]``, and its own variable (``credential_env`` in the
   account's table); it never falls back to the default account's credential.

   The file must not be readable or writable by group or others (``chmod 600``); otherwise it
   is refused with a :class:`~costctl.errors.ConfigError` naming the chmod to run.

A :class:`Credential` never shows its value in ``repr``/``str``; its :attr:`Credential.name` says
where it came from, for messages such as ``VAST_API_KEY was rejected (401)``.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costctl.errors import ConfigError
from costctl.i18n import _, language

#: Config-table key naming a credentials file (each adapter must accept it in its table).
CREDENTIALS_FILE_KEY = "credentials_file"
#: Default file name in costctl's data dir.
CREDENTIALS_FILE_NAME = "credentials.toml"

#: Keys accepted in a provider's table of the credentials file, in order of preference.
DEFAULT_FILE_KEYS: tuple[str, ...] = ("api_key", "token")


@dataclass(frozen=True)
class Credential:
    """A secret and where it came from.

    Attributes:
        provider: adapter name.
        name: the source, safe to print: ``"VAST_API_KEY"`` or
            ``"credentials file /path/credentials.toml [vastai] api_key"``.
        secret: the value. Never printed: excluded from ``repr``.
    """

    provider: str
    name: str
    secret: str = field(repr=False)

    def __str__(self) -> str:
        return self.name


def check_file_mode(path: Path) -> None:
    """Refuse a credentials file that group or others can read or write.

    Raises:
        ConfigError: with the ``chmod 600`` command to run.
    """
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(_("credentials file {path}: cannot read: {reason}").format(path=path, reason=exc.strerror)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            _("credentials file {path} is accessible by group or others (mode {mode:04o}); "
              "it must be 0600: run `chmod 600 {path}`").format(path=path, mode=stat.S_IMODE(mode))
        )


def credentials_path(config: Mapping[str, Any], data_dir: Path) -> tuple[Path, bool]:
    """The credentials file to read and whether it was named explicitly in ``config``."""
    configured = config.get(CREDENTIALS_FILE_KEY)
    if configured:
        return Path(str(configured)).expanduser(), True
    return Path(data_dir) / CREDENTIALS_FILE_NAME, False


def read_credentials_file(path: Path) -> dict[str, Any]:
    """Parse the credentials file after checking its mode.

    Raises:
        ConfigError: bad mode, unreadable, or not valid TOML (the message never quotes the file).
    """
    check_file_mode(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError:
        # The decoder's message can quote the offending line, which may hold a token.
        raise ConfigError(_("credentials file {path} is not valid TOML").format(path=path)) from None
    except OSError as exc:
        raise ConfigError(_("credentials file {path}: cannot read: {reason}").format(path=path, reason=exc.strerror)) from None


def _declared_env(provider: str) -> tuple[str, ...]:
    """The adapter's own ``credential_env`` (empty for an unknown provider)."""
    from .registry import credential_env  # the registry imports adapters; import on use

    return credential_env(provider)


def load_credential(
    provider: str,
    config: Mapping[str, Any],
    *,
    data_dir: Path,
    env_var: str | None = None,
    keys: tuple[str, ...] = DEFAULT_FILE_KEYS,
    required: bool = True,
    env: Mapping[str, str] | None = None,
    env_vars: tuple[str, ...] | None = None,
    account: str | None = None,
) -> Credential | None:
    """Find ``provider``'s credential (for ``account``, when named).

    Args:
        provider: adapter name; also the table name in the credentials file.
        config: the provider's config table (may name ``credentials_file``).
        data_dir: costctl's data dir (default file location).
        env_var: one environment variable to read first (``""`` for none); overrides ``env_vars``.
        keys: keys accepted in the file's ``[provider]`` table, first present wins.
        required: raise when nothing is found (else return None).
        env: environment mapping (default ``os.environ``).
        env_vars: variables to read first, first set wins (default: the adapter's declared
            ``credential_env`` for the default account, none for a named account).
        account: a named account: its file section is ``[<provider>.accounts.<account>]``.

    Returns:
        the :class:`Credential`, or None when not ``required`` and none is configured.

    Raises:
        ConfigError: nothing found (when required; the message says how to provide it), an
            explicitly named file missing, or a file with a bad mode / bad TOML / wrong shape.
    """
    env = os.environ if env is None else env
    if env_var is not None:
        names: tuple[str, ...] = (env_var,) if env_var else ()
    elif env_vars is not None:
        names = tuple(env_vars)
    else:
        names = _declared_env(provider) if account is None else ()
    for var in names:
        value = env.get(var, "").strip()
        if value:
            return Credential(provider, var, value)
    section = provider if account is None else f"{provider}.accounts.{account}"
    path, explicit = credentials_path(config, data_dir)
    if path.exists():
        data = read_credentials_file(path)
        table: Any = data
        for part in [provider] + ([] if account is None else ["accounts", account]):
            table = table.get(part) if isinstance(table, dict) else None
            if table is None:
                break
        if table is not None and not isinstance(table, dict):
            raise ConfigError(_("credentials file {path}: [{section}] must be a table").format(path=path, section=section))
        for key in keys:
            value = (table or {}).get(key)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(_("credentials file {path}: [{section}] {key} must be a non-empty string").format(
                    path=path, section=section, key=key))
            return Credential(provider, _("credentials file {path} [{section}] {key}").format(
                path=path, section=section, key=key), value.strip())
    elif explicit:
        raise ConfigError(_("credentials file {path} (credentials_file of [providers.{provider}]) does not exist")
                          .format(path=path, provider=provider))
    if not required:
        return None
    shape = {"provider": provider, "account": account, "section": section, "key": keys[0], "path": path}
    if names:
        from babel.lists import format_list  # "A or B" / "A或B" by the language's rules (CLDR)

        shape["variables"] = format_list(list(names), style="or", locale=language())
        if account is None:
            missing = _("no credential for {provider}: set {variables} or add [{section}] {key} = \"...\" "
                        "to {path} (chmod 600)")
        else:
            missing = _("no credential for {provider} account {account!r}: set {variables} or add [{section}] "
                        "{key} = \"...\" to {path} (chmod 600)")
    elif account is None:
        missing = _("no credential for {provider}: add [{section}] {key} = \"...\" to {path} (chmod 600)")
    else:
        missing = _("no credential for {provider} account {account!r}: add [{section}] {key} = \"...\" "
                    "to {path} (chmod 600)")
    raise ConfigError(missing.format(**shape))
