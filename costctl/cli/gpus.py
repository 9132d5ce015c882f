"""Placeholder: the `gpus` command group is being built (replaced before this lands)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
