"""Field types shared by every configuration section, the policies' included.

A low-level module: it imports nothing from costctl but :mod:`costctl.errors`,
:mod:`costctl.money` and :mod:`costctl.validation`, so a policy (or a third-party policy) can
describe its own ``[policies.<name>]`` section without importing the whole
:class:`~costctl.config.Settings`. :mod:`costctl.config` re-exports every name here.

Durations are written ``90s``, ``30m``, ``2h``, ``1h30m`` or a number of seconds; windows also
accept ``off`` (disabled; never zero). Money is a string or number, held as Decimal.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from .errors import ConfigError
from .money import parse_decimal

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")


#: The shortest duration a plain :data:`Duration` or :data:`Window` takes.
MIN_DURATION = timedelta(seconds=1)


def duration_allowed(minimum: timedelta = MIN_DURATION, maximum: timedelta | None = None, *,
                     noun: str = "a duration", note: str = "", off: bool = False) -> str:
    """What a duration setting allows, as the text after ``expected`` in its error message,
    naming that setting's own bounds: ``"a duration like 90s, ... (at least 1s)"``, or, with a
    maximum, ``"a retention from 1h to 87600h (ten years), written like 90s, ..., or off"``.

    Args:
        minimum / maximum: the bounds (inclusive; no maximum: unbounded).
        noun: what the setting is (``"a retention"``, ``"an interval"``).
        note: said after the maximum, in parentheses (``"ten years"``).
        off: the setting also takes ``off``.
    """
    forms = "90s, 30m, 2h, 1h30m or a number of seconds"
    if maximum is None:
        text = f"{noun} like {forms} (at least {format_duration(minimum)})"
    else:
        text = (f"{noun} from {format_duration(minimum)} to {format_duration(maximum)}"
                + (f" ({note})" if note else "") + f", written like {forms}")
    return text + (", or off" if off else "")


def parse_duration(value: Any, *, minimum: timedelta = MIN_DURATION, maximum: timedelta | None = None,
                   allowed: str | None = None) -> timedelta:
    """Parse ``90s``, ``30m``, ``2h``, ``1h30m``, a bare number of seconds, or a timedelta.

    Args:
        minimum / maximum: the bounds the result must lie in (inclusive; default at least 1 s).
        allowed: the text after ``expected`` in the error (default :func:`duration_allowed`
            of the bounds), so every setting's message names its own bounds.

    Returns:
        a timedelta within the bounds.

    Raises:
        ValueError: for anything else, including zero, negatives, ``off`` and values out of bounds.
    """
    message = f"expected {allowed or duration_allowed(minimum, maximum)}"
    try:
        td = _to_timedelta(value, message)
    except (OverflowError, ArithmeticError, ValueError):  # 1e99 s, 1e20h: past timedelta; NaN
        raise ValueError(message) from None
    if td < minimum or (maximum is not None and td > maximum):
        raise ValueError(message)
    return td


def _to_timedelta(value: Any, message: str) -> timedelta:
    """:func:`parse_duration`'s reading of ``value``, unbounded (OverflowError past timedelta's
    range, ValueError with ``message`` for what is no duration)."""
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, bool):
        raise ValueError(message)
    elif isinstance(value, (int, float, Decimal)):
        td = timedelta(seconds=float(value))
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            td = timedelta(seconds=float(text))
        except ValueError:
            m = _DURATION_RE.match(text)
            if not text or not m or not any(m.groups()):
                raise ValueError(message) from None
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            td = timedelta(hours=h, minutes=mi, seconds=s)
    else:
        raise ValueError(message)
    return td


def parse_window(value: Any, *, minimum: timedelta = MIN_DURATION, maximum: timedelta | None = None,
                 allowed: str | None = None) -> timedelta | None:
    """Like :func:`parse_duration`, but ``off`` (or ``false``) disables the window: returns None.

    Raises:
        ValueError: as :func:`parse_duration`; its message also offers ``off``."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in {"off", "false", "none", "disabled"}:
        return None
    return parse_duration(value, minimum=minimum, maximum=maximum,
                          allowed=allowed or duration_allowed(minimum, maximum, off=True))


def format_duration(td: timedelta | None) -> str:
    """``2h``, ``30m``, ``90s`` (the largest whole unit), or ``off`` for None."""
    if td is None:
        return "off"
    secs = td.total_seconds()
    if secs % 3600 == 0:
        return f"{int(secs // 3600)}h"
    if secs % 60 == 0:
        return f"{int(secs // 60)}m"
    return f"{secs:g}s"


#: What a plain :data:`Duration` / :data:`Window` allows (the text after ``expected``).
DURATION_ALLOWED = duration_allowed()
WINDOW_ALLOWED = duration_allowed(off=True)


def parse_money(value: Any) -> Decimal:
    """A non-negative amount of money (string or number) as Decimal.

    Raises:
        ValueError: not a number, or negative.
    """
    try:
        amount = parse_decimal(value)
    except ConfigError:
        raise ValueError("expected an amount of money like 2.5 or \"2.50\"") from None
    if amount < 0:
        raise ValueError("expected an amount of money >= 0")
    return amount


#: A positive duration (``30m``); serialized back as ``30m``.
Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration)]
#: A duration or ``off`` (None).
Window = Annotated[timedelta | None, BeforeValidator(parse_window), PlainSerializer(format_duration)]
#: Money >= 0 as Decimal; serialized as a string.
MoneyAmount = Annotated[Decimal, BeforeValidator(parse_money), PlainSerializer(str)]


def bounded_duration(minimum: timedelta, maximum: timedelta | None = None, **text: Any) -> Any:
    """A :data:`Duration` type bounded to ``[minimum, maximum]`` whose error message names
    those bounds (``text``: ``noun`` and ``note`` of :func:`duration_allowed`)."""
    allowed = duration_allowed(minimum, maximum, **text)
    return Annotated[timedelta, BeforeValidator(lambda v: parse_duration(v, minimum=minimum, maximum=maximum,
                                                                         allowed=allowed)),
                     PlainSerializer(format_duration)]


def bounded_window(minimum: timedelta, maximum: timedelta | None = None, **text: Any) -> Any:
    """A :data:`Window` type (a duration or ``off``) bounded to ``[minimum, maximum]``, its
    error message naming those bounds (see :func:`bounded_duration`)."""
    allowed = duration_allowed(minimum, maximum, off=True, **text)
    return Annotated[timedelta | None, BeforeValidator(lambda v: parse_window(v, minimum=minimum, maximum=maximum,
                                                                              allowed=allowed)),
                     PlainSerializer(format_duration)]


#: A percentage in [0, 100].
Percent = Annotated[float, Field(ge=0, le=100)]
#: What most policies may do when they fire.
Action = Literal["advise", "stop"]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# Old private names, kept for code that imported them from costctl.config.
_Section = Section
_format_duration = format_duration
_money = parse_money

__all__ = [
    "DURATION_ALLOWED", "WINDOW_ALLOWED", "MIN_DURATION", "duration_allowed", "bounded_duration",
    "bounded_window", "parse_duration", "parse_window", "format_duration",
    "parse_money", "Duration", "Window", "MoneyAmount", "Percent", "Action", "Section",
]
