"""The not-learning policy: the loss never fell meaningfully below its start.

A run whose loss has not fallen is not on a plateau: its model, its data or its learning rate
is the problem, and a cheaper card (the plateau's ``downsize``) or more steps will not fix it.
This policy says so, once, and never stops by default.

The rule (:class:`LearningCheck`), over the monitored loss values in order, non-finite values
skipped (the divergence policy reports those), the first ``warmup_points`` ignored:

* ``y0`` is the first value after the warm-up; the *noise* ``sigma`` is the scale of the
  point-to-point changes, ``sigma = sqrt(pi)/2 * mean(|y[i] - y[i-1]|)`` (the mean absolute
  successive difference: the standard deviation of white noise, robust to a trend);
* the *level* is TensorBoard's debiased EMA of the values (``smoothing`` = its weight ``w``:
  ``last = w*last + (1-w)*y; level = last / (1 - w**n)``);
* the run **has learned** as soon as either the level fell ``min_drop`` noise units below the
  start (``y0 - min(level) >= min_drop * sigma``), or the least-squares trend of the values
  against their index since the start is downward with a t-statistic of at most
  ``-min_trend_t`` (a slow, noisy fall counts: ``slope / SE(slope) <= -min_trend_t``, from the
  10th value on);
* a run that has not learned after ``min_points`` values is **not learning**: one decision
  (keyed by that point), its episode open until the run learns after all.

Where the rule does not apply (:attr:`LearningCheck.not_applicable` says why, and it never
fires): a loss that starts at or below 0 or goes negative (RL policy losses such as GRPO's 0.0,
contrastive and other negative-valued losses: "below its start" means nothing for them), a
series whose name marks a GAN or RL loss (generator/discriminator, policy/value/actor/critic,
KL, entropy, reward, contrastive/InfoNCE/triplet: such losses need not fall), and a log that
starts past its run's start (a *resumed* run: the first position is more than
``max_start_intervals`` logging intervals from 0, so its first value is not the run's start).

Sources: the EMA is TensorBoard's smoothing; the noise estimate is von Neumann's mean
successive difference; the trend test is the ordinary least-squares slope t-test. The
parameters' names follow Keras' ``EarlyStopping(start_from_epoch)`` (here ``warmup_points``)
and ReduceLROnPlateau's ``patience`` idea (here ``min_points``: how long the run gets).

:class:`NotLearningPolicy` feeds the rule each new point of the monitored kind once
(``O(1)`` per point, over the :class:`~costctl.progress.batch.PointBatch` columns, no object per
point) and names the money at stake: the cost of the rest of the run when its length is known
(as the plateau policy prices it), else the spend per hour. The plateau policy holds its own
fires back while this rule has not seen the run learn (:mod:`costctl.policies.plateau`), so a
run that is not learning is never called a plateau and never downsized.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..clock import ensure_utc
from ..i18n import N_, _
from ..progress.batch import NO_INT, PointBatch
from ..records import Decision, ProgressPoint
from .base import Policy, PolicyConfig, PolicyContext, clauses, cost_clause, iso, register, where_text
from .history import History, finite_or_text, thin

#: sqrt(pi)/2: mean |X1 - X2| of two independent N(0, s^2) is 2s/sqrt(pi).
_MSD_TO_SIGMA = math.sqrt(math.pi) / 2

#: series names of losses that need not fall (GAN, RL, contrastive): the rule does not apply.
NOT_APPLICABLE_NAME = re.compile(
    r"(?i)(^|[^a-z])(g|d|gen|disc|generator|discriminator|adv|adversarial|policy|pg|value|vf|actor|critic|"
    r"reward|rewards|kl|entropy|contrastive|infonce|nce|ntxent|triplet)([^a-z]|$)")

#: values before the trend test is taken (fewer give chance t-statistics: 5 noise values reach t -5)
TREND_MIN_POINTS = 10

UNKNOWN, LEARNED, NOT_LEARNING = "unknown", "learned", "not_learning"


class NotLearningConfig(PolicyConfig):
    """``[policies.not_learning]``: the loss never fell meaningfully below its start (relative to its noise).

    ``min_points`` values (after ``warmup_points``) without the level falling ``min_drop`` noise
    units below the first value, nor a downward trend with t <= -``min_trend_t``: not learning.
    """

    heading: ClassVar[str] = N_("the loss never fell meaningfully below its start (relative to its noise).")

    action: Literal["advise", "stop"] = Field(
        default="advise", description=N_("what to do when the run is not learning: advise | stop (never downsize)"))
    monitor: Literal["train", "eval"] = Field(default="train", description=N_("which loss: train | eval"))
    min_points: int = Field(default=25, ge=5, le=1_000_000, description=N_("values (after the warm-up) the run gets to show it learns"))
    warmup_points: int = Field(default=0, ge=0, le=1_000_000, description=N_("first values ignored (LR warm-up), as Keras start_from_epoch"))
    min_drop: float = Field(default=3.0, gt=0, le=1000, description=N_("a fall of the smoothed loss below its start, in noise units, that counts as learning"))
    min_trend_t: float = Field(default=3.0, gt=0, le=1000, description=N_("t-statistic of a downward least-squares trend that counts as learning"))
    smoothing: float = Field(default=0.9, ge=0, lt=1, description=N_("TensorBoard debiased EMA weight of the level"))
    max_start_intervals: float = Field(
        default=10.0, gt=0, le=1_000_000, description=N_("a log whose first step is more logging intervals than this past 0 is a resumed run: the rule does not apply"))


class LearningCheck:
    """The rule of the module docstring, fed values in order (``add``); O(1) per value.

    Attributes:
        state: ``"unknown"`` (fewer than ``min_points`` values, not yet learned),
            ``"learned"`` or ``"not_learning"``.
        not_applicable: why the rule does not apply to this series, or None.
        n: values taken (after the warm-up).
    """

    __slots__ = ("min_points", "warmup", "min_drop", "min_t", "w", "max_start", "state", "not_applicable",
                 "n", "skipped", "y0", "prev", "abs_diff", "last", "wn", "level", "min_level", "sx", "sy",
                 "sxx", "sxy", "syy", "first_pos", "t", "fell")

    def __init__(self, *, min_points: int = 25, warmup_points: int = 0, min_drop: float = 3.0,
                 min_trend_t: float = 3.0, smoothing: float = 0.9, max_start_intervals: float = 10.0) -> None:
        self.min_points, self.warmup, self.min_drop, self.min_t = min_points, warmup_points, min_drop, min_trend_t
        self.w, self.max_start = smoothing, max_start_intervals
        self.state = UNKNOWN
        self.not_applicable: str | None = None
        self.n = self.skipped = 0
        self.y0 = self.prev = self.level = 0.0
        self.abs_diff = self.last = 0.0
        self.wn = 1.0
        self.min_level = math.inf
        self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0
        self.first_pos: float | None = None
        self.t = 0.0
        self.fell = 0.0

    @classmethod
    def from_config(cls, config: NotLearningConfig) -> LearningCheck:
        return cls(min_points=config.min_points, warmup_points=config.warmup_points, min_drop=config.min_drop,
                   min_trend_t=config.min_trend_t, smoothing=config.smoothing,
                   max_start_intervals=config.max_start_intervals)

    @property
    def sigma(self) -> float:
        """The noise estimate (0 before two values)."""
        return _MSD_TO_SIGMA * self.abs_diff / (self.n - 1) if self.n > 1 else 0.0

    def name(self, series: str) -> None:
        """The monitored series' name: a GAN/RL/contrastive loss makes the rule not apply."""
        if self.not_applicable is None and NOT_APPLICABLE_NAME.search(series):
            self.not_applicable = _("'{series}' looks like a GAN, RL or contrastive loss, which need not fall: the "
                                    "not-learning rule does not apply").format(series=series)

    def position(self, pos: float | None) -> None:
        """The position (step, else epoch) of the value about to be added, for the resumed-run test
        (only the first two taken values' positions are used)."""
        if pos is None or self.not_applicable is not None or self.n > 1:
            return
        if self.n == 0:
            self.first_pos = pos
        elif self.first_pos is not None and pos > self.first_pos and self.first_pos > self.max_start * (pos - self.first_pos):
            self.not_applicable = _("the log starts at {first:g}, {intervals:.0f} logging intervals past 0: a resumed "
                                    "run, whose first value is not its start").format(
                first=self.first_pos, intervals=self.first_pos / (pos - self.first_pos))

    def add(self, y: float) -> str | None:
        """Take one value; returns ``"not_learning"`` when the rule fires at it, ``"learned"`` when
        a not-learning run learned after all at it, else None."""
        if not math.isfinite(y) or self.not_applicable is not None:
            return None
        if self.skipped < self.warmup:
            self.skipped += 1
            return None
        n = self.n
        if n == 0:
            self.y0 = y
            if y <= 0:
                self.not_applicable = _("the loss starts at {start:g} (at or below 0: an RL loss such as GRPO's, or a "
                                        "negative-valued one): the not-learning rule does not apply").format(start=y)
                return None
        elif y < 0:
            self.not_applicable = _("the loss went negative: the not-learning rule does not apply")
            return None
        else:
            self.abs_diff += abs(y - self.prev)
        self.prev = y
        self.n = n = n + 1
        w = self.w
        self.last = w * self.last + (1.0 - w) * y
        self.wn *= w
        level = self.last / (1.0 - self.wn) if self.wn != 1.0 else y
        self.level = level
        if level < self.min_level:
            self.min_level = level
        x, yc = float(n - 1), y - self.y0
        self.sx += x
        self.sy += yc
        self.sxx += x * x
        self.sxy += x * yc
        self.syy += yc * yc
        if self.state == LEARNED:
            return None
        learned = False
        sigma = self.sigma
        self.fell = (self.y0 - self.min_level) / sigma if sigma > 0 else 0.0
        if n > 1 and sigma > 0 and self.fell >= self.min_drop:
            learned = True
        if n >= TREND_MIN_POINTS:
            self.t = t = self._t()
            if t <= -self.min_t:
                learned = True
        if learned:
            was = self.state
            self.state = LEARNED
            return LEARNED if was == NOT_LEARNING else None
        if self.state == UNKNOWN and n >= self.min_points:
            self.state = NOT_LEARNING
            return NOT_LEARNING
        return None

    def _t(self) -> float:
        n = float(self.n)
        sxx = self.sxx - self.sx * self.sx / n
        sxy = self.sxy - self.sx * self.sy / n
        syy = self.syy - self.sy * self.sy / n
        if sxx <= 0:
            return 0.0
        b = sxy / sxx
        res = syy - b * sxy
        if res <= 1e-300 * max(syy, 1.0):
            return -math.inf if b < 0 else (math.inf if b > 0 else 0.0)
        return b / math.sqrt(res / (n - 2) / sxx)

    @property
    def learning_shown(self) -> bool:
        """True when the run has learned, or the rule does not apply (nothing to hold back)."""
        return self.state == LEARNED or self.not_applicable is not None


def position_of(batch: PointBatch, i: int) -> float | None:
    """A point's position on its log's axis: its step, else its epoch, else None."""
    step = batch.steps[i]
    if step != NO_INT:
        return float(step)
    epoch = batch.epochs[i]
    return None if math.isnan(epoch) else epoch


@register
class NotLearningPolicy(Policy):
    """Say so when the loss never fell meaningfully below its start (``[policies.not_learning]``)."""

    name = "not_learning"
    config_model: ClassVar[type[NotLearningConfig]] = NotLearningConfig
    order = 42

    def __init__(self, config: NotLearningConfig) -> None:
        self.config = config
        self.action = config.action
        self.rule = LearningCheck.from_config(config)
        self._seen = 0
        self._series: str | None = None
        self._open: str | None = None  # the open episode's key

    @classmethod
    def from_config(cls, config: NotLearningConfig, context: PolicyContext) -> NotLearningPolicy:
        return cls(config)

    @property
    def not_applicable(self) -> str | None:
        """Why the rule does not apply to the run watched, or None."""
        return self.rule.not_applicable

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        now = ensure_utc(now)
        batches, missed = history.new_batches(self._seen)
        self._seen += missed + sum(len(b) for b in batches)
        found: list[Decision] = []
        for batch in batches:
            kinds = batch.series_of_kind(self.config.monitor)
            if not kinds:
                continue
            mask = batch.mask_of(kinds)
            idx = range(len(batch)) if mask is None else [j for j, m in enumerate(mask) if m]
            idx = thin(idx)  # a flood: every k-th value (history.DIAGNOSIS_MAX_PER_BATCH)
            values, keys, series = batch.values, batch.keys, batch.series
            rule = self.rule
            if rule.state == LEARNED or rule.not_applicable is not None:
                # settled for this series: only a move to another series matters
                if all(keys[k][1] == self._series for k in kinds):
                    continue
            for j in idx:
                name = keys[series[j]][1]
                if name != self._series:
                    if self._series is not None:  # the watched series moved: start over on the new one
                        self.rule = rule = LearningCheck.from_config(self.config)
                        self._open = None
                    self._series = name
                    rule.name(name)
                if rule.n < 2:
                    rule.position(position_of(batch, j))
                event = rule.add(values[j])
                if event == NOT_LEARNING:
                    found.append(self._decision(history, now, batch.point(j)))
                elif event == LEARNED:
                    self._open = None
        return found

    def _decision(self, history: History, now: datetime, point: ProgressPoint) -> Decision:
        from .plateau import rest_of_run_cost

        cfg, rule = self.config, self.rule
        rest = rest_of_run_cost(history, point)
        where = where_text(point.step, point.epoch, rule.n)
        evidence: dict[str, Any] = {
            "monitor": cfg.monitor, "metric": point.name, "step": point.step, "epoch": point.epoch,
            "point_time": iso(point.time) if point.time is not None else None,
            "index": rule.n - 1 + cfg.warmup_points, "points": rule.n, "start": finite_or_text(rule.y0), "value": finite_or_text(point.value),
            "level": finite_or_text(rule.level), "lowest_level": finite_or_text(rule.min_level),
            "noise": rule.sigma, "fell_noise_units": round(rule.fell, 3), "trend_t": finite_or_text(round(rule.t, 3)),
            "min_points": cfg.min_points, "warmup_points": cfg.warmup_points, "min_drop": cfg.min_drop,
            "min_trend_t": cfg.min_trend_t, "smoothing": cfg.smoothing, "configured_action": cfg.action,
            "rest_of_run": rest,
            "spend_per_hour": str(history.rate.amount) if history.rate is not None else None,
            "currency": history.rate.currency if history.rate is not None else None,
        }
        diagnosis = _("{monitor} loss is not learning at {where}: after {points} points its smoothed level (lowest "
                      "{lowest:.6g}) never fell {drop:g} noise units ({noise:.3g} each) below its start {start:.6g} "
                      "and shows no downward trend (t {t:.2g}): a model, data or learning-rate problem, not a "
                      "plateau; a cheaper card will not fix it").format(
            monitor=cfg.monitor, where=where, points=rule.n, lowest=rule.min_level, drop=cfg.min_drop,
            noise=rule.sigma, start=rule.y0, t=rule.t)
        reason = clauses(diagnosis, cost_clause(rest, history.rate))
        key = f"not_learning:{cfg.monitor}:{point.name}"
        self._open = key
        return Decision(time=now, policy=self.name, action=self.action, reason=reason, evidence=evidence, key=key)


__all__ = ["NotLearningConfig", "NotLearningPolicy", "LearningCheck", "NOT_APPLICABLE_NAME", "position_of"]
