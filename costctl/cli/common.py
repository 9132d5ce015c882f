"""Options and helpers shared by the CLI modules: config loading, the ledger, output formats."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..config import Settings, load_settings

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (default: ./costctl.toml or $COSTCTL_CONFIG)."),
]
DbOption = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy database URL (default: $COSTCTL_DATABASE_URL or SQLite in the data dir)."),
]


class OutputFormat(str, Enum):
    """Output formats for report-like commands."""

    table = "table"
    json = "json"
    csv = "csv"


FormatOption = Annotated[OutputFormat, typer.Option("--format", "-f", help="table, json or csv.")]

#: costctl's own messages (never the child's output) go to stderr.
err_console = Console(stderr=True, highlight=False, markup=False)
out_console = Console(highlight=False, markup=False)


def settings_from(config: Path | None, db: str | None = None, **overrides: Any) -> Settings:
    """Load settings with ``--config`` and ``--db`` applied (see :func:`costctl.config.load_settings`).

    Raises:
        ConfigError: one line, exit status 2.
    """
    extra: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    if db:
        extra["database_url"] = db
    return load_settings(config, extra or None)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout (Decimals and datetimes as strings)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
