"""What ``costctl serve`` masks before showing a decision or an unreadable account: the
:class:`~costctl.redaction.Redactor` of :mod:`costctl.redaction` (known secrets, shapes, keys),
which the fleet read and ``costctl patrol`` share. Re-exported here for the server's imports."""

from __future__ import annotations

from ..redaction import SHAPES, Redactor, known_secrets, secret_key

__all__ = ["Redactor", "SHAPES", "known_secrets", "secret_key"]
