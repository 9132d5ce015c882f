"""The public errors of the provider adapters: what callers catch, by kind.

Every class is a :class:`costctl.errors.ProviderError` (itself a ``CostctlError``: one line,
non-zero exit), so a caller that only wants "the provider failed" catches that one.

============================  ==========================================================
:class:`AuthError`            401 / 403 — names the credential's source, never its value
:class:`NotFoundError`        404, or the provider says the object does not exist
:class:`RateLimitedError`     429 after the retries
:class:`ProviderUnavailableError`  5xx, connection error or timeout after the retries
:class:`ProviderResponseError`     malformed JSON, another 4xx, the provider's error envelope
:class:`StatusWaitError`      a wait for a status gave up (failure status or timeout)
:class:`CapabilityError`      the adapter cannot do this at all (see its ``capabilities``)
============================  ==========================================================

(``costctl_providers._http`` re-exports the first six for older imports.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costctl.errors import ProviderError

if TYPE_CHECKING:
    from .base import Instance


class AuthError(ProviderError):
    """The provider rejected the credential (HTTP 401/403). The message names the credential's
    source (an environment variable or the credentials file), never its value."""


class RateLimitedError(ProviderError):
    """HTTP 429 persisted after the retries (or on a call that may not be retried).

    Attributes:
        retry_after_s: the provider's ``Retry-After`` in seconds, when it sent one.
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ProviderUnavailableError(ProviderError):
    """5xx, connection failure or timeout after the retries."""


class NotFoundError(ProviderError):
    """HTTP 404, or the provider says the object (e.g. an instance id) does not exist."""


class ProviderResponseError(ProviderError):
    """The provider answered, but not usably: malformed JSON, an unexpected 4xx, or the
    provider's own error envelope (e.g. AutoDL ``{"code": "...", "msg": "..."}``).

    Attributes:
        status: the HTTP status, when there was a response.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class StatusWaitError(ProviderError):
    """:func:`wait_for_status` gave up: the instance reached a failure status or the timeout passed.

    Attributes:
        last: the last :class:`Instance` seen (None if none could be read).
    """

    def __init__(self, message: str, *, last: Instance | None = None) -> None:
        super().__init__(message)
        self.last = last


class CapabilityError(ProviderError):
    """The adapter does not support the operation at all (its capability is absent).

    Attributes:
        capability: the capability's name (``"create"``, ``"stop"``...).
        reason: why the adapter lacks it, as its :class:`~costctl_providers.capabilities.Capabilities`
            says.
    """

    def __init__(self, message: str, *, capability: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.capability = capability
        self.reason = reason


__all__ = [
    "AuthError", "CapabilityError", "NotFoundError", "ProviderError", "ProviderResponseError",
    "ProviderUnavailableError", "RateLimitedError", "StatusWaitError",
]
