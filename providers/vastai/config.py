"""``[providers.vastai]``: the Vast.ai adapter's config table, validated by pydantic.

Example (costctl.toml)::

    [providers.vastai]
    base_url = "https://console.vast.ai/api/v0"   # tests point it at a fake
    timeout = 10          # seconds per HTTP call
    poll_interval = 5     # seconds between status reads after a stop
    stop_timeout = 300    # seconds to wait for actual_status "stopped"

The API key comes from ``VAST_API_KEY`` or the credentials file's ``[vastai] api_key``.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from costctl.errors import ConfigError


class VastAIConfig(BaseModel):
    """Validated ``[providers.vastai]`` table.

    Attributes:
        base_url: API root (default ``https://console.vast.ai/api/v0``).
        timeout: seconds per HTTP call; retries / backoff: for idempotent calls only
            (the n-th retry waits ``backoff × 2^(n-1)`` s unless ``Retry-After`` says otherwise).
        poll_interval: seconds between status reads while waiting after stop/start.
        stop_timeout: seconds to wait for the instance to report ``stopped``.
        offer_limit: offers asked for per search (1..1000).
        verified_only: search only verified machines.
        credentials_file: a credentials TOML file (mode 0600) instead of the data dir's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://console.vast.ai/api/v0"
    timeout: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(default=3, ge=0, le=10)
    backoff: float = Field(default=0.5, ge=0, le=60)
    poll_interval: float = Field(default=5.0, gt=0, le=600)
    stop_timeout: float = Field(default=300.0, gt=0, le=86400)
    offer_limit: int = Field(default=64, ge=1, le=1000)
    verified_only: bool = True
    credentials_file: str | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


def load_config(table: Mapping[str, Any] | None) -> VastAIConfig:
    """Validate the ``[providers.vastai]`` table.

    Raises:
        ConfigError: one line naming the key, the value and what is allowed.
    """
    try:
        return VastAIConfig(**dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(table)"
    if first["type"] == "extra_forbidden":
        return f"[providers.vastai] unknown key '{key}'"
    value = repr(first.get("input"))
    value = value if len(value) <= 60 else value[:57] + "..."
    return f"[providers.vastai] {key} = {value}: {str(first['msg']).removeprefix('Value error, ')}"
