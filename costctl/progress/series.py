"""Which loss series a training log's lines hold, and which one the policies watch.

One module for ``costctl analyze`` (:mod:`costctl.replay.train_log`) and the live
``costctl watch`` (:mod:`costctl.progress.console`), so that for the same bytes both read the
same series and watch the same one.

* :func:`kind_of` / :func:`granularity_of`: a series name's side (``train``/``eval``, or None
  for test/predict and ``loss scale``) and grain (``batch``, or ``epoch`` for
  ``train_loss_epoch``, ``avg loss``, ``Average loss``); :class:`EpochShape` tells the grain
  from the data (one value per integral epoch, no step).
* :func:`named_losses`: the named losses of one line when it holds two or more distinct
  train-side names (GANs' ``[D loss: 0.69] [G loss: 0.70]``, ``loss_D: 0.40, loss_G_fake:
  0.30``) or one the single-loss grammar cannot read (``train_loss_step``, ``kl_loss``).
* :func:`choose_primary`: the primary train series among the names a log shows:

  1. ``--loss NAME`` when given (an exact series name);
  2. else a series whose name holds ``total`` (a detector's total, ``total_loss``);
  3. else a per-batch series named as the single-loss grammar names a train loss (``loss``,
     ``train_loss``, ``running_loss``... with a known prefix);
  4. else the first per-batch series the log shows, else the first series.

* :class:`PrimarySeries`: the same rule applied while the points stream by (the live watch):
  each :class:`~costctl.progress.batch.PointBatch` is cut to the primary train series and the
  first eval series, so the policies never see two series interleaved as one, nor an epoch
  average mixed into the per-batch loss.
"""

from __future__ import annotations

import math
import re

from ..errors import UsageError
from ..i18n import _
from .batch import PointBatch

_NUMBER = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z0-9_])"
# A named loss: "D loss", "Loss_D", "loss_G_fake", "d_loss", "train_loss_step" then its value.
_NAMED_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?P<name>(?:[A-Za-z][A-Za-z0-9]{0,15}(?:_[A-Za-z0-9]{1,15}){0,3}[ _])?loss(?:_[A-Za-z0-9]+){0,3})"
    rf"(?![A-Za-z0-9_(])\s*(?:[:=]\s*|\s+)(?:tensor\(\s*)?(?P<value>{_NUMBER})",
    re.IGNORECASE,
)
_EVAL_HEADS = {"val", "valid", "validation", "eval", "evaluation", "dev", "v"}
_DROP_HEADS = {"test", "predict"}
_KNOWN_TRAIN_HEADS = {"", "train", "training", "total", "avg", "average", "mean", "running", "epoch", "batch"}
_EPOCH_HEADS = ("epoch", "avg", "average", "mean")


def _head(name: str) -> str:
    """The word before ``loss`` (``"val"`` for ``val_loss``, ``""`` for ``loss_D``)."""
    low = name.lower()
    at = low.find("loss")
    return low if at < 0 else low[:at].rstrip(" _/.-")


def kind_of(name: str) -> str | None:
    """``"train"``, ``"eval"`` or None (test/predict, loss scale: not a loss series)."""
    low = name.lower()
    if "scale" in low:
        return None
    head = _head(name)
    if head in _DROP_HEADS:
        return None
    return "eval" if head in _EVAL_HEADS else "train"


def granularity_of(name: str) -> str:
    """``"epoch"`` for an epoch-level name (``train_loss_epoch``, ``avg loss``, ``Average loss``),
    else ``"batch"``."""
    low = name.lower()
    return "epoch" if low.endswith("_epoch") or _head(name).startswith(_EPOCH_HEADS) else "batch"


class EpochShape:
    """Whether a series holds one value per epoch, from its points' columns: every point has
    an integral epoch and no step, and no epoch repeats (a per-epoch average, a table row).
    Kept per series while the points stream by (bounded by the number of epochs)."""

    def __init__(self) -> None:
        self.ok = True
        self._epochs: set[float] = set()
        self._count = 0

    def add(self, epochs, steps) -> None:
        """Take the ``epochs`` (NaN: none) and ``steps`` (negative / None: none) of some points."""
        if not self.ok:
            return
        for e in epochs:
            if not math.isfinite(e) or e != int(e) or e in self._epochs:
                self.ok = False
                return
            self._epochs.add(e)
        for st in steps:
            if st is not None and st >= 0:
                self.ok = False
                return

    @property
    def per_epoch(self) -> bool:
        return self.ok and bool(self._epochs)


def series_granularity(name: str, shape: EpochShape | None) -> str:
    """``"epoch"`` by the name (:func:`granularity_of`) or by the data (:class:`EpochShape`)."""
    if granularity_of(name) == "epoch" or (shape is not None and shape.per_epoch):
        return "epoch"
    return "batch"


def named_losses(line: str) -> list[tuple[str, str, float]]:
    """``(kind, name, value)`` of each named loss on ``line`` (first value of a name kept), when
    the line holds two or more distinct train-side names; else ``[]``."""
    seen: dict[str, tuple[str, str, float]] = {}
    for m in _NAMED_RE.finditer(line):
        name = m["name"]
        kind = kind_of(name)
        if kind is None or name in seen:
            continue
        seen[name] = (kind, name, float(m["value"]))
    train = [n for k, n, _ in seen.values() if k == "train"]
    if len(train) >= 2 or (train and grammar_blind(train[0])):
        return list(seen.values())
    return []


# The names the line grammar reads (costctl.progress.lines._LOSS_RE): "loss" with a known prefix.
_GRAMMAR_NAME_RE = re.compile(
    r"(?:(?:training|train|total|average|avg|mean|running|epoch|batch|validation|valid|val"
    r"|evaluation|eval|dev|test|predict)[ _/.-]?)?loss", re.IGNORECASE)


def grammar_blind(name: str) -> bool:
    """The line grammar cannot read a loss named ``name`` (``train_loss_step``, ``kl_loss``,
    ``Loss_D``: a word joined to ``loss`` by ``_``), so a line whose one loss it is is read here."""
    low = name.lower()
    joined = "loss_" in low or (low.endswith("_loss") and low != "loss")
    return joined and _GRAMMAR_NAME_RE.fullmatch(name) is None


def choose_primary(names: list[str], wanted: str | None = None) -> str | None:
    """The primary train series among ``names`` (first-seen order), by the module's rule.

    Raises:
        UsageError: ``wanted`` is not one of ``names``.
    """
    if wanted is not None:
        if wanted not in names:
            if not names:
                raise UsageError(_("--loss {wanted!r}: no such train loss series in the log (it has none)").format(
                    wanted=wanted))
            raise UsageError(_("--loss {wanted!r}: no such train loss series in the log (it has {allowed})").format(
                wanted=wanted, allowed=_(", ").join(repr(n) for n in names)))
        return wanted
    if not names:
        return None
    for n in names:
        if "total" in n.lower():
            return n
    batch = [n for n in names if granularity_of(n) == "batch"]
    for n in batch:
        if _head(n) in _KNOWN_TRAIN_HEADS and n.lower().endswith("loss"):
            return n
    return batch[0] if batch else names[0]


class PrimarySeries:
    """:func:`choose_primary` while the points stream by: cuts batches to the primary series.

    The train primary is chosen over the train series seen so far (first-seen order), again
    whenever a new one appears (a series the rule prefers that shows up later takes over from
    its first point: :attr:`changes` lists such moves); the eval primary is the first eval
    series seen. With ``wanted`` (``--loss NAME``) no train point passes until that series
    appears. Cheap per batch: a few set lookups over its keys, the cut done at C speed
    (:meth:`PointBatch.cut`), no object per point.

    A ``wanted`` series the output has not shown once the other train series have shown
    :data:`MISSING_AFTER_POINTS` points between them sets :attr:`missing` (once): analyze's
    refusal line (:func:`choose_primary`), for the watch to say while it goes on (the series
    may still appear later; then it is watched from its first point).

    Args:
        wanted: the train series to watch (an exact name), or None for the rule.
    """

    def __init__(self, wanted: str | None = None) -> None:
        self.wanted = wanted
        #: analyze's "--loss NAME: no such train loss series ..." once the rule above says so
        self.missing: str | None = None
        self._others = 0  # train points of other series while ``wanted`` is absent (counted up to the limit)
        #: kind -> series names in first-seen order
        self.names: dict[str, list[str]] = {"train": [], "eval": []}
        #: kind -> the primary series name (absent: none yet)
        self.primary: dict[str, str] = {}
        #: ``(kind, old, new)`` each time a primary moved to another series
        self.changes: list[tuple[str, str, str]] = []
        self._seen: set[tuple[str, str]] = set()

    def _choose(self) -> None:
        """Apply the rule to the names seen so far; record a move of a primary."""
        for kind, names in self.names.items():
            if not names:
                continue
            if kind == "train":
                new = (self.wanted if self.wanted in names else None) if self.wanted is not None else choose_primary(names)
            else:
                new = names[0]
            old = self.primary.get(kind)
            if new is not None and new != old:
                self.primary[kind] = new
                if old is not None:
                    self.changes.append((kind, old, new))

    def cut(self, batch: PointBatch) -> PointBatch:
        """``batch`` with only the points of the primary series (``batch`` itself when all are)."""
        if not batch:
            return batch
        keys = batch.keys
        new = [key for key in keys if key not in self._seen]
        if new:  # the batch's new series all at once: a move is between batches only
            for kind, name in new:
                self._seen.add((kind, name))
                self.names.setdefault(kind, []).append(name)
            self._choose()
        primary = self.primary
        if self.wanted is not None and self.missing is None and "train" not in primary:
            self._count_others(batch)
        wanted = {i for i, (kind, name) in enumerate(keys) if primary.get(kind) == name}
        if len(wanted) == len(keys):
            return batch
        return batch.cut(batch.mask_of(wanted))

    def _count_others(self, batch: PointBatch) -> None:
        """Count the batch's train points (none is ``wanted``'s: it has not shown); set
        :attr:`missing` at :data:`MISSING_AFTER_POINTS`."""
        series = batch.series
        self._others += sum(series.count(i) for i in batch.series_of_kind("train"))
        if self._others >= MISSING_AFTER_POINTS:
            try:
                choose_primary(self.names["train"], self.wanted)
            except UsageError as exc:
                self.missing = exc.message


#: Train points of other series after which a ``--loss NAME`` the output has not shown is said
#: (:attr:`PrimarySeries.missing`): 20 points, ten lines of a GAN's two losses.
MISSING_AFTER_POINTS = 20

__all__ = ["MISSING_AFTER_POINTS", "EpochShape", "PrimarySeries", "choose_primary", "grammar_blind", "granularity_of", "kind_of",
           "named_losses", "series_granularity"]
