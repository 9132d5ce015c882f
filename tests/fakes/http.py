"""A reusable local fake HTTP server for provider and metadata-service tests.

Real HTTP on 127.0.0.1, a fresh port per server (port 0), served by
:class:`http.server.ThreadingHTTPServer` in a daemon thread.

Usage::

    from tests.fakes.http import FakeHTTPServer, Reply

    with FakeHTTPServer() as srv:                       # srv.url == "http://127.0.0.1:PORT"
        srv.route("GET", "/instances/", lambda req: {"instances": []})        # dict/list -> JSON 200
        srv.route("PUT", "/instances/{id}/", lambda req: Reply.json({"success": True}))
        srv.inject("PUT", "/instances/{id}/", Reply.empty(503))           # next call fails once
        srv.inject_429("GET", "/instances/", retry_after=2)
        ...
        req = srv.last("PUT", "/instances/{id}/")       # RecordedRequest
        assert req.path_params == {"id": "42"} and req.json() == {"state": "stopped"}
        assert req.headers["Authorization"] == "Bearer k"
        assert srv.count("PUT", "/instances/{id}/") == 2   # the failed call and the retry

Routes: ``(method, pattern)``; ``pattern`` is a path (no query string) where ``{name}`` matches
one path segment (``[^/]+``), available as ``req.path_params``. A handler takes the
:class:`RecordedRequest` and returns a :class:`Reply`, a ``dict``/``list`` (JSON, 200), a
``str``/``bytes`` (200, text), or ``None`` (204). An exception in a handler becomes a 500 with
the exception text (and is kept in :attr:`FakeHTTPServer.errors`).

Unexpected requests (no route) get **400** and are recorded with ``matched=False``;
:meth:`FakeHTTPServer.unexpected` lists them (assert it is empty).

Injected replies (:meth:`FakeHTTPServer.inject` and the ``inject_*`` helpers) are queued per
route and served first, one per request, before the route's handler is consulted again:
``inject_status`` (a status once, e.g. 500), ``inject_5xx``, ``inject_429`` (with
``Retry-After``), ``inject_delay`` (a canned answer, late), ``inject_disconnect`` (the socket is
closed without an answer), ``inject_reset`` (a TCP reset, no answer), ``inject_malformed_json``.
:meth:`FakeHTTPServer.delay_next` is different: the route's handler runs (the fake's state
changes, e.g. the stop happens) but the answer comes ``seconds`` late — a client timeout on a
call that was carried out. A :class:`Reply` with ``delay`` sleeps that many seconds before
answering (use it for "longer than the client timeout"); :meth:`FakeHTTPServer.stop` interrupts
pending delays. Each :class:`RecordedRequest` keeps the ``status`` it was answered with (None
when the connection was dropped), so tests count requests and successful ones per route.
"""

from __future__ import annotations

import json as _json
import re
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeHTTPServer", "RecordedRequest", "Reply"]


@dataclass
class Reply:
    """A canned response.

    Attributes:
        status: HTTP status.
        body: bytes sent as is; ``str`` is UTF-8 encoded; anything else is JSON-encoded.
        headers: extra response headers (Content-Type defaults from the body kind).
        delay: seconds to wait before answering.
        close: drop the connection without answering (a connection error for the client).
        reset: like ``close``, but with a TCP reset (``SO_LINGER`` 0): the client reads
            "connection reset by peer".
    """

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    close: bool = False
    reset: bool = False

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> "Reply":
        """A JSON reply."""
        return cls(status=status, body=_json.dumps(data).encode(), headers={"Content-Type": "application/json", **(headers or {})})

    @classmethod
    def text(cls, text: str, status: int = 200, headers: dict[str, str] | None = None) -> "Reply":
        """A text/plain reply."""
        return cls(status=status, body=text.encode(), headers={"Content-Type": "text/plain", **(headers or {})})

    @classmethod
    def empty(cls, status: int, headers: dict[str, str] | None = None) -> "Reply":
        """A reply with ``status`` and an empty body, e.g. ``Reply.empty(503)``."""
        return cls(status=status, body=b"", headers=dict(headers or {}))

    @classmethod
    def malformed_json(cls, status: int = 200) -> "Reply":
        """A reply that claims JSON but is not."""
        return cls(status=status, body=b'{"truncated": ', headers={"Content-Type": "application/json"})

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        if isinstance(self.body, bytes):
            body = self.body
        elif isinstance(self.body, str):
            body = self.body.encode()
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        else:
            body = _json.dumps(self.body).encode()
            headers.setdefault("Content-Type", "application/json")
        return body, headers


@dataclass
class RecordedRequest:
    """One request the server received.

    Attributes:
        method: upper-case method.
        path: path without the query string; ``query``: parsed query (name -> list of values).
        raw_path: path with query string as sent.
        headers: request headers (case-insensitive lookups via :meth:`header`; the dict keeps
            the sent capitalization).
        body: raw body bytes.
        route: the matched pattern (None when unexpected); ``path_params`` from ``{name}``.
        matched: whether a route matched.
        status: the HTTP status it was answered with (None: dropped or reset without an answer).
        reply_body: the answered body bytes (``b""`` when none).
    """

    method: str
    path: str
    raw_path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    route: str | None = None
    path_params: dict[str, str] = field(default_factory=dict)
    matched: bool = False
    status: int | None = None
    reply_body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON (raises ValueError if it is not)."""
        return _json.loads(self.body or b"null")

    def header(self, name: str) -> str | None:
        """Header value by case-insensitive name, or None."""
        lname = name.lower()
        for k, v in self.headers.items():
            if k.lower() == lname:
                return v
        return None


Handler = Callable[[RecordedRequest], Any]


class _Route:
    def __init__(self, method: str, pattern: str, handler: Handler | None) -> None:
        self.method = method.upper()
        self.pattern = pattern
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(pattern))
        self.regex = re.compile(f"^{regex}$")
        self.handler = handler
        self.queue: deque[Reply] = deque()
        self.delays: deque[float] = deque()


class FakeHTTPServer:
    """Local fake HTTP server (see the module docstring for the API).

    Attributes:
        url: ``http://127.0.0.1:<port>``, no trailing slash.
        host / port.
        requests: every :class:`RecordedRequest`, in arrival order.
        errors: exceptions raised by handlers.
    """

    def __init__(self) -> None:
        self._routes: list[_Route] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.host = "127.0.0.1"
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> "FakeHTTPServer":
        """Bind a fresh port on 127.0.0.1 and serve in a daemon thread."""
        owner = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence
                pass

            def _handle(self) -> None:
                owner._dispatch(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

        self._server = ThreadingHTTPServer((self.host, 0), _H)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, interrupt delayed replies and free the port."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeHTTPServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self.host}:{self.port}"

    # -- routes and injection -----------------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler | Reply | dict | list | None = None) -> None:
        """Register (or replace) the handler for ``(method, pattern)``.

        ``handler`` may be a callable, or a fixed :class:`Reply` / dict / list returned every time.
        """
        if handler is not None and not callable(handler):
            fixed = handler
            handler = lambda req: fixed  # noqa: E731
        with self._lock:
            for r in self._routes:
                if r.method == method.upper() and r.pattern == pattern:
                    r.handler = handler
                    return
            self._routes.append(_Route(method, pattern, handler))

    def _route_for(self, method: str, pattern: str) -> _Route:
        with self._lock:
            for r in self._routes:
                if r.method == method.upper() and r.pattern == pattern:
                    return r
            r = _Route(method, pattern, None)
            self._routes.append(r)
            return r

    def inject(self, method: str, pattern: str, *replies: Reply) -> None:
        """Queue ``replies`` for ``(method, pattern)``: each is served once, in order, before
        the route's handler answers again. The route need not have a handler (then, once the
        queue is empty, requests are unexpected: 400)."""
        r = self._route_for(method, pattern)
        with self._lock:
            r.queue.extend(replies)

    def inject_status(self, method: str, pattern: str, status: int, *, times: int = 1,
                      headers: dict[str, str] | None = None) -> None:
        """The next ``times`` requests get ``status`` (e.g. 500) with an empty body."""
        self.inject(method, pattern, *[Reply.empty(status, headers) for _ in range(times)])

    def inject_reset(self, method: str, pattern: str, *, times: int = 1) -> None:
        """The next ``times`` requests are read and answered with a TCP reset (no HTTP answer)."""
        self.inject(method, pattern, *[Reply(reset=True) for _ in range(times)])

    def delay_next(self, method: str, pattern: str, seconds: float, *, times: int = 1) -> None:
        """The next ``times`` requests are handled by the route's handler (its state changes)
        but answered ``seconds`` late: longer than the client's timeout, a call that happened."""
        r = self._route_for(method, pattern)
        with self._lock:
            r.delays.extend([seconds] * times)

    def inject_5xx(self, method: str, pattern: str, *, times: int = 1, status: int = 503) -> None:
        """The next ``times`` requests get ``status`` (default 503) with an empty body."""
        self.inject(method, pattern, *[Reply.empty(status) for _ in range(times)])

    def inject_429(self, method: str, pattern: str, *, retry_after: float | str | None = 1, times: int = 1) -> None:
        """The next ``times`` requests get 429 with ``Retry-After: retry_after`` (seconds)."""
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        self.inject(method, pattern, *[Reply.empty(429, headers) for _ in range(times)])

    def inject_delay(self, method: str, pattern: str, seconds: float, *, then: Reply | None = None, times: int = 1) -> None:
        """The next ``times`` requests wait ``seconds`` before answering ``then`` (default: 200 ``{}``)."""
        base = then or Reply.json({})
        self.inject(method, pattern, *[Reply(base.status, base.body, dict(base.headers), delay=seconds) for _ in range(times)])

    def inject_malformed_json(self, method: str, pattern: str, *, times: int = 1) -> None:
        """The next ``times`` requests get 200 with a body that is not valid JSON."""
        self.inject(method, pattern, *[Reply.malformed_json() for _ in range(times)])

    def inject_disconnect(self, method: str, pattern: str, *, times: int = 1) -> None:
        """The next ``times`` requests are read and the connection closed without an answer."""
        self.inject(method, pattern, *[Reply(close=True) for _ in range(times)])

    # -- assertions -----------------------------------------------------------------------

    def calls(self, method: str | None = None, pattern: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally filtered by method and matched route pattern."""
        with self._lock:
            reqs = list(self.requests)
        return [
            r for r in reqs
            if (method is None or r.method == method.upper()) and (pattern is None or r.route == pattern)
        ]

    def count(self, method: str | None = None, pattern: str | None = None) -> int:
        """Number of requests to ``(method, pattern)``."""
        return len(self.calls(method, pattern))

    def answered(self, method: str | None = None, pattern: str | None = None) -> list[int | None]:
        """The statuses the requests to ``(method, pattern)`` were answered with, in order
        (None for a dropped or reset connection)."""
        return [r.status for r in self.calls(method, pattern)]

    def last(self, method: str | None = None, pattern: str | None = None) -> RecordedRequest:
        """The latest request to ``(method, pattern)`` (AssertionError if none)."""
        calls = self.calls(method, pattern)
        assert calls, f"no request to {method} {pattern}; got {[(r.method, r.raw_path) for r in self.calls()]}"
        return calls[-1]

    def unexpected(self) -> list[RecordedRequest]:
        """Requests that matched no route (they got a 400)."""
        return [r for r in self.calls() if not r.matched]

    # -- serving ----------------------------------------------------------------------------

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        split = urlsplit(h.path)
        req = RecordedRequest(
            method=h.command.upper(),
            path=split.path,
            raw_path=h.path,
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k: v for k, v in h.headers.items()},
            body=body,
        )
        reply: Reply | None = None
        handler: Handler | None = None
        late = 0.0
        with self._lock:
            for r in self._routes:
                if r.method != req.method:
                    continue
                m = r.regex.match(req.path)
                if not m:
                    continue
                if not r.queue and r.handler is None:
                    continue
                req.route, req.path_params, req.matched = r.pattern, m.groupdict(), True
                if r.queue:
                    reply = r.queue.popleft()
                else:
                    handler = r.handler
                    if r.delays:
                        late = r.delays.popleft()
                break
            self.requests.append(req)
        if reply is None:
            if handler is None:
                reply = Reply.json({"error": f"unexpected request {req.method} {req.raw_path}"}, status=400)
            else:
                try:
                    reply = _coerce(handler(req))
                except Exception as exc:  # noqa: BLE001 - reported to the test via .errors
                    self.errors.append(exc)
                    reply = Reply.text(f"handler error: {exc!r}", status=500)
        if reply.delay or late:
            self._stopping.wait(reply.delay + late)
        if reply.reset:
            h.close_connection = True
            try:
                h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                h.connection.close()
            except OSError:
                pass
            return
        if reply.close:
            h.close_connection = True
            try:
                h.wfile.flush()
                h.connection.shutdown(2)
            except OSError:
                pass
            return
        payload, headers = reply.encoded()
        req.status, req.reply_body = reply.status, payload
        try:
            h.send_response(reply.status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(payload)
        except OSError:  # the client gave up (timeout): nothing to answer
            h.close_connection = True


def _coerce(result: Any) -> Reply:
    if isinstance(result, Reply):
        return result
    if result is None:
        return Reply(status=204)
    if isinstance(result, (dict, list)):
        return Reply.json(result)
    if isinstance(result, (str, bytes)):
        return Reply(status=200, body=result)
    raise TypeError(f"handler returned {type(result).__name__}; expected Reply, dict, list, str, bytes or None")
