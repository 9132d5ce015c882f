"""The watched command: its batch plan, resume checkpoint, placeholders and environment.

:func:`prepare_command` runs before anything is recorded (a bad ``$COSTCTL_BATCH_SIZE``, a
placeholder without a value, ``--resume`` with nothing to resume from or a missing program is
a user mistake, not a failed run); :func:`child_argv_env` gives the argv and environment each
(re)start of the command runs with (see :mod:`costctl.job` for the variables).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..checkpoint import CheckpointFile, find_checkpoints, known_patterns, newest_intact_checkpoint, resolve_pattern
from ..child import check_command
from ..config import Settings
from ..errors import UsageError
from ..i18n import _
from ..lifecycle.oom_retry import BatchPlan, render_command
from ..progress.lines import compile_loss_regex
from .options import WatchOptions


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def skipped_line(cp: CheckpointFile, reason: str, cwd: Path | None = None) -> str:
    """The one line ``--resume`` prints for a checkpoint it passed over (path relative to ``cwd``
    when under it)."""
    try:
        shown = cp.path.relative_to(cwd or Path.cwd())
    except ValueError:
        shown = cp.path
    return _("costctl: skipped checkpoint {path} ({reason})").format(path=shown, reason=reason)


def prepare_command(opts: WatchOptions, s: Settings, *, warn: Callable[[str], None] = _to_stderr,
                    known: Sequence[str] = ()) -> tuple[BatchPlan | None, str | None]:
    """Batch size, accumulation and the resume checkpoint; validates the placeholders.

    With ``--resume`` the checkpoint is the newest match of ``[checkpoint] path`` — or of the
    places this job's chain acknowledged saves outside it (``known``: their paths, from the
    ledger; :func:`costctl.checkpoint.known_patterns`) — that passes
    :func:`costctl.checkpoint_integrity.check_checkpoint`; each newer one passed over (empty,
    truncated, a Hugging Face directory without ``trainer_state.json`` or whole weights) is
    named with the reason, one line each, through ``warn`` (default: stderr, even with --quiet).

    Returns:
        ``(batch plan, resume checkpoint)``: the plan is None when no batch size is known
        (``--batch-size``, else ``$COSTCTL_BATCH_SIZE``; accumulation ``--accum-steps``, else
        ``$COSTCTL_ACCUM_STEPS``, else 1); the checkpoint (a path) only with ``--resume``.

    Raises:
        UsageError: a bad ``$COSTCTL_BATCH_SIZE``, ``{batch_size}`` without a known batch size,
            or ``--resume`` with no (intact) checkpoint to resume from; a bad ``--loss-regex``; a command
            that cannot be run (exit status 127/126).
    """

    def env_int(name: str) -> int | None:
        raw = os.environ.get(name, "").strip()
        if not raw:
            return None
        if not raw.isdigit() or int(raw) < 1:
            raise UsageError(_("{name}={value!r}: expected a positive integer").format(name=name, value=raw))
        return int(raw)

    if opts.loss_regex:
        compile_loss_regex(opts.loss_regex)  # a bad pattern is a user mistake: nothing recorded
    batch_size = opts.batch_size or env_int("COSTCTL_BATCH_SIZE")
    accum = opts.accum_steps or env_int("COSTCTL_ACCUM_STEPS") or 1
    batch = BatchPlan(batch_size, accum) if batch_size else None
    resume_from: str | None = None
    if opts.resume:
        if not s.checkpoint.path and not known:
            raise UsageError(_("--resume needs [checkpoint] path (where the job writes its checkpoints)"))
        pattern = [resolve_pattern(s.checkpoint.path)] if s.checkpoint.path else []
        pattern += known_patterns(known)
        if not find_checkpoints(pattern):
            if not s.checkpoint.path:
                message = _("--resume: no checkpoint matches the places this job's saves were acknowledged")
            elif known:
                message = _("--resume: no checkpoint matches [checkpoint] path {path!r} nor where this job's saves "
                            "were acknowledged")
            else:
                message = _("--resume: no checkpoint matches [checkpoint] path {path!r}")
            raise UsageError(message.format(path=s.checkpoint.path))
        skipped: list[str] = []

        def skip(cp: CheckpointFile, reason: str) -> None:
            skipped.append(str(cp.path))
            warn(skipped_line(cp, reason))

        newest = newest_intact_checkpoint(pattern, on_skip=skip)
        if newest is None:
            if known:
                message = _("--resume: none of the {count} checkpoints matching [checkpoint] path {path!r} (or saved "
                            "elsewhere by this job) is intact (each is named above with what is wrong)")
            else:
                message = _("--resume: none of the {count} checkpoints matching [checkpoint] path {path!r} is "
                            "intact (each is named above with what is wrong)")
            raise UsageError(message.format(count=len(skipped), path=s.checkpoint.path))
        resume_from = str(newest.path)
    if opts.command:
        argv = render_command(opts.command, batch_size=batch.batch_size if batch else None,
                              accum_steps=accum, checkpoint=resume_from)
        check_command(argv)  # a missing command is a user mistake: nothing recorded
    return batch, resume_from


def child_argv_env(
    command: Sequence[str],
    batch: BatchPlan | None,
    resume_from: str | None,
    *,
    run_id: str,
    checkpoint_request: Path,
    extra_env: dict[str, str],
) -> tuple[list[str], dict[str, str]]:
    """The argv (placeholders filled) and the extra environment for one start of the command.

    The environment holds ``PYTHONUNBUFFERED=1``, ``$COSTCTL_RUN_ID``,
    ``$COSTCTL_CHECKPOINT_REQUEST``, ``extra_env``, and, when known, ``$COSTCTL_BATCH_SIZE`` /
    ``$COSTCTL_ACCUM_STEPS`` and ``$COSTCTL_RESUME_FROM``.

    Raises:
        UsageError: the command uses ``{batch_size}`` but ``batch`` is None.
    """
    argv = render_command(command, batch_size=batch.batch_size if batch else None,
                          accum_steps=batch.accum_steps if batch else 1, checkpoint=resume_from)
    env = {
        "PYTHONUNBUFFERED": "1",
        "COSTCTL_RUN_ID": run_id,
        "COSTCTL_CHECKPOINT_REQUEST": str(checkpoint_request),
        **extra_env,
    }
    if batch is not None:
        env["COSTCTL_BATCH_SIZE"] = str(batch.batch_size)
        env["COSTCTL_ACCUM_STEPS"] = str(batch.accum_steps)
    if resume_from:
        env["COSTCTL_RESUME_FROM"] = resume_from
    return argv, env
