"""``costctl watch [OPTIONS] -- COMMAND...``: run a training job and stop the waste around it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, DbOption, settings_from


class OnExit(str, Enum):
    """What happens when COMMAND exits."""

    guard = "guard"
    stop = "stop"
    leave = "leave"


def watch(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The training command, after `--`. Without one, guard the whole machine."),
    ] = None,
    config: ConfigOption = None,
    db: DbOption = None,
    on_exit: Annotated[
        OnExit | None,
        typer.Option(
            "--on-exit",
            help="When COMMAND exits: guard (keep guarding with the idle policy), stop (stop the instance now), "
            "leave (end the watch, leave the instance running). Default: [watch] on_exit (guard).",
        ),
    ] = None,
    loss_regex: Annotated[
        str | None, typer.Option("--loss-regex", help="Regex with a named group `loss` (optional `step`, `epoch`).")
    ] = None,
    metrics_file: Annotated[
        Path | None, typer.Option("--metrics-file", help="Read progress from this JSONL or CSV file (e.g. Lightning metrics.csv).")
    ] = None,
    sample_interval: Annotated[
        str | None, typer.Option("--sample-interval", help="Override [watch] sample_interval, e.g. 1s, 10s.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Record decisions; stop nothing.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No messages of costctl's own except errors.")] = False,
    no_status: Annotated[bool, typer.Option("--no-status", help="No live status line.")] = False,
) -> None:
    """Run COMMAND under watch: sample GPU use, parse the loss, accrue spend, apply the policies.

    The job's output passes through unchanged and is copied into a per-run log. Exits with the
    job's exit status when the watch ends with the job.
    """
    from ..watch import Watcher, WatchOptions  # heavy (ledger, scheduler): only when watching

    overrides: dict = {}
    if sample_interval is not None:
        overrides["watch"] = {"sample_interval": sample_interval}
    settings = settings_from(config, db, **overrides)
    options = WatchOptions(
        command=list(command) if command else None,
        on_exit=(on_exit.value if on_exit else settings.watch.on_exit),
        loss_regex=loss_regex,
        metrics_file=metrics_file,
        dry_run=dry_run,
        quiet=quiet,
        status_line=False if (no_status or not settings.watch.status_line) else None,
    )
    code = Watcher(settings, options).run()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``watch`` to ``app``."""
    app.command(
        "watch",
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )(watch)
