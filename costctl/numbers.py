"""Numbers read from recorded logs, job output and metrics files, never raising.

A log is input costctl does not control: a cell may hold ``1e400``, ``inf``, a 5,000-digit
integer or 10 MB of digits. Python's own conversions raise on some of these — ``int(text)`` past
4,300 digits (``ValueError``, the ``sys.int_info.default_max_str_digits`` limit of CVE-2020-10735),
``float(int)`` past about 1.8e308 and ``int(float("inf"))`` (``OverflowError``), ``int(nan)``
(``ValueError``) — and a value can pass every conversion yet not fit where it goes (an SQLite
INTEGER holds signed 64 bits). Every reader takes its numbers through these functions:

* a **measured value** (a loss, a gradient norm, a learning rate) reads as ``float()`` reads its
  text, except that a numeric literal past the float range (``1e400``, 400 digits) is no number
  (None, skipped) while the words ``inf``/``nan`` (an fp16 overflow prints ``inf``) stay
  readings, see :func:`as_float`;
* a **count or index** (a step, a run's length, an epoch header, a GPU index, a PID, a byte
  count) is an integer within a documented range, by default ``0 .. 2**63 - 1``
  (:data:`INT64_MAX`, what an int64 column and the ledger's INTEGER columns hold); a count out
  of its range is *absent* (None), never clamped to a wrong value (:func:`parse_count`,
  :func:`as_count`);
* a **gauge** (utilization in percent, power in watts, memory) is a finite float within its
  range, else absent (:func:`finite`).

None of these functions raises, whatever it is given.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from typing import Any

__all__ = ["INT64_MAX", "MAX_NUMBER_CHARS", "as_count", "as_float", "finite", "parse_count"]


#: The largest count a reader keeps (signed 64-bit, the ledger's INTEGER columns and the
#: progress batches' ``array('q')`` columns): 9,223,372,036,854,775,807.
INT64_MAX = 2**63 - 1
#: Characters of a numeric text converted at most (longer text is no number): 65,536, the
#: longest line the job-output parser reads (:data:`costctl.progress.lines.MAX_LINE_CHARS`), so a
#: number reads the same in a metrics file as on a console line, and a 10 MB cell of digits costs
#: no 10 MB conversion (``float()`` of 64 Ki digits takes about half a millisecond).
MAX_NUMBER_CHARS = 64 * 1024
_INT64_DIGITS = len(str(INT64_MAX))  # 19
_FLOAT_MAX = sys.float_info.max


def parse_count(text: str | None, *, low: int = 0, high: int = INT64_MAX) -> int | None:
    """The integer written in ``text`` (blanks around it allowed, an optional sign, ASCII
    digits) when it lies in ``low .. high``; else None.

    The length is checked before any conversion, so a 5,000-digit or 10 MB run of digits costs
    no ``int()`` (which raises past 4,300 digits) and reads as out of range. Leading zeros are
    allowed (``"007"`` is 7).

    Args:
        text: the text, e.g. a regex group ``"42"``.
        low / high: the accepted range, inclusive (default ``0 .. 2**63 - 1``).

    Returns:
        the integer, or None for anything else (no digits, other characters, out of range).
    """
    if text is None:
        return None
    s = text.strip()
    sign = 1
    if s[:1] in ("-", "+"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if not s or not s.isascii() or not s.isdigit():
        return None
    s = s.lstrip("0") or "0"
    if len(s) > _INT64_DIGITS:
        return None  # past any int64 (and past any range given here)
    value = sign * int(s)
    return value if low <= value <= high else None


def as_float(value: Any) -> float | None:
    """A number as a float, read as ``float()`` reads it, for measured values (a loss).

    * a float marked ``overflowed`` (:class:`costctl.jsonio.HugeNumber`, a JSON literal past
      the float range): None, no reading (issue 17);
    * ``float``: itself (``nan`` and ``+/-inf`` kept: a divergence is a reading);
    * ``int`` (not ``bool``): its float; None past the float range (a huge number is no number,
      issue 17); ``Decimal``: its float;
    * ``str``: ``float(text)`` of the stripped text (``"0.5"``, ``"1e-3"``, ``"nan"``, ``"inf"``);
      text longer than :data:`MAX_NUMBER_CHARS` characters, that ``float()`` refuses, or a
      numeric literal past the float range (``"1e400"``: only the words inf/nan are
      non-finite readings) is None;
    * anything else (None, bool, lists, dicts...): None.
    """
    if getattr(value, "overflowed", False):  # costctl.jsonio.HugeNumber: a literal past the range
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if -_FLOAT_MAX <= value <= _FLOAT_MAX:
            try:
                return float(value)
            except OverflowError:  # pragma: no cover - within the range a float holds it
                pass
        return None  # a huge integer is no number (issue 17), never an inf "divergence"
    if isinstance(value, Decimal):
        try:
            return float(value)  # Decimal's own conversion: +/-inf past the range, nan kept
        except (ValueError, OverflowError):  # pragma: no cover - signalling NaN
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > MAX_NUMBER_CHARS:
            return None
        try:
            number = float(text)
        except ValueError:
            return None
        if math.isinf(number) and "inf" not in text.lower():
            return None  # an overflowing literal (1e400, 400 digits) is no number
        return number
    return None


def finite(value: Any, *, low: float = -math.inf, high: float = math.inf) -> float | None:
    """:func:`as_float` of ``value`` when finite and within ``low .. high`` (inclusive), else
    None: for gauges (utilization 0-100 %, watts, memory), where ``inf`` or ``nan`` is no reading."""
    number = as_float(value)
    if number is None or not math.isfinite(number) or not low <= number <= high:
        return None
    return number


def as_count(value: Any, *, low: int = 0, high: int = INT64_MAX) -> int | None:
    """A count (a step, an index, a number of bytes) within ``low .. high`` from a number or
    its text; None otherwise.

    ``int`` is taken as it is; a finite ``float`` (JSON and CSV steps are often ``500.0``) or
    numeric text is truncated toward zero (``int()``'s rule: ``2.9`` is 2); ``nan``, ``inf``,
    ``bool`` and anything out of range are None.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if low <= value <= high else None
    if isinstance(value, str):
        exact = parse_count(value, low=low, high=high)
        if exact is not None:
            return exact
    number = as_float(value)
    if number is None or not math.isfinite(number):
        return None
    if not low - 1 < number < high + 1:  # past the range before truncation (no huge int built)
        return None
    whole = int(number)
    return whole if low <= whole <= high else None
