"""One user-facing line for a pydantic :class:`~pydantic.ValidationError`.

Used for costctl's own settings (:func:`costctl.config.load_settings`) and for the provider
adapters' ``[providers.<name>]`` tables (``costctl_providers._config.load_table``), so that a bad
key reads the same everywhere::

    unknown key 'polices' (check the spelling; `costctl init` writes every key)
    instance.billing = 'free': expected 'on-demand', 'spot' or 'prepaid'
    instance.provider = 3: Input should be a valid string (and 1 more problem(s))
    [providers.vastai] unknown key 'api_key'
    [providers.runpod] base_url = 'ftp://x': expected an http:// or https:// URL
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

#: Longest ``repr`` of a bad value quoted in a message, in characters (longer ones are cut with "...").
MAX_VALUE_CHARS = 60


def describe_value(value: Any) -> str:
    """``repr(value)``, cut to :data:`MAX_VALUE_CHARS` characters (ending in ``...`` when cut)."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def one_line(
    err: ValidationError,
    *,
    table: str | None = None,
    unknown_hint: str = "",
    count_others: bool = True,
    secret_keys: tuple[str, ...] = (),
) -> str:
    """The first problem of ``err`` as one line naming the key, the value and what is allowed.

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

    Returns:
        ``"[table] unknown key 'k' hint"`` or ``"[table] key.path = 'value': what is allowed"``
        (pydantic's message without its ``Value error,`` prefix; a ``Literal`` field's
        ``Input should be 'a' or 'b'`` reads ``expected 'a' or 'b'``).
    """
    problems = err.errors()
    first = problems[0]
    prefix = f"[{table}] " if table else ""
    key = ".".join(str(p) for p in first["loc"]) or ("(table)" if table else "")
    if first["type"] == "extra_forbidden":
        hint = f" {unknown_hint}" if unknown_hint else ""
        return f"{prefix}unknown key '{key}'{hint}"
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "literal_error":
        msg = msg.replace("Input should be", "expected")
    more = f" (and {len(problems) - 1} more problem(s))" if count_others and len(problems) > 1 else ""
    if any(key == s or key.startswith(s + ".") for s in secret_keys):
        return f"{prefix}{key} = (hidden): {msg}{more}"
    return f"{prefix}{key} = {describe_value(first.get('input'))}: {msg}{more}"
