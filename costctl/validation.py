"""One user-facing line for a pydantic :class:`~pydantic.ValidationError`.

Used for costctl's own settings (:func:`costctl.config.load_settings`) and for the provider
adapters' ``[providers.<name>]`` tables (``costctl_providers._config.load_table``), so that a bad
key reads the same everywhere::

    unknown key 'polices' (check the spelling; `costctl init` writes every key)
    instance.billing = 'free': expected 'on-demand', 'spot' or 'prepaid'
    instance.provider = 3: expected text (and 1 more problem(s))
    [providers.vastai] unknown key 'api_key'
    [providers.runpod] base_url = 'ftp://x': expected an http:// or https:// URL
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from .errors import UsageError
from .i18n import _, language, ngettext

#: Longest ``repr`` of a bad value quoted in a message, in characters (longer ones are cut with "...").
MAX_VALUE_CHARS = 60

#: pydantic's error types of a number outside its bounds (or not finite), and of text that is no
#: number: with the key's range known, the message names the whole range.
BOUND_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"})
NUMBER_ERRORS = frozenset({"int_parsing", "int_from_float", "float_parsing", "int_type", "float_type",
                           "decimal_parsing", "decimal_type"})


def escape_controls(text: str) -> str:
    """``text`` with every character a terminal would not show as itself (C0 and C1 controls,
    DEL, other non-printable characters but the space) written as Python's ``repr`` escape
    (``\\x1b``, ``\\n``, ``\\u202e``): a path holding an escape sequence or a NUL is shown as
    typed in an error message, never swallowed or acted on by the terminal.

    >>> escape_controls("run\\x1b[31m.log")
    'run\\\\x1b[31m.log'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def _escape_char(c: str) -> str:
    """One non-printable character as an escape; a ``surrogateescape``'d byte (U+DC80..U+DCFF,
    a byte of a path or argument that is not UTF-8) as that byte, ``\\xff``."""
    if "\udc80" <= c <= "\udcff":
        return "\\x{:02x}".format(ord(c) - 0xDC00)
    return repr(c)[1:-1]


def describe_value(value: Any) -> str:
    """``repr(value)``, cut to :data:`MAX_VALUE_CHARS` characters (ending in ``...`` when cut)."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def pydantic_problem(error: Any) -> str:
    """What is wrong with one value, in costctl's own words in the current language, for one
    of pydantic's error dicts (``ValidationError.errors()[i]``: ``type``, ``msg``, ``ctx``).

    The common error types (a number, a boolean, a list, a table, text, one of a set of
    values, a bound, a length, a missing or unknown key) get costctl's sentence; a validator's
    own ``ValueError`` keeps its text (without pydantic's ``Value error,`` prefix); any other
    type falls back to pydantic's English ``msg``.
    """
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return _("expected a whole number")
    if kind in ("float_parsing", "float_type", "decimal_parsing", "decimal_type", "finite_number"):
        return _("expected a number")
    if kind in ("bool_parsing", "bool_type"):
        return _("expected true or false")
    if kind in ("list_type", "tuple_type", "set_type"):
        return _("expected a list")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return _("expected a table of keys and values")
    if kind in ("string_type", "string_sub_type"):
        return _("expected text")
    if kind == "literal_error" and "expected" in ctx:
        return _("expected {choices}").format(choices=ctx["expected"])
    if kind == "missing":
        return _("required, but missing")
    if kind == "extra_forbidden":
        return _("not a known key")
    bounds = {"greater_than": (_("expected a number greater than {limit}"), "gt"),
              "greater_than_equal": (_("expected a number of at least {limit}"), "ge"),
              "less_than": (_("expected a number less than {limit}"), "lt"),
              "less_than_equal": (_("expected a number of at most {limit}"), "le")}
    if kind in bounds and bounds[kind][1] in ctx:
        text, name = bounds[kind]
        return text.format(limit=ctx[name])
    if kind in ("too_long", "string_too_long") and "max_length" in ctx:
        if kind == "string_too_long":
            return _("expected at most {count} characters").format(count=ctx["max_length"])
        return _("expected at most {count} items").format(count=ctx["max_length"])
    if kind in ("too_short", "string_too_short") and "min_length" in ctx:
        if kind == "string_too_short":
            return _("expected at least {count} characters").format(count=ctx["min_length"])
        return _("expected at least {count} items").format(count=ctx["min_length"])
    return str(error.get("msg", "")).removeprefix("Value error, ")


def ordered_problems(err: ValidationError) -> list[Any]:
    """``err``'s problems, the one to show first first: an unknown key (``extra_forbidden``: a
    misspelled key is most often the cause of the others, e.g. ``filter`` for ``filters`` makes
    ``filters`` missing) ahead of every other, else pydantic's order."""
    problems = list(err.errors())
    return sorted(problems, key=lambda problem: problem["type"] != "extra_forbidden")


def one_line(
    err: ValidationError,
    *,
    table: str | None = None,
    unknown_hint: str = "",
    count_others: bool = True,
    secret_keys: tuple[str, ...] = (),
    ranges: Callable[[tuple[Any, ...]], str] | None = None,
    shown_key: str | None = None,
    written: str | None = None,
) -> str:
    """The first problem of ``err`` (:func:`ordered_problems`: an unknown key first) as one line
    naming the key, the value and what is allowed.

    Args:
        err: pydantic's error (models with ``extra="forbid"`` report unknown keys as
            ``extra_forbidden``).
        table: the TOML table the model validated, e.g. ``"providers.autodl"``; the line then
            starts with ``[providers.autodl] `` and a model-level problem is reported against the
            key ``(table)``.
        unknown_hint: appended (after a space) to an unknown-key line, e.g. how to find the keys.
        count_others: append ``(and N more problem(s))`` when pydantic reported more than one.
        secret_keys: dotted key prefixes whose values are secrets (``"notify.urls"``): a bad
            value there is never quoted, the line says ``(hidden)`` in its place.
        ranges: the documented range of the key at a location (``"0 to 100"``, ``""`` when it
            has none): a number outside its bounds, or no number at all, then reads
            ``expected a number from 0 to 100`` instead of pydantic's one-sided bound.
        shown_key: how the line names a bad value's key, instead of its dotted path (e.g.
            ``environment variable COSTCTL_X``, already translated).
        written: the bad value as the user wrote it (a TOML float's text: ``1e400``, which the
            parser read as ``inf``), shown instead of the parsed value's ``repr``.

    Returns:
        ``"[table] unknown key 'k' hint"`` or ``"[table] key.path = 'value': what is allowed"``
        (pydantic's message without its ``Value error,`` prefix; a ``Literal`` field's
        ``Input should be 'a' or 'b'`` reads ``expected 'a' or 'b'``).
    """
    problems = ordered_problems(err)
    first = problems[0]
    prefix = f"[{table}] " if table else ""
    key = ".".join(str(p) for p in first["loc"]) or ("(table)" if table else "")
    if first["type"] == "extra_forbidden":
        if unknown_hint:
            return prefix + _("unknown key '{key}' {hint}").format(key=key, hint=unknown_hint)
        return prefix + _("unknown key '{key}'").format(key=key)
    msg = pydantic_problem(first)
    rng = ranges(tuple(first["loc"])) if ranges is not None and first["type"] in BOUND_ERRORS | NUMBER_ERRORS else ""
    if rng:
        msg = (_("expected a number from {range}") if rng[0].isdigit() else _("expected a number {range}")).format(
            range=rng)
    shown = shown_key or key
    hidden = any(key == s or key.startswith(s + ".") for s in secret_keys)
    if hidden:
        value = _("(hidden)")
    elif written is not None:
        value = written if len(written) <= MAX_VALUE_CHARS else written[: MAX_VALUE_CHARS - 3] + "..."
    else:
        value = describe_value(first.get("input"))
    if count_others and len(problems) > 1:
        return prefix + ngettext("{key} = {value}: {problem} (and {count} more problem)",
                                 "{key} = {value}: {problem} (and {count} more problems)",
                                 len(problems) - 1).format(
            key=shown, value=value, problem=msg, count=len(problems) - 1)
    return prefix + _("{key} = {value}: {problem}").format(key=shown, value=value, problem=msg)


_TOML_WHERE = re.compile(r"\s*\((?:at line (?P<line>\d+), column (?P<column>\d+)|at end of document)\)\s*$")


def toml_error_text(where: str, exc: Exception) -> str:
    """One line for a :class:`tomllib.TOMLDecodeError` of the file or text ``where`` (a path, a
    name): ``"<where>: not valid TOML at line L, column C"`` (``at the end of the file``), in the
    current language; tomllib's own detail (English only, e.g. ``Invalid value``) is added in
    English alone. The position is read from tomllib's message (Python 3.11 keeps it nowhere else).
    """
    text = str(exc)
    found = _TOML_WHERE.search(text)
    detail = text[:found.start()] if found else text
    english = language() == "en"
    if found is not None and found.group("line"):
        shape = {"where": where, "line": int(found.group("line")), "column": int(found.group("column")),
                 "detail": detail}
        said = (_("{where}: not valid TOML at line {line}, column {column}: {detail}") if english
                else _("{where}: not valid TOML at line {line}, column {column}"))
    else:
        shape = {"where": where, "detail": detail}
        said = (_("{where}: not valid TOML at the end of the file: {detail}") if english
                else _("{where}: not valid TOML at the end of the file"))
    return said.format(**shape)


def special_file_kind(path: "os.PathLike[str] | str", fd: int | None = None) -> str | None:
    """What ``path`` (or the open ``fd``) is when it is neither a regular file nor a directory:
    ``"fifo"``, ``"device"`` (character or block) or ``"socket"``; None for a regular file, a
    directory, or a path that cannot be stat'ed (the caller's open reports that its own way).
    Never opens the path (opening a FIFO blocks until a writer comes)."""
    try:
        mode = os.fstat(fd).st_mode if fd is not None else os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return None


def shown_path(path: "os.PathLike[str] | str | bytes") -> str:
    """A path (or command argument) as text that always encodes: bytes that are not UTF-8
    (kept by Python as lone surrogates, ``surrogateescape``) are written as ``\\xff`` escapes."""
    try:
        raw = os.fsencode(path)
    except (TypeError, UnicodeEncodeError):
        return str(path).encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def require_regular_file(path: "os.PathLike[str] | str") -> None:
    """Check, before opening it, that a file the user named is a regular file (or a directory,
    which the caller's open reports): a FIFO would block the open forever, a device such as
    ``/dev/zero`` never ends.

    Raises:
        UsageError: ``path`` is a FIFO, a device or a socket (one line naming it; exit 2).
    """
    kind = special_file_kind(path)
    if kind is None:
        return
    shown = escape_controls(shown_path(path))
    if kind == "fifo":
        raise UsageError(_("{path} is a FIFO, expected a regular file").format(path=shown))
    if kind == "device":
        raise UsageError(_("{path} is a device, expected a regular file").format(path=shown))
    raise UsageError(_("{path} is a socket, expected a regular file").format(path=shown))
