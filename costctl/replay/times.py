"""Times read from recorded logs, kept within a range a replay can compute with.

A log's time can be anything: ``9999/12/31 23:59:59`` is a valid nvidia-smi timestamp, a wandb
``_timestamp`` of ``1e300`` or ``nan`` is a valid JSON number, an ``elapsed_sec`` of ``1e18`` a
valid offset. Python's datetimes end at the years 1 and 9999, so a replay that adds its idle
window (or a plan's hours) to such a time, or places a step at ``start + step / rate``, would
raise ``OverflowError`` far from the reader. Every recorded time therefore lies in
:data:`TIME_MIN` .. :data:`TIME_MAX` (the years 1900 to 8999, UTC): a record outside it cannot be
placed in time and is skipped (counted) by its reader, like any unreadable record. The margin
left to either end of Python's range (a thousand years) is more than any window, plan or
duration costctl adds to a time.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

__all__ = ["TIME_MAX", "TIME_MIN", "in_range", "offset", "from_unix"]

#: The earliest time a recorded log's record may carry (aware UTC).
TIME_MIN = datetime(1900, 1, 1, tzinfo=timezone.utc)
#: The end of the range: a record at or after it is skipped (aware UTC).
TIME_MAX = datetime(9000, 1, 1, tzinfo=timezone.utc)


def in_range(when: datetime) -> bool:
    """Whether the aware datetime ``when`` lies in ``TIME_MIN <= when < TIME_MAX``."""
    return TIME_MIN <= when < TIME_MAX


def offset(start: datetime, seconds: float) -> datetime | None:
    """``start + seconds`` (aware ``start``; ``seconds`` may be negative or fractional), or None
    when ``seconds`` is not finite or the result falls outside :data:`TIME_MIN` ..
    :data:`TIME_MAX`. Never raises."""
    if not math.isfinite(seconds):
        return None
    # compared in seconds first: start + seconds itself may be past Python's year 9999
    if not (TIME_MIN - start).total_seconds() <= seconds < (TIME_MAX - start).total_seconds():
        return None
    when = start + timedelta(seconds=seconds)
    return when if in_range(when) else None  # a float at the very edge rounds either way


def from_unix(seconds: float) -> datetime | None:
    """The aware-UTC time of Unix ``seconds`` (a wandb ``_timestamp``), or None when it is not
    finite or falls outside :data:`TIME_MIN` .. :data:`TIME_MAX`. Never raises."""
    return offset(datetime(1970, 1, 1, tzinfo=timezone.utc), seconds)
