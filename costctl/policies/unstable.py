"""The unstable policy: the loss swings far beyond its trend.

A loss that jumps by a large fraction of its own level from one logged value to the next is
dominated by gradient noise or a too-high learning rate: more steps or a cheaper card do not
help; a bigger *effective* batch (gradient accumulation, more data-parallel replicas) or a
lower learning rate do. A bigger card helps only when the run is memory-bound (it cannot
raise its batch on the card it has).

The rule (:class:`SwingCheck`), over the monitored loss values in order (non-finite values
skipped: the divergence policy reports those):

* the *trend* is TensorBoard's debiased EMA of the values (``smoothing`` = its weight ``w``:
  ``last = w*last + (1-w)*y; trend = last / (1 - w**n)``);
* each value's *swing* is its change from the previous value relative to the trend before it,
  ``|y[i] - y[i-1]| / max(|trend[i-1]|, level_floor * |y0|)`` — the floor (a fraction of the
  first value's size) keeps a loss that has fallen near 0 from reading its printed digits'
  rounding (0.0001 -> 0.0002) as swings;
* the run is **unstable** when the *median* swing over the last ``window`` values exceeds
  ``max_swing``: for white noise of standard deviation ``s`` around a level ``L`` the median
  swing is ``0.95 s / L``, so the default 0.15 means noise of about 16 % of the loss itself.
  The median ignores a single jump (a change of the loss's composition, such as new loss
  heads switching on) and a falling trend (the change between two neighbours is small);
* one decision per episode; the episode ends when the median swing has stayed below
  ``0.75 * max_swing`` for ``window`` values in a row (hysteresis: a median hovering about the
  bound is one episode, not one advice per crossing), and a later one is a new episode.

Sources: TensorBoard's smoothing for the trend; the swing is the relative mean successive
difference (von Neumann) taken as a median over a window.

:class:`UnstablePolicy` feeds each new point of the monitored kind once (a ring of ``window``
swings, O(window) per point, no object per point) and names the money at stake: the cost of
the rest of the run when its length is known (as the plateau policy prices it), else the spend
per hour. It says whether a bigger card would help from the newest telemetry sample: the fullest
GPU's memory at least 90 % used is memory-bound (a bigger card lets the batch grow), less is not
(the batch can grow on this card); unknown memory (a loss log alone) says so.
"""

from __future__ import annotations

import math
from array import array
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..clock import ensure_utc
from ..i18n import N_, _
from ..records import Decision, ProgressPoint
from .base import Policy, PolicyConfig, PolicyContext, clauses, cost_clause, iso, register, where_text
from .history import History, finite_or_text, thin

RELEASE = 0.75
#: GPU memory in use (fraction of the card, the fullest GPU of the newest sample) from which the
#: run counts as memory-bound: its batch cannot grow on this card, a bigger one would let it.
MEMORY_BOUND = 0.9


def memory_use(history: History) -> float | None:
    """The fullest GPU's memory in use as a fraction of its card in the newest telemetry sample,
    or None when unknown (no sample, no GPU, a replay of a loss log alone)."""
    sample = history.newest_sample()
    if sample is None:
        return None
    fractions = [g.memory_used_bytes / g.memory_total_bytes for g in sample.gpus
                 if g.memory_used_bytes is not None and g.memory_total_bytes]
    return max(fractions) if fractions else None


class UnstableConfig(PolicyConfig):
    """``[policies.unstable]``: the loss swings beyond ``max_swing`` of its trend (median over ``window`` values)."""

    heading: ClassVar[str] = N_("the loss swings beyond `max_swing` of its trend (median over `window` values).")

    action: Literal["advise", "stop"] = Field(default="advise", description=N_("what to do when the loss is unstable: advise | stop"))
    monitor: Literal["train", "eval"] = Field(default="train", description=N_("which loss: train | eval"))
    window: int = Field(default=20, ge=3, le=10_000, description=N_("values the median swing is taken over"))
    max_swing: float = Field(default=0.15, gt=0, le=1000, description=N_("median |change| between neighbours, as a fraction of the trend, beyond which the loss is unstable"))
    smoothing: float = Field(default=0.9, ge=0, lt=1, description=N_("TensorBoard debiased EMA weight of the trend"))
    level_floor: float = Field(default=0.05, ge=0, lt=1, description=N_("the trend is taken as at least this fraction of the first value (a loss near 0 is not judged by its rounding)"))


class SwingCheck:
    """The rule of the module docstring, fed values in order (``add``).

    Attributes:
        median: the latest median swing (0 until ``window`` swings).
        unstable: True inside an episode.
        n: finite values taken.
    """

    __slots__ = ("window", "max_swing", "w", "floor", "ring", "pos", "filled", "n", "prev", "last", "wn",
                 "trend", "median", "unstable", "calm")

    def __init__(self, *, window: int = 20, max_swing: float = 0.15, smoothing: float = 0.9,
                 level_floor: float = 0.05) -> None:
        self.window, self.max_swing, self.w, self.floor = window, max_swing, smoothing, level_floor
        self.ring = array("d", bytes(8 * window))
        self.pos = self.filled = self.n = 0
        self.prev = self.last = self.trend = self.median = 0.0
        self.wn = 1.0
        self.unstable = False
        self.calm = 0  # values in a row, inside an episode, whose median swing was below the release

    @classmethod
    def from_config(cls, config: UnstableConfig) -> SwingCheck:
        return cls(window=config.window, max_swing=config.max_swing, smoothing=config.smoothing,
                   level_floor=config.level_floor)

    def add(self, y: float) -> str | None:
        """Take one value; ``"unstable"`` when an episode opens at it, ``"stable"`` when one ends."""
        if not math.isfinite(y):
            return None
        if self.n == 0:
            self.floor = self.floor * abs(y)
        else:
            scale = max(abs(self.trend), self.floor)
            if scale > 0:
                self.ring[self.pos] = abs(y - self.prev) / scale
                self.pos = (self.pos + 1) % self.window
                if self.filled < self.window:
                    self.filled += 1
        self.prev = y
        self.n += 1
        w = self.w
        self.last = w * self.last + (1.0 - w) * y
        self.wn *= w
        self.trend = self.last / (1.0 - self.wn) if self.wn != 1.0 else y
        if self.filled < self.window:
            return None
        ordered = sorted(self.ring)
        mid = self.window // 2
        self.median = ordered[mid] if self.window % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
        if not self.unstable and self.median > self.max_swing:
            self.unstable = True
            return "unstable"
        if self.unstable:
            self.calm = self.calm + 1 if self.median < RELEASE * self.max_swing else 0
            if self.calm >= self.window:
                self.unstable = False
                self.calm = 0
                return "stable"
        return None


@register
class UnstablePolicy(Policy):
    """Advise when the loss swings far beyond its trend (``[policies.unstable]``)."""

    name = "unstable"
    config_model: ClassVar[type[UnstableConfig]] = UnstableConfig
    order = 44

    def __init__(self, config: UnstableConfig) -> None:
        self.config = config
        self.action = config.action
        self.rule = SwingCheck.from_config(config)
        self._seen = 0
        self._series: str | None = None

    @classmethod
    def from_config(cls, config: UnstableConfig, context: PolicyContext) -> UnstablePolicy:
        return cls(config)

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
            for j in idx:
                name = keys[series[j]][1]
                if name != self._series:
                    if self._series is not None:
                        self.rule = rule = SwingCheck.from_config(self.config)
                    self._series = name
                if rule.add(values[j]) == "unstable":
                    found.append(self._decision(history, now, batch.point(j)))
        return found

    def _decision(self, history: History, now: datetime, point: ProgressPoint) -> Decision:
        from .plateau import rest_of_run_cost

        cfg, rule = self.config, self.rule
        rest = rest_of_run_cost(history, point)
        where = where_text(point.step, point.epoch, rule.n)
        memory = memory_use(history)
        if memory is None:
            card = _("a bigger card only if the run is memory-bound")
        elif memory >= MEMORY_BOUND:
            card = _("the card's memory is {memory:.0%} used (memory-bound): a bigger card would let the batch grow, "
                     "gradient accumulation does it on this one").format(memory=memory)
        else:
            card = _("not a bigger card: the run uses {memory:.0%} of its memory, room for a bigger batch "
                     "here").format(memory=memory)
        evidence: dict[str, Any] = {
            "monitor": cfg.monitor, "metric": point.name, "step": point.step, "epoch": point.epoch,
            "point_time": iso(point.time) if point.time is not None else None, "index": rule.n - 1,
            "gpu_memory_used": round(memory, 4) if memory is not None else None,
            "memory_bound": memory >= MEMORY_BOUND if memory is not None else None,
            "value": finite_or_text(point.value), "trend": finite_or_text(rule.trend),
            "median_swing": round(rule.median, 4), "max_swing": cfg.max_swing, "window": cfg.window,
            "smoothing": cfg.smoothing, "level_floor": cfg.level_floor, "configured_action": cfg.action,
            "rest_of_run": rest,
            "spend_per_hour": str(history.rate.amount) if history.rate is not None else None,
            "currency": history.rate.currency if history.rate is not None else None,
        }
        diagnosis = _("{monitor} loss is unstable at {where}: over the last {window} points it moves a median "
                      "{median:.0%} of its trend ({trend:.4g}) from one point to the next (bound {bound:.0%}): use a "
                      "bigger effective batch (gradient accumulation) or a lower learning rate").format(
            monitor=cfg.monitor, where=where, window=cfg.window, median=rule.median, trend=rule.trend,
            bound=cfg.max_swing)
        reason = clauses(diagnosis, card, cost_clause(rest, history.rate))
        return Decision(time=now, policy=self.name, action=self.action, reason=reason, evidence=evidence,
                        key=f"unstable:{cfg.monitor}:{point.name}:{rule.n - 1}")


__all__ = ["UnstableConfig", "UnstablePolicy", "SwingCheck"]
