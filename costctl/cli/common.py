"""Options and helpers shared by the CLI modules: config loading, the ledger, output formats."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..i18n import _

if TYPE_CHECKING:  # rich loads when a table or message is printed (see __getattr__)
    from rich.console import Console
    from rich.table import Table
if TYPE_CHECKING:  # config (pydantic, the policies) loads when a command reads settings, not for --help
    from ..config import Settings

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=_("Config file (default: ./costctl.toml or $COSTCTL_CONFIG).")),
]
DbOption = Annotated[
    str | None,
    typer.Option("--db", help=_("SQLAlchemy database URL (default: $COSTCTL_DATABASE_URL or SQLite in the data dir).")),
]


class OutputFormat(str, Enum):
    """Output formats for report-like commands."""

    table = "table"
    json = "json"
    csv = "csv"


FormatOption = Annotated[OutputFormat, typer.Option("--format", "-f", help=_("table, json or csv."))]

def __getattr__(name: str) -> Any:
    """``err_console`` (costctl's own messages, never the child's output, go to stderr) and
    ``out_console`` (stdout): rich consoles made on first use, so a command that prints no
    table (``costctl watch`` until its summary) does not import rich."""
    if name in ("err_console", "out_console"):
        from rich.console import Console

        console = globals()[name] = Console(stderr=name == "err_console", highlight=False, markup=False)
        return console
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _console(name: str) -> Console:
    """The module's ``err_console`` / ``out_console`` (made on first use; a test may replace it)."""
    return globals()[name] if name in globals() else __getattr__(name)


def settings_from(config: Path | None, db: str | None = None, **overrides: Any) -> Settings:
    """Load settings with ``--config`` and ``--db`` applied (see :func:`costctl.config.load_settings`).

    Raises:
        ConfigError: one line, exit status 2.
    """
    from ..config import load_settings
    from ..i18n import set_language

    extra: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    if db:
        extra["database_url"] = db
    settings = load_settings(config, extra or None)
    set_language(settings.ui.language)
    return settings


def team_settings(config: Path | None, db: str | None = None) -> Settings:
    """Settings for the commands that read the team's view of the fleet (``costctl fleet``,
    ``costctl patrol``, ``costctl snooze --instance``): ``--db`` wins; else, in fleet mode
    (``[ledger] central_url``), the central ledger becomes the ledger they read and record into,
    so instances guarded by colleagues' watches show as guarded; else as :func:`settings_from`.

    Raises:
        ConfigError: one line, exit status 2.
    """
    settings = settings_from(config, db)
    central = settings.ledger.central_url
    if db is None and central is not None:
        settings = settings.model_copy(update={"database_url": central})
    return settings


def unprefixed(error: str, provider: str) -> str:
    """``error`` without the ``"<provider>: "`` (or full-width ``"<provider>："``) its adapter
    starts it with, for a line that names the provider already."""
    for colon in (": ", "："):
        if error.startswith(provider + colon):
            return error[len(provider) + len(colon):]
    return error


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout (Decimals and datetimes as strings)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")


def print_line(text: str, *, console: Console | None = None) -> None:
    """Print a line of text: word-wrapped to the window on a terminal, one unbroken line into a
    pipe or file (so notes and messages stay greppable)."""
    console = console or _console("out_console")
    console.print(text, soft_wrap=not console.is_terminal)


#: Widest table measured (characters); rows are never longer than this in practice.
_MAX_TABLE_WIDTH = 10_000


def natural_width(console: Console, table: Table) -> int:
    """Characters ``table`` needs to show every cell on one line, unwrapped."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update(max_width=_MAX_TABLE_WIDTH), table).maximum


def print_table(table: Table, *, droppable: Sequence[str] = (), console: Console | None = None) -> list[str]:
    """Print a rich table so that no cell is cut short ("A10…").

    * Into a pipe or file (not a terminal): at its natural width, however wide, so each row is
      one line that grep, awk or a wide pager can read.
    * On a terminal: columns whose header is in ``droppable`` (least useful first) are removed
      one by one until the table fits the window, and a note on stderr names them; what still
      does not fit is wrapped (long words folded), never ellipsized.

    Args:
        table: the table, with its rows added.
        droppable: headers of columns that may be hidden on a narrow terminal, in drop order
            (as shown, or their English message ids: either matches).
        console: where to print (default: :data:`out_console`, stdout).

    Returns:
        The headers of the columns hidden (empty when nothing was).
    """
    from rich.console import Console

    console = console or _console("out_console")
    if not console.is_terminal:
        natural = natural_width(console, table)
        if natural > console.width:
            console = Console(file=console.file, width=natural, highlight=False, markup=False,
                              color_system=None, soft_wrap=False)
        console.print(table)
        return []
    dropped: list[str] = []
    for header in droppable:
        if natural_width(console, table) <= console.width:
            break
        column = next((c for c in table.columns if str(c.header) in (header, _(header))), None)
        if column is not None:
            table.columns.remove(column)
            for index, kept in enumerate(table.columns):
                kept._index = index  # rich pads the first and last column by this position
            dropped.append(str(column.header))
    for column in table.columns:
        column.overflow = "fold"
    console.print(table)
    if dropped:
        from babel.lists import format_list  # "A, B, and C" / "A、B和C" by the language's rules (CLDR)

        from ..i18n import language

        _console("err_console").print(
            _("note: columns {columns} hidden to fit {width} columns; widen the terminal, pipe the output or "
              "use --format json to see them").format(columns=format_list(dropped, locale=language()),
                                                      width=console.width), soft_wrap=True)
    return dropped
