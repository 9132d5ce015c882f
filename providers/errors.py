"""The public errors of the provider adapters: what callers catch, by kind.

Every class is a :class:`costctl.errors.ProviderError` (itself a ``CostctlError``: one line,
non-zero exit), so a caller that only wants "the provider failed" catches that one.

============================  ==========================================================
:class:`AuthError`            401 / 403 — names the credential's source, never its value
:class:`NotFoundError`        404, or the provider says the object does not exist
:class:`RateLimitedError`     429 (or a rate-limit error inside a 200) after the retries
:class:`ProviderUnavailableError`  5xx, connection error, timeout, or a transient error
                              inside a 200 (RunPod ``errors[]``, an AutoDL envelope code),
                              after the retries
:class:`ProviderResponseError`     malformed JSON, another 4xx, the provider's error envelope
:class:`StatusWaitError`      a wait for a status gave up (failure status or timeout)
:class:`CapabilityError`      the adapter cannot do this at all (see its ``capabilities``)
============================  ==========================================================

Transient or permanent: an error is *transient* (worth repeating an idempotent call) when its
``transient`` attribute is true — every :class:`RateLimitedError`, and a
:class:`ProviderUnavailableError` unless built with ``transient=False`` (e.g. HTTP 501).
:func:`is_transient` is the one test the retry loop (:mod:`costctl_providers._retry`) applies.
Errors that leave the retry loop carry ``attempts`` (how many times the call was sent) and their
message says it (``autodl: power_off failed after 3 attempts: server error 500 on POST ...``).

(``costctl_providers._http`` re-exports the first six for older imports.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costctl.errors import ProviderError

if TYPE_CHECKING:
    from .base import Instance


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure worth repeating an idempotent call for (its ``transient``
    attribute; False for anything that is not a provider error)."""
    return bool(getattr(exc, "transient", False))


class AuthError(ProviderError):
    """The provider rejected the credential (HTTP 401/403). The message names the credential's
    source (an environment variable or the credentials file), never its value."""


class RateLimitedError(ProviderError):
    """HTTP 429 (or a rate-limit error inside a 200) persisted after the retries, or came on a
    call that may not be retried. Always transient.

    Attributes:
        retry_after_s: the provider's ``Retry-After`` in seconds, when it sent one.
        attempts: how many times the call was sent (set by the retry loop).
    """

    transient = True

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.attempts: int | None = None


class ProviderUnavailableError(ProviderError):
    """5xx, connection failure, timeout, or a transient failure inside a 200, after the retries.

    Attributes:
        transient: whether repeating the call may help (False for e.g. HTTP 501).
        retry_after_s: a ``Retry-After`` the provider sent with it (503), in seconds.
        attempts: how many times the call was sent (set by the retry loop).
    """

    def __init__(self, message: str, *, transient: bool = True, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after_s = retry_after_s
        self.attempts: int | None = None


class NotFoundError(ProviderError):
    """HTTP 404, or the provider says the object (e.g. an instance id) does not exist."""


class ProviderResponseError(ProviderError):
    """The provider answered, but not usably: malformed JSON, an unexpected 4xx, or the
    provider's own error envelope (e.g. AutoDL ``{"code": "...", "msg": "..."}``).

    Attributes:
        status: the HTTP status, when there was a response.
        attempts: how many times the call was sent (set by the retry loop).
    """

    transient = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.attempts: int | None = None


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
    "ProviderUnavailableError", "RateLimitedError", "StatusWaitError", "is_transient",
]
