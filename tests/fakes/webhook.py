"""A local webhook that records, in order, the notifications it receives (Apprise ``json://``
payloads and AutoDL's WeChat push), real HTTP on 127.0.0.1; it can hang each request (a webhook
that does not answer) until released.

Usage::

    with FakeWebhook() as hook:                  # hook.json_url("TOKEN") == "json://127.0.0.1:PORT/hook/TOKEN"
        ...
        hook.wait_for(2)                         # two messages received (real-time wait, bounded)
        assert [m["title"] for m in hook.messages] == [...]
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.fakes.http import FakeHTTPServer, RecordedRequest, Reply


class FakeWebhook:
    """See the module docstring.

    Attributes:
        messages: the JSON payloads received, in arrival order (``title``, ``message`` or
            ``content``...), each with ``_path``, ``_headers`` and ``_at`` (monotonic seconds).
        in_flight: requests received and not answered yet (a hanging webhook).
        hang_s: while > 0, each request is held that many seconds (or until :meth:`release`).
    """

    def __init__(self) -> None:
        self.server = FakeHTTPServer()
        self.messages: list[dict[str, Any]] = []
        self.in_flight = 0
        self.hang_s = 0.0
        self._release = threading.Event()
        self._lock = threading.Lock()
        self.server.route("POST", "/hook/{token}", self._handle)
        self.server.route("POST", "/api/v1/wechat/message/send", self._wechat)

    def __enter__(self) -> FakeWebhook:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.stop()

    @property
    def port(self) -> int:
        return self.server.port

    def json_url(self, token: str) -> str:
        """An Apprise ``json://`` URL of this webhook with ``token`` in its path."""
        return f"json://127.0.0.1:{self.port}/hook/{token}"

    def release(self) -> None:
        """Answer every held request now, and hold no more."""
        self.hang_s = 0.0
        self._release.set()

    def _record(self, req: RecordedRequest) -> None:
        payload = req.json()
        payload.update(_path=req.path, _headers=dict(req.headers), _at=time.monotonic())
        with self._lock:
            self.messages.append(payload)
            self.in_flight += 1
        try:
            if self.hang_s > 0:
                self._release.wait(self.hang_s)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handle(self, req: RecordedRequest) -> Reply:
        self._record(req)
        return Reply.json({})

    def _wechat(self, req: RecordedRequest) -> Reply:
        self._record(req)
        return Reply.json({"code": "Success", "msg": ""})

    def titles(self) -> list[str]:
        with self._lock:
            return [str(m.get("title")) for m in self.messages]

    def wait_for(self, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Wait (real time, at most ``timeout_s``) until ``count`` messages arrived; returns them.

        Raises:
            AssertionError: fewer arrived in time (names those that did).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.messages) >= count:
                    return list(self.messages)
            time.sleep(0.02)
        raise AssertionError(f"the webhook got {len(self.messages)} of {count} messages: {self.titles()}")


__all__ = ["FakeWebhook"]
