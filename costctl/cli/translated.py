"""typer commands whose own words are translated (:mod:`costctl.i18n`).

typer (0.2x) carries its own copy of click, whose help layout and usage errors print fixed
English words ("Usage:", "Show this message and exit.", "Try ... for help.", "Error: ..."), not
through gettext. costctl's command classes, given to typer through its documented ``cls``
parameter, put those words through :func:`~costctl.i18n._`; typer's own gettext-translated words
("Options", "Commands") come from the same catalogue (:func:`costctl.i18n.install_for_cli`).
:func:`show_usage_error` prints a usage error the way click does, in the current language (the
detail of click's message, "No such option: --x", by :func:`~costctl.cli.click_errors.click_message`).

:class:`CostctlTyper` is a :class:`typer.Typer` whose commands and groups use these classes.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ..i18n import _
from ..validation import escape_controls
from .click_errors import click_message
from .help_format import WidthContext, short_help_of


def _help_option(cmd: Any, ctx: Any, found: Any) -> Any:
    if found is not None:
        found.help = _("Show this message and exit.")
    return found


def _format_usage(cmd: Any, ctx: Any, formatter: Any) -> None:
    pieces = cmd.collect_usage_pieces(ctx)
    formatter.write_usage(ctx.command_path, " ".join(pieces), prefix=_("Usage:") + " ")


class TranslatedCommand(TyperCommand):
    """A typer command whose "Usage:" and ``--help`` text are translated, laid out by display
    width (:mod:`costctl.cli.help_format`)."""

    context_class = WidthContext

    def get_help_option(self, ctx: Any) -> Any:
        return _help_option(self, ctx, super().get_help_option(ctx))

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        _format_usage(self, ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return short_help_of(self, limit)


class TranslatedGroup(TyperGroup):
    """A typer group whose "Usage:" and ``--help`` text are translated, laid out by display
    width (:mod:`costctl.cli.help_format`)."""

    context_class = WidthContext

    def get_help_option(self, ctx: Any) -> Any:
        return _help_option(self, ctx, super().get_help_option(ctx))

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        _format_usage(self, ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return short_help_of(self, limit)


class CostctlTyper(typer.Typer):
    """:class:`typer.Typer` whose group, commands and sub-groups use the translated classes."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", TranslatedGroup)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", TranslatedCommand)
        return super().command(*args, **kwargs)


#: click's exception classes as typer raises them (its own copy of click, or click itself).
_MRO = {c.__name__: c for c in typer.BadParameter.__mro__}
ClickException: type[Exception] = _MRO["ClickException"]
UsageError: type[Exception] = _MRO["UsageError"]


def show_usage_error(exc: Any) -> int:
    """Print a click usage error (or other click exception) to stderr in the current language,
    as click lays it out (usage line, hint, error); returns its exit status (2 for usage errors)."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # a group run bare: its help, as click prints it
        print(exc.format_message(), file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    lines = []
    if isinstance(exc, UsageError) and ctx is not None:
        lines.append(ctx.get_usage())
        if ctx.command.get_help_option(ctx) is not None:
            lines.append(_("Try '{command} {option}' for help.").format(command=ctx.command_path,
                                                                       option=ctx.help_option_names[0]))
        lines.append("")
    lines.append(escape_controls(_("Error: {message}").format(message=click_message(exc))))
    print("\n".join(lines), file=sys.stderr)
    return int(getattr(exc, "exit_code", 1))


__all__ = ["ClickException", "CostctlTyper", "TranslatedCommand", "TranslatedGroup", "UsageError",
           "show_usage_error"]
