"""click's usage errors in the current language (issue 16, part 3).

typer (0.2x) carries its own copy of click whose error messages are English f-strings, not
gettext look-ups ("No such option: --x", "Missing argument 'GPU'.", "Option '--limit' requires
an argument.", "Got unexpected extra argument(s) (a b)"). :func:`click_message` rebuilds each
from the exception's own fields (its class, option name, parameter, the pydantic error that
caused it) as a whole sentence of costctl's catalogue; a message it does not recognise is shown
as click wrote it.
"""

from __future__ import annotations

import re
from typing import Any

from ..i18n import _
from ..validation import describe_value, escape_controls, pydantic_problem

#: click's own English sentences (typer 0.29's vendored click, ``typer/_click`` and
#: ``typer/core.py``) that carry no structured fields: matched on the message text.
_EXTRA_ARGS = re.compile(r"^Got unexpected extra arguments? ?(?:\(s\))? \((?P<args>.*)\)$", re.S)
_NO_COMMAND = re.compile(r"^No such command (?P<name>'.*?')\.?(?: Did you mean (?P<maybe>.*)\?)?$", re.S)
_REQUIRES = re.compile(r"^Option (?P<name>'.*') requires (?:an argument|(?P<nargs>\d+) arguments)\.$")
_NO_VALUE = re.compile(r"^Option (?P<name>'.*') does not take a value\.$")
_NOT_ONE_OF = re.compile(r"^(?:Value error, )?(?P<value>.*) is not one of (?P<choices>.*)\.$", re.S)
_CHOOSE_FROM = "Choose from:"


def _no_command_translated() -> re.Pattern[str]:
    """typer words "No such command" through gettext (costctl's catalogue, installed by
    :func:`costctl.i18n.install_for_cli`), then appends an English "Did you mean": the pattern
    of that mixed sentence in the current language."""
    translated = _("No such command {name!r}.")
    head, _sep, tail = translated.partition("{name!r}")
    tail = tail.rstrip(".。")
    return re.compile("^" + re.escape(head) + r"(?P<name>'.*?')" + re.escape(tail)
                      + r"[.。]?(?:\.? Did you mean (?P<maybe>.*)\?)?$", re.S)


def _param_hint(exc: Any) -> str | None:
    hint = getattr(exc, "param_hint", None)
    if hint is None and getattr(exc, "param", None) is not None:
        hint = exc.param.get_error_hint()
    if hint is not None and not isinstance(hint, str):
        hint = " / ".join(repr(x) for x in hint)
    return hint


def _bad_value(exc: Any) -> str:
    """What is wrong with a bad parameter's value, in the current language."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        try:
            problems = errors()
        except Exception:  # noqa: BLE001 - not pydantic's: fall back to click's text
            problems = []
        if problems:
            first = problems[0]
            text = str(first.get("msg", "")).removeprefix("Value error, ")
            found = _NOT_ONE_OF.match(text)
            if found:
                return _("{value} is not one of {choices}.").format(**found.groupdict())
            problem = pydantic_problem(first)
            if "input" in first and first.get("type") != "value_error":
                return _("{value}: {problem}").format(value=describe_value(first["input"]), problem=problem)
            return problem
    found = _NOT_ONE_OF.match(exc.message)
    if found:
        return _("{value} is not one of {choices}.").format(**found.groupdict())
    return str(exc.message)


def click_message(exc: Any) -> str:
    """The detail of a click exception (what follows "Error:") in the current language."""
    kind = {c.__name__ for c in type(exc).__mro__}
    message = str(getattr(exc, "message", "") or "")
    if "NoSuchOption" in kind:
        text = _("No such option: {name}").format(name=escape_controls(exc.option_name))
        if exc.possibilities:
            text = _("{message} (Did you mean {options}?)").format(
                message=text, options=", ".join(sorted(exc.possibilities)))
        return text
    if "MissingParameter" in kind:
        hint = _param_hint(exc) or ""
        param_type = exc.param_type or (exc.param.param_type_name if exc.param is not None else "parameter")
        text = {"argument": _("Missing argument {name}."), "option": _("Missing option {name}.")}.get(
            param_type, _("Missing parameter {name}.")).format(name=hint).replace(" .", ".")
        extra = exc.param.get_missing_message(ctx=exc.ctx) if exc.param is not None else ""
        if extra and extra.startswith(_CHOOSE_FROM):
            choices = [c.strip() for c in extra[len(_CHOOSE_FROM):].split(",") if c.strip()]
            text = _("{message} Choose from: {choices}.").format(message=text, choices=", ".join(choices))
        return text
    if "BadParameter" in kind:
        hint = _param_hint(exc)
        problem = _bad_value(exc)
        if hint is None:
            return _("Invalid value: {message}").format(message=problem)
        return _("Invalid value for {param_hint}: {message}").format(param_hint=hint, message=problem)
    found = _REQUIRES.match(message)
    if found:
        if found["nargs"]:
            return _("Option {name} requires {count} arguments.").format(name=found["name"], count=found["nargs"])
        return _("Option {name} requires an argument.").format(name=found["name"])
    found = _NO_VALUE.match(message)
    if found:
        return _("Option {name} does not take a value.").format(name=found["name"])
    found = _EXTRA_ARGS.match(message)
    if found:
        return _("Got unexpected extra arguments: {args}").format(args=found["args"])
    found = _NO_COMMAND.match(message) or _no_command_translated().match(message)
    if found:
        if found["maybe"]:
            return _("No such command {name}. Did you mean {commands}?").format(name=found["name"],
                                                                            commands=found["maybe"])
        return _("No such command {name}.").format(name=found["name"])
    return str(exc.format_message())


__all__ = ["click_message"]
