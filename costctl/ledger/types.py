"""Column types that keep money exact and times aware-UTC on every backend.

* :class:`UTCDateTime` — ``TIMESTAMP WITH TIME ZONE`` on PostgreSQL; on SQLite (which has no
  zone) the UTC wall time is stored and the zone re-attached on load. Values are always
  returned as aware UTC ``datetime`` objects; naive values are refused on the way in.
* :class:`DecimalText` — a :class:`~decimal.Decimal` stored as its exact decimal string.
  SQLite's NUMERIC affinity would turn money into a binary float; text keeps every digit on
  both backends. Sums are done in Python, never in SQL (a text column does not add).
* :class:`JSONText` — a JSON document stored as text (``json.dumps(..., default=str)``, so
  Decimals and datetimes become strings).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import DateTime, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from ..errors import LedgerError
from ..i18n import _, canonical, canonical_data
from ..money import MAX_AMOUNT, AmountError
from ..validation import shown_path

#: Characters a money column holds (``VARCHAR(64)`` on PostgreSQL).
DECIMAL_TEXT_CHARS = 64


class UTCDateTime(TypeDecorator[datetime]):
    """Aware-UTC datetimes on every backend (microsecond precision).

    Raises:
        ValueError: when binding a naive datetime (times in costctl are always aware).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: costctl stores aware UTC times only")
        value = value.astimezone(timezone.utc)
        if dialect.name == "sqlite":
            # SQLite keeps a fixed-width 'YYYY-MM-DD HH:MM:SS.ffffff' string: drop the zone so
            # every stored value is UTC wall time and string order equals time order.
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class DecimalText(TypeDecorator[Decimal]):
    """An exact Decimal stored as text (``str(Decimal)``); up to 64 characters.

    Every money column holds a price per hour, so a value is a finite amount in
    ``[0, MAX_AMOUNT]`` (10^9, :mod:`costctl.money`) whose text fits the column: anything else
    is refused on the way in (nothing absurd is stored, so nothing absurd is billed), and a
    stored text that is no number is refused on the way out.

    Raises:
        TypeError: when binding a float (money is never a float) or anything not Decimal/int.
        AmountError: when binding an amount that is not finite, negative, over 10^9, or longer
            than 64 characters as text.
        LedgerError: a stored value is no number.
    """

    impl = String(DECIMAL_TEXT_CHARS)
    cache_ok = True

    def process_bind_param(self, value: Decimal | int | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
            raise TypeError(f"{value!r}: money columns take Decimal (or int), never float")
        return money_text(Decimal(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        try:
            return Decimal(value)
        except InvalidOperation:
            raise LedgerError(_("the ledger holds {value!r} where an amount of money belongs").format(
                value=value[:40])) from None


def money_text(value: Decimal) -> str:
    """How a :class:`DecimalText` column stores ``value``: its exact ``str``.

    Raises:
        AmountError: ``value`` is not finite, negative, over :data:`~costctl.money.MAX_AMOUNT`,
            or its text is longer than :data:`DECIMAL_TEXT_CHARS`.
    """
    if not value.is_finite() or value < 0 or value > MAX_AMOUNT:
        raise AmountError(_("{value}: a money column holds an amount from 0 to 1000000000").format(
            value=format(value, ".6g")), value)
    text = str(value)
    if len(text) > DECIMAL_TEXT_CHARS:
        raise AmountError(_("{value}...: a money column holds at most {limit} characters").format(
            value=text[:20], limit=DECIMAL_TEXT_CHARS), value)
    return text


def _utf8_tree(value: Any) -> Any:
    """``value`` (parsed JSON) with every string holding lone surrogates (``surrogateescape``'d
    bytes of a command argument or a path) written with ``\\xff`` escapes instead."""
    if isinstance(value, str):
        return shown_path(value)
    if isinstance(value, list):
        return [_utf8_tree(v) for v in value]
    if isinstance(value, dict):
        return {shown_path(k): _utf8_tree(v) for k, v in value.items()}
    return value


class JSONText(TypeDecorator[Any]):
    """Any JSON-serialisable value stored as text; Decimals and datetimes become strings."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        text = json.dumps(canonical_data(value), default=str, sort_keys=True, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # an argv or a path holding bytes that are not UTF-8
            text = json.dumps(_utf8_tree(json.loads(text)), sort_keys=True, ensure_ascii=False)
        return text

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class CanonicalText(TypeDecorator[str]):
    """Text people read that the ledger keeps in English whatever language the writer shows:
    a :class:`costctl.i18n.Text` is stored as its canonical (English) text, any other str as it
    is. For reasons, details, outcomes and errors, so machine output (``bill --format json``,
    CSV, the dashboard) does not depend on the language of the watch that wrote the row."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else str(canonical(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return value


__all__ = ["CanonicalText", "UTCDateTime", "DecimalText", "JSONText", "money_text", "DECIMAL_TEXT_CHARS"]
