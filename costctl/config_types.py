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
DURATION_ALLOWED = "a duration like 90s, 30m, 2h, 1h30m or a number of seconds (at least 1s)"
WINDOW_ALLOWED = DURATION_ALLOWED + ", or off"


def parse_duration(value: Any) -> timedelta:
    """Parse ``90s``, ``30m``, ``2h``, ``1h30m``, a bare number of seconds, or a timedelta.

    Returns:
        a positive timedelta (>= 1 s).

    Raises:
        ValueError: for anything else, including zero, negatives and ``off``.
    """
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, bool):
        raise ValueError(f"expected {DURATION_ALLOWED}")
    elif isinstance(value, (int, float, Decimal)):
        td = timedelta(seconds=float(value))
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            td = timedelta(seconds=float(text))
        except ValueError:
            m = _DURATION_RE.match(text)
            if not text or not m or not any(m.groups()):
                raise ValueError(f"expected {DURATION_ALLOWED}") from None
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            td = timedelta(hours=h, minutes=mi, seconds=s)
    else:
        raise ValueError(f"expected {DURATION_ALLOWED}")
    if td < timedelta(seconds=1):
        raise ValueError(f"expected {DURATION_ALLOWED}")
    return td


def parse_window(value: Any) -> timedelta | None:
    """Like :func:`parse_duration`, but ``off`` (or ``false``) disables the window: returns None."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in {"off", "false", "none", "disabled"}:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(f"expected {WINDOW_ALLOWED}") from None


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
    "DURATION_ALLOWED", "WINDOW_ALLOWED", "parse_duration", "parse_window", "format_duration",
    "parse_money", "Duration", "Window", "MoneyAmount", "Percent", "Action", "Section",
]
