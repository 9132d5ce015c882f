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

from pydantic import Field

from costctl_providers._config import HttpProviderConfig, HttpUrl


class AutoDLConfig(HttpProviderConfig):
    """Validated ``[providers.autodl]`` table: the common keys of
    :class:`~costctl_providers._config.HttpProviderConfig` (``stop_timeout``: seconds to wait for
    the provider to report ``shutdown``) plus:

    Attributes:
        base_url: developer API root (default ``https://api.autodl.com``).
        console_url: web-console API root (default ``https://www.autodl.com``).
        console_api: use the console API for ordinary (non-Pro) instances; unofficial, opt-in.
        page_size: instances per list page (1..100).
        shutdown_command: the command that powers off the AutoDL container this process runs
            in (used by ``stop_instance`` on its own instance when no token is configured).
    """

    base_url: HttpUrl = "https://api.autodl.com"
    console_url: HttpUrl = "https://www.autodl.com"
    console_api: bool = False
    page_size: int = Field(default=100, ge=1, le=100)
    shutdown_command: list[str] = Field(default_factory=lambda: ["shutdown"], min_length=1)
