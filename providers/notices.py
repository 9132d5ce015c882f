"""Preemption-notice sources: "this spot instance will be taken away at <deadline>".

Each source's :meth:`~NoticeSource.poll` returns one :class:`Notice` or None:

* :class:`AwsNoticeSource` — EC2 IMDSv2: ``PUT /latest/api/token`` (header
  ``X-aws-ec2-metadata-token-ttl-seconds``), then ``GET /latest/meta-data/spot/instance-action``
  with ``X-aws-ec2-metadata-token``; 404 = no notice; 200 = ``{"action": "terminate|stop|hibernate",
  "time": "2017-09-18T08:22:00Z"}``, about two minutes ahead. AWS recommends polling every 5 s.
  (AWS EC2 User Guide, "Spot Instance interruption notices" and "Use IMDSv2".)
* :class:`GcpNoticeSource` — ``GET /computeMetadata/v1/instance/preempted`` with
  ``Metadata-Flavor: Google`` → ``TRUE``/``FALSE``; Compute Engine gives about 30 s, so the
  deadline is taken as first-seen + 30 s. (Google Cloud, "Detect if a VM was preempted".)
  With ``long_poll_s`` (what :func:`detect_cloud` sets up: :data:`GCP_LONG_POLL_S`) it
  long-polls: after one plain read, each call adds ``?wait_for_change=true&last_etag=<the
  ETag last seen>&timeout_sec=N``, which the metadata server answers at once when the value
  changed since that ETag and otherwise holds for up to N seconds (Google Cloud, "Waiting for
  change": ``wait_for_change``, ``last_etag``, ``timeout_sec``). A notice is then seen as soon
  as it is set, at one request per N seconds while nothing happens.
* :class:`AzureNoticeSource` — Scheduled Events ``GET /metadata/scheduledevents?api-version=2020-07-01``
  with ``Metadata: true`` → ``Events[]``; an ``EventType`` of ``"Preempt"`` with ``NotBefore``
  (RFC 1123 date; empty = imminent). Spot eviction gives at least 30 s.
  (Azure docs, "Azure Metadata Service: Scheduled Events for Linux VMs".)
* :class:`ProviderNoticeSource` — a provider adapter that exposes
  ``preemption_notice(instance_id) -> Notice | None`` (the sim provider does).

:func:`detect_cloud` decides once, with short timeouts, which source applies. On AutoDL
(hostname ``autodl-container-*``), Vast.ai (``VAST_CONTAINERLABEL`` / ``CONTAINER_ID``) or RunPod
(``RUNPOD_POD_ID``) it never contacts a metadata address: marketplaces give no in-guest notice,
their adapters report a preemption after the fact (the instance shows as stopped).

Base URLs are configurable so tests point them at local fakes. Defaults follow the standard
SDK variables: ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (and ``AWS_EC2_METADATA_DISABLED=true``),
``GCE_METADATA_HOST``; Azure's address has no such variable.

:class:`NoticePoller` polls one source every ``interval_s`` seconds (5 s by default, AWS's
recommendation) and reports each distinct notice once. The watch polls every ``[preemption]
poll_interval`` (default 1 s: a notice is seen 0.5 s after it is issued at the median, one small
GET on a kept-alive session per second), and runs a long-polling source (GCP) in one thread of
its own, back to back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from costctl.clock import Clock, RealClock, ensure_utc
from costctl.errors import ProviderError
from costctl.i18n import _

from ._http import AuthError, HttpClient, ProviderResponseError

log = logging.getLogger("costctl_providers.notices")

AWS_DEFAULT_BASE_URL = "http://169.254.169.254"
GCP_DEFAULT_BASE_URL = "http://metadata.google.internal"
AZURE_DEFAULT_BASE_URL = "http://169.254.169.254"

#: Seconds of warning Compute Engine gives before preempting (Google Cloud docs: "30 seconds").
GCP_NOTICE_S = 30
#: IMDSv2 token lifetime we ask for, seconds (AWS allows 1..21600).
AWS_TOKEN_TTL_S = 21600
AZURE_API_VERSION = "2020-07-01"
#: Seconds a GCP long-poll (``timeout_sec``) may be held by the metadata server when nothing changes.
GCP_LONG_POLL_S = 60


@dataclass(frozen=True)
class Notice:
    """A preemption notice.

    Attributes:
        action: what will happen: ``"terminate"``, ``"stop"``, ``"hibernate"`` (AWS),
            ``"preempt"`` (GCP, Azure, sim).
        deadline: aware UTC time by which the instance will be taken.
        source: ``"aws"``, ``"gcp"``, ``"azure"`` or the provider's name (``"sim"``).
        raw: the payload the source returned.
    """

    action: str
    deadline: datetime
    source: str
    raw: Any = field(default=None, compare=False)

    def seconds_left(self, now: datetime) -> float:
        """Seconds from ``now`` until the deadline (negative once passed)."""
        return (self.deadline - ensure_utc(now)).total_seconds()


class NoticeSource(Protocol):
    """Something that can be polled for a preemption notice."""

    name: str

    def poll(self) -> Notice | None:  # pragma: no cover - protocol
        """The current notice, or None. Raises ProviderError when the source cannot be read."""
        ...


def _metadata_client(base_url: str, source: str, timeout: float) -> HttpClient:
    # No retries (the poller polls again), no proxies (link-local addresses are never proxied).
    return HttpClient(base_url, provider=_("{source} metadata").format(source=source), timeout=timeout, retries=0,
                      trust_env=False)


class AwsNoticeSource:
    """EC2 spot interruption notice via IMDSv2 (see the module docstring).

    Args:
        base_url: IMDS root (default ``$AWS_EC2_METADATA_SERVICE_ENDPOINT`` or 169.254.169.254).
        timeout: seconds per request.
        clock: used for the token's expiry.
    """

    name = "aws"

    def __init__(self, base_url: str | None = None, *, timeout: float = 1.0, clock: Clock | None = None) -> None:
        self.http = _metadata_client(base_url or _aws_base_url(os.environ), "aws", timeout)
        self.clock = clock or RealClock()
        self._token: str | None = None
        self._token_expires: datetime | None = None

    def token(self, *, refresh: bool = False) -> str:
        """An IMDSv2 session token (cached until shortly before it expires)."""
        now = self.clock.now()
        if refresh or self._token is None or self._token_expires is None or now >= self._token_expires:
            r = self.http.request(
                "PUT",
                "/latest/api/token",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
                idempotent=True,
            )
            token = r.text.strip()
            if not token:
                raise ProviderResponseError(_("aws metadata: empty IMDSv2 token"))
            self.http.add_secret(token)
            self._token = token
            self._token_expires = now + timedelta(seconds=AWS_TOKEN_TTL_S - 60)
        return self._token

    def poll(self) -> Notice | None:
        """None when IMDS answers 404; a Notice for a 200 ``{"action", "time"}``.

        Raises:
            ProviderError: IMDS unreachable or the answer malformed.
        """
        for attempt in range(2):
            try:
                r = self.http.request(
                    "GET",
                    "/latest/meta-data/spot/instance-action",
                    headers={"X-aws-ec2-metadata-token": self.token(refresh=attempt > 0)},
                    idempotent=True,
                    ok_statuses={404},
                )
            except AuthError:
                if attempt == 0:  # token expired or IMDS restarted: get a new one, once
                    continue
                raise
            break
        if r.status_code == 404:
            return None
        data = self.http.parse_json(r, "GET /latest/meta-data/spot/instance-action")
        try:
            action = str(data["action"])
            deadline = _parse_iso(str(data["time"]))
        except (KeyError, TypeError, ValueError):
            raise ProviderResponseError(_("aws metadata: unexpected spot/instance-action answer: {answer}").format(
                answer=repr(data)[:120])) from None
        return Notice(action=action, deadline=deadline, source=self.name, raw=data)


class GcpNoticeSource:
    """Compute Engine preemption flag (see the module docstring).

    Args:
        base_url: metadata server root (default ``http://$GCE_METADATA_HOST`` or metadata.google.internal).
        timeout: seconds per request (a long-poll waits ``long_poll_s`` more).
        clock: "now" for the deadline (first seen + :data:`GCP_NOTICE_S`).
        long_poll_s: whole seconds a call may wait for a change (``timeout_sec``); 0: plain reads.
    """

    name = "gcp"

    def __init__(self, base_url: str | None = None, *, timeout: float = 1.0, clock: Clock | None = None,
                 long_poll_s: int = 0) -> None:
        if long_poll_s < 0:
            raise ValueError("long_poll_s must be >= 0")
        self.http = _metadata_client(base_url or _gcp_base_url(os.environ), "gcp", timeout)
        self.clock = clock or RealClock()
        self.long_poll_s = int(long_poll_s)
        self._first_seen: datetime | None = None
        self._etag: str | None = None

    @property
    def long_poll(self) -> bool:
        """Whether :meth:`poll` waits on the server for a change (then poll it back to back)."""
        return self.long_poll_s > 0

    def poll(self, *, wait: bool = True) -> Notice | None:
        """None while ``preempted`` reads FALSE; a Notice (deadline = first TRUE + 30 s) after.
        Long-polling (and ``wait``), it returns when the value changes or after ``long_poll_s``
        seconds; ``wait=False`` reads plainly (a caller that must not block)."""
        params: dict[str, str] | None = None
        timeout: float | None = None
        if wait and self.long_poll and self._etag:
            params = {"wait_for_change": "true", "last_etag": self._etag, "timeout_sec": str(self.long_poll_s)}
            timeout = self.http.timeout + self.long_poll_s
        try:
            r = self.http.request(
                "GET", "/computeMetadata/v1/instance/preempted", headers={"Metadata-Flavor": "Google"},
                params=params, timeout=timeout, idempotent=True,
            )
        except ProviderError:
            self._etag = None  # read plainly next time
            raise
        self._etag = r.headers.get("ETag") or None
        text = r.text.strip().upper()
        if text == "FALSE":
            self._first_seen = None
            return None
        if text != "TRUE":
            raise ProviderResponseError(_("gcp metadata: unexpected instance/preempted answer: {answer!r}").format(
                answer=r.text[:60]))
        if self._first_seen is None:
            self._first_seen = self.clock.now()
        return Notice("preempt", self._first_seen + timedelta(seconds=GCP_NOTICE_S), self.name, raw=r.text.strip())


class AzureNoticeSource:
    """Azure Scheduled Events ``Preempt`` (see the module docstring).

    Args:
        base_url: IMDS root (default 169.254.169.254).
        timeout: seconds per request.
        clock: "now" for an event whose NotBefore is empty (imminent).
    """

    name = "azure"

    def __init__(self, base_url: str | None = None, *, timeout: float = 1.0, clock: Clock | None = None) -> None:
        self.http = _metadata_client(base_url or AZURE_DEFAULT_BASE_URL, "azure", timeout)
        self.clock = clock or RealClock()

    def poll(self) -> Notice | None:
        """The earliest ``Preempt`` event as a Notice, or None."""
        data = self.http.json(
            "GET",
            "/metadata/scheduledevents",
            params={"api-version": AZURE_API_VERSION},
            headers={"Metadata": "true"},
            idempotent=True,
        )
        events = data.get("Events") if isinstance(data, dict) else None
        if not isinstance(events, list):
            raise ProviderResponseError(_("azure metadata: unexpected scheduledevents answer: {answer}").format(
                answer=repr(data)[:120]))
        found: list[Notice] = []
        for ev in events:
            if not isinstance(ev, dict) or ev.get("EventType") != "Preempt":
                continue
            not_before = str(ev.get("NotBefore") or "").strip()
            try:
                deadline = ensure_utc(parsedate_to_datetime(not_before)) if not_before else self.clock.now()
            except (TypeError, ValueError):
                raise ProviderResponseError(_("azure metadata: unreadable NotBefore {value!r}").format(value=not_before)) from None
            found.append(Notice("preempt", deadline, self.name, raw=ev))
        return min(found, key=lambda n: n.deadline) if found else None


class ProviderNoticeSource:
    """Notices from a provider adapter that has ``preemption_notice(instance_id)`` (e.g. sim)."""

    def __init__(self, provider: Any, instance_id: str) -> None:
        self.provider = provider
        self.instance_id = instance_id
        self.name = str(getattr(provider, "name", "provider"))

    def poll(self) -> Notice | None:
        """The provider's pending notice for the instance, or None."""
        return self.provider.preemption_notice(self.instance_id)


# ----------------------------------------------------------------------------- detection


def _aws_base_url(env: Mapping[str, str]) -> str:
    return env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or AWS_DEFAULT_BASE_URL


def _gcp_base_url(env: Mapping[str, str]) -> str:
    host = env.get("GCE_METADATA_HOST")
    return f"http://{host}" if host else GCP_DEFAULT_BASE_URL


def detect_marketplace(env: Mapping[str, str] | None = None, hostname: str | None = None) -> str | None:
    """``"autodl"``, ``"vastai"`` or ``"runpod"`` when running inside one of their containers,
    else None. Looks only at the hostname and environment (no network)."""
    env = os.environ if env is None else env
    hostname = socket.gethostname() if hostname is None else hostname
    if hostname.startswith("autodl-container-"):
        return "autodl"
    if env.get("VAST_CONTAINERLABEL") or env.get("CONTAINER_ID"):
        return "vastai"
    if env.get("RUNPOD_POD_ID"):
        return "runpod"
    return None


@dataclass(frozen=True)
class Detection:
    """Result of :func:`detect_cloud`.

    Attributes:
        platform: ``"aws"``, ``"gcp"``, ``"azure"``, ``"autodl"``, ``"vastai"``, ``"runpod"``,
            or None when nothing was recognized.
        source: the notice source to poll, or None (marketplaces and unknown machines).
    """

    platform: str | None
    source: NoticeSource | None


def _probe_aws(src: AwsNoticeSource) -> bool:
    try:
        src.token()
        return True
    except ProviderError:
        return False


def _probe_gcp(base_url: str, timeout: float) -> bool:
    http = _metadata_client(base_url, "gcp", timeout)
    try:
        r = http.request("GET", "/computeMetadata/v1/", headers={"Metadata-Flavor": "Google"}, idempotent=True)
        return r.headers.get("Metadata-Flavor") == "Google"
    except ProviderError:
        return False
    finally:
        http.close()


def _probe_azure(base_url: str, timeout: float) -> bool:
    http = _metadata_client(base_url, "azure", timeout)
    try:
        data = http.json(
            "GET", "/metadata/instance", params={"api-version": "2021-02-01"}, headers={"Metadata": "true"},
            idempotent=True,
        )
        return isinstance(data, dict) and "compute" in data
    except ProviderError:
        return False
    finally:
        http.close()


def cloud_source(
    platform: str,
    *,
    env: Mapping[str, str] | None = None,
    aws_base_url: str | None = None,
    gcp_base_url: str | None = None,
    azure_base_url: str | None = None,
    timeout: float = 1.0,
    clock: Clock | None = None,
) -> Detection:
    """The notice source of ``platform`` (``"aws"``, ``"gcp"``, ``"azure"``) without detection
    (``[preemption] source``): built as :func:`detect_cloud` would build it, nothing probed.

    Raises:
        ValueError: another platform name.
    """
    env = os.environ if env is None else env
    if platform == "aws":
        return Detection("aws", AwsNoticeSource(aws_base_url or _aws_base_url(env), timeout=timeout, clock=clock))
    if platform == "gcp":
        return Detection("gcp", GcpNoticeSource(gcp_base_url or _gcp_base_url(env), timeout=timeout, clock=clock,
                                                long_poll_s=GCP_LONG_POLL_S))
    if platform == "azure":
        return Detection("azure", AzureNoticeSource(azure_base_url or AZURE_DEFAULT_BASE_URL, timeout=timeout,
                                                    clock=clock))
    raise ValueError(f"unknown notice source {platform!r} (allowed: aws, gcp, azure)")


def detect_cloud(
    *,
    env: Mapping[str, str] | None = None,
    hostname: str | None = None,
    aws_base_url: str | None = None,
    gcp_base_url: str | None = None,
    azure_base_url: str | None = None,
    timeout: float = 0.5,
    clock: Clock | None = None,
    provider: Any = None,
    instance_id: str | None = None,
) -> Detection:
    """Decide once which preemption-notice source applies to this machine.

    Order: a ``provider`` adapter with the ``preemption_notice`` capability (sim) →
    :class:`ProviderNoticeSource`; a marketplace container (:func:`detect_marketplace`) →
    no source and NO network access; else the three metadata services are probed in
    parallel with ``timeout`` seconds each (AWS: an IMDSv2 token; GCP: the
    ``Metadata-Flavor: Google`` response header; Azure: ``/metadata/instance`` with a
    ``compute`` section), first match in the order AWS, GCP, Azure.

    Args:
        env / hostname: for tests (default: ``os.environ`` / ``socket.gethostname()``).
        aws_base_url / gcp_base_url / azure_base_url: metadata roots (defaults in the module docstring).
        timeout: seconds per probe (they run concurrently, so detection takes about that long
            on a machine with no metadata service).
        clock: passed to the chosen source.
        provider / instance_id: the configured adapter and instance.
    """
    env = os.environ if env is None else env
    if provider is not None and instance_id and getattr(getattr(provider, "capabilities", None), "preemption_notice", False) \
            and callable(getattr(provider, "preemption_notice", None)):
        return Detection(str(getattr(provider, "name", "provider")), ProviderNoticeSource(provider, instance_id))
    market = detect_marketplace(env, hostname)
    if market is not None:
        return Detection(market, None)
    aws_url = aws_base_url or _aws_base_url(env)
    gcp_url = gcp_base_url or _gcp_base_url(env)
    azure_url = azure_base_url or AZURE_DEFAULT_BASE_URL
    aws = AwsNoticeSource(aws_url, timeout=timeout, clock=clock)
    aws_disabled = env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true"
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="costctl-detect") as pool:
        f_aws = pool.submit(lambda: False if aws_disabled else _probe_aws(aws))
        f_gcp = pool.submit(_probe_gcp, gcp_url, timeout)
        f_azure = pool.submit(_probe_azure, azure_url, timeout)
        is_aws, is_gcp, is_azure = f_aws.result(), f_gcp.result(), f_azure.result()
    if is_aws:
        return Detection("aws", aws)
    aws.http.close()
    if is_gcp:
        return Detection("gcp", GcpNoticeSource(gcp_url, timeout=max(timeout, 1.0), clock=clock,
                                                long_poll_s=GCP_LONG_POLL_S))
    if is_azure:
        return Detection("azure", AzureNoticeSource(azure_url, timeout=max(timeout, 1.0), clock=clock))
    return Detection(None, None)


# ----------------------------------------------------------------------------- polling


class NoticePoller:
    """Polls one :class:`NoticeSource` every ``interval_s`` seconds.

    Use :meth:`poll_once` from a scheduler job, or :meth:`start` for a daemon thread (which
    polls a long-polling source, one whose ``long_poll`` is true, back to back, and waits
    ``interval_s`` only after a failed poll). Each
    distinct notice (action, deadline, source) is passed to ``on_notice`` once. A source that
    cannot be read leaves :attr:`last_error` set and is polled again; an unreadable source
    never produces a notice. Whatever a source answers, a poll never raises and the polling
    thread never ends before :meth:`stop`: an exception other than a :class:`ProviderError`
    (a source's bug, an answer no parser expected) is read as an unreadable source
    (:attr:`last_error`) and handed to ``on_error``.

    Args:
        source: what to poll.
        interval_s: seconds between polls (default 5, AWS's recommendation).
        on_notice: called with each new :class:`Notice`.
        on_error: called with each such unexpected exception (the caller logs its traceback);
            an exception it raises itself is ignored.
    """

    def __init__(
        self,
        source: NoticeSource,
        interval_s: float = 5.0,
        *,
        on_notice: Callable[[Notice], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.source = source
        self.interval_s = interval_s
        self.on_notice = on_notice
        self.on_error = on_error
        self.latest: Notice | None = None
        self.last_error: ProviderError | None = None
        self._seen: set[tuple[str, datetime, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def poll_once(self, *, wait: bool = False) -> Notice | None:
        """Poll now; return the current notice (None if none or unreadable). A long-polling
        source is read plainly unless ``wait`` (the polling thread's own calls)."""
        try:
            notice = self.source.poll(wait=wait) if self.long_poll else self.source.poll()  # type: ignore[call-arg]
            self.last_error = None
        except ProviderError as exc:
            self.last_error = exc
            log.debug("notice source %s unreadable: %s", self.source.name, exc.message)
            return None
        except Exception as exc:  # noqa: BLE001 - any answer: the source is unreadable, the poller goes on
            self.last_error = ProviderError(_("{source}: the notice source failed: {error}").format(
                source=self.source.name, error=type(exc).__name__))
            log.debug("notice source %s failed", self.source.name, exc_info=True)
            self._report(exc)
            return None
        self.latest = notice
        if notice is not None:
            key = (notice.action, notice.deadline, notice.source)
            if key not in self._seen:
                self._seen.add(key)
                log.warning("preemption notice from %s: %s at %s", notice.source, notice.action, notice.deadline.isoformat())
                if self.on_notice is not None:
                    try:
                        self.on_notice(notice)
                    except Exception as exc:  # noqa: BLE001 - the polling thread goes on
                        if self.on_error is None:
                            raise
                        self._report(exc)
        return notice

    def _report(self, exc: BaseException) -> None:
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # noqa: BLE001 - reporting must not end the polling
                pass

    @property
    def long_poll(self) -> bool:
        """Whether the source long-polls (see the class docstring)."""
        return bool(getattr(self.source, "long_poll", False))

    @property
    def threaded(self) -> bool:
        """Whether :meth:`start` runs the polls (a scheduler job then has nothing to do)."""
        return self._thread is not None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll_once(wait=True)
            except Exception as exc:  # noqa: BLE001 - an on_notice that raised: the thread goes on
                self.last_error = ProviderError(_("{source}: handling a notice failed: {error}").format(
                    source=self.source.name, error=type(exc).__name__))
                log.debug("notice handling failed", exc_info=True)
            if self.long_poll and self.last_error is None:
                continue  # the server held the call until a change or its timeout_sec
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> "NoticePoller":
        """Poll in a daemon thread until :meth:`stop` (a second call does nothing)."""
        with self._start_lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="costctl-notices", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the polling thread (waits for the current poll to end; for a long-poll at most
        1 s: the daemon thread's held call ends with the process)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0 if self.long_poll else self.interval_s + 5)
            self._thread = None


def _parse_iso(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
