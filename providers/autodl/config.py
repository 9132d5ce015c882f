"""``[providers.autodl]``: the AutoDL adapter's config table, validated by pydantic.

Example (costctl.toml)::

    [providers.autodl]
    base_url = "https://api.autodl.com"   # official developer API (tests point it at a fake)
    console_api = false                   # opt in to the unofficial web-console API
    timeout = 10                          # seconds per HTTP call
    poll_interval = 5                     # seconds between status reads after a stop
    stop_timeout = 300                    # seconds to wait for "shutdown" after power_off

The developer token comes from ``AUTODL_TOKEN`` or the credentials file (never this table);
with ``console_api = true`` the console JWT comes from ``AUTODL_CONSOLE_TOKEN`` or the
credentials file's ``console_token``.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from costctl.errors import ConfigError


class AutoDLConfig(BaseModel):
    """Validated ``[providers.autodl]`` table.

    Attributes:
        base_url: developer API root (default ``https://api.autodl.com``).
        console_url: web-console API root (default ``https://www.autodl.com``).
        console_api: use the console API for ordinary (non-Pro) instances; unofficial, opt-in.
        timeout: seconds per HTTP call (connect and read).
        retries: retries of idempotent calls (never of create).
        backoff: seconds; the n-th retry waits ``backoff × 2^(n-1)`` (a ``Retry-After`` wins).
        poll_interval: seconds between status reads while waiting after a stop or start.
        stop_timeout: seconds to wait for the provider to report ``shutdown``.
        page_size: instances per list page (1..100).
        shutdown_command: the command that powers off the AutoDL container this process runs
            in (used by ``stop_instance`` on its own instance when no token is configured).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://api.autodl.com"
    console_url: str = "https://www.autodl.com"
    console_api: bool = False
    timeout: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(default=3, ge=0, le=10)
    backoff: float = Field(default=0.5, ge=0, le=60)
    poll_interval: float = Field(default=5.0, gt=0, le=600)
    stop_timeout: float = Field(default=300.0, gt=0, le=86400)
    page_size: int = Field(default=100, ge=1, le=100)
    shutdown_command: list[str] = Field(default_factory=lambda: ["shutdown"], min_length=1)
    credentials_file: str | None = None

    @field_validator("base_url", "console_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


def load_config(table: Mapping[str, Any] | None) -> AutoDLConfig:
    """Validate the ``[providers.autodl]`` table.

    Raises:
        ConfigError: one line naming the key, the value and what is allowed.
    """
    try:
        return AutoDLConfig(**dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(one_line("autodl", exc)) from None


def one_line(provider: str, exc: ValidationError) -> str:
    """The first pydantic error of a provider table as one user-facing line."""
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(table)"
    if first["type"] == "extra_forbidden":
        return f"[providers.{provider}] unknown key '{key}'"
    msg = str(first["msg"]).removeprefix("Value error, ")
    value = repr(first.get("input"))
    if len(value) > 60:
        value = value[:57] + "..."
    return f"[providers.{provider}] {key} = {value}: {msg}"
