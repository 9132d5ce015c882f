"""Local fakes of the three in-guest preemption-notice endpoints, on 127.0.0.1 (real HTTP).

Each fake is a :class:`http.server.ThreadingHTTPServer` in a daemon thread speaking HTTP/1.1
with keep-alive (as the real metadata services do), and enforces what the real service
requires, so a client that gets a header or path wrong is refused as it would be in a cloud:

* ``FakeMetadata("aws")`` — EC2 IMDSv2 (AWS EC2 User Guide, "Use IMDSv2" and "Spot Instance
  interruption notices"): ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds``
  (1..21600, else 400) and returns a token; ``GET /latest/meta-data/spot/instance-action`` needs
  ``X-aws-ec2-metadata-token`` (else 401) and answers 404 until a notice, then 200
  ``{"action": "terminate", "time": "<ISO 8601 Z>"}``.
* ``FakeMetadata("gcp")`` — Compute Engine metadata server (Google Cloud, "About VM metadata",
  "Detect if a VM was preempted", "Waiting for change"): every request needs
  ``Metadata-Flavor: Google`` (else 403) and every answer carries it back;
  ``GET /computeMetadata/v1/instance/preempted`` answers ``FALSE``/``TRUE`` with an ``ETag``;
  with ``wait_for_change=true`` it answers at once when ``last_etag`` differs from the current
  ETag, else holds the request until the value changes or ``timeout_sec`` passes.
* ``FakeMetadata("azure")`` — Azure Instance Metadata Service, Scheduled Events (Azure docs,
  "Scheduled Events for Linux VMs"): ``GET /metadata/scheduledevents?api-version=...`` needs
  ``Metadata: true`` (else 400) and an ``api-version`` (else 400); answers
  ``{"DocumentIncarnation": n, "Events": [...]}``, a notice being one ``"Preempt"`` event with
  ``NotBefore`` in RFC 1123 form. ``/metadata/instance`` answers a ``compute`` section (detection).

:meth:`FakeMetadata.issue` issues a notice ``notice_s`` seconds ahead and returns the
``time.monotonic()`` at which it became visible (for latency measurements); :attr:`requests`
counts answered requests per path; :attr:`held` records how each long-poll ended
(``"changed"``, ``"etag"``: answered at once for a stale ETag, ``"timeout"``).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeMetadata", "KINDS"]

KINDS = ("aws", "gcp", "azure")
AWS_TOKEN = "AQAEAFakeImdsV2Token=="


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone before its answer (a held long-poll at the client's exit) is normal."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeMetadata:
    """One fake metadata service (see the module docstring). Use as a context manager;
    :attr:`url` is its root (``http://127.0.0.1:PORT``)."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        self.kind = kind
        self._cond = threading.Condition()
        self.notice: dict[str, object] | None = None
        self.version = 0  # bumped on every change (GCP ETag, Azure DocumentIncarnation)
        self.requests: dict[str, int] = {}
        self.refused: list[str] = []
        self.held: list[str] = []
        self.connections = 0  # TCP connections accepted (a kept-alive client opens one)
        self.waiting = 0  # GCP long-polls being held now
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-{kind}-metadata", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "FakeMetadata":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (held long-polls are released)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    _closing = False

    def issue(self, notice_s: float = 120.0, action: str = "terminate", *, now: datetime | None = None) -> float:
        """Issue a preemption notice ``notice_s`` seconds after ``now`` (default: the real time;
        a simulated clock's time for a watch on one); returns ``time.monotonic()`` at the
        moment it became visible to clients."""
        deadline = (now or datetime.now(timezone.utc)) + timedelta(seconds=notice_s)
        with self._cond:
            self.notice = {"action": action, "deadline": deadline}
            self.version += 1
            issued = time.monotonic()
            self._cond.notify_all()
        return issued

    def clear(self) -> None:
        """Withdraw the notice."""
        with self._cond:
            self.notice = None
            self.version += 1
            self._cond.notify_all()

    @property
    def etag(self) -> str:
        """The GCP ETag of the current ``preempted`` value."""
        return f"etag-{self.version:04d}"

    def wait_until_held(self, timeout_s: float = 10.0) -> bool:
        """Block until a GCP long-poll is being held (True), or ``timeout_s`` passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting > 0, timeout_s)

    def wait_for_change(self, last_etag: str | None, timeout_s: float) -> str:
        """GCP ``wait_for_change``: how the held request ended (see :attr:`held`)."""
        with self._cond:
            if last_etag is not None and last_etag != self.etag:
                outcome = "etag"
            else:
                start = self.version
                self.waiting += 1
                self._cond.notify_all()
                try:
                    ok = self._cond.wait_for(lambda: self.version != start or self._closing, timeout_s)
                finally:
                    self.waiting -= 1
                outcome = "changed" if ok and not self._closing else "timeout"
            self.held.append(outcome)
            return outcome


def _handler(fake: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the metadata services

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, body: str = "", ctype: str = "text/plain", headers: dict[str, str] | None = None):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            path = urlsplit(self.path).path
            with fake._cond:
                fake.requests[path] = fake.requests.get(path, 0) + 1
                if status >= 400 and status != 404:
                    fake.refused.append(f"{self.command} {self.path} -> {status}")

        def setup(self) -> None:
            super().setup()
            with fake._cond:
                fake.connections += 1

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if fake.kind == "aws" and urlsplit(self.path).path == "/latest/api/token":
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    return self._send(400, "Missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
                return self._send(200, AWS_TOKEN, headers={"X-aws-ec2-metadata-token-ttl-seconds": ttl})
            self._send(404, "not found")

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            getattr(self, f"_{fake.kind}")(parts.path, query)

        def _aws(self, path: str, query: dict[str, str]) -> None:
            if self.headers.get("X-aws-ec2-metadata-token") != AWS_TOKEN:
                return self._send(401, "Unauthorized")
            if path != "/latest/meta-data/spot/instance-action":
                return self._send(404, "not found")
            with fake._cond:
                notice = fake.notice
            if notice is None:
                return self._send(404, "Not Found")
            deadline = notice["deadline"].strftime("%Y-%m-%dT%H:%M:%SZ")  # type: ignore[union-attr]
            self._send(200, json.dumps({"action": notice["action"], "time": deadline}), "application/json")

        def _gcp(self, path: str, query: dict[str, str]) -> None:
            flavor = {"Metadata-Flavor": "Google"}
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing Metadata-Flavor:Google header.", headers=flavor)
            if path == "/computeMetadata/v1/":
                return self._send(200, "instance/\nproject/\n", headers=flavor)
            if path != "/computeMetadata/v1/instance/preempted":
                return self._send(404, "not found", headers=flavor)
            if query.get("wait_for_change") == "true":
                fake.wait_for_change(query.get("last_etag"), float(query.get("timeout_sec", "300")))
            with fake._cond:
                value = "TRUE" if fake.notice is not None else "FALSE"
                etag = fake.etag
            self._send(200, value, "application/text", headers={**flavor, "ETag": etag})

        def _azure(self, path: str, query: dict[str, str]) -> None:
            if self.headers.get("Metadata") != "true":
                return self._send(400, json.dumps({"error": "Bad request. Required metadata header not specified"}),
                                  "application/json")
            if "api-version" not in query:
                return self._send(400, json.dumps({"error": "Bad request. api-version was not specified"}),
                                  "application/json")
            if path == "/metadata/instance":
                return self._send(200, json.dumps({"compute": {"vmId": "fake"}}), "application/json")
            if path != "/metadata/scheduledevents":
                return self._send(404, "not found")
            with fake._cond:
                notice, version = fake.notice, fake.version
            events = []
            if notice is not None:
                events.append({
                    "EventId": f"fake-{version}", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                    "Resources": ["fake-vm"], "EventStatus": "Scheduled",
                    "NotBefore": format_datetime(notice["deadline"], usegmt=True),  # type: ignore[arg-type]
                    "Description": "", "EventSource": "Platform", "DurationInSeconds": -1,
                })
            self._send(200, json.dumps({"DocumentIncarnation": version, "Events": events}), "application/json")

    return Handler
