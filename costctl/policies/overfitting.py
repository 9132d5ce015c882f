"""The overfitting policy: the eval loss stopped improving while the train loss still falls.

Train and eval losses are watched together. The eval side is Keras' and Lightning's
``EarlyStopping(monitor="val_loss", mode="min", min_delta, patience)`` rule on the (optionally
smoothed) eval loss:

* an eval value *improves* when it is below ``best - min_delta`` (``mode = "min"``; Lightning's
  ``min_delta`` in absolute units, Keras' likewise); then ``best`` moves to it and ``wait = 0``;
  otherwise ``wait += 1``;
* with ``smoothing`` > 0 the eval values are first smoothed by TensorBoard's debiased EMA
  (``last = w*last + (1-w)*y; out = last / (1 - w**n)``): per-epoch validation losses are noisy,
  and an unsmoothed ``patience`` of a few evaluations fires on noise (YOLOv5's val/box_loss);
* the rule fires when ``wait >= patience`` (Keras and Lightning alike) **and** the train loss is
  still falling: the lowest train value seen since the best eval is below the lowest train value
  seen up to the best eval by more than ``train_min_delta`` (relative). An eval loss that stops
  improving while the train loss stops too is a plateau (the plateau policy's), not overfitting.

One decision per episode: the episode ends when the eval loss improves again (a new best), and a
later fire is a new episode. While an episode is open -- and from the first evaluation that is worse than the best one while
the train loss fell (a suspected over-fit, before ``patience`` runs out) -- it supersedes the plateau policy (a train
loss that flattens while the eval loss has turned is not "the rest may go on a cheaper card":
the advice is to stop or keep the best checkpoint), so a plateau at or after the step (epoch,
time) the episode opened at is dropped by the engine (:meth:`OverfittingPolicy.covers`). The advice: stop, or keep the checkpoint of the best eval
(``load_best_model_at_end``, ``ModelCheckpoint(save_best_only=True)``); the money at stake is what
was spent since the best eval (``rate x (time of this eval - time of the best eval)``) when the
points carry times, and the spend per hour otherwise (with the steps since the best eval).

Sources: ``keras.callbacks.EarlyStopping`` and ``lightning.pytorch.callbacks.EarlyStopping``
(``monitor``, ``min_delta``, ``patience``, ``mode``); TensorBoard's smoothing.

:class:`OverfittingPolicy` reads each new point once, over the
:class:`~costctl.progress.batch.PointBatch` columns: train values only update a running minimum
(C-speed ``min`` over the slices between two eval points), eval values (few) run the rule.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import deque
from datetime import datetime
from decimal import Decimal
from itertools import compress
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..clock import ensure_utc
from ..i18n import N_, _
from ..money import Money, cost_of
from ..progress.batch import NO_INT, PointBatch
from ..records import Decision, ProgressPoint
from .base import Policy, PolicyConfig, PolicyContext, clauses, cost_clause, iso, register, where_text
from .history import History, finite_or_text

#: the train running minimum is kept where it fell by more than this (relative): a few thousand
#: positions for a loss that falls a hundredfold, whatever the number of points.
RESOLUTION = 1e-3


class OverfittingConfig(PolicyConfig):
    """``[policies.overfitting]``: EarlyStopping's rule on the eval loss while the train loss still falls.

    ``patience`` evaluations without the (smoothed) eval loss improving by ``min_delta``, and the
    train loss fell by ``train_min_delta`` (relative) since the best eval.
    """

    heading: ClassVar[str] = N_("EarlyStopping's rule on the eval loss while the train loss still falls.")

    action: Literal["advise", "stop"] = Field(
        default="advise", description=N_("what to do when the run overfits: advise | stop (keep the best checkpoint)"))
    patience: int = Field(default=3, ge=1, le=1_000_000, description=N_("evaluations with no improvement, as EarlyStopping's patience"))
    min_delta: float = Field(default=0.0, ge=0, le=1_000_000, description=N_("an eval improvement smaller than this (absolute) is none, as EarlyStopping's min_delta"))
    smoothing: float = Field(default=0.8, ge=0, lt=1, description=N_("TensorBoard debiased EMA weight over the eval values; 0 = off"))
    train_min_delta: float = Field(default=0.01, ge=0, lt=1, description=N_("relative fall of the train loss since the best eval that counts as still falling"))


@register
class OverfittingPolicy(Policy):
    """Advise when the eval loss stopped improving while the train loss still falls (``[policies.overfitting]``)."""

    name = "overfitting"
    config_model: ClassVar[type[OverfittingConfig]] = OverfittingConfig
    order = 43

    def __init__(self, config: OverfittingConfig) -> None:
        self.config = config
        self.action = config.action
        self._seen = 0
        self._train_name: str | None = None
        self._eval_name: str | None = None
        self.train_min = math.inf  # lowest train value so far
        self.train_min_at_best = math.inf  # lowest train value up to the best eval
        # the train running minimum's breakpoints: position (step, epoch, arrival) and value
        self._steps, self._epochs, self._arrivals, self._mins = array("d"), array("d"), array("d"), array("d")
        self._arrival = 0
        self._low = math.inf
        self._best_arrival = 0
        self._last = 0.0
        self._wn = 1.0
        self.evals = 0
        self.best = math.inf
        self.best_point: ProgressPoint | None = None
        self.wait = 0
        self.open = False
        self.train_now = math.inf
        #: the latest episodes as ``[opened at, closed at or None]`` positions (step, epoch, time)
        self.episodes: deque[list[Any]] = deque(maxlen=64)

    @classmethod
    def from_config(cls, config: OverfittingConfig, context: PolicyContext) -> OverfittingPolicy:
        return cls(config)

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        now = ensure_utc(now)
        batches, missed = history.new_batches(self._seen)
        self._seen += missed + sum(len(b) for b in batches)
        found: list[Decision] = []
        for batch in batches:
            train, evals = self._series(batch)
            if train is None and evals is None:
                continue
            if evals is None:
                self._train_upto(batch, train, 0, len(batch))
                continue
            emask = batch.mask_of({evals})
            positions = range(len(batch)) if emask is None else list(compress(range(len(batch)), emask))
            start = 0
            for i in positions:
                if train is not None:
                    self._train_upto(batch, train, start, i)
                start = i + 1
                decision = self._eval(history, now, batch, i)
                if decision is not None:
                    found.append(decision)
            if train is not None and start < len(batch):
                self._train_upto(batch, train, start, len(batch))
        return found

    def _series(self, batch: PointBatch) -> tuple[int | None, int | None]:
        """The indexes (in ``batch.keys``) of the train and the eval series followed (the first
        of each kind seen in the run)."""
        train = evals = None
        for i, (kind, name) in enumerate(batch.keys):
            if kind == "train" and train is None and (self._train_name in (None, name)):
                if i in batch.series:
                    self._train_name = name
                    train = i
            elif kind == "eval" and evals is None and (self._eval_name in (None, name)):
                if i in batch.series:
                    self._eval_name = name
                    evals = i
        return train, evals

    def _train_upto(self, batch: PointBatch, train: int, start: int, stop: int) -> None:
        """Take the train values of ``batch[start:stop]``: the running minimum's breakpoints (where
        it fell by more than :data:`RESOLUTION`, relative) are kept with their positions."""
        values, series, steps, epochs = batch.values, batch.series, batch.steps, batch.epochs
        only = len(batch.keys) == 1
        arrival, low = self._arrival, self._low
        for j in range(start, stop):
            if not only and series[j] != train:
                continue
            arrival += 1
            v = values[j]
            if v < low:  # NaN compares False
                self.train_min = v
                low = v - abs(v) * RESOLUTION
                step = steps[j]
                self._steps.append(float(step) if step != NO_INT else math.nan)
                self._epochs.append(epochs[j])
                self._arrivals.append(float(arrival))
                self._mins.append(v)
        self._arrival, self._low = arrival, low

    def _train_min_at(self, point: ProgressPoint, arrival: int) -> float:
        """The lowest train value up to ``point``'s position: by step when both sides have steps,
        else by epoch, else by arrival order (``arrival`` train values had come)."""
        if point.step is not None and self._steps and not math.isnan(self._steps[-1]):
            axis, pos = self._steps, float(point.step)
        elif point.epoch is not None and self._epochs and not math.isnan(self._epochs[-1]):
            axis, pos = self._epochs, point.epoch
        else:
            axis, pos = self._arrivals, float(arrival)
        k = bisect_right(axis, pos)
        return self._mins[k - 1] if k else math.inf

    def _eval(self, history: History, now: datetime, batch: PointBatch, i: int) -> Decision | None:
        cfg = self.config
        y = batch.values[i]
        if not math.isfinite(y):
            return None  # the divergence policy's
        self.evals += 1
        w = cfg.smoothing
        if w:
            self._last = w * self._last + (1.0 - w) * y
            self._wn *= w
            value = self._last / (1.0 - self._wn)
        else:
            value = y
        if value < self.best - cfg.min_delta:
            self.best = value
            self.best_point = batch.point(i)
            self._best_arrival = self._arrival
            self.wait = 0
            if self.episodes and self.episodes[-1][1] is None:
                self.episodes[-1][1] = _position(self.best_point)
            self.open = False
            return None
        self.wait += 1
        if self.open:
            return None
        assert self.best_point is not None
        point = batch.point(i)
        if self.wait < cfg.patience:
            # not yet the rule's patience, but the eval loss is already worse than its best while the
            # train loss fell: a suspected over-fit, which covers a train plateau from here (never a
            # reason to move the run to a cheaper card), though nothing is reported yet
            if not (self.episodes and self.episodes[-1][1] is None):
                base = self._train_min_at(self.best_point, self._best_arrival)
                now_min = self._train_min_at(point, self._arrival)
                if math.isfinite(base) and math.isfinite(now_min) and now_min < base - abs(base) * cfg.train_min_delta:
                    self.episodes.append([_position(point), None])
            return None
        base = self.train_min_at_best = self._train_min_at(self.best_point, self._best_arrival)
        now_min = self.train_now = self._train_min_at(point, self._arrival)
        if not (math.isfinite(base) and math.isfinite(now_min)):
            return None
        if not now_min < base - abs(base) * cfg.train_min_delta:
            return None
        self.open = True
        if not (self.episodes and self.episodes[-1][1] is None):
            self.episodes.append([_position(point), None])
        return self._decision(history, now, point, value)

    def covers(self, decision: Decision) -> bool:
        """True for a plateau decision at or after the point an overfitting episode opened at and
        before it closed (compared by step, else epoch, else the point's time; a decision with no
        comparable position is covered while an episode is open)."""
        if decision.policy != "plateau":
            return False
        ev = decision.evidence
        at = (ev.get("step"), ev.get("epoch"), ev.get("point_time"))
        for opened, closed in self.episodes:
            for k in range(3):
                if at[k] is None or opened[k] is None:
                    continue
                if at[k] >= opened[k] and (closed is None or closed[k] is None or at[k] < closed[k]):
                    return True
                break
            else:
                if closed is None:
                    return True
        return False

    def _decision(self, history: History, now: datetime, point: ProgressPoint, value: float) -> Decision:
        cfg, best = self.config, self.best_point
        assert best is not None
        spent = None
        since_s = None
        if best.time is not None and point.time is not None:
            since = ensure_utc(point.time) - ensure_utc(best.time)
            since_s = since.total_seconds()
            if history.rate is not None and since_s >= 0:
                spent = Money(cost_of(history.rate.amount, since), history.rate.currency)
        def where(p: ProgressPoint) -> str:
            return where_text(p.step, p.epoch, 0, other=N_("its start"))
        steps_since = (point.step - best.step) if point.step is not None and best.step is not None else None
        evidence: dict[str, Any] = {
            "monitor": "eval", "metric": point.name, "index": self.evals - 1, "train_metric": self._train_name, "step": point.step, "epoch": point.epoch,
            "point_time": iso(point.time) if point.time is not None else None,
            "value": finite_or_text(point.value), "monitored_value": finite_or_text(value),
            "best": finite_or_text(self.best), "best_step": best.step, "best_epoch": best.epoch,
            "best_time": iso(best.time) if best.time is not None else None, "evals_since_best": self.wait,
            "steps_since_best": steps_since, "seconds_since_best": since_s,
            "train_best_at_best_eval": finite_or_text(self.train_min_at_best),
            "train_best": finite_or_text(self.train_now),
            "spent_since_best": {"amount": str(spent.amount), "currency": spent.currency} if spent is not None else None,
            "spend_per_hour": str(history.rate.amount) if history.rate is not None else None,
            "currency": history.rate.currency if history.rate is not None else None,
            "patience": cfg.patience, "min_delta": cfg.min_delta, "smoothing": cfg.smoothing,
            "train_min_delta": cfg.train_min_delta, "configured_action": cfg.action,
        }
        diagnosis = _("overfitting at {where}: eval {metric} has not improved on its best {best:.6g} (at {best_at}) "
                      "for {evals} evaluations (EarlyStopping patience {patience}) while train {train} fell "
                      "{train_before:.4g} -> {train_now:.4g}: stop, or keep the best checkpoint").format(
            where=where(point), metric=point.name, best=self.best, best_at=where(best), evals=self.wait,
            patience=cfg.patience, train=self._train_name, train_before=self.train_min_at_best,
            train_now=self.train_now)
        if spent is not None:
            cost = _("{spent} was spent since the best eval").format(spent=spent.shown())
        else:
            cost = cost_clause(None, history.rate)
        reason = clauses(diagnosis, cost)
        return Decision(time=now, policy=self.name, action=self.action, reason=reason, evidence=evidence,
                        key=f"overfitting:{point.name}:{self.evals - 1}")


def _position(point: ProgressPoint) -> tuple[Any, Any, Any]:
    """``(step, epoch, time as ISO text)`` of a point, as decisions' evidence records them."""
    return (point.step, point.epoch, iso(point.time) if point.time is not None else None)


__all__ = ["OverfittingConfig", "OverfittingPolicy"]
