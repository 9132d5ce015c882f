"""The one HTTP layer every adapter uses: timeouts, retries, typed errors, redaction.

:class:`HttpClient` sends each call once per attempt through a :class:`requests.Session` (no
urllib3 retries of its own) and repeats it under the one retry rule of
:mod:`costctl_providers._retry` (tenacity): ONLY calls the caller marks ``idempotent=True`` are
repeated — reads, and POST/PUT calls that are idempotent by the provider's semantics (a status
query, a stop or power-off, setting an intended state). A create is never retried: if it times
out, the caller is told that it may have happened. Adapters whose provider answers failures
inside a 200 (RunPod GraphQL ``errors[]``, AutoDL's envelope) pass an ``unwrap`` function to
:meth:`HttpClient.json` that raises a transient or permanent typed error, so those failures
go through the same loop.

Every failure becomes a :class:`costctl.errors.ProviderError` subclass with a one-line,
user-facing message that says how many attempts were made:

============================  ==========================================================
:class:`AuthError`            401 / 403 — names the credential (``VAST_API_KEY was rejected
                              (401)``), never prints it; not retried
:class:`NotFoundError`        404; not retried
:class:`RateLimitedError`     429 after the retries (``Retry-After`` honoured up to a cap)
:class:`ProviderUnavailableError`  500/502/503/504, connection error, reset or timeout after
                              the retries; another 5xx (501, 505...) is not retried
:class:`ProviderResponseError`     malformed JSON, any other 4xx, the provider's own error
                              envelope (adapters raise it via :meth:`HttpClient.response_error`)
============================  ==========================================================

Every message and every log line passes through a :class:`Redactor` that removes the
client's secrets and any ``Authorization`` header value. Exceptions are raised ``from None``
so no chained requests/urllib3 exception (whose text can hold a URL) reaches a traceback.

:func:`wait_for_status` polls an instance after a stop until the provider reports the wanted
status (or a failure status), with an injectable clock and sleep.
"""

from __future__ import annotations

import json as _json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urljoin

# requests (and urllib3) are imported where a call is made, not with this module: a watch on
# the sim provider, or one that makes no provider call, does not carry them (several MB).
if TYPE_CHECKING:
    import requests

from costctl.clock import Clock, RealClock
from costctl.errors import ProviderError
from costctl.i18n import Text, _, text_map

from ._retry import RetryPolicy, call_with_retries
from .base import Instance, Status

log = logging.getLogger("costctl_providers.http")

T = TypeVar("T")

#: HTTP statuses that are transient (retried on idempotent calls only): rate limited, internal
#: server error, bad gateway, unavailable, gateway timeout. Other 5xx (501 Not Implemented, 505)
#: are permanent.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

_REDACTED = "***"
_AUTH_RE = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+")


# ----------------------------------------------------------------------------- errors

# The public error classes live in costctl_providers.errors; re-exported here for old imports.
from .errors import (  # noqa: E402,F401
    AuthError, NotFoundError, ProviderResponseError, ProviderUnavailableError, RateLimitedError, StatusWaitError,
    is_transient,
)


# ----------------------------------------------------------------------------- redaction


class Redactor:
    """Removes secrets from text: each registered secret, and any ``Authorization`` value.

    Secrets shorter than 4 characters are ignored (replacing them would mangle ordinary
    text and they are not credentials). Thread-safe.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        for s in secrets:
            self.add(s)

    def add(self, secret: str | None) -> None:
        """Register one more secret (e.g. a token obtained at run time)."""
        if secret and len(secret) >= 4:
            with self._lock:
                self._secrets.add(secret)

    def __call__(self, text: object) -> str:
        """``text`` as a string with every secret replaced by ``***`` (a translated message
        keeps its English, redacted too: :func:`costctl.i18n.text_map`)."""
        if isinstance(text, Text):
            return text_map(self, text)
        out = str(text)
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
        for s in secrets:
            out = out.replace(s, _REDACTED)
        return _AUTH_RE.sub(lambda m: m.group(1) + (m.group(2) or "") + _REDACTED, out)


class RedactingFilter(logging.Filter):
    """A logging filter that passes each record's final message through a :class:`Redactor`."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken log call must not break the caller
            return True
        record.msg = self.redactor(message)
        record.args = None
        return True


#: Process-wide redactor: every HttpClient registers its secrets here too, and it filters
#: our own logger and urllib3's (which logs request lines, e.g. ``GET /path?query``).
GLOBAL_REDACTOR = Redactor()
_GLOBAL_FILTER = RedactingFilter(GLOBAL_REDACTOR)
for _name in ("costctl_providers", "costctl_providers.http", "urllib3.connectionpool", "urllib3.util.retry"):
    logging.getLogger(_name).addFilter(_GLOBAL_FILTER)


# ----------------------------------------------------------------------------- retries


def _requests() -> Any:
    """The requests module (imported on first use; an HttpClient imported it already)."""
    import requests

    return requests


def _retry_after_seconds(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        from urllib3.util.retry import Retry

        return float(Retry().parse_retry_after(value))
    except Exception:  # noqa: BLE001 - a malformed header is just absent
        return None


# ----------------------------------------------------------------------------- client


class HttpClient:
    """HTTP client for one provider API.

    Args:
        base_url: API root, e.g. ``https://console.vast.ai/api/v0``; paths are appended to it.
        auth_header: ``(name, value)`` sent on every call, e.g. ``("Authorization", "Bearer K")``
            or AutoDL's ``("Authorization", token)``; its value is registered as a secret.
        secrets: further strings that must never appear in messages or logs.
        timeout: seconds, for connect and for read, on every attempt.
        retries: how many times an idempotent call is repeated after its first attempt
            (0 = never); see :mod:`costctl_providers._retry`.
        backoff: seconds; the n-th retry waits ``backoff × 2^(n-1)`` plus up to ``backoff`` of
            jitter, capped at ``backoff_max``; a ``Retry-After`` header (429/503) replaces the
            wait, capped at ``max_retry_after`` seconds.
        deadline: seconds all attempts of one call and the waits between them may take.
        provider: adapter name, the prefix of every error message.
        credential_name: where the credential came from (``"VAST_API_KEY"``, ``"credentials file
            ~/.local/share/costctl/credentials.toml [vastai] api_key"``), named by :class:`AuthError`.
        sleep: replaces ``time.sleep`` between retries (tests record delays instead of sleeping).
        trust_env: let requests read proxy settings from the environment (metadata-service
            clients pass False).
        headers: extra headers sent on every call.
    """

    def __init__(
        self,
        base_url: str,
        *,
        auth_header: tuple[str, str] | None = None,
        secrets: Iterable[str] = (),
        timeout: float = 10,
        retries: int = 3,
        backoff: float = 0.5,
        provider: str,
        credential_name: str | None = None,
        max_retry_after: float = 60.0,
        backoff_max: float = 30.0,
        deadline: float = 120.0,
        sleep: Callable[[float], None] | None = None,
        trust_env: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.provider = provider
        self.credential_name = credential_name
        self.timeout = timeout
        self.retries = retries
        self.policy = RetryPolicy(
            attempts=max(0, retries) + 1, deadline_s=deadline, backoff_s=backoff,
            backoff_max_s=backoff_max, retry_after_max_s=max_retry_after,
        )
        self._sleep = sleep or time.sleep
        self.redact = Redactor(secrets)
        for s in secrets:
            GLOBAL_REDACTOR.add(s)
        self._headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "costctl"}
        self._headers.update(headers or {})
        if auth_header is not None:
            self._headers[auth_header[0]] = auth_header[1]
            self.add_secret(auth_header[1])
            if auth_header[1].lower().startswith("bearer "):
                self.add_secret(auth_header[1][7:].strip())
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        self._session = requests.Session()
        self._session.trust_env = trust_env
        # One send per attempt: the retry rule is ours (tenacity), not urllib3's.
        adapter = HTTPAdapter(max_retries=Retry(total=0, connect=0, read=0, status=0, other=0, redirect=0,
                                                raise_on_status=False, raise_on_redirect=False))
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def add_secret(self, secret: str | None) -> None:
        """Register a secret obtained later (e.g. a session token) for redaction."""
        self.redact.add(secret)
        GLOBAL_REDACTOR.add(secret)

    def close(self) -> None:
        """Close the underlying session."""
        self._session.close()

    def __enter__(self) -> "HttpClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        """The absolute URL for ``path`` (relative to ``base_url``; a leading ``/`` is allowed)."""
        return urljoin(self.base_url, path.lstrip("/"))

    def response_error(self, what: str, *, status: int | None = None) -> ProviderResponseError:
        """A permanent :class:`ProviderResponseError` ``"<provider>: <what>"`` with secrets redacted.

        Adapters use it for their provider's error envelope:
        ``raise client.response_error(f"{msg} (code {code})")``.
        """
        return ProviderResponseError(self.redact(f"{self.provider}: {what}"), status=status)

    def transient_error(self, what: str, *, rate_limited: bool = False) -> ProviderError:
        """A transient error ``"<provider>: <what>"`` (redacted) for a failure inside a 200 that
        is worth repeating: :class:`RateLimitedError` when ``rate_limited``, else
        :class:`ProviderUnavailableError`. Raised from an ``unwrap`` function, it is retried on
        idempotent calls like a 503."""
        text = self.redact(f"{self.provider}: {what}")
        return RateLimitedError(text) if rate_limited else ProviderUnavailableError(text)

    # -- calls ----------------------------------------------------------------------------

    def retrying(self, operation: str, attempt: Callable[[], T], *, idempotent: bool) -> T:
        """Run ``attempt()`` (one send, raising typed errors) under the retry rule of
        :func:`~costctl_providers._retry.call_with_retries` with this client's policy and sleep.

        Raises:
            the last attempt's error, its message ``"<provider>: <operation> failed after N
            attempts: ..."`` and its ``attempts`` set.
        """
        return call_with_retries(
            attempt, provider=self.provider, operation=operation, idempotent=idempotent,
            policy=self.policy, sleep=self._sleep, redact=self.redact,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool,
        ok_statuses: Iterable[int] = (),
        timeout: float | None = None,
        operation: str | None = None,
    ) -> requests.Response:
        """Send one call (retried when ``idempotent`` and the failure is transient) and return
        the response (2xx, or a status in ``ok_statuses``).

        Args:
            method: HTTP method.
            path: relative to ``base_url``.
            json / params / data / headers: as in requests.
            idempotent: True lets the call be retried (see module docstring). Required, so every
                call site decides.
            ok_statuses: non-2xx statuses returned instead of raised (e.g. ``{404}`` for
                "no notice").
            timeout: override the client's timeout (seconds) for this call.
            operation: the name used in messages (default ``"<METHOD> <path>"``).

        Raises:
            AuthError, NotFoundError, RateLimitedError, ProviderUnavailableError,
            ProviderResponseError: see the module docstring.
        """
        where = f"{method.upper()} {path}"
        return self.retrying(
            operation or where,
            lambda: self.send(method, path, json=json, params=params, data=data, headers=headers,
                              idempotent=idempotent, ok_statuses=ok_statuses, timeout=timeout),
            idempotent=idempotent,
        )

    def json(
        self,
        method: str,
        path: str,
        *,
        unwrap: Callable[[Any], Any] | None = None,
        operation: str | None = None,
        idempotent: bool,
        **kwargs: Any,
    ) -> Any:
        """Like :meth:`request`, returning the parsed JSON body (``unwrap(body)`` when given).

        Args:
            unwrap: checks the parsed body of a 2xx answer and returns what the caller wants;
                it raises a typed error for a failure inside the 200 — transient ones
                (:meth:`transient_error`) are retried like a 503, permanent ones
                (:meth:`response_error`, AuthError, NotFoundError) are not.
            operation: the name used in messages (default ``"<METHOD> <path>"``).

        Raises:
            ProviderResponseError: the body is not JSON (besides :meth:`request`'s errors).
        """
        where = f"{method.upper()} {path}"

        def attempt() -> Any:
            body = self.parse_json(self.send(method, path, idempotent=idempotent, **kwargs), where)
            return unwrap(body) if unwrap is not None else body

        return self.retrying(operation or where, attempt, idempotent=idempotent)

    def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool,
        ok_statuses: Iterable[int] = (),
        timeout: float | None = None,
    ) -> requests.Response:
        """One attempt, never repeated: the response (2xx or ``ok_statuses``) or a typed error
        (``transient`` set as the module docstring says). ``idempotent`` only shapes the message
        of a timeout (a non-idempotent call "may have been carried out")."""
        method = method.upper()
        merged = dict(self._headers)
        if headers:
            merged.update(headers)
        where = f"{method} {path}"
        started = time.monotonic()
        try:
            response = self._session.request(
                method,
                self.url(path),
                json=json,
                params=params,
                data=data,
                headers=merged,
                timeout=timeout if timeout is not None else self.timeout,
                allow_redirects=False,
            )
        except (_requests().Timeout, _requests().ConnectionError) as exc:
            raise self._unavailable(where, exc, idempotent, timeout) from None
        except _requests().RequestException as exc:
            raise ProviderUnavailableError(
                self.redact(_("{provider}: {where} failed: {error}").format(
                    provider=self.provider, where=where, error=type(exc).__name__)), transient=False,
            ) from None
        elapsed = time.monotonic() - started
        log.debug("%s", self.redact(f"{self.provider}: {where} -> {response.status_code} in {elapsed:.3f}s"))
        status = response.status_code
        if 200 <= status < 300 or status in set(ok_statuses):
            return response
        raise self._status_error(where, response)

    def parse_json(self, response: requests.Response, where: str = "response") -> Any:
        """Parse ``response``'s body as JSON or raise :class:`ProviderResponseError` (permanent)."""
        try:
            return _json.loads(response.content or b"")
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's limit
            snippet = self._snippet(response)
            raise ProviderResponseError(
                self.redact(_("{provider}: malformed JSON in the answer to {where}: {snippet!r}").format(
                    provider=self.provider, where=where, snippet=snippet)),
                status=response.status_code,
            ) from None

    # -- error construction ------------------------------------------------------------

    def _snippet(self, response: requests.Response, limit: int = 120) -> str:
        try:
            text = response.content.decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            text = ""
        # masked (this client's secrets, and every one registered process-wide: another account's
        # key a shared answer echoes) before it is cut: a secret the cut falls inside would
        # otherwise show in part
        text = GLOBAL_REDACTOR(self.redact(" ".join(text.split())))
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return text

    def _unavailable(
        self, where: str, exc: Exception, idempotent: bool, timeout: float | None,
    ) -> ProviderUnavailableError:
        text = str(exc).lower()
        timed_out = isinstance(exc, _requests().Timeout) or "timed out" in text or "timeout" in text
        seconds = timeout if timeout is not None else self.timeout
        # each sentence starts "<provider>: <where> ", which the retry's final message leaves out
        if timed_out and not idempotent:
            said = _("{provider}: {where} timed out after {seconds:g}s; the request may have been carried out "
                     "— check before repeating it")
        elif timed_out:
            said = _("{provider}: {where} timed out after {seconds:g}s")
        elif "reset" in text:
            said = _("{provider}: {where} connection reset")
        elif "aborted" in text or "remotedisconnected" in text or "closed" in text:
            said = _("{provider}: {where} connection closed without an answer")
        else:
            said = _("{provider}: {where} could not connect")
        return ProviderUnavailableError(self.redact(said.format(provider=self.provider, where=where, seconds=seconds)))

    def _status_error(self, where: str, response: requests.Response) -> ProviderError:
        status = response.status_code
        # "<provider>: " first and "<where>" at the start or as the " on <where>" tail of the rest:
        # the retry's final message leaves those out (costctl_providers._retry)
        shape = {"provider": self.provider, "where": where, "status": status,
                 "credential": self.credential_name}
        if status in (401, 403):
            if self.credential_name:
                said = _("{provider}: {credential} was rejected ({status}) on {where}")
            else:
                said = _("{provider}: the credential was rejected ({status}) on {where}")
            return AuthError(self.redact(said.format(**shape)))
        if status == 404:
            return NotFoundError(self.redact(_("{provider}: not found (404) on {where}").format(**shape)))
        after = _retry_after_seconds(response)
        if status == 429:
            return RateLimitedError(
                self.redact(_("{provider}: rate limited (429) on {where}").format(**shape)), retry_after_s=after,
            )
        if status >= 500:
            return ProviderUnavailableError(
                self.redact(_("{provider}: server error {status} on {where}").format(**shape)),
                transient=status in RETRY_STATUSES, retry_after_s=after,
            )
        snippet = self._snippet(response)
        return ProviderResponseError(
            self.redact(_("{provider}: {where} answered {status}: {snippet!r}").format(snippet=snippet, **shape)),
            status=status,
        )


# ----------------------------------------------------------------------------- polling

#: Statuses that mean "the provider could not do it" while waiting for a stop or start.
FAILURE_STATUSES = frozenset({Status.ERROR})


def wait_for_status(
    get: Callable[[], Instance],
    want: set[Status] | frozenset[Status],
    timeout_s: float = 300.0,
    poll_s: float = 5.0,
    *,
    fail: set[Status] | frozenset[Status] = FAILURE_STATUSES,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Instance:
    """Poll ``get()`` until the instance's status is in ``want``.

    Used after a stop ("poll until the provider reports it stopped, or says it could not").
    The first read happens at once; then one read every ``poll_s`` seconds.

    Args:
        get: reads the instance (e.g. ``lambda: provider.get_instance(iid)``, itself retried).
            A transient error (:func:`~costctl_providers.errors.is_transient`) that outlasts the
            read's own retries is tolerated until the timeout; other errors propagate.
        want: the statuses that end the wait successfully.
        timeout_s: give up after this many seconds (measured on ``clock``).
        poll_s: seconds between reads.
        fail: statuses meaning the provider could not do it (default ``{ERROR}``); a status in
            both ``want`` and ``fail`` counts as wanted.
        clock: time source (default real time); ``sleep`` must advance it (tests pass a
            SimClock and ``sleep=clock.advance``).
        sleep: replaces ``time.sleep``.

    Returns:
        the :class:`Instance` in a wanted status.

    Raises:
        StatusWaitError: a failure status was seen, or the timeout passed.
    """
    clock = clock or RealClock()
    sleep = sleep or time.sleep
    deadline = clock.now() + timedelta(seconds=timeout_s)
    wanted = ", ".join(sorted(s.value for s in want))
    last: Instance | None = None
    last_error: ProviderError | None = None
    while True:
        try:
            last = get()
            last_error = None
        except ProviderError as exc:
            if not is_transient(exc):
                raise
            last_error = exc
        if last is not None and last_error is None:
            if last.status in want:
                return last
            if last.status in fail:
                if last.status_raw:
                    said = _("{provider}: instance {id} is {status} ({status_raw}); wanted {wanted}")
                else:
                    said = _("{provider}: instance {id} is {status}; wanted {wanted}")
                raise StatusWaitError(said.format(provider=last.provider, id=last.id, status=last.status.value,
                                                  status_raw=last.status_raw, wanted=wanted),
                                      last=last)
        if clock.now() >= deadline:
            shape = {"timeout": timeout_s, "wanted": wanted,
                     "error": last_error.message if last_error is not None else None}
            if last is not None:
                shape.update(provider=last.provider, id=last.id, status=last.status.value)
                if last_error is not None:
                    said = _("{provider}: instance {id} still {status}; last error: {error} after {timeout:g}s; "
                             "wanted {wanted}")
                else:
                    said = _("{provider}: instance {id} still {status} after {timeout:g}s; wanted {wanted}")
            elif last_error is not None:
                said = _("instance never read; last error: {error} after {timeout:g}s; wanted {wanted}")
            else:
                said = _("instance never read after {timeout:g}s; wanted {wanted}")
            raise StatusWaitError(said.format(**shape), last=last)
        sleep(poll_s)
