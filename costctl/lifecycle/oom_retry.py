"""CUDA out-of-memory recovery: spot the error in the job's output, halve the batch, keep the
effective batch, and fill the command's placeholders.

The job learns its batch size and accumulation steps from ``{batch_size}`` / ``{accum_steps}``
placeholders in the command, or from ``$COSTCTL_BATCH_SIZE`` / ``$COSTCTL_ACCUM_STEPS``
(:func:`costctl.job.batch_size`). ``{checkpoint}`` becomes the checkpoint to resume from
(empty when there is none). Placeholders are replaced as plain text inside each argument,
so other braces (``python -c "print({})"``) are left alone.

Every OOM shape in ``shared/corpus/oom_messages_from_issues.txt`` is recognized by
:func:`costctl.replay.oom.match_oom`, reused here line by line on both streams.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UsageError
from ..i18n import _
from ..records import BatchPlan
from ..replay.oom import OomEvent, match_oom

BATCH = "{batch_size}"
ACCUM = "{accum_steps}"
CHECKPOINT = "{checkpoint}"
#: Longest partial line kept while waiting for its end (characters).
MAX_LINE_CHARS = 64 * 1024


def uses(argv: Sequence[str] | None, placeholder: str) -> bool:
    """Whether any argument of ``argv`` contains ``placeholder`` (e.g. ``"{batch_size}"``)."""
    return bool(argv) and any(placeholder in arg for arg in argv)  # type: ignore[union-attr]


def render_command(argv: Sequence[str], *, batch_size: int | None, accum_steps: int | None,
                   checkpoint: str | None) -> list[str]:
    """``argv`` with ``{batch_size}``, ``{accum_steps}`` and ``{checkpoint}`` filled in.

    Raises:
        UsageError: the command uses ``{batch_size}`` (or ``{accum_steps}``) but no value is
            known (pass ``--batch-size`` / ``--accum-steps``).
    """
    if uses(argv, BATCH) and batch_size is None:
        raise UsageError(_("the command uses {placeholder} but no batch size is known: pass --batch-size N "
                           "(or set COSTCTL_BATCH_SIZE)").format(placeholder=BATCH))
    values = {BATCH: str(batch_size) if batch_size is not None else "",
              ACCUM: str(accum_steps if accum_steps is not None else 1),
              CHECKPOINT: checkpoint or ""}
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


class OomScanner:
    """Finds out-of-memory lines in the job's output as it streams.

    :meth:`feed` takes decoded chunks per stream (``"stdout"``/``"stderr"``), re-assembles
    lines (``\\n`` or ``\\r``) and keeps the last OOM event seen since :meth:`reset`.
    """

    def __init__(self) -> None:
        self._tails = {"stdout": "", "stderr": ""}
        self.event: OomEvent | None = None
        self.stream: str | None = None

    def feed(self, stream: str, text: str) -> OomEvent | None:
        """Scan ``text``; returns the OOM event found in it, if any."""
        data = self._tails.get(stream, "") + text
        lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        tail = lines.pop()
        self._tails[stream] = tail if len(tail) <= MAX_LINE_CHARS else ""
        found = None
        for line in lines:
            if len(line) > MAX_LINE_CHARS:
                continue
            event = match_oom(line)
            if event is not None:
                found = event
        if found is not None:
            self.event, self.stream = found, stream
        return found

    def pending(self, stream: str) -> bool:
        """Whether a partial line of ``stream`` waits for its end (feeding a line end then
        scans it); False: the next :meth:`feed` starts at a line start."""
        return bool(self._tails.get(stream))

    def finish(self) -> OomEvent | None:
        """Scan the unterminated last lines too (at the child's exit); returns the last event."""
        for stream, tail in list(self._tails.items()):
            if tail:
                self._tails[stream] = ""
                event = match_oom(tail)
                if event is not None:
                    self.event, self.stream = event, stream
        return self.event

    def reset(self) -> None:
        """Forget everything (a new child starts)."""
        self.__init__()


def advice(plan: BatchPlan | None, event: OomEvent | None, min_batch: int) -> str:
    """The one-line advice after an OOM crash, with the numbers when the batch is known."""
    if event is not None and event.requested_bytes and event.total_bytes:
        what = _("the job ran out of GPU memory (tried to allocate {requested:.2f} GiB on a {total:.2f} GiB "
                 "GPU)").format(requested=event.requested_bytes / 2**30, total=event.total_bytes / 2**30)
    else:
        what = _("the job ran out of GPU memory")
    if plan is None:
        return _("{what}: halve the batch size and double gradient accumulation to keep the effective batch; "
                 "pass --batch-size N so costctl can name the numbers, and --on-oom retry to do it").format(what=what)
    nxt = plan.halved(min_batch)
    if nxt is None:
        return _("{what} at batch {batch}: halving it would go below [oom] min_batch {min_batch}; reduce memory "
                 "another way (mixed precision, activation checkpointing, a larger card)").format(
            what=what, batch=plan.batch_size, min_batch=min_batch)
    return _("{what} at batch {batch} x accumulation {accum}: retry with batch {next_batch} x accumulation "
             "{next_accum} (effective batch {effective}); costctl watch --on-oom retry does this by itself").format(
        what=what, batch=plan.batch_size, accum=plan.accum_steps, next_batch=nxt.batch_size,
        next_accum=nxt.accum_steps, effective=nxt.effective)


def fixed_memory_advice(plan: BatchPlan, evidence: str) -> str:
    """The one line when a halved batch died on the same allocation (see
    :mod:`costctl.lifecycle.oom_compare`): ``plan`` is the batch actually passed to the job that
    died last, ``evidence`` the figures compared (``"20480.00 MiB requested at batch 1024 and at 512"``)."""
    return _("the memory that runs out does not depend on the batch size ({evidence}), so a smaller batch will "
             "not fit: costctl stopped retrying at batch {batch} x accumulation {accum} (effective batch "
             "{effective}); use a card with more memory (costctl recommend), mixed precision, gradient "
             "checkpointing or an 8-bit optimizer").format(evidence=evidence, batch=plan.batch_size,
                                                          accum=plan.accum_steps, effective=plan.effective)


__all__ = ["ACCUM", "BATCH", "CHECKPOINT", "BatchPlan", "OomScanner", "advice", "fixed_memory_advice",
           "render_command", "uses"]
