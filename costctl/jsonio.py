"""JSON read from logs and metrics files: :func:`loads`, which fails only with ``ValueError``.

:func:`json.loads` fails in three ways on text costctl does not control: ``JSONDecodeError``
(malformed), a plain ``ValueError`` for an integer of more than 4,300 digits (Python's
int-from-string limit, ``sys.int_info.default_max_str_digits``) and ``RecursionError`` for arrays
or objects nested past the interpreter's recursion limit (about 1,000 levels). Here an integer
literal of more than 19 digits (past any int64: no step, index or count) is read as ``float()``
reads its text, and a number literal past the float range (400 digits, ``1e400``) is a
:class:`HugeNumber` (``inf``, but no reading to
:func:`costctl.numbers.as_float`), so it never raises, and too deep a nesting raises :class:`JsonTooDeep`, a
``ValueError``: one ``except ValueError`` covers every way a record cannot be read.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

__all__ = ["HugeNumber", "JsonTooDeep", "loads", "loads_skipping_deep"]

_INT_DIGITS = 19  # len(str(2**63 - 1))


class HugeNumber(float):
    """A JSON number literal past the float range (``1e400``, 400 digits): ``+/-inf`` as a float,
    so a step or count of it is out of range (skipped, counted), but marked ``overflowed`` so
    that :func:`costctl.numbers.as_float` reads it as no number, never an ``inf`` that would trip
    the divergence policy (issue 17). Only the words ``Infinity``/``NaN`` are non-finite
    readings."""

    overflowed = True


class JsonTooDeep(ValueError):
    """The JSON nests arrays/objects deeper than Python's parser can follow (its recursion
    limit, :func:`sys.getrecursionlimit`); a training log's records are flat."""


def _int(text: str) -> int | float:
    digits = len(text) - (text[0] == "-")
    return int(text) if digits <= _INT_DIGITS else _float(text)


def _float(text: str) -> float:
    """A JSON number literal as a float; a :class:`HugeNumber` (``inf``, but no
    reading to :func:`costctl.numbers.as_float`) when it overflows the float range: a huge number
    is no number, never an ``inf`` divergence (issue 17). The literals ``NaN``/``Infinity`` are
    not numbers to the parser and stay plain floats."""
    value = float(text)
    return HugeNumber(value) if math.isinf(value) else value


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` for untrusted logs (see the module docstring).

    Returns:
        the parsed value; an integer literal past 19 digits becomes a float, a number literal
        beyond the float range a :class:`HugeNumber`; ``NaN``/``Infinity`` literals are floats, as ``json.loads`` reads them.

    Raises:
        JsonTooDeep: nesting past the recursion limit.
        ValueError: anything else that is not JSON (``json.JSONDecodeError`` is one).
    """
    try:
        return json.loads(text, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise JsonTooDeep(f"JSON nested deeper than {sys.getrecursionlimit()} levels") from None


_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float)
_WS = re.compile(r"[ \t\n\r]*")
# What a skipped value's scan stops at: a quote, a bracket or brace (strings are stepped over).
_STRUCTURE = re.compile(r'["\[\]{}]')
_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)


def loads_skipping_deep(text: str, levels: int = 2) -> tuple[Any, int]:
    """:func:`loads`, but an element nested too deep to read is left out and counted instead of
    failing the whole document: a ``trainer_state.json`` whose ``log_history`` holds one record
    nested 2,000 deep keeps every other record (as a JSON-lines reader skips that one line).

    The containers of the first ``levels`` levels (the document, ``log_history``) are walked
    here, one element at a time; an element of them that nests past the parser's limit is
    dropped (an object loses that key, an array that element). Linear in the text.

    Returns:
        ``(value, skipped)``: the document and the number of elements left out (0 when
        :func:`loads` read it whole).

    Raises:
        ValueError: the text is not JSON (``json.JSONDecodeError``), or the document itself is
            too deep at ``levels`` (:class:`JsonTooDeep`).
    """
    try:
        return loads(text), 0
    except JsonTooDeep:
        pass
    skipped = [0]

    def value(pos: int, depth: int) -> tuple[Any, int]:
        try:
            return _DECODER.raw_decode(text, pos)
        except RecursionError:
            if depth >= levels or text[pos] not in "[{":
                raise JsonTooDeep(f"JSON nested deeper than {sys.getrecursionlimit()} levels") from None
        return container(pos, depth)

    def element(pos: int, depth: int) -> tuple[Any, int]:
        """An element of a walked container; ``_SKIPPED`` (counted) when too deep to read."""
        try:
            return value(pos, depth + 1)
        except JsonTooDeep:
            skipped[0] += 1
            return _SKIPPED, _skip_value(text, pos)

    def container(pos: int, depth: int) -> tuple[Any, int]:
        is_object = text[pos] == "{"
        close = "}" if is_object else "]"
        out: Any = {} if is_object else []
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        if text.startswith(close, pos):
            return out, pos + 1
        while True:
            if is_object:
                key, pos = _DECODER.raw_decode(text, pos)
                if not isinstance(key, str):
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
                pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
                if not text.startswith(":", pos):
                    raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                item, pos = element(pos, depth)
                if item is not _SKIPPED:
                    out[key] = item
            else:
                item, pos = element(pos, depth)
                if item is not _SKIPPED:
                    out.append(item)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text.startswith(close, pos):
                return out, pos + 1
            if not text.startswith(",", pos):
                raise json.JSONDecodeError(f"Expecting ',' delimiter or '{close}'", text, pos)
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]

    start = _WS.match(text).end()  # type: ignore[union-attr]
    doc, end = value(start, 0)
    if _WS.match(text, end).end() != len(text):  # type: ignore[union-attr]
        raise json.JSONDecodeError("Extra data", text, end)
    return doc, skipped[0]


#: stands for an element left out (:func:`loads_skipping_deep`).
_SKIPPED = object()


def _skip_value(text: str, pos: int) -> int:
    """The end of the (bracket-balanced) array or object at ``text[pos]``, stepping over strings.

    Raises:
        json.JSONDecodeError: it never closes.
    """
    depth = 0
    scan = _STRUCTURE.search
    while True:
        m = scan(text, pos)
        if m is None:
            raise json.JSONDecodeError("Unterminated array or object", text, pos)
        c = m.group()
        if c == '"':
            s = _STRING_BODY.match(text, m.end())
            if s is None:
                raise json.JSONDecodeError("Unterminated string", text, m.start())
            pos = s.end()
            continue
        depth += 1 if c in "[{" else -1
        pos = m.end()
        if depth == 0:
            return pos
