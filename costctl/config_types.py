"""Field types shared by every configuration section, the policies' included.

A low-level module: it imports nothing from costctl but :mod:`costctl.errors`,
:mod:`costctl.money` and :mod:`costctl.validation`, so a policy (or a third-party policy) can
describe its own ``[policies.<name>]`` section without importing the whole
:class:`~costctl.config.Settings`. :mod:`costctl.config` re-exports every name here.

Durations are written ``90s``, ``30m``, ``2h``, ``1h30m`` or a number of seconds; windows also
accept ``off`` (disabled; never zero). Money is a string or number, held as Decimal.

Every value has a range, checked at load, and the types carry it so that every key using a type
gets it: a :data:`Duration` or :data:`Window` lies in ``[1s, 8760h]`` (:data:`MIN_DURATION`,
:data:`MAX_DURATION`; :func:`bounded_duration` / :func:`bounded_window` narrow it for one key),
a :data:`MoneyAmount` in ``[0, 10^9]`` (:data:`costctl.money.MAX_AMOUNT`), a :data:`Percent` in
``[0, 100]``; numbers are finite (``inf`` and ``nan`` are refused) and text holds no NUL byte
(:class:`Section`). Counts and other numbers give their bounds with ``Field(ge=..., le=...)``.
:func:`value_range` reads any key's range back as text, for ``costctl init``'s comments and the
documentation's table.
"""

from __future__ import annotations

import re
import typing
from datetime import timedelta
from decimal import Decimal
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, field_validator
from pydantic.fields import FieldInfo

from .i18n import N_, _
from .money import AMOUNT_ALLOWED, MAX_AMOUNT, AmountError, bounded_amount

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")


#: The shortest duration a plain :data:`Duration` or :data:`Window` takes.
MIN_DURATION = timedelta(seconds=1)
#: The longest duration a plain :data:`Duration` or :data:`Window` takes: a year (8760h). Longer
#: than any window, interval or timeout a watch can use, and far enough from ``datetime``'s
#: limits (year 9999) that no time computed from it overflows.
MAX_DURATION = timedelta(days=365)
_YEAR_NOTE = N_("a year")


class ValueRange:
    """The documented range of a field type, as text (``"1s to 8760h"``); metadata of the
    annotated types below, read by :func:`value_range`.

    Worded when read, in the language of that moment (not of the import): give a function that
    returns the text, or an English sentence marked with :func:`~costctl.i18n.N_` (translated
    with :func:`~costctl.i18n._` on each read).
    """

    __slots__ = ("_source",)

    def __init__(self, text: str | Callable[[], str]) -> None:
        self._source = text

    @property
    def text(self) -> str:
        """The range in the current language."""
        return self._source() if callable(self._source) else _(self._source)

    def __repr__(self) -> str:
        return f"ValueRange({self.text!r})"


def duration_allowed(minimum: timedelta = MIN_DURATION, maximum: timedelta | None = MAX_DURATION, *,
                     noun: str = N_("a duration"), note: str = "", off: bool = False) -> str:
    """What a duration setting allows, as the text after ``expected`` in its error message,
    naming that setting's own bounds: ``"a duration from 1s to 8760h (a year), written like
    90s, ..."``, ``"a retention from 1h to 87600h (ten years), written like 90s, ..., or off"``.

    Args:
        minimum / maximum: the bounds (inclusive; maximum None: unbounded, ``at least ...``).
        noun: what the setting is (``"a retention"``, ``"an interval"``).
        note: said after the maximum, in parentheses (``"ten years"``; for the default maximum,
            ``"a year"``).
        off: the setting also takes ``off``.
    """
    if maximum == MAX_DURATION and not note:
        note = _YEAR_NOTE
    forms = _("90s, 30m, 2h, 1h30m or a number of seconds")
    values = {"noun": _(noun), "forms": forms, "minimum": format_duration(minimum),
              "maximum": format_duration(maximum), "note": _(note) if note else ""}
    if maximum is None:
        text = (_("{noun} like {forms} (at least {minimum}), or off") if off
                else _("{noun} like {forms} (at least {minimum})"))
    elif note:
        text = (_("{noun} from {minimum} to {maximum} ({note}), written like {forms}, or off") if off
                else _("{noun} from {minimum} to {maximum} ({note}), written like {forms}"))
    else:
        text = (_("{noun} from {minimum} to {maximum}, written like {forms}, or off") if off
                else _("{noun} from {minimum} to {maximum}, written like {forms}"))
    return text.format(**values)


def duration_range(minimum: timedelta = MIN_DURATION, maximum: timedelta | None = MAX_DURATION) -> str:
    """A duration key's range for the documentation: ``"1s to 8760h"`` (``"at least 1s"``
    without a maximum)."""
    if maximum is None:
        return _("at least {minimum}").format(minimum=format_duration(minimum))
    return _("{low} to {high}").format(low=format_duration(minimum), high=format_duration(maximum))


def parse_duration(value: Any, *, minimum: timedelta = MIN_DURATION, maximum: timedelta | None = MAX_DURATION,
                   allowed: str | None = None) -> timedelta:
    """Parse ``90s``, ``30m``, ``2h``, ``1h30m``, a bare number of seconds, or a timedelta.

    Args:
        minimum / maximum: the bounds the result must lie in (inclusive; default 1 s to
            :data:`MAX_DURATION`, a year; maximum None: unbounded).
        allowed: the text after ``expected`` in the error (default :func:`duration_allowed`
            of the bounds), so every setting's message names its own bounds.

    Returns:
        a timedelta within the bounds.

    Raises:
        ValueError: for anything else, including zero, negatives, ``off`` and values out of bounds.
    """
    message = _("expected {allowed}").format(allowed=allowed or duration_allowed(minimum, maximum))
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
        if "_" in text or not text.isascii():  # float() reads "1_000" and non-ASCII digits: not as written here
            raise ValueError(message)
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


def parse_window(value: Any, *, minimum: timedelta = MIN_DURATION, maximum: timedelta | None = MAX_DURATION,
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
    """An amount of money (string or number) as Decimal, in ``[0, 10^9]``, kept to 10 decimals
    (:func:`costctl.money.bounded_amount`).

    Raises:
        ValueError: not a finite number, negative, or over 10^9 (the message names the range).
    """
    try:
        return bounded_amount(value)
    except AmountError:
        raise ValueError(_("expected {allowed}").format(allowed=_(AMOUNT_ALLOWED))) from None


def money_range() -> str:
    """The range of a :data:`MoneyAmount`, for the documentation: ``"0 to 1000000000"``."""
    return _("{low} to {high}").format(low=0, high=f"{MAX_AMOUNT:f}")


def _or_off(minimum: timedelta = MIN_DURATION, maximum: timedelta | None = MAX_DURATION) -> str:
    """A window's range: :func:`duration_range`, ``or off``."""
    return _("{range}, or off").format(range=duration_range(minimum, maximum))


#: The range of a :data:`MoneyAmount` in English (the current language: :func:`money_range`).
MONEY_RANGE = "{low} to {high}".format(low=0, high=f"{MAX_AMOUNT:f}")

#: A duration from 1s to 8760h (``30m``); serialized back as ``30m``.
Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration),
                     ValueRange(duration_range)]
#: A duration (1s to 8760h) or ``off`` (None).
Window = Annotated[timedelta | None, BeforeValidator(parse_window), PlainSerializer(format_duration),
                   ValueRange(_or_off)]
#: Money from 0 to 10^9 as Decimal (kept to 10 decimals); serialized as a string.
MoneyAmount = Annotated[Decimal, BeforeValidator(parse_money), PlainSerializer(str), ValueRange(money_range)]


class _Allowed:
    """:func:`duration_allowed` of one key's bounds, worded when shown (in the language of that
    moment, not of the import)."""

    def __init__(self, minimum: timedelta, maximum: timedelta | None, text: dict[str, Any]) -> None:
        self.minimum, self.maximum, self.text = minimum, maximum, text

    def __str__(self) -> str:
        return duration_allowed(self.minimum, self.maximum, **self.text)


def bounded_duration(minimum: timedelta, maximum: timedelta | None = MAX_DURATION, **text: Any) -> Any:
    """A :data:`Duration` type bounded to ``[minimum, maximum]`` (default maximum: a year) whose
    error message names those bounds (``text``: ``noun`` and ``note`` of :func:`duration_allowed`)."""
    return Annotated[timedelta, BeforeValidator(lambda v: parse_duration(v, minimum=minimum, maximum=maximum,
                                                                         allowed=_Allowed(minimum, maximum, text))),
                     PlainSerializer(format_duration), ValueRange(lambda: duration_range(minimum, maximum))]


def bounded_window(minimum: timedelta, maximum: timedelta | None = MAX_DURATION, **text: Any) -> Any:
    """A :data:`Window` type (a duration or ``off``) bounded to ``[minimum, maximum]``, its
    error message naming those bounds (see :func:`bounded_duration`)."""
    allowed = _Allowed(minimum, maximum, {**text, "off": True})
    return Annotated[timedelta | None, BeforeValidator(lambda v: parse_window(v, minimum=minimum, maximum=maximum,
                                                                              allowed=allowed)),
                     PlainSerializer(format_duration), ValueRange(lambda: _or_off(minimum, maximum))]


#: A percentage in [0, 100].
Percent = Annotated[float, Field(ge=0, le=100)]
#: What most policies may do when they fire.
Action = Literal["advise", "stop"]


def _number(value: Any) -> str:
    """A bound as the documentation shows it: ``100``, ``0.5``, ``1000000``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}".replace(",", "") if isinstance(value, int) else f"{value:g}"


def value_range(field: FieldInfo) -> str:
    """A field's documented range as text: ``"1s to 8760h"``, ``"0 to 100"``, ``"> 0 and
    < 1"``, ``"1 to 64"``, ``"0 to 1000000000"``, or ``""`` for a field with no range (text,
    a choice, a flag). Read from the field's :class:`ValueRange` (the duration and money types)
    or its ``ge``/``gt``/``le``/``lt`` bounds."""
    metadata = list(field.metadata)
    for arg in typing.get_args(field.annotation):  # X | None: the bounds sit on X
        metadata.extend(getattr(arg, "__metadata__", ()))
    for m in metadata:
        if isinstance(m, ValueRange):
            return m.text
    low = high = None
    for m in metadata:
        for name in ("ge", "gt"):
            if getattr(m, name, None) is not None:
                low = (name, getattr(m, name))
        for name in ("le", "lt"):
            if getattr(m, name, None) is not None:
                high = (name, getattr(m, name))
    if low is None and high is None:
        return ""
    if low is not None and high is not None and low[0] == "ge" and high[0] == "le":
        return _("{low} to {high}").format(low=_number(low[1]), high=_number(high[1]))
    parts = [f"{'>=' if name == 'ge' else '>'} {_number(v)}" for name, v in ([low] if low else [])]
    parts += [f"{'<=' if name == 'le' else '<'} {_number(v)}" for name, v in ([high] if high else [])]
    return _("{low} and {high}").format(low=parts[0], high=parts[1]) if len(parts) == 2 else parts[0]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated,
    numbers are finite (``inf`` and ``nan`` are refused) and text holds no NUL byte (a NUL
    reaches no command, path or URL)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if isinstance(value, str) and "\x00" in value:
            raise ValueError(_("expected text without NUL bytes"))
        return value


# Old private names, kept for code that imported them from costctl.config.
_Section = Section
_format_duration = format_duration
_money = parse_money

__all__ = [
    "DURATION_ALLOWED", "WINDOW_ALLOWED", "MIN_DURATION", "MAX_DURATION", "MONEY_RANGE", "duration_allowed",
    "duration_range", "bounded_duration", "bounded_window", "parse_duration", "parse_window", "format_duration",
    "parse_money", "money_range", "Duration", "Window", "MoneyAmount", "Percent", "Action", "Section", "ValueRange", "value_range",
]
