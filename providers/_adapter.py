"""The base class of the HTTP adapters (AutoDL, Vast.ai, RunPod): what they construct alike.

:class:`HttpProvider` validates the config table (``config_model``), keeps the data dir, clock,
environment and sleep function, reads the API credential lazily (so that constructing an adapter
never needs a key), builds the :class:`~costctl_providers._http.HttpClient` on first use, and
waits for a status after a stop. An adapter supplies, as class attributes:

==================  =================================================================
``name``            adapter name (the ``[providers.<name>]`` table, the credentials file table)
``config_model``    its :class:`~costctl_providers._config.HttpProviderConfig` subclass
``credential_keys`` keys read from the credentials file's ``[<name>]`` table, first wins
``auth_scheme``     ``"Bearer"`` sends ``Authorization: Bearer <key>``; ``""`` sends the bare key
``extra_headers``   headers sent on every call (e.g. ``Content-Type: application/json``)
==================  =================================================================

and, as every adapter, ``credential_env`` (``("VAST_API_KEY",)``), ``capabilities`` and ``storage``
(see :class:`~costctl_providers.base.Provider`). Constructed with ``account=`` (a
:class:`~costctl_providers.base.Account`), the credential is the named account's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from costctl.clock import Clock, RealClock

from ._config import HttpProviderConfig, load_table
from ._http import HttpClient, wait_for_status
from .base import Account, Instance, Provider, Status
from .credentials import DEFAULT_FILE_KEYS, Credential, load_credential


def clock_sleep(clock: Clock) -> Callable[[float], None]:
    """How to wait ``seconds`` on ``clock``: its ``advance`` when it has one (a
    :class:`~costctl.clock.SimClock`, so tests never sleep), else :func:`time.sleep`."""
    advance = getattr(clock, "advance", None)
    return advance if callable(advance) else time.sleep


class HttpProvider(Provider):
    """A provider reached over HTTP. Constructed as ``Adapter(config, data_dir=..., clock=...)``.

    Args:
        config: the ``[providers.<name>]`` table, validated as :attr:`config_model`.
        data_dir: costctl's data dir (default credentials file location).
        clock: time source for waits (default real time; a clock with ``advance`` is advanced
            instead of sleeping).
        env: environment mapping for the credential (default ``os.environ``).
        sleep: replaces ``time.sleep`` between retries and status polls (default
            :func:`clock_sleep` of the clock).
        account: a named account (its credential variables and file section); None for the
            provider's default account.

    Raises:
        ConfigError: a bad or unknown key in ``config`` (one line, see
            :func:`~costctl_providers._config.load_table`).
    """

    config_model: ClassVar[type[HttpProviderConfig]]
    credential_keys: ClassVar[tuple[str, ...]] = DEFAULT_FILE_KEYS
    auth_scheme: ClassVar[str] = "Bearer"
    extra_headers: ClassVar[Mapping[str, str]] = {}
    supports_accounts: ClassVar[bool] = True

    config: HttpProviderConfig

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        data_dir: Path,
        clock: Clock | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] | None = None,
        account: Account | None = None,
    ) -> None:
        self._table = dict(config or {})
        self.config = load_table(self.config_model, self.name, self._table)
        self.data_dir = Path(data_dir)
        self.clock = clock or RealClock()
        self._env = env
        self._sleep = sleep or clock_sleep(self.clock)
        self._cred: Credential | None = None
        self._cred_checked = False
        self._client: HttpClient | None = None
        self._account = account
        self.account = account.name if account else None

    # -- credential and client ------------------------------------------------------------

    def find_credential(
        self, keys: tuple[str, ...], *, env_var: str | None = None, required: bool = True,
    ) -> Credential | None:
        """:func:`~costctl_providers.credentials.load_credential` for this adapter (its table,
        data dir, environment and account; its declared ``credential_env`` unless ``env_var``
        names another). Raises ConfigError when ``required`` and none is found."""
        acct = self._account
        env_vars = acct.credential_env if acct else self.credential_env
        return load_credential(
            self.name, self._table, data_dir=self.data_dir, env_var=env_var, keys=keys,
            required=required, env=self._env, env_vars=tuple(env_vars),
            account=acct.name if acct else None,
        )

    def has_credential(self) -> bool:
        """Whether the API credential is configured (reads it without raising for its absence)."""
        return self.credential(required=False) is not None

    def credential(self, *, required: bool = True) -> Credential | None:
        """The API credential, read once (``credential_keys``); None when not ``required`` and
        none is configured.

        Raises:
            ConfigError: ``required`` and none is configured (says how to provide one).
        """
        if self._cred is None and (required or not self._cred_checked):
            self._cred = self.find_credential(self.credential_keys, required=required)
            self._cred_checked = True
        return self._cred

    def new_client(self, base_url: str, credential: Credential) -> HttpClient:
        """An :class:`HttpClient` for ``base_url`` sending ``credential`` (``auth_scheme``) with
        the config's timeout and retry rule (``retries``, ``backoff``, ``retry_deadline``,
        ``retry_after_max``)."""
        secret = f"{self.auth_scheme} {credential.secret}" if self.auth_scheme else credential.secret
        return HttpClient(
            base_url,
            auth_header=("Authorization", secret),
            provider=self.name,
            credential_name=credential.name,
            timeout=self.config.timeout,
            retries=self.config.retries,
            backoff=self.config.backoff,
            deadline=self.config.retry_deadline,
            max_retry_after=self.config.retry_after_max,
            sleep=self._sleep,
            headers=dict(self.extra_headers),
        )

    @property
    def http(self) -> HttpClient:
        """The client for ``base_url`` (reads the credential on first use; ConfigError when
        there is none)."""
        if self._client is None:
            cred = self.credential()
            assert cred is not None
            self._client = self.new_client(self.config.base_url, cred)
        return self._client

    # -- waiting ------------------------------------------------------------------------------

    def _poll(self, instance_id: str) -> Instance:
        """The status read used while waiting (default :meth:`get_instance`)."""
        return self.get_instance(instance_id)

    def _wait(self, instance_id: str, want: set[Status]) -> Instance:
        """Poll every ``poll_interval`` s until the status is in ``want``.

        Raises:
            StatusWaitError: a failure status, or ``stop_timeout`` s passed.
        """
        return wait_for_status(
            lambda: self._poll(instance_id), want,
            timeout_s=self.config.stop_timeout, poll_s=self.config.poll_interval,
            clock=self.clock, sleep=self._sleep,
        )
