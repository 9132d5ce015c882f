"""Keeping notification URLs secret: what of a URL may be shown, and masking the rest anywhere.

An Apprise URL carries its credentials anywhere in it: the password (``json://user:TOKEN@host``),
the host (Telegram's ``tgram://BOTTOKEN/CHAT``), the path (``json://host/hook/TOKEN``), a header
or a parameter (``json://host?+Authorization=Bearer%20TOKEN``, ``dingtalk://TOKEN/?secret=S``).
Apprise's own ``url(privacy=True)`` hides the parts each service declares private, but a generic
``json://`` webhook's path and headers stay visible, so costctl never prints a URL at all:

* :func:`describe_url` names a target as ``json://127.0.0.1:8080/...``: the scheme, the host only
  when it reads as a network name or address (never a token), the port, and ``/...`` for
  whatever follows;
* :func:`url_secrets` lists every other part of a URL (user, password, host that is no network
  name, each path segment, each query key and value, the fragment, in raw and percent-decoded
  form), and :func:`redact` masks each of them in a text: what the sender child reports, Apprise's
  own log lines (:class:`RedactFilter`), a traceback.

Standard library only (and :mod:`costctl.i18n`, which is too): the watch imports it, Apprise is
never imported there.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from ..i18n import _

#: What replaces a secret in a text.
MASK = "****"

#: Fragments shorter than this are not masked on their own (``/a/``, ``?x=1``): masking them
#: would blank ordinary words and digits everywhere; they are no credential either.
MIN_SECRET_CHARS = 4

_NETWORK_NAME = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", re.IGNORECASE)


def _split(url: str):
    """``urlsplit`` that never raises (an invalid port, an odd bracket): None for what it cannot read."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
        return parts
    except ValueError:
        return None


def _shown_host(host: str | None) -> str | None:
    """``host`` when it reads as a network address or a DNS name (``hooks.slack.com``,
    ``127.0.0.1``, ``localhost``), else None: a bare word may be a token (``tgram://BOTTOKEN``)."""
    if not host:
        return None
    if host == "localhost":
        return host
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    return host if _NETWORK_NAME.match(host) else None


def describe_url(url: str) -> str:
    """How a notification URL is named in messages: ``json://127.0.0.1:8080/...``,
    ``tgram://...``, ``autodl://...`` — the scheme, the host when it is a network name or
    address, the port, and ``/...`` when anything else followed. Never a credential."""
    parts = _split(url)
    if parts is None or not parts.scheme:
        scheme = re.match(r"^\s*([A-Za-z][A-Za-z0-9+.-]*)://", url)
        return f"{scheme.group(1).lower()}://..." if scheme else _("(an unreadable URL)")
    host = _shown_host(parts.hostname)
    if host is None:
        return f"{parts.scheme.lower()}://..."
    shown = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    rest = "/..." if (parts.path.strip("/") or parts.query or parts.fragment or parts.username) else ""
    return f"{parts.scheme.lower()}://{shown}{port}{rest}"


def url_secrets(url: str) -> list[str]:
    """Every part of ``url`` that :func:`describe_url` does not show, in raw and decoded form,
    longest first (the whole URL first): what :func:`redact` masks."""
    found: set[str] = {url.strip()}
    parts = _split(url)
    text = url.strip()
    if parts is None:
        found.update(re.split(r"[:/@?&=#]+", text.split("://", 1)[-1]))
    else:
        netloc = parts.netloc
        userinfo = netloc.rpartition("@")[0] if "@" in netloc else ""
        found.update(re.split(r"[:]", userinfo, maxsplit=1))
        host = parts.hostname
        if host and _shown_host(host) is None:
            found.add(host)
            # the host as written (its case kept: urlsplit lowers it)
            written = netloc.rpartition("@")[2]
            found.add(written.rsplit(":", 1)[0] if written.count(":") == 1 else written)
        found.update(parts.path.split("/"))
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            found.add(key)
            found.add(value)
            found.update(value.split())  # "Bearer TOKEN"
        found.update(parts.query.split("&"))
        found.add(parts.fragment)
    decoded = {unquote(f) for f in found}
    return sorted((f for f in found | decoded if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True)


def all_secrets(urls: Iterable[str]) -> list[str]:
    """:func:`url_secrets` of every URL, longest first."""
    out: set[str] = set()
    for url in urls:
        out.update(url_secrets(url))
    return sorted(out, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret (longest first) replaced by :data:`MASK`."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactFilter(logging.Filter):
    """A logging filter that masks the given secrets in each record's message (its arguments
    merged in first), so no handler ever formats a URL or a token.

    Args:
        secrets: the fragments to mask (:func:`all_secrets`).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record whose arguments do not format: drop them
            message = str(record.msg)
        record.msg = redact(message, self.secrets)
        record.args = None
        if record.exc_info:
            import traceback

            record.msg += "\n" + redact("".join(traceback.format_exception(*record.exc_info)), self.secrets)
            record.exc_info = None
            record.exc_text = None
        return True


__all__ = ["MASK", "RedactFilter", "all_secrets", "describe_url", "redact", "url_secrets"]
