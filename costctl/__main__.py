"""``python -m costctl`` runs the CLI."""

from .cli.main import run

run()
