"""The divergence policy: the loss became NaN or infinite.

Reads each new progress point once (train and eval alike, kept apart). A run of consecutive
non-finite values of one kind is one *streak*; each streak gives one decision, keyed
``divergence:<kind>:<n>`` with ``n`` the 0-based index (among that kind's points) of the
streak's first non-finite value. A finite value ends the streak, so a later NaN is reported
again. (Lightning's ``EarlyStopping(check_finite=True)`` stops on the first non-finite value.)

Non-finite *gradient norms* follow :mod:`costctl.policies.grad_norm` (divergence only when
they persist ``grad_norm_streak`` logged values in a row, or come with a non-finite loss): the
live watch feeds the gradient norms its output shows (:meth:`History.add_grad_norms`) to this
policy, ``costctl analyze`` applies the same rule to those a training log records.
"""

from __future__ import annotations

import math
from array import array
from datetime import datetime
from typing import ClassVar

from pydantic import Field

from ..clock import ensure_utc
from ..config_types import Action
from ..i18n import N_, _
from ..progress.batch import native
from ..records import Decision, ProgressPoint
from .base import Policy, PolicyConfig, PolicyContext, iso, register, where_text
from .grad_norm import DEFAULT_STREAK, GradNormStreak
from .history import History, finite_or_text


class DivergenceConfig(PolicyConfig):
    """``[policies.divergence]``: a NaN or infinite loss."""

    heading: ClassVar[str] = N_("a NaN or infinite loss.")

    action: Action = Field(default="advise", description=N_("what to do when the loss turns NaN/inf: advise | stop"))
    grad_norm_streak: int = Field(
        default=DEFAULT_STREAK, ge=1, le=1_000_000,
        description=N_("logged non-finite grad norms in a row that are divergence (an isolated one is an fp16 "
                       "loss-scaling skip); one with a non-finite loss on the same log always is"),
    )


@register
class DivergencePolicy(Policy):
    """Advise (or stop) when the loss turns NaN/inf (``[policies.divergence]``).

    Args:
        config: the ``[policies.divergence]`` section.
    """

    name = "divergence"
    config_model: ClassVar[type[DivergenceConfig]] = DivergenceConfig
    order = 50

    def __init__(self, config: DivergenceConfig) -> None:
        self.config = config
        self.action = config.action
        self._seen = 0
        self._count: dict[str, int] = {}
        self._in_streak: dict[str, bool] = {}
        #: the persistence rule over the logged gradient norms (:mod:`.grad_norm`)
        self.grad_rule = GradNormStreak(streak=config.grad_norm_streak, action=config.action)
        self._grad_seen = 0

    @classmethod
    def from_config(cls, config: DivergenceConfig, context: PolicyContext) -> DivergencePolicy:
        """Always enabled (it only advises by default)."""
        return cls(config)

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        """One decision per non-finite streak that began among the points added since the last
        call, and one per gradient-norm divergence among the gradient norms added since then."""
        now = ensure_utc(now)
        batches, missed = history.new_batches(self._seen)
        self._seen += missed + sum(len(b) for b in batches)
        found = []
        isfinite = math.isfinite
        for batch in batches:
            values = batch.values
            if _all_finite(values):
                # every value finite (a NaN or an inf makes the sum non-finite): counts only
                for k, (kind, _name) in enumerate(batch.keys):
                    n = batch.series.count(k) if len(batch.keys) > 1 else len(values)
                    if n:
                        self._count[kind] = self._count.get(kind, 0) + n
                        self._in_streak[kind] = False
                continue
            keys, series = batch.keys, batch.series
            for i in range(len(values)):
                kind = keys[series[i]][0]
                index = self._count.get(kind, 0)
                self._count[kind] = index + 1
                if isfinite(values[i]):
                    self._in_streak[kind] = False
                    continue
                if self._in_streak.get(kind):
                    continue
                self._in_streak[kind] = True
                found.append(self._decision(now, batch.point(i), index))
        records, missed = history.new_grad_norms(self._grad_seen)
        self._grad_seen += missed + len(records)
        for value, loss, step, epoch in records:
            decision = self.grad_rule.add(value, now, loss=loss, step=step, epoch=epoch)
            if decision is not None:
                found.append(decision)
        return found

    def _decision(self, now: datetime, point: ProgressPoint, index: int) -> Decision:
        text = "NaN" if math.isnan(point.value) else ("+inf" if point.value > 0 else "-inf")
        where = where_text(point.step, point.epoch, index)
        evidence = {
            "kind": point.kind,
            "metric": point.name,
            "index": index,
            "value": finite_or_text(point.value),
            "step": point.step,
            "epoch": point.epoch,
            "point_time": iso(point.time) if point.time is not None else None,
        }
        reason = _("{kind} {metric} is {value} at {where}: the run diverged").format(
            kind=point.kind, metric=point.name, value=text, where=where)
        return Decision(time=now, policy=self.name, action=self.action, reason=reason,
                        evidence=evidence, key=f"divergence:{point.kind}:{index}")


def _all_finite(values) -> bool:
    """Every value is finite: one C pass (``_scan.extremes``) over an array('d') where built,
    else one C-speed sum (a NaN or an inf makes it non-finite; a sum of finite values too
    large for a float raises, and then the caller looks point by point)."""
    scan = native()
    if scan is not None and isinstance(values, array) and values.typecode == "d":
        return scan.extremes(values, 0, len(values))[4] == 0
    try:
        return math.isfinite(math.fsum(values))
    except (OverflowError, ValueError):
        return False


__all__ = ["DivergenceConfig", "DivergencePolicy"]
