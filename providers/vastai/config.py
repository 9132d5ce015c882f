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

from pydantic import Field

from costctl_providers._config import HttpProviderConfig, HttpUrl


class VastAIConfig(HttpProviderConfig):
    """Validated ``[providers.vastai]`` table: the common keys of
    :class:`~costctl_providers._config.HttpProviderConfig` (``stop_timeout``: seconds to wait for
    the instance to report ``stopped``) plus:

    Attributes:
        base_url: API root (default ``https://console.vast.ai/api/v0``).
        offer_limit: offers asked for per search (1..1000).
        verified_only: search only verified machines.
    """

    base_url: HttpUrl = "https://console.vast.ai/api/v0"
    offer_limit: int = Field(default=64, ge=1, le=1000)
    verified_only: bool = True
