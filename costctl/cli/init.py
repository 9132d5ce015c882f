"""``costctl init``: write a commented example ``costctl.toml``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from ..config import CONFIG_FILE_NAME
from ..errors import UsageError
from .common import err_console


def example_config() -> str:
    """The commented example config shipped with costctl (every key with its default)."""
    return resources.files("costctl").joinpath("data/costctl.example.toml").read_text(encoding="utf-8")


def init(
    path: Annotated[Path, typer.Argument(help="Where to write it.")] = Path(CONFIG_FILE_NAME),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example config (every key with its default)."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a file path, e.g. {path / CONFIG_FILE_NAME}")
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; use --force to overwrite it")
    try:
        path.write_text(example_config(), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    err_console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add ``init`` to ``app``."""
    app.command("init")(init)
