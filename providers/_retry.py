"""The one retry rule of every provider call, built on tenacity.

A call is *attempted* by a function that raises a typed provider error
(:mod:`costctl_providers.errors`). :func:`call_with_retries` repeats it while all of these hold:

* the call is declared idempotent (``idempotent=True``: reads, stop/power-off, setting an
  intended state). A create is never repeated: one attempt, and a timeout says it may have
  happened;
* the failure is transient (:func:`~costctl_providers.errors.is_transient`): HTTP 429, 500,
  502, 503, 504, a timeout, a refused or reset connection, or a failure inside a 200 that the
  adapter classified as transient (RunPod ``errors[]`` about internal errors, timeouts or rate
  limits; an AutoDL envelope code such as ``InternalError``). 400/401/403/404, other 4xx,
  malformed answers and permanent in-200 errors are raised at once;
* fewer than :attr:`RetryPolicy.attempts` attempts were made, and the time spent (attempts and
  waits) plus the next wait stays within :attr:`RetryPolicy.deadline_s`.

Between attempts it waits ``backoff × 2^(n-1)`` seconds plus a random jitter of up to
``backoff`` (capped at ``backoff_max``); a ``Retry-After`` the provider sent (429/503) replaces
that wait, capped at ``retry_after_max`` seconds, and the log line and the final message say
when the cap cut it short. The sleep function is injected (tests pass a recorder and never
sleep). The error that leaves the loop has ``attempts`` set and its message says how many::

    autodl: power_off failed after 3 attempts: server error 500 on POST /api/v1/dev/instance/pro/power_off
    runpod: podStop failed after 1 attempt (not retried: podStop is not idempotent): ...
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from costctl.errors import ProviderError
from costctl.i18n import _, ngettext, text_map

from .errors import is_transient

log = logging.getLogger("costctl_providers.http")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long an idempotent call is repeated.

    Attributes:
        attempts: total sends of an idempotent call, the first included (``retries + 1``), >= 1.
        deadline_s: seconds the attempts and the waits between them may take together; a retry
            whose wait would pass it is not made.
        backoff_s: first wait in seconds (then doubled each retry), also the jitter's range.
        backoff_max_s: cap of one backoff wait, seconds.
        retry_after_max_s: cap of a provider's ``Retry-After``, seconds.
    """

    attempts: int = 4
    deadline_s: float = 120.0
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0

    @classmethod
    def from_retries(cls, retries: int, **kw: float) -> "RetryPolicy":
        """The policy for a config's ``retries`` (repeats after the first attempt)."""
        return cls(attempts=max(0, int(retries)) + 1, **kw)  # type: ignore[arg-type]


def retry_after_note(requested: float | None, cap: float) -> str:
    """``"Retry-After 7s"`` or ``"Retry-After 3600s, capped at 60s"`` ('' when none was sent)."""
    if requested is None:
        return ""
    if requested > cap:
        return f"Retry-After {requested:g}s, capped at {cap:g}s"
    return f"Retry-After {requested:g}s"


class _Wait(wait_base):
    """Retry-After (capped) when the failure carries one, else exponential backoff + jitter."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.backoff = wait_exponential(multiplier=policy.backoff_s, max=policy.backoff_max_s) + wait_random(
            0, policy.backoff_s
        )

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        after = getattr(exc, "retry_after_s", None)
        if after is not None:
            return max(0.0, min(float(after), self.policy.retry_after_max_s))
        if self.policy.backoff_s <= 0:
            return 0.0
        return min(float(self.backoff(retry_state)), self.policy.backoff_max_s)


class _Deadline(stop_base):
    """Stop when the time spent (real time, or the injected waits when those are larger, as with
    a recording sleep) plus the next wait would pass the deadline."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.hit = False

    def __call__(self, retry_state: RetryCallState) -> bool:
        spent = max(retry_state.seconds_since_start or 0.0, retry_state.idle_for)
        if spent + (retry_state.upcoming_sleep or 0.0) > self.seconds:
            self.hit = True
        return self.hit


def call_with_retries(
    attempt: Callable[[], T],
    *,
    provider: str,
    operation: str,
    idempotent: bool,
    policy: RetryPolicy,
    sleep: Callable[[float], None] | None = None,
    redact: Callable[[str], str] = str,
) -> T:
    """Run ``attempt()`` under the retry rule (module docstring) and return its result.

    Args:
        attempt: sends the call once; raises a provider error (its message
            ``"<provider>: <detail>"``) on failure.
        provider: the adapter's name, the prefix of the final message.
        operation: what the call is, for messages (``"power_off"``, ``"GET /instances/"``).
        idempotent: whether repeating it is harmless; False means exactly one attempt.
        policy: attempts, deadline, backoff and the ``Retry-After`` cap.
        sleep: replaces :func:`time.sleep` between attempts.
        redact: applied to every message and log line.

    Raises:
        the last attempt's provider error (same class and attributes), with ``attempts`` set and
        the message ``"<provider>: <operation> failed after N attempts: <detail>"``.
    """
    count = 0
    deadline = _Deadline(policy.deadline_s)
    attempts = policy.attempts if idempotent else 1

    def counted() -> T:
        nonlocal count
        count += 1
        return attempt()

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        note = retry_after_note(getattr(exc, "retry_after_s", None), policy.retry_after_max_s)
        log.info("%s", redact(
            f"{provider}: {operation}: {_detail(exc, provider)}; attempt {state.attempt_number} of {attempts}, "
            f"retrying in {state.upcoming_sleep:.2f}s" + (f" ({note})" if note else "")
        ))

    retrying = Retrying(
        stop=stop_after_attempt(attempts) | deadline,
        wait=_Wait(policy),
        retry=retry_if_exception(is_transient),
        sleep=sleep or time.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(counted)
    except ProviderError as exc:
        failure = _final(exc, provider=provider, operation=operation, count=count, idempotent=idempotent,
                         deadline=deadline, policy=policy, redact=redact)
    # Raised outside the handler: no chained exception (whose text could hold a URL) is kept.
    raise failure


def _detail(exc: BaseException | None, provider: str, operation: str = "") -> str:
    """The error's text without the ``"<provider>: "`` prefix, and without a repeat of
    ``operation`` at its start or as its ``" on <operation>"`` tail."""
    message = getattr(exc, "message", None) if exc is not None else _("unknown failure")
    text = message if isinstance(message, str) else str(exc)
    prefix = f"{provider}: "

    def trim(text: str) -> str:
        if text.startswith(prefix):
            text = text[len(prefix):]
        if operation:
            if text.startswith(operation + " ") or text.startswith(operation + ": "):
                text = text[len(operation):].lstrip(": ")
            text = text.replace(f" on {operation}", "", 1) if text.endswith(f" on {operation}") else text
        return text

    return text_map(trim, text)  # the English of a translated message survives the trim


def _detail_with_note(detail: str, requested: float | None, cap: float) -> str:
    """``detail`` with the provider's ``Retry-After`` (and its cap) in the current language, one
    whole pattern per case."""
    if requested is None:
        return detail
    if requested > cap:
        return _("{detail} (Retry-After {requested:g}s, capped at {cap:g}s)").format(
            detail=detail, requested=requested, cap=cap)
    return _("{detail} (Retry-After {requested:g}s)").format(detail=detail, requested=requested)


def _final(
    exc: ProviderError, *, provider: str, operation: str, count: int, idempotent: bool,
    deadline: _Deadline, policy: RetryPolicy, redact: Callable[[str], str],
) -> ProviderError:
    """The error that leaves the loop: ``exc`` with the message "<provider>: <operation> failed
    after N attempts[ (why not more)]: <detail>" in the current language (one sentence per case,
    the count's plural by :func:`~costctl.i18n.ngettext`)."""
    detail = _detail_with_note(_detail(exc, provider, operation), getattr(exc, "retry_after_s", None),
                               policy.retry_after_max_s)
    shape = dict(provider=provider, operation=operation, count=count, detail=detail, deadline=policy.deadline_s)
    if is_transient(exc) and not idempotent:
        said = ngettext("{provider}: {operation} failed after {count} attempt (not retried: {operation} is not "
                        "idempotent): {detail}",
                        "{provider}: {operation} failed after {count} attempts (not retried: {operation} is not "
                        "idempotent): {detail}", count)
    elif is_transient(exc) and deadline.hit:
        said = ngettext("{provider}: {operation} failed after {count} attempt (retry deadline {deadline:g}s "
                        "reached): {detail}",
                        "{provider}: {operation} failed after {count} attempts (retry deadline {deadline:g}s "
                        "reached): {detail}", count)
    else:
        said = ngettext("{provider}: {operation} failed after {count} attempt: {detail}",
                        "{provider}: {operation} failed after {count} attempts: {detail}", count)
    message = text_map(redact, said.format(**shape))
    out = copy.copy(exc)
    out.args = (message,)
    out.message = message
    out.attempts = count  # type: ignore[attr-defined]
    out.__traceback__ = None
    return out
