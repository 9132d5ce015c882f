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

from costctl_providers._config import HttpProviderConfig, HttpUrl


class RunPodConfig(HttpProviderConfig):
    """Validated ``[providers.runpod]`` table: the common keys of
    :class:`~costctl_providers._config.HttpProviderConfig` (``stop_timeout``: seconds to wait for
    the pod to report EXITED with no runtime) plus:

    Attributes:
        base_url: API host (default ``https://api.runpod.io``); requests go to ``/graphql``.
    """

    base_url: HttpUrl = "https://api.runpod.io"
