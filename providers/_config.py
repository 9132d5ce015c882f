"""What every HTTP adapter's ``[providers.<name>]`` table has in common, and how it is loaded.

Each adapter subclasses :class:`HttpProviderConfig`, sets its own ``base_url`` default and adds
its own keys; :func:`load_table` validates a table and turns pydantic's error into one line
(``[providers.vastai] unknown key 'api_key'``, ``[providers.runpod] timeout = -1: Input should
be greater than 0``).
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from costctl.config_types import value_range
from costctl.errors import ConfigError
from costctl.validation import one_line


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return value.rstrip("/")


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""A string that must start with ``http://`` or ``https://``; a trailing ``/`` is dropped."""


class HttpProviderConfig(BaseModel):
    """The keys every HTTP adapter's table accepts (unknown keys are refused; frozen).

    Attributes:
        base_url: API root (each adapter sets its default); http(s) only, no trailing ``/``.
        timeout: seconds per HTTP call (connect and read), 0 < timeout <= 300.
        retries: retries of idempotent calls only, never of a create (0..10): a call is sent at
            most ``retries + 1`` times, on transient failures only (see
            :mod:`costctl_providers._retry`).
        backoff: seconds; the n-th retry waits ``backoff × 2^(n-1)`` plus up to ``backoff`` of
            random jitter, unless the provider's ``Retry-After`` says otherwise (0..60).
        retry_deadline: seconds one call's attempts and waits may take together (0 < x <= 3600;
            default 120).
        retry_after_max: the cap, in seconds, on a provider's ``Retry-After`` (0..600, default
            60); a longer one is cut to it, and messages say so.
        poll_interval: seconds between status reads while waiting after a stop or start
            (0 < poll_interval <= 600).
        stop_timeout: seconds to wait for the provider to report the instance stopped
            (0 < stop_timeout <= 86400).
        credentials_file: a credentials TOML file (mode 0600) instead of the data dir's
            ``credentials.toml`` (see :mod:`costctl_providers.credentials`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: HttpUrl
    timeout: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(default=3, ge=0, le=10)
    backoff: float = Field(default=0.5, ge=0, le=60)
    retry_deadline: float = Field(default=120.0, gt=0, le=3600)
    retry_after_max: float = Field(default=60.0, ge=0, le=600)
    poll_interval: float = Field(default=5.0, gt=0, le=600)
    stop_timeout: float = Field(default=300.0, gt=0, le=86400)
    credentials_file: str | None = None


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_table(model: type[ConfigT], provider: str, table: Mapping[str, Any] | None) -> ConfigT:
    """Validate ``provider``'s ``[providers.<provider>]`` table (None = empty) as ``model``.

    Raises:
        ConfigError: one line naming the table, the key, the value and what is allowed (a
            number's whole range), e.g. ``[providers.autodl] unknown key 'base_ulr'``,
            ``[providers.vastai] retries = 11: expected a number from 0 to 10``.
    """
    try:
        return model(**dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(one_line(exc, table=f"providers.{provider}", count_others=False,
                                   ranges=lambda loc: _key_range(model, loc))) from None


def _key_range(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The documented range of ``model``'s key at ``loc`` (``"0 to 10"``; ``""``: none)."""
    field = model.model_fields.get(str(loc[0])) if len(loc) == 1 else None
    return value_range(field) if field is not None else ""
