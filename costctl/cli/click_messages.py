"""The strings click and typer print themselves (help layout and usage errors), marked with
:func:`~costctl.i18n.N_` so that ``pybabel extract`` puts them in costctl's catalogue:
:func:`costctl.i18n.install_for_cli` makes click and typer look them up there. Each is click's
(8.x) or typer's own message id, unchanged; nothing here is called."""

from __future__ import annotations

from ..i18n import N_

#: the help layout and the errors a user meets (click.core, click.exceptions, click.formatting,
#: click.parser, click.types, click.decorators; typer.core).
CLICK_MESSAGES = (
    N_("Usage:"),
    N_("Options"),
    N_("Commands"),
    N_("Arguments"),
    N_("Show this message and exit."),
    N_("Show the version and exit."),
    N_("Aborted!"),
    N_("Missing command."),
    N_("Error: {message}"),
    N_("Try '{command} {option}' for help."),
    N_("Invalid value: {message}"),
    N_("Invalid value for {param_hint}: {message}"),
    N_("Missing argument"),
    N_("Missing option"),
    N_("Missing parameter"),
    N_("Missing {param_type}"),
    N_("Missing parameter: {param_name}"),
    N_("No such option: {name}"),
    N_("No such option {name!r}."),
    N_("No such command {name!r}."),
    N_("Option {name!r} does not take a value."),
    N_("Argument {name!r} takes {nargs} values."),
    N_("{value!r} is not a valid {number_type}."),
    N_("{value} is not in the range {range}."),
    N_("{value!r} is not a valid boolean. Recognized values: {states}"),
    N_("{name} {filename!r} does not exist."),
    N_("{name} {filename!r} is a file."),
    N_("{name} {filename!r} is a directory."),
    N_("{name} {filename!r} is not readable."),
    N_("{name} {filename!r} is not writable."),
    N_("file"),
    N_("directory"),
    N_("path"),
    N_("default: {default}"),
    N_("env var: {var}"),
    N_("required"),
    N_("(dynamic)"),
    N_("Do you want to continue?"),
    N_("Confirm the action without prompting."),
)


def _plural_messages() -> None:  # pragma: no cover - never called: marks click's plural messages
    from ..i18n import ngettext

    ngettext("Got unexpected extra argument ({args})", "Got unexpected extra arguments ({args})", 1)
    ngettext("{value!r} is not {choice}.", "{value!r} is not one of {choices}.", 1)
    ngettext("Option {name!r} requires an argument.", "Option {name!r} requires {nargs} arguments.", 1)
    ngettext("Did you mean {possibility}?", "(Did you mean one of: {possibilities}?)", 1)
