"""The one HTTP layer every adapter uses: timeouts, retries, typed errors, redaction.

:class:`HttpClient` wraps a :class:`requests.Session` whose retries come from urllib3's
:class:`~urllib3.util.retry.Retry` (backoff, ``Retry-After``). Retries apply ONLY to calls the
caller marks ``idempotent=True``: reads, and POST/PUT calls that are idempotent by the provider's
semantics (a status query, a stop of an already stopping instance). A create call is never
retried: if it times out, the caller is told that it may have happened.

Every failure becomes a :class:`costctl.errors.ProviderError` subclass with a one-line,
user-facing message:

============================  ==========================================================
:class:`AuthError`            401 / 403 — names the credential (``VAST_API_KEY was rejected
                              (401)``), never prints it
:class:`NotFoundError`        404
:class:`RateLimitedError`     429 after the retries
:class:`ProviderUnavailableError`  5xx, connection error or timeout after the retries
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
from typing import Any
from urllib.parse import urljoin

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from costctl.clock import Clock, RealClock
from costctl.errors import ProviderError

from .base import Instance, Status

log = logging.getLogger("costctl_providers.http")

#: HTTP statuses retried (idempotent calls only): rate limited, bad gateway, unavailable,
#: gateway timeout. 500 is not retried: it usually means the request itself is wrong.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

_REDACTED = "***"
_AUTH_RE = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+")


# ----------------------------------------------------------------------------- errors

# The public error classes live in costctl_providers.errors; re-exported here for old imports.
from .errors import (  # noqa: E402,F401
    AuthError, NotFoundError, ProviderResponseError, ProviderUnavailableError, RateLimitedError, StatusWaitError,
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
        """``text`` as a string with every secret replaced by ``***``."""
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


class _Retry(Retry):
    """urllib3 Retry with a cap on ``Retry-After`` and an injectable sleep function."""

    def __init__(
        self,
        *args: Any,
        max_retry_after: float = 60.0,
        sleeper: Callable[[float], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_retry_after = max_retry_after
        self.sleeper = sleeper or time.sleep

    def new(self, **kw: Any) -> "_Retry":
        new = super().new(**kw)
        new.max_retry_after = self.max_retry_after
        new.sleeper = self.sleeper
        return new

    def get_retry_after(self, response: Any) -> float | None:
        value = super().get_retry_after(response)
        return None if value is None else max(0.0, min(value, self.max_retry_after))

    def sleep(self, response: Any = None) -> None:
        delay: float | None = None
        if self.respect_retry_after_header and response is not None:
            delay = self.get_retry_after(response)
        if delay is None:
            delay = self.get_backoff_time()
        if delay > 0:
            self.sleeper(delay)


def _retry_after_seconds(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
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
        timeout: seconds, for connect and for read, on every call.
        retries: how many times an idempotent call is retried (0 = never).
        backoff: urllib3 ``backoff_factor`` in seconds (sleep = backoff × 2^(n-1), capped at
            ``backoff_max``); a ``Retry-After`` header (429/503) takes precedence, capped at
            ``max_retry_after`` seconds.
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
        sleep: Callable[[float], None] | None = None,
        trust_env: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.provider = provider
        self.credential_name = credential_name
        self.timeout = timeout
        self.retries = retries
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
        self._retrying = self._session(
            _Retry(
                total=retries,
                connect=retries,
                read=retries,
                status=retries,
                other=0,
                redirect=0,
                backoff_factor=backoff,
                backoff_max=backoff_max,
                status_forcelist=RETRY_STATUSES,
                allowed_methods=None,  # idempotency is decided per call, not per method
                respect_retry_after_header=True,
                raise_on_status=False,
                raise_on_redirect=False,
                max_retry_after=max_retry_after,
                sleeper=sleep,
            ),
            trust_env,
        )
        self._once = self._session(
            _Retry(total=0, connect=0, read=0, status=0, other=0, redirect=0,
                   raise_on_status=False, raise_on_redirect=False),
            trust_env,
        )

    @staticmethod
    def _session(retry: Retry, trust_env: bool) -> requests.Session:
        session = requests.Session()
        session.trust_env = trust_env
        adapter = HTTPAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def add_secret(self, secret: str | None) -> None:
        """Register a secret obtained later (e.g. a session token) for redaction."""
        self.redact.add(secret)
        GLOBAL_REDACTOR.add(secret)

    def close(self) -> None:
        """Close the underlying sessions."""
        self._retrying.close()
        self._once.close()

    def __enter__(self) -> "HttpClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        """The absolute URL for ``path`` (relative to ``base_url``; a leading ``/`` is allowed)."""
        return urljoin(self.base_url, path.lstrip("/"))

    def response_error(self, what: str, *, status: int | None = None) -> ProviderResponseError:
        """A :class:`ProviderResponseError` ``"<provider>: <what>"`` with secrets redacted.

        Adapters use it for their provider's error envelope:
        ``raise client.response_error(f"{msg} (code {code})")``.
        """
        return ProviderResponseError(self.redact(f"{self.provider}: {what}"), status=status)

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
    ) -> requests.Response:
        """Send one call and return the response (2xx, or a status in ``ok_statuses``).

        Args:
            method: HTTP method.
            path: relative to ``base_url``.
            json / params / data / headers: as in requests.
            idempotent: True lets the call be retried (see module docstring). Required, so every
                call site decides.
            ok_statuses: non-2xx statuses returned instead of raised (e.g. ``{404}`` for
                "no notice").
            timeout: override the client's timeout (seconds) for this call.

        Raises:
            AuthError, NotFoundError, RateLimitedError, ProviderUnavailableError,
            ProviderResponseError: see the module docstring.
        """
        method = method.upper()
        session = self._retrying if (idempotent and self.retries > 0) else self._once
        merged = dict(self._headers)
        if headers:
            merged.update(headers)
        where = f"{method} {path}"
        started = time.monotonic()
        try:
            response = session.request(
                method,
                self.url(path),
                json=json,
                params=params,
                data=data,
                headers=merged,
                timeout=timeout if timeout is not None else self.timeout,
                allow_redirects=False,
            )
        except (requests.Timeout, requests.ConnectionError) as exc:
            raise self._unavailable(where, exc, idempotent) from None
        except requests.RequestException as exc:
            raise ProviderUnavailableError(
                self.redact(f"{self.provider}: {where} failed: {type(exc).__name__}")
            ) from None
        elapsed = time.monotonic() - started
        log.debug("%s", self.redact(f"{self.provider}: {where} -> {response.status_code} in {elapsed:.3f}s"))
        status = response.status_code
        if 200 <= status < 300 or status in set(ok_statuses):
            return response
        raise self._status_error(where, response, idempotent)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """Like :meth:`request`, returning the parsed JSON body.

        Raises:
            ProviderResponseError: the body is not JSON (besides :meth:`request`'s errors).
        """
        response = self.request(method, path, **kwargs)
        return self.parse_json(response, f"{method.upper()} {path}")

    def parse_json(self, response: requests.Response, where: str = "response") -> Any:
        """Parse ``response``'s body as JSON or raise :class:`ProviderResponseError`."""
        try:
            return _json.loads(response.content or b"")
        except ValueError:
            snippet = self._snippet(response)
            raise ProviderResponseError(
                self.redact(f"{self.provider}: malformed JSON in the answer to {where}: {snippet!r}"),
                status=response.status_code,
            ) from None

    # -- error construction ------------------------------------------------------------

    def _snippet(self, response: requests.Response, limit: int = 120) -> str:
        try:
            text = response.content.decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            text = ""
        text = " ".join(text.split())
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return self.redact(text)

    def _unavailable(self, where: str, exc: Exception, idempotent: bool) -> ProviderUnavailableError:
        timed_out = isinstance(exc, requests.Timeout) or "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
        kind = f"timed out after {self.timeout:g}s" if timed_out else "could not connect"
        if idempotent and self.retries > 0:
            tail = f" (after {self.retries} retries)"
        elif timed_out and not idempotent:
            tail = " (not retried; the request may have been carried out — check before repeating it)"
        else:
            tail = ""
        return ProviderUnavailableError(self.redact(f"{self.provider}: {where} {kind}{tail}"))

    def _status_error(self, where: str, response: requests.Response, idempotent: bool) -> ProviderError:
        status = response.status_code
        retried = f" after {self.retries} retries" if idempotent and self.retries > 0 else ""
        if status in (401, 403):
            who = self.credential_name or "the credential"
            return AuthError(self.redact(f"{self.provider}: {who} was rejected ({status}) on {where}"))
        if status == 404:
            return NotFoundError(self.redact(f"{self.provider}: not found (404) on {where}"))
        if status == 429:
            after = _retry_after_seconds(response)
            hint = f"; the provider asks to wait {after:g}s" if after is not None else ""
            return RateLimitedError(
                self.redact(f"{self.provider}: rate limited (429) on {where}{retried}{hint}"),
                retry_after_s=after,
            )
        if status >= 500:
            return ProviderUnavailableError(
                self.redact(f"{self.provider}: server error {status} on {where}{retried}")
            )
        snippet = self._snippet(response)
        return ProviderResponseError(
            self.redact(f"{self.provider}: {where} answered {status}: {snippet!r}"), status=status
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
        get: reads the instance (e.g. ``lambda: provider.get_instance(iid)``). A transient
            :class:`ProviderUnavailableError` or :class:`RateLimitedError` is tolerated until
            the timeout; other errors propagate.
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
    last: Instance | None = None
    last_error: ProviderError | None = None
    while True:
        try:
            last = get()
            last_error = None
        except (ProviderUnavailableError, RateLimitedError) as exc:
            last_error = exc
        if last is not None and last_error is None:
            if last.status in want:
                return last
            if last.status in fail:
                raw = f" ({last.status_raw})" if last.status_raw else ""
                raise StatusWaitError(
                    f"{last.provider}: instance {last.id} is {last.status.value}{raw}; "
                    f"wanted {', '.join(sorted(s.value for s in want))}",
                    last=last,
                )
        if clock.now() >= deadline:
            seen = f"still {last.status.value}" if last is not None else "never read"
            if last_error is not None:
                seen += f"; last error: {last_error.message}"
            who = f"{last.provider}: instance {last.id}" if last is not None else "instance"
            raise StatusWaitError(
                f"{who} {seen} after {timeout_s:g}s; wanted {', '.join(sorted(s.value for s in want))}",
                last=last,
            )
        sleep(poll_s)
