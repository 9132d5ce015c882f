"""Small pure helpers the adapters' ``normalize`` modules share when reading JSON payloads."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping


def decimal_from_json(value: Any) -> Decimal | None:
    """A JSON number (or numeric string) -> Decimal, exact through the float's shortest repr
    (``0.234567`` stays ``Decimal('0.234567')``); None for missing, boolean, non-numeric or
    non-finite values. The unit is the payload's (dollars, 厘...)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount.is_finite() else None


def percent_from_json(value: Any, *, upper: float | None = 100.0) -> float | None:
    """A utilization reading in percent -> float; None for a missing, boolean, non-numeric or
    non-finite value, a negative one (the providers' "not measured" marker, e.g. Vast's ``-1``),
    or one above ``upper`` (None: no upper bound). A reading that is not a plain percentage is
    unreported, never 0."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or number < 0 or (upper is not None and number > upper):
        return None
    return number


def strip_keys(payload: Any, secret_key: re.Pattern[str]) -> Any:
    """A deep copy of ``payload`` (mappings and lists) without the keys ``secret_key`` matches
    (``re.search`` on the key), so credentials never reach ``Instance.raw`` or logs."""
    if isinstance(payload, Mapping):
        return {k: strip_keys(v, secret_key) for k, v in payload.items() if not secret_key.search(str(k))}
    if isinstance(payload, list):
        return [strip_keys(v, secret_key) for v in payload]
    return payload
