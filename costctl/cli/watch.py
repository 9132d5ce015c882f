"""``costctl watch [OPTIONS] -- COMMAND...``: run a training job and stop the waste around it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..i18n import _
from .common import ConfigOption, DbOption, settings_from


class OnExit(str, Enum):
    """What happens when COMMAND exits."""

    guard = "guard"
    stop = "stop"
    leave = "leave"


class OnOom(str, Enum):
    """What happens when COMMAND dies of CUDA out of memory."""

    advise = "advise"
    retry = "retry"


def watch(
    command: Annotated[
        list[str] | None,
        typer.Argument(help=_("The training command, after `--`. Without one, guard the whole machine.")),
    ] = None,
    config: ConfigOption = None,
    db: DbOption = None,
    on_exit: Annotated[
        OnExit | None,
        typer.Option(
            "--on-exit",
            help=_("When COMMAND exits: guard (keep guarding with the idle policy), stop (stop the instance now), "
                   "leave (end the watch, leave the instance running). Default: [watch] on_exit (guard)."),
        ),
    ] = None,
    loss_regex: Annotated[
        str | None, typer.Option("--loss-regex", help=_("Regex with a named group `loss` (optional `step`, `epoch`)."))
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option("--loss", help=_("Which train loss series of the output the policies watch when it has several "
                                      "(e.g. 'G loss', 'total'); default: a 'total' one, else the plain per-batch "
                                      "loss, else the first (as costctl analyze --loss).")),
    ] = None,
    metrics_file: Annotated[
        Path | None,
        typer.Option("--metrics-file", help=_("Read progress from this JSONL or CSV file (e.g. Lightning "
                                              "metrics.csv).")),
    ] = None,
    sample_interval: Annotated[
        str | None, typer.Option("--sample-interval", help=_("Override [watch] sample_interval, e.g. 1s, 10s."))
    ] = None,
    attach: Annotated[
        str | None,
        typer.Option("--attach", metavar="RUN|PID",
                     help=_("Take over a run whose watch died while its job runs on (`costctl bill` shows it "
                            "unguarded): its run id (or a unique prefix) or the job's pid. Follows the job's output "
                            "from where the last watch left off, charges on from the run's last charge (the time "
                            "unwatched included: the instance billed it) and closes the run at the job's end.")),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Record decisions; stop nothing."))] = False,
    advise_only: Annotated[
        bool,
        typer.Option("--advise-only", help=_("A watch that stops nothing: run without a stop route (no credential, "
                                             "no self-stop); every stop decision is advice, said at start, on the "
                                             "status line and in the summary.")),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help=_("No messages of costctl's own except errors."))] = False,
    no_status: Annotated[bool, typer.Option("--no-status", help=_("No live status line."))] = False,
    passthrough: Annotated[
        bool,
        typer.Option("--passthrough/--no-passthrough", hidden=True,
                     help=_("Pass the job's output to this watch's stdout/stderr (default). --no-passthrough: the "
                            "run log alone keeps it (the watch the relay starts when the job ends unwatched).")),
    ] = True,
    resume: Annotated[
        bool,
        typer.Option("--resume", help=_("Restart COMMAND from the newest intact checkpoint under [checkpoint] path "
                                        "or where its earlier runs acknowledged saves (newer ones that are empty or "
                                        "cut short are skipped, each named on stderr): {checkpoint} in COMMAND and "
                                        "$COSTCTL_RESUME_FROM name it. Refused while a watch of the same job still "
                                        "runs.")),
    ] = False,
    on_oom: Annotated[
        OnOom | None,
        typer.Option("--on-oom", help=_("When COMMAND dies of CUDA out of memory: retry (batch halved, gradient "
                                        "accumulation doubled, same effective batch) or advise. Default: [oom] "
                                        "action (advise).")),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", min=1, help=_("COMMAND's per-device batch size: fills {batch_size} and "
                                                   "$COSTCTL_BATCH_SIZE (default: $COSTCTL_BATCH_SIZE).")),
    ] = None,
    accum_steps: Annotated[
        int | None,
        typer.Option("--accum-steps", min=1, help=_("Gradient-accumulation steps: fills {accum_steps} and "
                                                    "$COSTCTL_ACCUM_STEPS (default: $COSTCTL_ACCUM_STEPS or 1).")),
    ] = None,
    pty: Annotated[
        bool | None,
        typer.Option("--pty/--no-pty", help=_("Run COMMAND on one pseudo-terminal for its stdout and stderr (C stdio "
                                              "and perl then line-buffer; both streams in the order written, as one "
                                              "stream), or on two pipes. Default: a pty when costctl's stdout and "
                                              "stderr are one terminal.")),
    ] = None,
) -> None:
    """Run COMMAND under watch: sample GPU use, parse the loss, accrue spend, apply the policies.

    Before COMMAND starts, the watch proves it can stop this instance (an accepted API
    credential, or a self-stop command on this very instance); otherwise it refuses with exit
    status 2 and starts nothing, unless --advise-only is given.

    The job's output passes through unchanged and is copied into a per-run log. Exits with the
    job's exit status when the watch ends with the job. COMMAND may contain the placeholders
    {batch_size}, {accum_steps} and {checkpoint} (see --batch-size, --accum-steps, --resume).
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
        loss=loss,
        metrics_file=metrics_file,
        dry_run=dry_run,
        advise_only=advise_only,
        quiet=quiet,
        passthrough=passthrough,
        status_line=False if (no_status or not settings.watch.status_line) else None,
        resume=resume,
        on_oom=on_oom.value if on_oom else settings.oom.action,
        batch_size=batch_size,
        accum_steps=accum_steps,
        pty=pty,
        attach=attach,
    )
    code = Watcher(settings, options).run()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``watch`` to ``app``."""
    app.command(
        "watch",
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
        help=_("Run COMMAND under watch: sample GPU use, parse the loss, accrue spend, apply the policies.\n\n"
               "Before COMMAND starts, the watch proves it can stop this instance (an accepted API credential, "
               "or a self-stop command on this very instance); otherwise it refuses with exit status 2 and "
               "starts nothing, unless --advise-only is given.\n\n"
               "The job's output passes through unchanged and is copied into a per-run log. Exits with the "
               "job's exit status when the watch ends with the job. COMMAND may contain the placeholders "
               "{batch_size}, {accum_steps} and {checkpoint} (see --batch-size, --accum-steps, --resume)."),
    )(watch)
