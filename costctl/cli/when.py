"""Date/date-time options of the CLI (``bill --since/--until``, ``analyze --start-time``): one
parser for all, so every one takes the same ISO-8601 shapes and the same range.

Only the extended ISO-8601 forms are taken (``2026-01-31``, ``2026-01-31T08:00``,
``2026-01-31 08:00:00.5``, with an optional ``Z`` or ``+08:00``): :meth:`datetime.fromisoformat`
alone also reads basic forms, so that ``1111111111111111`` would be read as 1111-11-11. The value
becomes aware UTC; one outside :data:`MIN_WHEN` .. :data:`MAX_WHEN` (past which a time zone's
offset or a day added to it leaves :class:`datetime`'s years 1..9999) is a one-line error.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo

from ..errors import UsageError
from ..i18n import _

__all__ = ["MAX_WHEN", "MIN_WHEN", "parse_when_option"]

#: The earliest instant a date option takes: the Unix epoch (no GPU log or ledger row is older).
MIN_WHEN = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The latest: the last day of :class:`datetime`'s range at midnight UTC, leaving room for any
#: zone's offset (at most 26 hours, RFC 9557) when the value is shown in the configured zone.
MAX_WHEN = datetime(9999, 12, 31, tzinfo=timezone.utc)

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}(?::?\d{2})?)?)?",
                  re.ASCII)


def parse_when_option(text: str, *, option: str, tz: tzinfo, allowed: str) -> datetime:
    """``text`` (a date option's value) as aware UTC.

    Args:
        text: the value as typed; a date means its midnight in ``tz``, a date-time without an
            offset is read in ``tz``.
        option: the option's name, for the message (``--since``).
        tz: the zone of a value without an offset.
        allowed: the translated sentence saying which shapes are allowed.

    Raises:
        UsageError: not an extended ISO-8601 date/date-time (``allowed`` said), or outside
            :data:`MIN_WHEN` .. :data:`MAX_WHEN` (the range said) — one line naming ``option``.
    """
    value = text.strip()
    parsed: datetime | None = None
    if _ISO.fullmatch(value):
        try:
            parsed = datetime.fromisoformat(value.replace(",", "."))
        except ValueError:
            parsed = None
    if parsed is None:
        raise UsageError(_("{option} {value!r}: {allowed}").format(option=option, value=text, allowed=allowed))
    try:
        utc = (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=tz)).astimezone(timezone.utc)
    except (OverflowError, ValueError):  # 0001-01-01 east of UTC, 9999-12-31 west of it
        utc = None
    if utc is None or not MIN_WHEN <= utc <= MAX_WHEN:
        raise UsageError(_("{option} {value!r}: outside the allowed range {low} .. {high} (UTC)").format(
            option=option, value=text, low=MIN_WHEN.strftime("%Y-%m-%d %H:%M"), high=MAX_WHEN.strftime("%Y-%m-%d %H:%M")))
    return utc
