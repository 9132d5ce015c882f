"""UTC 15-minute buckets and POSIX microseconds: the time arithmetic of the charge rollups.

Shared by the accrual (:mod:`costctl.ledger.accrual`, which writes ``charge_rollups``) and the
bill's queries (:mod:`costctl.ledger.queries`, which read them); no SQLAlchemy here.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from ..clock import ensure_utc

#: Width of a rollup bucket, seconds (UTC 15 minutes: every time zone's midnight is on one).
BUCKET_S = 900
#: Microseconds per second and per bucket.
US_PER_S = 1_000_000
BUCKET_US = BUCKET_S * US_PER_S
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)


def epoch_us(when: datetime) -> int:
    """POSIX microseconds of aware ``when`` (exact integer arithmetic, no float)."""
    return (ensure_utc(when) - EPOCH) // _ONE_US


def from_epoch_us(us: int) -> datetime:
    """Aware-UTC datetime of POSIX microseconds ``us`` (exact)."""
    return EPOCH + timedelta(microseconds=us)


def bucket_pieces(start_us: int, end_us: int) -> Iterator[tuple[int, int, int]]:
    """Split ``[start_us, end_us)`` (POSIX µs) at UTC 15-minute boundaries:
    ``(bucket_s, piece_start_us, piece_end_us)`` for each bucket it meets, in order."""
    cursor = start_us
    while cursor < end_us:
        bucket_s = cursor // BUCKET_US * BUCKET_S
        stop = min(end_us, (bucket_s + BUCKET_S) * US_PER_S)
        yield bucket_s, cursor, stop
        cursor = stop


__all__ = ["BUCKET_S", "BUCKET_US", "EPOCH", "US_PER_S", "bucket_pieces", "epoch_us", "from_epoch_us"]
