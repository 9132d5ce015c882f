"""The plateau policy: PyTorch's ``ReduceLROnPlateau`` rule, applied to the training loss.

:class:`PlateauTracker` reproduces ``torch.optim.lr_scheduler.ReduceLROnPlateau.step`` (torch
2.x source) step for step, without torch:

* ``best`` starts at ``inf`` (mode ``min``) or ``-inf`` (mode ``max``);
* ``is_better(a, best)``: min/rel ``a < best * (1 - threshold)``; min/abs ``a < best - threshold``;
  max/rel ``a > best * (threshold + 1)``; max/abs ``a > best + threshold``. A NaN is never
  better, so it is a bad step (as in PyTorch);
* better: ``best = a``, ``num_bad_epochs = 0``; else ``num_bad_epochs += 1``;
* in cooldown (``cooldown_counter > 0``): ``cooldown_counter -= 1`` and ``num_bad_epochs = 0``;
* when ``num_bad_epochs > patience`` the rule *fires* (PyTorch reduces the LR there), then
  ``cooldown_counter = cooldown`` and ``num_bad_epochs = 0`` — so it can fire again.

It is O(1) per value and deterministic for a given sequence. Optional smoothing is
TensorBoard's debiased EMA (``vz_line_chart2`` smoothing): ``last = w*last + (1-w)*y``,
``n += 1``, ``out = last / (1 - w**n)`` with ``last = 0`` and ``n = 0`` initially; a non-finite
``y`` passes through unsmoothed and leaves ``last``/``n`` untouched, as TensorBoard does.

:class:`PlateauPolicy` feeds the tracker once per new progress point of the monitored kind
(``monitor = "train"`` or ``"eval"``), never per tick, and turns each fire into a decision that
names the point and the money at stake:

* when the run's length is known (``ProgressPoint.total``, else ``History.total_steps``) and the
  point's position (its ``step``, else its ``epoch``) and time are known, the *cost of the rest
  of the run*: ``remaining_seconds = elapsed * (total - position) / position`` with ``elapsed =
  point.time - History.started_at`` — a linear extrapolation that assumes the remaining steps
  take as long each as the steps so far — times ``History.rate`` per hour;
* otherwise the spend per hour (``History.rate``).

With action ``"downsize"`` the decision's action is ``"downsize"``: the executor hands it to
the lifecycle controller (:mod:`costctl.lifecycle.controller`), which moves the rest of the run
to a cheaper card that fits or advises (the configured action is also kept in the evidence).
"""

from __future__ import annotations

import math
from array import array
from datetime import datetime
from itertools import compress
from decimal import Decimal
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..clock import ensure_utc
from ..i18n import N_, _
from ..money import cost_of
from ..progress.batch import PointBatch, native, take
from ..records import Decision, ProgressPoint, RestOfRun
from .base import Policy, PolicyConfig, PolicyContext, clauses, cost_clause, iso, register, where_text
from .history import History, finite_or_text, thin
from .not_learning import LearningCheck, position_of
from .unstable import SwingCheck


class PlateauConfig(PolicyConfig):
    """``[policies.plateau]``: PyTorch ``ReduceLROnPlateau``'s rule, applied to the loss.

    ``mode`` min|max, ``threshold``, ``threshold_mode`` rel|abs, ``patience`` (bad progress
    points tolerated), ``cooldown`` (points ignored after firing), as in
    ``torch.optim.lr_scheduler.ReduceLROnPlateau``. ``smoothing`` in [0, 1) is TensorBoard's
    debiased EMA weight (0 = off). ``monitor`` picks the train or the eval loss.
    """

    heading: ClassVar[str] = N_("PyTorch `ReduceLROnPlateau`'s rule, applied to the loss.")

    action: Literal["advise", "stop", "downsize"] = Field(
        default="advise", description=N_("what to do on a plateau: advise | stop | downsize"))
    mode: Literal["min", "max"] = Field(default="min", description=N_("min (a loss) | max"))
    threshold: float = Field(default=1e-4, ge=0, le=1_000_000, description=N_("significance threshold of an improvement"))
    threshold_mode: Literal["rel", "abs"] = Field(
        default="rel", description=N_("rel | abs (use abs for losses that can go negative)"))
    patience: int = Field(default=10, ge=0, le=1_000_000, description=N_("bad progress points tolerated"))
    cooldown: int = Field(default=0, ge=0, le=1_000_000, description=N_("progress points ignored after firing"))
    smoothing: float = Field(default=0.0, ge=0, lt=1, description=N_("TensorBoard debiased EMA weight; 0 = off"))
    monitor: Literal["train", "eval"] = Field(default="train", description=N_("which loss: train | eval"))
    hold_until_learning: bool = Field(
        default=True, description=N_("hold fires back until the run has shown it learns, and while its loss is unstable "
                                     "(the not_learning and unstable rules, with their [policies.*] settings): a run that is not learning "
                                     "is not on a plateau, and is never downsized"))


class PlateauTracker:
    """Incremental ``ReduceLROnPlateau`` rule (see the module docstring for the exact steps).

    Args:
        mode: ``"min"`` (a loss) or ``"max"``.
        threshold: significance threshold (PyTorch default 1e-4).
        threshold_mode: ``"rel"`` or ``"abs"`` (``rel`` misbehaves for negative values; use ``abs``).
        patience: bad values tolerated; the rule fires on the ``patience + 1``-th in a row.
        cooldown: values after a fire during which bad values are not counted.
        smoothing: TensorBoard EMA weight ``w`` in ``[0, 1)``; 0 = raw values.

    Attributes (after each :meth:`step`, named as in PyTorch):
        best, num_bad_epochs, cooldown_counter, last_epoch (values seen), last_value (the
        value the rule saw, smoothed if smoothing is on), fires (indices, 0-based, that fired).

    Raises:
        ValueError: for an unknown mode/threshold_mode, a negative patience/cooldown/threshold,
            or a smoothing weight outside ``[0, 1)``.
    """

    def __init__(self, mode: Literal["min", "max"] = "min", threshold: float = 1e-4,
                 threshold_mode: Literal["rel", "abs"] = "rel", patience: int = 10, cooldown: int = 0,
                 smoothing: float = 0.0) -> None:
        if mode not in ("min", "max"):
            raise ValueError(_("mode {mode!r}: expected min or max").format(mode=mode))
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(_("threshold_mode {mode!r}: expected rel or abs").format(mode=threshold_mode))
        if patience < 0 or cooldown < 0 or threshold < 0:
            raise ValueError(_("patience, cooldown and threshold must be >= 0"))
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(_("smoothing {smoothing!r}: expected a weight in [0, 1)").format(smoothing=smoothing))
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.patience = patience
        self.cooldown = cooldown
        self.smoothing = smoothing
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self.last_value: float | None = None
        self.fires: list[int] = []
        self.improved_since_fire = True  # an improvement since the latest fire (or no fire yet)
        self._ema_last = 0.0
        self._ema_n = 0

    @classmethod
    def from_config(cls, config: PlateauConfig) -> PlateauTracker:
        """A tracker with the settings of a ``[policies.plateau]`` section."""
        return cls(mode=config.mode, threshold=config.threshold, threshold_mode=config.threshold_mode,
                   patience=config.patience, cooldown=config.cooldown, smoothing=config.smoothing)

    def is_better(self, a: float, best: float) -> bool:
        """PyTorch's ``_is_better`` (same float operations, so the same answers)."""
        if self.mode == "min" and self.threshold_mode == "rel":
            rel_epsilon = 1.0 - self.threshold
            return a < best * rel_epsilon
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            rel_epsilon = self.threshold + 1.0
            return a > best * rel_epsilon
        return a > best + self.threshold

    def smooth(self, value: float) -> float:
        """The value the rule sees: ``value`` itself, or TensorBoard's debiased EMA of the values."""
        if self.smoothing == 0.0 or not math.isfinite(value):
            return value
        w = self.smoothing
        self._ema_last = self._ema_last * w + (1 - w) * value
        self._ema_n += 1
        return self._ema_last / (1 - w ** self._ema_n)

    def step(self, value: float) -> bool:
        """Feed the next value (NaN allowed: a bad step); True when the rule fires on it."""
        current = self.smooth(float(value))
        self.last_value = current
        index = self.last_epoch
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
            self.improved_since_fire = True
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
            self.fires.append(index)
            self.improved_since_fire = False
            return True
        return False

    def step_many(self, values: Sequence[float],
                  positions: Iterable[int] | None = None) -> list[tuple[int, bool, float, float]]:
        """Feed ``values[i]`` for each ``i`` of ``positions`` (default: all, in order), exactly as
        that many :meth:`step` calls would, in one tight loop (no object per value).

        Returns:
            ``(i, improved, best, current)`` for each value that fired: its position in
            ``values``, whether the rule saw an improvement since the previous fire, and the
            rule's best and (smoothed) current value at that fire (not at the end of the loop:
            a decision's evidence is the state it fired in). :attr:`fires` is not extended
            (a long run would hold one index per fire); :attr:`last_epoch` counts the values.
        """
        if positions is None:
            seq = values
        else:
            positions = list(positions)
            seq = array("d", map(values.__getitem__, positions))
        out = self._expand(self.step_runs(seq), seq)
        if positions is not None:
            out = [(positions[k], improved, best, current) for k, improved, best, current in out]
        return out

    def _expand(self, runs: list[tuple], seq: Sequence[float]) -> list[tuple[int, bool, float, float]]:
        """:meth:`step_runs`'s result with each run of repeats written out fire by fire."""
        if all(len(item) == 4 for item in runs):
            return runs  # type: ignore[return-value]
        period = self.cooldown + self.patience + 1
        out: list[tuple[int, bool, float, float]] = []
        for item in runs:
            if len(item) == 4:
                out.append(item)
                continue
            last, improved, best, _current, count = item
            for t in range(count - 1, -1, -1):
                k = last - t * period
                out.append((k, improved, best, float(seq[k])))
        return out

    def step_runs(self, seq: Sequence[float]) -> list[tuple]:
        """:meth:`step_many` over every value of ``seq``, fires as ``(k, improved, best, current)``,
        except that ``count`` further fires every ``cooldown + patience + 1`` values of one run of
        not-better values (all with ``improved`` False, the same ``best``) come as one
        ``(k_last, False, best, current_at_k_last, count)``.

        Without smoothing, a run of values that are not better than ``best`` only counts
        (``num_bad_epochs``, the cooldown) and fires every ``cooldown + patience + 1`` values:
        such runs are found in one C pass (``_scan.first_beyond`` over an array('d'); else,
        with no NaN in ``seq``, C-level ``min``/``max`` over slices) and their fires computed
        arithmetically, not value by value. The result is
        the same as the value-by-value loop (the same comparisons against the same ``best``).
        """
        out: list[tuple] = []
        best, bad, cool = self.best, self.num_bad_epochs, self.cooldown_counter
        patience, cooldown, improved = self.patience, self.cooldown, self.improved_since_fire
        smooth = self.smooth if self.smoothing != 0.0 else None
        rel = self.threshold_mode == "rel"
        minimize = self.mode == "min"
        if minimize and rel:
            factor, offset = 1.0 - self.threshold, 0.0
        elif minimize:
            factor, offset = 1.0, self.threshold
        elif rel:
            factor, offset = self.threshold + 1.0, 0.0
        else:
            factor, offset = 1.0, self.threshold
        n = len(seq)
        current = self.last_value
        scan = native()
        if smooth is not None:
            bulk, beyond = False, None
        elif scan is not None and isinstance(seq, array) and seq.typecode == "d":
            bulk, beyond = True, scan.first_beyond  # C: compares as Python does (NaN never better)
        else:
            total = sum(seq)
            bulk, beyond = total == total, None  # no NaN (nor +inf with -inf): min/max over a slice are exact
        period = cooldown + patience + 1
        k = 0
        while k < n:
            if bulk and cool == 0:
                # PyTorch's _is_better: better iff current < best * factor (or best - offset), or >
                thr = (best * factor if rel else best - offset) if minimize else (
                    best * factor if rel else best + offset)
                j = beyond(seq, k, thr, minimize) if beyond is not None else _first_better(seq, k, thr, minimize)
                m = j - k  # values k..j-1 are not better: they only count
                need = patience + 1 - bad
                if m >= need:
                    f = k + need - 1
                    out.append((f, improved, best, float(seq[f])))
                    improved = False
                    rest = m - need
                    more = rest // period
                    if more:  # their fires repeat every period values: one entry for them all
                        f += more * period
                        out.append((f, False, best, float(seq[f]), more))
                    rest %= period
                    if rest <= cooldown:
                        cool, bad = cooldown - rest, 0
                    else:
                        cool, bad = 0, rest - cooldown
                else:
                    bad += m
                if j >= n:
                    current = float(seq[n - 1])
                    break
                k = j  # seq[j] is better: the step below takes it
            current = float(seq[k])
            if smooth is not None:
                current = smooth(current)
            # PyTorch's _is_better with the same float operations (best * eps, or best -/+ threshold)
            if minimize:
                better = current < (best * factor if rel else best - offset)
            else:
                better = current > (best * factor if rel else best + offset)
            if better:
                best = current
                bad = 0
                improved = True
            else:
                bad += 1
            if cool > 0:
                cool -= 1
                bad = 0
            if bad > patience:
                cool = cooldown
                bad = 0
                out.append((k, improved, best, current))
                improved = False
            k += 1
        self.best, self.num_bad_epochs, self.cooldown_counter = best, bad, cool
        self.improved_since_fire = improved
        self.last_epoch += n
        if n:
            self.last_value = current
        return out


def _first_better(seq: Sequence[float], k: int, thr: float, minimize: bool) -> int:
    """The first index ``>= k`` whose value is better than ``thr`` (``< thr`` when
    ``minimize``, else ``> thr``), ``len(seq)`` if none; ``seq`` holds no NaN. Scans with
    C-level ``min``/``max`` over growing slices, then halves the slice that holds the hit."""
    n = len(seq)
    width = 64
    while k < n:
        end = min(n, k + width)
        seg = seq[k:end]
        if (min(seg) < thr) if minimize else (max(seg) > thr):
            while len(seg) > 16:
                half = len(seg) // 2
                head = seg[:half]
                if (min(head) < thr) if minimize else (max(head) > thr):
                    seg = head
                else:
                    seg, k = seg[half:], k + half
            for t, v in enumerate(seg):
                if (v < thr) if minimize else (v > thr):
                    return k + t
        k = end
        if width < 1 << 16:
            width *= 2
    return n


def plateau_fires(values: list[float], **kwargs: Any) -> list[int]:
    """0-based indices at which the ReduceLROnPlateau rule fires on ``values`` (kwargs as
    :class:`PlateauTracker`)."""
    tracker = PlateauTracker(**kwargs)
    for value in values:
        tracker.step(value)
    return list(tracker.fires)


def rest_of_run_cost(history: History, point: ProgressPoint) -> dict[str, Any] | None:
    """Estimate what the rest of the run costs at the current rate (see the module docstring).

    Returns:
        ``{"total", "position", "elapsed_s", "remaining_s", "cost", "currency"}`` (money and
        seconds as decimal strings), or None when the length, position, times or rate are unknown.
    """
    total = point.total if point.total is not None else history.total_steps
    position = point.step if point.step is not None else point.epoch
    if (total is None or position is None or point.time is None or history.started_at is None
            or history.rate is None or position <= 0):
        return None
    elapsed = ensure_utc(point.time) - history.started_at
    if elapsed.total_seconds() <= 0:
        return None
    pos = Decimal(position) if isinstance(position, int) else Decimal(repr(position))
    remaining_units = max(Decimal(total) - pos, Decimal(0))
    elapsed_s = Decimal(elapsed.days * 86400 + elapsed.seconds) + Decimal(elapsed.microseconds) / Decimal(10**6)
    remaining_s = elapsed_s * remaining_units / pos
    cost = cost_of(history.rate.amount, remaining_s)
    return {"total": total, "position": finite_or_text(float(position)), "elapsed_s": str(elapsed_s),
            "remaining_s": str(remaining_s), "cost": str(cost), "currency": history.rate.currency}


def _thinned(vals: Sequence[float], start: int, stop: int) -> Sequence[float]:
    """``vals[start:stop]``, thinned as the diagnoses read a flood (:func:`.history.thin`)."""
    return [vals[j] for j in thin(range(start, stop))]


@register
class PlateauPolicy(Policy):
    """Advise when the monitored loss stopped improving, by ReduceLROnPlateau's rule.

    Args:
        config: the ``[policies.plateau]`` section.

    Keys are ``plateau:<monitor>:<index>`` with ``index`` the 0-based position of the point
    among the monitored points, so each fire is reported once. An open overfitting episode
    supersedes it (:meth:`costctl.policies.overfitting.OverfittingPolicy.covers`).
    """

    superseded_by: ClassVar[tuple[str, ...]] = ("overfitting",)

    name = "plateau"
    config_model: ClassVar[type[PlateauConfig]] = PlateauConfig
    order = 40

    #: Seconds between two updates of an open episode's evidence (repeats) in the ledger.
    UPDATE_EVERY_S = 60.0

    def __init__(self, config: PlateauConfig, *, learning: Any = None, swings: Any = None) -> None:
        """``learning`` / ``swings``: the ``[policies.not_learning]`` / ``[policies.unstable]``
        sections the hold applies (None: their defaults)."""
        self.config = config
        self.action = config.action
        self.tracker = PlateauTracker.from_config(config)
        self._seen = 0
        self.missed = 0
        self.fires = 0  # every fire of the rule, episodes' repeats included
        self._episode: dict[str, Any] | None = None  # the open episode (see decisions())
        self._updates: list[tuple[str, dict[str, Any]]] = []
        self._series: str | None = None  # the monitored series' name the tracker follows
        self._index_base = 0  # values seen by the trackers of earlier series (indexes stay unique)
        #: the not-learning rule over the same values: fires before it saw the run learn are held back
        self._learning_config, self._swings_config = learning, swings
        self.learning: LearningCheck | None = None
        #: the unstable rule over the same values: fires inside an unstable episode are held back
        self.swings: SwingCheck | None = None
        if config.hold_until_learning:
            self.learning, self.swings = self._new_checks()
        self._fed = self._swings_fed = 0  # monitored values of the current batch already fed to ``learning``
        #: fires held back because the run had not (yet) shown it learns
        self.held_back = 0

    def _new_checks(self) -> tuple[LearningCheck, SwingCheck]:
        """Fresh not-learning and unstable rules for the hold, with the user's settings."""
        learning = (LearningCheck.from_config(self._learning_config) if self._learning_config is not None
                    else LearningCheck())
        swings = SwingCheck.from_config(self._swings_config) if self._swings_config is not None else SwingCheck()
        return learning, swings

    @classmethod
    def from_config(cls, config: PlateauConfig, context: PolicyContext) -> PlateauPolicy:
        """Always enabled (it only advises by default). The hold applies the user's
        ``[policies.not_learning]`` and ``[policies.unstable]`` settings (their rules, whether or
        not those policies are enabled)."""
        sections = context.policies
        return cls(config, learning=getattr(sections, "not_learning", None),
                   swings=getattr(sections, "unstable", None))

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        """One decision per plateau *episode* among the progress added since the last call.

        The rule (ReduceLROnPlateau) sees every point and fires exactly where PyTorch would; the
        first fire opens an episode and gives the decision (keyed by its index); later fires
        with no improvement of the monitored value in between are *repeats* of it, counted, not
        new decisions. The episode ends when the value improves again (a new best by the
        threshold); the next fire opens a new one. Repeats reach the ledger through
        :meth:`updates` (at most every :data:`UPDATE_EVERY_S` seconds, and at the episode's end).
        """
        now = ensure_utc(now)
        batches, missed = history.new_batches(self._seen)
        self._seen += missed + sum(len(b) for b in batches)
        self.missed += missed
        found = []
        monitor = self.config.monitor
        for batch in self._by_series(batches, monitor):
            mask = batch.mask_of(batch.series_of_kind(monitor))
            if mask is not None and not any(mask):
                continue
            base = self._index_base + self.tracker.last_epoch
            # the monitored values (cut out at C speed when the batch mixes kinds); a fire's k is
            # its ordinal among them, positions[k] its place in the batch
            fires = self.tracker.step_runs(batch.values if mask is None else take(batch.values, mask))
            self.fires += sum(1 if len(item) == 4 else item[4] for item in fires)
            positions = None if mask is None or not fires else list(compress(range(len(batch)), mask))
            # a fire with no improvement since the previous one repeats the open episode: runs
            # of those only count (the episode notes the run's last one)
            repeats, last_k = 0, -1
            vals = batch.values if mask is None else take(batch.values, mask)
            self._fed = self._swings_fed = 0
            for item in fires:
                if len(item) == 5:  # a run of repeats (after a fire: an episode is open, unless held back)
                    if self._episode is None and not repeats:
                        if not self._learned(batch, mask, vals, item[0]):
                            self.held_back += item[4]
                            continue
                        item = item[:4]  # learned since the held-back fire: its latest repeat opens an episode
                    else:
                        repeats += item[4]
                        last_k = item[0]
                        continue
                k, improved, best, current = item
                if not improved and (self._episode is not None or repeats):
                    repeats += 1
                    last_k = k
                    continue
                if not self._learned(batch, mask, vals, k):
                    self.held_back += 1
                    continue
                if repeats:
                    self._repeat(batch, positions, base, repeats, last_k)
                    repeats = 0
                self._end_episode()
                index = base + k
                i = k if positions is None else positions[k]
                point = batch.point(i)
                decision = self._decision(history, now, point, index, best=best, current=current)
                found.append(decision)
                self._episode = {"key": decision.key, "repeats": 1, "first_index": index, "last_index": index,
                                 "last": (batch, i), "updated_at": now, "reported": 1}
            if repeats:
                self._repeat(batch, positions, base, repeats, last_k)
            if vals:
                self._learned(batch, mask, vals, len(vals) - 1)
        if self._episode is not None and self.tracker.improved_since_fire:
            self._end_episode()
        elif self._episode is not None and self._episode["repeats"] != self._episode["reported"] and (
                (now - self._episode["updated_at"]).total_seconds() >= self.UPDATE_EVERY_S):
            self._queue_update(self._episode, ended=False, now=now)
        return found

    def _by_series(self, batches: list[PointBatch], monitor: str) -> Iterator[PointBatch]:
        """``batches`` as the rule takes them: one monitored series at a time. When the series
        of ``monitor`` kind moves to another (the live watch's primary series moved: a ``total``
        loss appeared after the plain one, say), the rule restarts on the new series — a fresh
        ReduceLROnPlateau state and the open episode ended — since a best value of one loss says
        nothing about another; decision indexes go on counting. A batch holding several such
        series (a move inside one drain) is cut into one batch per series, in the order each
        first appears."""
        for batch in batches:
            kinds = sorted(batch.series_of_kind(monitor))
            names = [batch.keys[i][1] for i in kinds]
            if len(kinds) <= 1:
                parts = [(names[0] if names else None, batch)]
            else:
                first = {i: batch.series.index(i) for i in kinds if i in batch.series}
                order = sorted(first, key=first.__getitem__)
                parts = [(batch.keys[i][1], batch.cut(batch.mask_of({i}))) for i in order]
            for name, part in parts:
                if name is not None and name != self._series:
                    if self._series is not None:
                        self._end_episode()
                        self._index_base += self.tracker.last_epoch
                        self.tracker = PlateauTracker.from_config(self.config)
                        if self.learning is not None:
                            self.learning, self.swings = self._new_checks()
                    self._series = name
                yield part

    def _learned(self, batch: PointBatch, mask: bytes | None, vals: Sequence[float], k: int) -> bool:
        """Feed the not-learning rule the batch's monitored values up to ordinal ``k`` (those not
        fed yet); True when the run has shown it learns by then (or the hold is off, or the rule
        does not apply)."""
        learning = self.learning
        if learning is None:
            return True
        if self._fed <= k:
            if learning.n < 2:
                if learning.n == 0 and self._series is not None:
                    learning.name(self._series)
                positions = range(len(batch)) if mask is None else compress(range(len(batch)), mask)
                for j, ordinal in zip(positions, range(k + 1)):
                    if ordinal >= self._fed and learning.n < 2:
                        learning.position(position_of(batch, j))
                        learning.add(vals[ordinal])
                        self._fed = ordinal + 1
            add = learning.add
            swing = self.swings.add if self.swings is not None else None
            if swing is not None and self._swings_fed < self._fed:
                for v in _thinned(vals, self._swings_fed, self._fed):
                    swing(v)
            if learning.learning_shown:  # settled: only the swings still matter
                if swing is not None:
                    for v in _thinned(vals, self._fed, k + 1):
                        swing(v)
            else:
                for v in _thinned(vals, self._fed, k + 1):
                    add(v)
                    if swing is not None:
                        swing(v)
            self._fed = self._swings_fed = k + 1
        return learning.learning_shown and not (self.swings is not None and self.swings.unstable)

    def _repeat(self, batch: Any, positions: list[int] | None, base: int, repeats: int, last_k: int) -> None:
        """Add ``repeats`` fires to the open episode, the last at ordinal ``last_k`` of the batch."""
        episode = self._episode
        assert episode is not None
        episode["repeats"] += repeats
        episode["last_index"] = base + last_k
        episode["last"] = (batch, last_k if positions is None else positions[last_k])  # a point only when reported

    def _end_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None and episode["repeats"] != 1:
            self._queue_update(episode, ended=True, now=episode["updated_at"])

    def _queue_update(self, episode: dict[str, Any], *, ended: bool, now: datetime) -> None:
        last_batch, last_i = episode["last"]
        last: ProgressPoint = last_batch.point(last_i)
        episode["updated_at"] = now
        episode["reported"] = episode["repeats"]
        self._updates.append((episode["key"], {
            "repeats": episode["repeats"], "last_index": episode["last_index"], "last_step": last.step,
            "last_epoch": last.epoch, "last_value": finite_or_text(last.value),
            "last_point_time": iso(last.time) if last.time is not None else None, "episode_ended": ended,
        }))

    def updates(self, now: datetime) -> list[tuple[str, dict[str, Any]]]:
        """Evidence to add to decisions already made, as ``(key, evidence)``: an episode's
        repeat count (``repeats``, the fires of the rule in it, the first included) and its
        latest fire, at most every :data:`UPDATE_EVERY_S` seconds and once when it ended."""
        out, self._updates = self._updates, []
        return out

    def _decision(self, history: History, now: datetime, point: ProgressPoint, index: int, *,
                  best: float, current: float) -> Decision:
        cfg = self.config
        rest = rest_of_run_cost(history, point)
        evidence: dict[str, Any] = {
            "monitor": cfg.monitor,
            "metric": point.name,
            "index": index,
            "step": point.step,
            "epoch": point.epoch,
            "point_time": iso(point.time) if point.time is not None else None,
            "value": finite_or_text(point.value),
            "monitored_value": finite_or_text(current),
            "best": finite_or_text(best),
            "bad_points": cfg.patience + 1,
            "repeats": 1,
            "mode": cfg.mode,
            "threshold": cfg.threshold,
            "threshold_mode": cfg.threshold_mode,
            "patience": cfg.patience,
            "cooldown": cfg.cooldown,
            "smoothing": cfg.smoothing,
            "configured_action": cfg.action,
            "rest_of_run": rest,
            "spend_per_hour": str(history.rate.amount) if history.rate is not None else None,
            "currency": history.rate.currency if history.rate is not None else None,
        }
        shape = {"monitor": cfg.monitor, "name": point.name, "where": where_text(point.step, point.epoch, index),
                 "best": _fmt(best), "points": cfg.patience + 1, "patience": cfg.patience,
                 "threshold": cfg.threshold, "mode": cfg.threshold_mode}
        # a series of its own name (a GAN's 'D loss', a detector's 'loss_cls') is named: which
        # loss plateaued matters (the plain 'loss' / 'eval_loss' needs no name)
        if point.name in ("loss", "eval_loss", "val_loss", f"{cfg.monitor}_loss"):
            diagnosis = _("{monitor} loss plateaued at {where}: no improvement on best {best} for {points} points "
                          "(ReduceLROnPlateau patience {patience}, threshold {threshold:g} {mode})")
        else:
            diagnosis = _("{monitor} loss '{name}' plateaued at {where}: no improvement on best {best} for {points} "
                          "points (ReduceLROnPlateau patience {patience}, threshold {threshold:g} {mode})")
        reason = clauses(diagnosis.format(**shape), cost_clause(rest, history.rate, at_rate=True))
        return Decision(time=now, policy=self.name, action=self.action, reason=reason,
                        evidence=evidence, key=f"plateau:{cfg.monitor}:{index}",
                        rest_of_run=RestOfRun.from_dict(rest) if rest is not None else None)


def _fmt(value: float) -> str:
    return f"{value:.6g}" if math.isfinite(value) else str(finite_or_text(value))


__all__ = ["PlateauConfig", "PlateauTracker", "PlateauPolicy", "plateau_fires", "rest_of_run_cost"]
