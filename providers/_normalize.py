"""Small pure helpers the adapters' ``normalize`` modules share when reading JSON payloads."""

from __future__ import annotations

import math
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from costctl.clock import ensure_utc
from costctl.i18n import _
from costctl.validation import escape_controls

from .errors import ProviderResponseError


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


# -- field validation at the boundary --------------------------------------------------------
#
# Every adapter builds its :class:`~costctl_providers.base.Instance` through these (the sim from its
# state file, the HTTP adapters from their JSON), and ``Instance.__post_init__`` checks the
# finished record with :func:`check_instance`, so a malformed field is one ProviderResponseError
# line naming the provider, the field and the value, never a TypeError deep inside the watch.

MAX_GPU_COUNT = 1024
"""Most GPUs one rented instance may report. The largest single nodes sold today carry 8-16 GPUs
(e.g. 8 x H100 SXM, 16 x A100 40GB); 1024 leaves room for any cluster-as-one-instance offer and
still fits every integer column (SQLite INTEGER is 64-bit)."""

_VALUE_CHARS = 60


def refused_amount(provider: str, instance: str, field_name: str, value: Any) -> str | None:
    """The note for an amount :func:`decimal_from_json` drops though the provider gave one (not
    null: ``"NaN"``, ``"Infinity"``, text, a boolean); None when it is read or absent."""
    if value is None or decimal_from_json(value) is not None:
        return None
    return _("{provider} reported a {field} of {value} for instance {instance}; expected a finite amount of "
             "money").format(provider=provider, field=field_name, value=shown_value(value), instance=instance)


def refused_percent(provider: str, instance: str, field_name: str, value: Any, *,
                    upper: float | None = 100.0) -> str | None:
    """The note for a utilization :func:`percent_from_json` drops though the provider gave one:
    not a number, not finite, or above ``upper``; None when it is read, absent (null) or the
    providers' "not measured" marker (negative)."""
    if value is None or percent_from_json(value, upper=upper) is not None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if number < 0:  # "not measured" (Vast's -1): unreported, not out of range
        return None
    allowed = (_("a utilization from 0 to {upper:g} percent (negative: not measured)").format(upper=upper)
               if upper is not None else _("a utilization of 0 percent or more (negative: not measured)"))
    return _("{provider} reported a {field} of {value} for instance {instance}; expected {allowed}").format(
        provider=provider, field=field_name, value=shown_value(value), instance=instance, allowed=allowed)


def shown_value(value: Any) -> str:
    """``value`` as it is shown in an error line: JSON-like repr, control characters escaped,
    every registered secret masked (:data:`~costctl_providers._http.GLOBAL_REDACTOR`), then cut to 60
    characters with ``...``."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int too long for repr (Python's digit limit)
        text = "<{kind}>".format(kind=type(value).__name__)
    from ._http import GLOBAL_REDACTOR  # every client's secrets, masked before the cut

    text = GLOBAL_REDACTOR(escape_controls(text))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def bad_field(provider: str, field_name: str, value: Any, allowed: str) -> Exception:
    """The one error a malformed provider field becomes: a permanent
    :class:`~costctl_providers.errors.ProviderResponseError` whose line names the provider, the
    field, the value (escaped, truncated) and what is allowed. Returned (the caller raises)."""
    return ProviderResponseError(
        _("{provider}: the provider reported an unusable {field} {value}; expected {allowed}").format(
            provider=provider, field=field_name, value=shown_value(value), allowed=allowed))


def int_field(provider: str, field_name: str, value: Any, *, low: int = 0, high: int = MAX_GPU_COUNT) -> int:
    """A whole number from ``low`` to ``high`` (a JSON int, an integral float, or a decimal digit
    string); anything else raises :func:`bad_field`'s error."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and 0 < len(value.strip()) <= 20 and value.strip().lstrip("-").isascii() \
            and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    if number is None or not low <= number <= high:
        raise bad_field(provider, field_name, value,
                        _("a whole number from {low} to {high}").format(low=low, high=high))
    return number


def decimal_field(provider: str, field_name: str, value: Any, *, optional: bool = False) -> Decimal | None:
    """A finite amount (JSON number or numeric string) as Decimal via :func:`decimal_from_json`;
    None only when ``optional`` and the value is missing. Range checks (negative, too large) stay
    with the caller, which knows the currency. Anything else raises :func:`bad_field`'s error."""
    if value is None and optional:
        return None
    amount = None if isinstance(value, str) and len(value) > 200 else decimal_from_json(value)
    if amount is None or isinstance(value, (list, dict)):
        raise bad_field(provider, field_name, value, _("a number, like 2.5 or \"2.50\""))
    return amount


def enum_field(provider: str, field_name: str, value: Any, enum: type[Any]) -> Any:
    """``enum(value)`` for a string naming one of its values; anything else raises
    :func:`bad_field`'s error listing the allowed values."""
    if isinstance(value, str):
        try:
            return enum(value)
        except ValueError:
            pass
    raise bad_field(provider, field_name, value, ", ".join(m.value for m in enum))


def text_field(provider: str, field_name: str, value: Any, *, optional: bool = True, pattern: str | None = None,
               allowed: str | None = None) -> str | None:
    """A string (or None when ``optional``); with ``pattern`` it must match it in full
    (``allowed`` words the pattern for the error line)."""
    if value is None and optional:
        return None
    if isinstance(value, str) and (pattern is None or re.fullmatch(pattern, value)):
        return value
    raise bad_field(provider, field_name, value,
                    allowed or (_("text matching {pattern}").format(pattern=pattern) if pattern else _("text")))


def datetime_field(provider: str, field_name: str, value: Any) -> datetime | None:
    """An ISO 8601 time (naive means UTC) as aware UTC; None for a missing or empty value;
    anything else raises :func:`bad_field`'s error."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            return ensure_utc(datetime.fromisoformat(value))
        except (ValueError, OverflowError):
            pass
    raise bad_field(provider, field_name, value, _("an ISO 8601 time, like 2024-01-31T12:00:00+00:00"))


def check_instance(instance: Any) -> None:
    """The last check every :class:`~costctl_providers.base.Instance` passes on construction:
    ``gpu_count`` a whole number in ``0..MAX_GPU_COUNT``, money fields finite Decimals (or None),
    ``currency`` three letters, ``status``/``billing`` the enums, times aware datetimes.

    Raises:
        ProviderResponseError: via :func:`bad_field`, naming the first bad field.
    """
    name = instance.provider
    if not (isinstance(instance.gpu_count, int) and not isinstance(instance.gpu_count, bool)
            and 0 <= instance.gpu_count <= MAX_GPU_COUNT):
        int_field(name, "gpu_count", instance.gpu_count)  # raises
    for key in ("price_per_hour", "bid_per_hour", "stopped_price_per_hour"):
        value = getattr(instance, key)
        if value is not None and not (isinstance(value, Decimal) and value.is_finite()):
            raise bad_field(name, key, value, _("a number, like 2.5 or \"2.50\""))
    if not (isinstance(instance.currency, str) and re.fullmatch(r"[A-Za-z]{3}", instance.currency)):
        raise bad_field(name, "currency", instance.currency, _("a three-letter ISO 4217 code, like USD"))
    for key in ("created_at", "started_at", "stopped_at"):
        value = getattr(instance, key)
        if value is not None and not (isinstance(value, datetime) and value.tzinfo is not None):
            raise bad_field(name, key, value, _("an ISO 8601 time, like 2024-01-31T12:00:00+00:00"))
