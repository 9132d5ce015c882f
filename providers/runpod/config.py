"""``[providers.runpod]``: the RunPod adapter's config table, validated by pydantic.

Example (costctl.toml)::

    [providers.runpod]
    base_url = "https://api.runpod.io"   # GraphQL endpoint is <base_url>/graphql
    timeout = 10
    poll_interval = 5
    stop_timeout = 300

The API key comes from ``RUNPOD_API_KEY`` or the credentials file's ``[runpod] api_key``; it is
sent as ``Authorization: Bearer <key>`` (GraphQL Spec 1.1.0), never in the URL.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from costctl.errors import ConfigError


class RunPodConfig(BaseModel):
    """Validated ``[providers.runpod]`` table.

    Attributes:
        base_url: API host (default ``https://api.runpod.io``); requests go to ``/graphql``.
        timeout: seconds per HTTP call; retries / backoff: idempotent calls only (the n-th
            retry waits ``backoff × 2^(n-1)`` s unless ``Retry-After`` says otherwise).
        poll_interval: seconds between status reads after stop/start.
        stop_timeout: seconds to wait for the pod to report EXITED with no runtime.
        credentials_file: a credentials TOML file (mode 0600) instead of the data dir's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://api.runpod.io"
    timeout: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(default=3, ge=0, le=10)
    backoff: float = Field(default=0.5, ge=0, le=60)
    poll_interval: float = Field(default=5.0, gt=0, le=600)
    stop_timeout: float = Field(default=300.0, gt=0, le=86400)
    credentials_file: str | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


def load_config(table: Mapping[str, Any] | None) -> RunPodConfig:
    """Validate the ``[providers.runpod]`` table.

    Raises:
        ConfigError: one line naming the key, the value and what is allowed.
    """
    try:
        return RunPodConfig(**dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(table)"
    if first["type"] == "extra_forbidden":
        return f"[providers.runpod] unknown key '{key}'"
    value = repr(first.get("input"))
    value = value if len(value) <= 60 else value[:57] + "..."
    return f"[providers.runpod] {key} = {value}: {str(first['msg']).removeprefix('Value error, ')}"
