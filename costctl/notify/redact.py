"""Keeping notification URLs secret: what of a URL may be shown, and masking the rest anywhere.

An Apprise URL carries its credentials anywhere in it: the password (``json://user:TOKEN@host``),
the host (Telegram's ``tgram://BOTTOKEN/CHAT``), the path (``json://host/hook/TOKEN``), a header
or a parameter (``json://host?+Authorization=Bearer%20TOKEN``, ``dingtalk://TOKEN/?secret=S``).
Apprise's own ``url(privacy=True)`` hides the parts each service declares private, but a generic
``json://`` webhook's path and headers stay visible, so costctl never prints a URL at all:

* :func:`describe_url` names a target as ``json://127.0.0.1:8080/...``: the scheme, the host only
  when it reads as a network name or address (never a token), the port, and ``/...`` for
  whatever follows;
* :func:`url_secrets` lists every other part of a URL that can be a secret (user, password, a
  query value whose key names a secret; a host that is no network name, a path segment, another
  query value or the fragment when it is token-like: :func:`costctl.redaction.token_like`), in raw
  and percent-decoded form, and :func:`redact` masks each of them in a text where it stands as a
  whole token: what the sender child reports, Apprise's own log lines (:class:`RedactFilter`), a
  traceback. Both live in :mod:`costctl.redaction` (the fleet and ``costctl serve`` use them too).

Standard library only (and :mod:`costctl.i18n`, which is too): the watch imports it, Apprise is
never imported there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from ..i18n import _
from ..redaction import MASK, MIN_SECRET_CHARS, all_secrets, redact, url_secrets
from ..redaction import shown_host as _shown_host
from ..redaction import split_url as _split


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


__all__ = ["MASK", "MIN_SECRET_CHARS", "RedactFilter", "all_secrets", "describe_url", "redact", "url_secrets"]
