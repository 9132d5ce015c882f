"""JSON read from logs and metrics files: :func:`loads`, which fails only with ``ValueError``.

:func:`json.loads` fails in three ways on text costctl does not control: ``JSONDecodeError``
(malformed), a plain ``ValueError`` for an integer of more than 4,300 digits (Python's
int-from-string limit, ``sys.int_info.default_max_str_digits``) and ``RecursionError`` for arrays
or objects nested past the interpreter's recursion limit (about 1,000 levels). Here an integer
literal of more than 19 digits (past any int64: no step, index or count) is read as ``float()``
reads its text (``+/-inf`` past the float range, as :func:`costctl.numbers.as_float` reads a
huge value), so it never raises, and too deep a nesting raises :class:`JsonTooDeep`, a
``ValueError``: one ``except ValueError`` covers every way a record cannot be read.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["JsonTooDeep", "loads"]

_INT_DIGITS = 19  # len(str(2**63 - 1))


class JsonTooDeep(ValueError):
    """The JSON nests arrays/objects deeper than Python's parser can follow (its recursion
    limit, :func:`sys.getrecursionlimit`); a training log's records are flat."""


def _int(text: str) -> int | float:
    digits = len(text) - (text[0] == "-")
    return int(text) if digits <= _INT_DIGITS else float(text)


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` for untrusted logs (see the module docstring).

    Returns:
        the parsed value; an integer literal past 19 digits becomes a float (``inf`` beyond
        the float range); ``NaN``/``Infinity`` literals are floats, as ``json.loads`` reads them.

    Raises:
        JsonTooDeep: nesting past the recursion limit.
        ValueError: anything else that is not JSON (``json.JSONDecodeError`` is one).
    """
    try:
        return json.loads(text, parse_int=_int)
    except RecursionError:
        raise JsonTooDeep(f"JSON nested deeper than {sys.getrecursionlimit()} levels") from None
