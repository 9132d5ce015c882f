"""What one ``costctl watch`` was asked to do: the command-line choices (:class:`WatchOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class WatchOptions:
    """Command-line choices for one watch.

    Attributes:
        command: argv of the training job; None guards the whole machine.
        on_exit: when the command exits: ``guard`` (keep guarding with the idle policy),
            ``stop`` (stop the instance at once) or ``leave`` (end the watch, leave it running).
        loss_regex: overrides the built-in loss formats (named group ``loss``).
        loss: ``--loss NAME``: the train series of the output the policies watch when it
            has several (:func:`costctl.progress.series.choose_primary`); None: by the rule.
        metrics_file: read progress from this JSONL/CSV file instead of the output.
        dry_run: record decisions, stop nothing (the preflight still refuses a watch that could
            not stop its instance: a dry run rehearses the real one).
        advise_only: a watch that stops nothing, asked for explicitly: no stop route is needed
            (the preflight does not refuse) and every stop decision is recorded as advice.
        quiet: no messages of costctl's own on stderr except errors (the child's bytes still pass).
        passthrough: pass the job's output to this process's stdout/stderr (False: the run log,
            written by the relay, alone keeps it: the on-exit watch the relay starts, whose own
            output goes to a file nobody reads, would copy the job's output there again).
        status_line: None = on when stderr is a terminal.
        resume: restart the command from the newest intact checkpoint under ``[checkpoint] path``
            (:func:`costctl.checkpoint.newest_intact_checkpoint`; ``{checkpoint}`` in the command
            and ``$COSTCTL_RESUME_FROM``).
        on_oom: ``retry`` (halve the batch, double accumulation, restart) or ``advise``.
        batch_size / accum_steps: the job's batch size and gradient-accumulation steps, for
            ``{batch_size}``/``{accum_steps}`` and ``$COSTCTL_BATCH_SIZE``/``$COSTCTL_ACCUM_STEPS``
            (default: those variables in costctl's own environment, accumulation 1).
        pty: run the job on one pseudo-terminal for its stdout and stderr (True) or on two
            pipes (False); None: a pty when costctl's stdout and stderr are one terminal.
    """

    command: list[str] | None = None
    on_exit: str = "guard"
    loss_regex: str | None = None
    loss: str | None = None
    metrics_file: Path | None = None
    dry_run: bool = False
    advise_only: bool = False
    quiet: bool = False
    passthrough: bool = True
    status_line: bool | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    attach: str | None = None
    resume: bool = False
    on_oom: str = "advise"
    batch_size: int | None = None
    accum_steps: int | None = None
    pty: bool | None = None
