"""Serving the WSGI app: the standard library's ``wsgiref`` server with a thread per request, and
the rule for which addresses may be bound without a token.

:class:`ThreadingWSGIServer` is ``wsgiref.simple_server.WSGIServer`` with
:class:`socketserver.ThreadingMixIn` (daemon threads: a slow scrape never holds up the page,
and Ctrl-C does not wait for open connections). It binds IPv4 or IPv6 by the address given.
Its request log goes to the ``costctl.serve`` logger without the query string (a ``?token=``
must not reach a log).

:func:`check_bind`: a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``, or a name
resolving only to those) may be bound without a token; any other needs a token or the
statement that a reverse proxy in front authenticates (``--behind-proxy``), else it is a usage
error (one line, exit status 2).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import socketserver
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..errors import UsageError
from ..i18n import _

log = logging.getLogger("costctl.serve")

#: The shortest token accepted: 16 characters (about 96 bits as ``secrets.token_urlsafe(12)``
#: makes them; OWASP's session-id guidance asks for at least 64 bits of entropy).
MIN_TOKEN_CHARS = 16
#: The fewest distinct characters a token may have: a random 16-character urlsafe token has 13
#: or more almost always (64 symbols); fewer than 6 is a typed pattern ("aaaa...", "abab...").
MIN_TOKEN_DISTINCT = 6
#: Default port (unassigned in IANA's registry; 0 picks a free one).
DEFAULT_PORT = 8787


class QuietHandler(WSGIRequestHandler):
    """The request handler: logs ``METHOD PATH STATUS`` at debug level (no query string, no
    client details on stderr)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        path = getattr(self, "path", "").split("?", 1)[0]
        log.debug("%s %s %s", getattr(self, "command", "-"), path, code)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """``wsgiref``'s server with one daemon thread per request."""

    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        """Bind, and name the server by the address it was given (``http.server`` would look
        its name up with ``socket.getfqdn``: a reverse DNS query that can hang for seconds)."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is loopback only: ``127.0.0.0/8``, ``::1``,
    ``localhost``, or a name whose every address is one of those. An empty host (every
    address) and a name that does not resolve are not."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def token_problem(token: str) -> None:
    """Refuse a weak serve token: one with whitespace (a header carries it badly, and sixteen
    spaces are no secret), shorter than :data:`MIN_TOKEN_CHARS`, or with fewer than
    :data:`MIN_TOKEN_DISTINCT` distinct characters.

    Raises:
        UsageError: one line naming what is wrong and what is allowed.
    """
    hint = "python -c \"import secrets; print(secrets.token_urlsafe(24))\""
    if any(ch.isspace() for ch in token):
        raise UsageError(_("the serve token contains whitespace (a space, tab or line break): give at least {least} "
                           "letters, digits or punctuation, e.g. from {hint}").format(least=MIN_TOKEN_CHARS, hint=hint))
    if len(token) < MIN_TOKEN_CHARS:
        raise UsageError(_("the serve token is {count} characters long; give at least {least} (e.g. from "
                           "{hint})").format(count=len(token), least=MIN_TOKEN_CHARS, hint=hint))
    distinct = len(set(token))
    if distinct < MIN_TOKEN_DISTINCT:
        raise UsageError(_("the serve token has only {count} different characters: a guessable pattern; give a "
                           "random one with at least {least} different characters (e.g. from {hint})").format(
            count=distinct, least=MIN_TOKEN_DISTINCT, hint=hint))


def check_bind(host: str, token: str | None, behind_proxy: bool) -> None:
    """Refuse a bind that would serve the ledger to a network without authentication.

    Raises:
        UsageError: ``host`` is not loopback and neither a token nor ``behind_proxy`` is given;
            or the token is weak (:func:`token_problem`).
    """
    if token is not None:
        token_problem(token)
    if not is_loopback(host) and token is None and not behind_proxy:
        raise UsageError(_("--host {host} is not a loopback address: give a token (--token, or COSTCTL_SERVE__TOKEN) "
                           "or --behind-proxy (a reverse proxy in front authenticates)").format(host=host or "''"))


def make_server(host: str, port: int, app: Any) -> ThreadingWSGIServer:
    """A :class:`ThreadingWSGIServer` bound to ``host:port`` (``port`` 0: a free one) serving ``app``.

    Raises:
        UsageError: the address cannot be bound (in use, not this machine's, no permission).
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
    try:
        server = server_class((host.strip("[]"), port), QuietHandler)
    except OSError as exc:
        raise UsageError(_("cannot listen on {host} port {port}: {error}").format(
            host=host, port=port, error=exc.strerror or exc)) from None
    except OverflowError:
        raise UsageError(_("--port {port} is not a port number (0 to 65535)").format(port=port)) from None
    server.set_app(app)
    return server


__all__ = ["DEFAULT_PORT", "MIN_TOKEN_CHARS", "MIN_TOKEN_DISTINCT", "token_problem", "QuietHandler", "ThreadingWSGIServer", "check_bind", "is_loopback",
           "make_server"]
