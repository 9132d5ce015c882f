"""Non-finite gradient norms: divergence only when they persist.

Mixed-precision training with *dynamic loss scaling* logs an inf/NaN gradient norm routinely:
when the scaled gradients overflow, the scaler skips that optimizer step and lowers the scale
(PyTorch ``torch.amp.GradScaler``: ``backoff_factor=0.5`` per overflowing step, the step
skipped; DeepSpeed / Megatron fp16 optimizers: the same, after ``hysteresis`` (default 2)
overflows), and the next steps are finite again. An isolated non-finite ``grad_norm`` is
therefore **not** divergence.

The rule (:class:`GradNormStreak`):

* ``streak`` (default :data:`DEFAULT_STREAK` = 3) *logged* non-finite gradient norms in a row
  are divergence. Rationale: a logged value is one step every ``logging_steps`` (Hugging
  Face's default 500, Megatron's ``log_interval`` 100); a scaler backs off within a few steps
  of an overflow, so one overflowing logged step is ordinary, two in a row rare (the first
  steps of an fp16 run at the initial scale ``2**16``, logged every step), three in a row
  means the scale cannot recover: the weights or the loss are already non-finite.
* a non-finite gradient norm logged **together with** a non-finite loss on the same record
  is divergence at once (the loss itself diverged; the scaler does not skip the loss).

Each streak gives one decision (a finite value ends it), keyed
``divergence:grad_norm:<n>`` with ``n`` the 0-based index among the logged gradient norms of
the streak's first non-finite value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from ..i18n import N_, _
from ..records import Decision
from .base import where_text
from .history import finite_or_text

#: Logged non-finite gradient norms in a row that make a divergence (see the module docstring).
DEFAULT_STREAK = 3


@dataclass(slots=True)
class GradNormStreak:
    """The persistence rule fed one logged gradient norm at a time (in log order).

    Args:
        streak: non-finite values in a row that are divergence (>= 1).
        action: the decisions' action (``advise`` by default, as ``[policies.divergence]``).
        metric: the name logged (``grad_norm``, ``grad norm``), used in the reason.

    Raises:
        ValueError: ``streak`` below 1.
    """

    streak: int = DEFAULT_STREAK
    action: str = "advise"
    metric: str = "grad_norm"
    _index: int = 0
    _run: int = 0
    _start: int = 0
    _reported: bool = False
    #: non-finite values seen, and how many stood alone (a streak of one that a finite ended)
    nonfinite: int = 0
    isolated: int = 0

    def __post_init__(self) -> None:
        if self.streak < 1:
            raise ValueError(_("grad-norm streak {streak}: expected at least 1").format(streak=self.streak))

    def add(self, value: float, now: datetime, *, loss: float | None = None,
            step: int | None = None, epoch: float | None = None) -> Decision | None:
        """Take the next logged gradient norm; a decision when this value makes a divergence.

        Args:
            value: the logged gradient norm.
            loss: the loss logged on the same record, when there is one.
            step / epoch: where it was logged (for the reason and the evidence).
        """
        index = self._index
        self._index += 1
        if math.isfinite(value):
            if self._run == 1 and not self._reported:
                self.isolated += 1
            self._run, self._reported = 0, False
            return None
        self.nonfinite += 1
        if self._run == 0:
            self._start = index
        self._run += 1
        if self._reported:
            return None
        with_loss = loss is not None and not math.isfinite(loss)
        if self._run < self.streak and not with_loss:
            return None
        self._reported = True
        where = where_text(step, epoch, index, other=N_("log {index}"))
        text = "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")
        shape = {"metric": self.metric, "value": text, "where": where, "run": self._run, "streak": self.streak,
                 "loss": finite_or_text(loss) if loss is not None else None}
        if with_loss:
            reason = _("{metric} is {value} at {where}, with a non-finite loss ({loss}) on the same log: the run "
                       "diverged").format(**shape)
        else:
            reason = _("{metric} is {value} at {where}, {run} logged values in a row (an isolated one is an fp16 "
                       "loss-scaling skip; {streak} in a row is not): the run diverged").format(**shape)
        evidence = {
            "kind": "train", "metric": self.metric, "index": self._start, "at_index": index,
            "value": finite_or_text(value), "step": step, "epoch": epoch, "streak": self._run,
            "streak_needed": self.streak, "loss": None if loss is None else finite_or_text(loss),
            "point_time": None,
        }
        return Decision(time=now, policy="divergence", action=self.action,  # type: ignore[arg-type]
                        reason=reason,
                        evidence=evidence, key=f"divergence:grad_norm:{self._start}")

    def add_finite(self, count: int) -> None:
        """Take ``count`` finite logged values in a row (as ``count`` calls of :meth:`add` with
        a finite value would, in one step: only the first ends a streak)."""
        if count <= 0:
            return
        if self._run == 1 and not self._reported:
            self.isolated += 1
        self._run, self._reported = 0, False
        self._index += count

    def finish(self) -> None:
        """The log ended: a trailing single non-finite value counts as isolated."""
        if self._run == 1 and not self._reported:
            self.isolated += 1
        self._run = 0


__all__ = ["DEFAULT_STREAK", "GradNormStreak"]
