"""The WSGI application of ``costctl serve``: read-only, token-checked, one line per error.

Routes (GET, and HEAD: the same headers, no body):

* ``/`` — the dashboard (:mod:`.dashboard`), ``text/html``;
* ``/metrics`` — Prometheus exposition (:mod:`.metrics`);
* ``/healthz`` — ``ok``: the server answers (the ledger is not read).

Anything else: 404. Any other method: 405 with ``Allow: GET, HEAD`` — nothing here writes, and
the ledger is opened without migrating or creating it (:class:`.source.LedgerSource`).

With a token, every route asks for it (401 otherwise, ``WWW-Authenticate: Bearer``): an
``Authorization: Bearer TOKEN`` header (Prometheus' ``authorization`` / ``bearer_token_file``),
or ``?token=TOKEN`` in the URL for a browser. Compared with :func:`hmac.compare_digest` (time
independent of where the texts differ). The token never appears in a page or a log line.

A ledger that cannot be read gives 503 and one line (``text/plain``), the reason; the server
stays up and the next request reads again. A missing ledger is an empty page and metrics with
no series but the zero counters.

Every answer carries ``Cache-Control: no-store``, ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` (a ``?token=`` URL is never sent on) and, for the page, a
Content-Security-Policy that allows no script and no resource from elsewhere.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from ..clock import utcnow
from ..errors import LedgerError
from ..i18n import _
from .data import InstanceSource, Thresholds, ledger_instances, read_dashboard, read_metrics
from .metrics import LedgerCollector, exposition
from .redaction import Redactor

if TYPE_CHECKING:
    from .fleet_view import FleetCache
    from .source import LedgerSource

log = logging.getLogger("costctl.serve")

StartResponse = Callable[..., Any]

#: Methods served; everything else is 405.
METHODS = ("GET", "HEAD")
#: Headers on every answer.
COMMON_HEADERS = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                  ("Referrer-Policy", "no-referrer")]
#: The page's Content-Security-Policy: its own inline styles and nothing else.
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action 'none'; " \
           "frame-ancestors 'none'"

_STATUS = {200: "200 OK", 401: "401 Unauthorized", 404: "404 Not Found", 405: "405 Method Not Allowed",
           500: "500 Internal Server Error", 503: "503 Service Unavailable"}


def _internal_error(exc: BaseException) -> str:
    """One line for an unexpected exception (a bug), its traceback written to the crash-log
    directory (as the CLI does for a command) when it can be."""
    import traceback
    from datetime import timezone

    from ..errors import CostctlError
    from ..paths import crash_log_dir

    detail = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    try:
        path = crash_log_dir() / f"serve-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}.log"
        path.write_text("".join(traceback.format_exception(exc)))
    except (OSError, CostctlError):
        return _("costctl: internal error: {error}: {detail}").format(error=type(exc).__name__, detail=detail)
    return _("costctl: internal error: {error}: {detail} (traceback in {path})").format(
        error=type(exc).__name__, detail=detail, path=path)


class ServeApp:
    """The WSGI callable (see the module docstring).

    Args:
        source: the ledger.
        token: the token every request must carry, or None (no check: a loopback bind, or a
            reverse proxy that authenticates).
        tz: the zone times are shown in (``[watch] timezone``).
        thresholds: the idle thresholds (``[policies.idle]``).
        redactor: what masks secrets in decisions.
        instances: the ledger's instances table's rows.
        fleet: the cached fleet read (:class:`.fleet_view.FleetCache`) whose rows the instances
            table shows; None: no provider is configured, the ledger's table.
        clock: the present (aware UTC); tests pass a simulated one.
    """

    def __init__(self, source: LedgerSource, *, token: str | None = None, tz: tzinfo, thresholds: Thresholds,
                 redactor: Redactor, instances: InstanceSource = ledger_instances,
                 clock: Callable[[], datetime] = utcnow, fleet: FleetCache | None = None) -> None:
        self.source = source
        self._token = token.encode("utf-8") if token else None
        self.tz = tz
        self.thresholds = thresholds
        self.redactor = redactor
        self.instances = instances
        self.clock = clock
        self.fleet = fleet

    # -------------------------------------------------------------------- checks

    def authorized(self, environ: dict[str, Any]) -> bool:
        """Whether the request carries the token (always True without one)."""
        if self._token is None:
            return True
        offered: list[str] = []
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _sep, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            offered.append(value.strip())
        offered += parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).get("token", [])
        # Every offered value is compared (no early exit on the first mismatch).
        return any([hmac.compare_digest(o.encode("utf-8"), self._token) for o in offered])

    # -------------------------------------------------------------------- answers

    @staticmethod
    def _answer(start_response: StartResponse, code: int, body: bytes, content_type: str, *, head: bool,
                extra: Iterable[tuple[str, str]] = ()) -> list[bytes]:
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *COMMON_HEADERS, *extra]
        start_response(_STATUS[code], headers)
        return [] if head else [body]

    def _line(self, start_response: StartResponse, code: int, text: str, *, head: bool,
              extra: Iterable[tuple[str, str]] = ()) -> list[bytes]:
        """One line of text (an error, ``ok``)."""
        return self._answer(start_response, code, (text.rstrip("\n") + "\n").encode("utf-8"),
                            "text/plain; charset=utf-8", head=head, extra=extra)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET").upper()
        if method not in METHODS:
            return self._line(start_response, 405, _("costctl serve is read-only: {method} is not allowed (GET or "
                                                     "HEAD)").format(method=method[:16]), head=False,
                              extra=[("Allow", ", ".join(METHODS))])
        head = method == "HEAD"
        if not self.authorized(environ):
            return self._line(start_response, 401, _("a token is required: send the header \"Authorization: Bearer "
                                                     "TOKEN\" or add ?token=TOKEN to the URL"), head=head,
                              extra=[("WWW-Authenticate", 'Bearer realm="costctl"')])
        path = environ.get("PATH_INFO", "/") or "/"
        try:
            if path == "/healthz":
                return self._line(start_response, 200, "ok", head=head)
            if path == "/metrics":
                return self._metrics(environ, start_response, head=head)
            if path in ("/", "/index.html"):
                return self._page(start_response, head=head)
        except LedgerError as exc:
            log.warning("%s", exc.message)
            return self._line(start_response, 503, exc.message, head=head)
        except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback in a crash log, the server stays up
            return self._line(start_response, 500, self.redactor.text(_internal_error(exc)), head=head)
        return self._line(start_response, 404, _("no page at {path} (the dashboard is at /, the metrics at "
                                                 "/metrics)").format(path=path[:200]), head=head)

    def _metrics(self, environ: dict[str, Any], start_response: StartResponse, *, head: bool) -> list[bytes]:
        now = self.clock()
        collector = LedgerCollector(lambda: self.source.read(lambda conn: read_metrics(conn, now, self.thresholds)))
        body, content_type = exposition(collector, environ.get("HTTP_ACCEPT"))
        return self._answer(start_response, 200, body, content_type, head=head)

    def _page(self, start_response: StartResponse, *, head: bool) -> list[bytes]:
        from .dashboard import render

        now = self.clock()
        data = self.source.read(lambda conn: read_dashboard(conn, now, self.thresholds, self.instances))
        note = None
        if data is None:
            note = _("Nothing recorded yet: there is no ledger at {url} (`costctl watch` creates it).").format(
                url=self.source.shown_url)
        fleet = self.fleet.view() if self.fleet is not None else None
        html = render(data, now=now, tz=self.tz, redactor=self.redactor, ledger=self.source.shown_url, note=note,
                      fleet=fleet)
        return self._answer(start_response, 200, html.encode("utf-8"), "text/html; charset=utf-8", head=head,
                            extra=[("Content-Security-Policy", PAGE_CSP)])


__all__ = ["COMMON_HEADERS", "METHODS", "PAGE_CSP", "ServeApp"]
