"""SQL expressions for the ledger's time columns, the same on SQLite and PostgreSQL.

:class:`~costctl.ledger.types.UTCDateTime` columns as POSIX microseconds (exact integers: no
julianday, no float), so the bill's queries sum and compare times in SQL and hand Python plain
integers instead of datetimes to convert row by row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, cast, func


def epoch_us_sql(col: Any, dialect: str) -> Any:
    """SQL for a :class:`~costctl.ledger.types.UTCDateTime` column (or expression) as POSIX
    microseconds, on SQLite (``dialect`` ``sqlite``) and PostgreSQL (``postgresql``)."""
    if dialect == "postgresql":
        return cast(func.round(func.extract("epoch", col) * 1_000_000), BigInteger)
    # SQLite keeps 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC): whole seconds by strftime, µs by substr.
    return (cast(func.strftime("%s", func.substr(col, 1, 19)), BigInteger) * 1_000_000
            + cast(func.substr(col, 21, 6), BigInteger))


__all__ = ["epoch_us_sql"]
