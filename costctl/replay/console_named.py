"""Named loss series in a console log that the live line grammar reads as one (or not at all).

``costctl analyze`` runs this beside :class:`~costctl.progress.LineParser` on each block of a
console log (:func:`~costctl.replay.train_log.iter_console_batches`). Two shapes:

* **Named losses the line grammar cannot read** (a word joined to ``loss`` by ``_``:
  ``train_loss_step=0.48``, ``kl_loss: 0.02``), alone or several on a line, and
* **several named losses on one line** (GANs: ``[D loss: 0.69] [G loss: 0.70]``,
  ``Loss_D: 1.74  Loss_G: 5.12``, ``loss_D: 0.405, loss_G_fake: 0.300``; Lightning's bar
  ``loss=0.5, train_loss_step=0.48, train_loss_epoch=0.52``): a line holding two or more
  distinct *train-side* loss names (eval names -- ``val``/``eval``/``valid``... prefixes -- do
  not count; ``test``/``predict`` and ``loss scale`` are not losses) gives one point per name,
  each its own series, and is taken away from the line parser (so no series mixes them).
* **Column tables**: a header row whose first column is ``Epoch`` and which names loss
  columns (``box_loss obj_loss cls_loss``, or YOLOv5's ``box obj cls total`` beside
  ``gpu_mem``), then rows ``k/N v1 v2 ...`` (tqdm refreshes of one row each): one point per
  loss column per epoch, from the **final refresh** of the epoch's row (counted once).

Repeated values: on a line with a progress bar (tqdm refreshes redraw the same postfix), a
point equal to the previous point of its series (same value, and same step where the line has
one; any step for a per-epoch series, which a bar shows unchanged all the next epoch) is a
redraw and is counted once.

Which series is the primary one (the one the loss policies watch), over every train series
the log holds, line-parser ones included (:func:`choose_primary`):

1. ``--loss NAME`` when given (an exact series name);
2. else a series whose name holds ``total`` (a detector's total, ``total_loss``);
3. else a per-batch series named as the single-loss grammar names a train loss (``loss``,
   ``train_loss``, ``running_loss``... with a known prefix);
4. else the first per-batch series the log shows, else the first series.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import UsageError
from ..progress.lines import clean_line, parse_epoch_header
from ..records import ProgressPoint
from .loss_stats import LossStream

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
# YOLOv5 console columns (no "loss" in the name) when the header also has gpu_mem.
_YOLO_LOSS_COLUMNS = {"box", "obj", "cls", "dfl", "seg", "kobj", "kpt", "total"}
_ROW_EPOCH_RE = re.compile(r"(\d+)/(\d+)")


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
            if e != e or e != int(e) or e in self._epochs:
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
    if len(train) >= 2 or (train and _grammar_blind(train[0])):
        return list(seen.values())
    return []


# The names the line grammar reads (costctl.progress.lines._LOSS_RE): "loss" with a known prefix.
_GRAMMAR_NAME_RE = re.compile(
    r"(?:(?:training|train|total|average|avg|mean|running|epoch|batch|validation|valid|val"
    r"|evaluation|eval|dev|test|predict)[ _/.-]?)?loss", re.IGNORECASE)


def _grammar_blind(name: str) -> bool:
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
            allowed = ", ".join(repr(n) for n in names) or "none"
            raise UsageError(f"--loss {wanted!r}: no such train loss series in the log (it has {allowed})")
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


@dataclass
class NamedSeries:
    """One series this reader found: its points (kept: such logs are small) and figures."""

    kind: str
    name: str
    granularity: str
    points: list[ProgressPoint] = field(default_factory=list)
    stream: LossStream = field(default_factory=LossStream)
    shape: EpochShape = field(default_factory=EpochShape)

    def add(self, p: ProgressPoint, *, redraw_check: bool) -> None:
        if redraw_check and self.points:
            last = self.points[-1]
            same = last.value == p.value or (math.isnan(last.value) and math.isnan(p.value))
            if same and (self.granularity == "epoch" or last.step == p.step):
                return  # a redraw of the same state: counted once
        self.points.append(p)
        self.stream.add(p)
        self.shape.add((math.nan if p.epoch is None else p.epoch,), (p.step,))


# A line worth reading here holds a loss joined by "_" (train_loss_step, Loss_D, kl_loss) or two
# "loss" words (D loss ... G loss); found by the regex engine over the whole block, on its
# lower-case copy (an ASCII block: same positions) with case-sensitive patterns that start with
# a literal, which the engine finds with its fast search (IGNORECASE would try every position).
_HINT_LOW = (re.compile(r"_loss"), re.compile(r"loss(?:_|[^\r\n]*loss)"))
_HINT_ANY = re.compile(r"loss_|_loss|loss[^\r\n]*?loss", re.IGNORECASE)


def _hints(text: str) -> list[int]:
    """Positions (in order, one or more per line) of the lines of ``text`` worth reading here."""
    if text.isascii():
        low = text.lower()
        found = [m.start() for m in _HINT_LOW[0].finditer(low)]
        found += [m.start() for m in _HINT_LOW[1].finditer(low)]
        return sorted(found)
    return [m.start() for m in _HINT_ANY.finditer(text)]
# An epoch header line ("epoch 3:", "Epoch 3/10"): only where a named-loss line needs its epoch.
_EPOCH_LINE_RE = re.compile(r"(?im)^[ \t]*epoch[ \t]*\d+[ \t]*(?:/[ \t]*\d+)?[ \t]*:?[ \t]*$")
# A column-table header: "Epoch" then two or more column names, at the start of its line
# (the regex starts with the literal, found fast; the line start is checked per match).
_TABLE_HEADER_RE = re.compile(r"Epoch[ \t]+[A-Za-z_]\S*[ \t]+[A-Za-z_/]\S*")


def _has_table_header(text: str) -> bool:
    for m in _TABLE_HEADER_RE.finditer(text):
        start, _ = line_bounds(text, m.start(), m.start())
        if not text[start:m.start()].strip(" \t"):
            return True
    return False


def line_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` of the line of ``text`` holding ``text[start:end]`` (``\n``/``\r``
    end a line); each search stops at the nearer ``\n``, so the cost is the line's length."""
    nl = text.rfind("\n", 0, start)
    cr = text.rfind("\r", nl + 1, start)
    first = max(nl, cr) + 1
    nl = text.find("\n", end)
    stop = len(text) if nl < 0 else nl
    cr = text.find("\r", end, stop)
    return first, (cr if cr >= 0 else stop)


class NamedLossReader:
    """Reads the module's shapes from a console log's blocks (:meth:`take`), in order."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], NamedSeries] = {}
        self._table: list[str] | None = None  # header columns
        self._loss_columns: list[int] = []
        self._row: tuple[int, list[str]] | None = None  # the newest refresh of the current row
        self._epoch: int | None = None  # from the last "epoch 3:" header line

    def take(self, text: str) -> str:
        """Read complete lines ``text``; return it with the multi-loss lines emptied (their line
        ends kept) for the line parser."""
        if self._table is not None or _has_table_header(text):
            self._tables(text)
        if "oss" not in text and "OSS" not in text:
            return text
        cut: list[tuple[int, int]] = []
        from ..progress.lines import _step_epoch_total

        hits = _hints(text)
        headers = [m.start() for m in _EPOCH_LINE_RE.finditer(text)] if hits and self._epoch_context(text) else []
        h = 0
        done = -1
        for hit in hits:
            start, end = line_bounds(text, hit, hit)
            if start == done:
                continue
            done = start
            while h < len(headers) and headers[h] < start:  # epoch headers above this line
                header = parse_epoch_header(text[headers[h]:line_bounds(text, headers[h], headers[h])[1]].strip().rstrip(":"))
                if header is not None:
                    self._epoch = header[0]
                h += 1
            seg = text[start:end]
            line = clean_line(seg)
            found = named_losses(line)
            if not found:
                continue
            step, epoch, total = _step_epoch_total(line)
            if epoch is None and step is None and self._epoch is not None:
                epoch = float(self._epoch)
            bar = "|" in line and ("it/s" in line or "s/it" in line)
            for kind, name, value in found:
                self._add(kind, name, ProgressPoint(time=None, value=value, kind=kind, name=name,  # type: ignore[arg-type]
                                                    step=step, epoch=epoch, total=total), redraw=bar)
            cut.append((start, end))
        if not cut:
            return text
        pieces, pos = [], 0
        for start, end in cut:
            pieces.append(text[pos:start])
            pos = end
        pieces.append(text[pos:])
        return "".join(pieces)

    @staticmethod
    def _epoch_context(text: str) -> bool:
        return "poch" in text or "POCH" in text

    def _add(self, kind: str, name: str, p: ProgressPoint, *, redraw: bool) -> None:
        s = self.series.get((kind, name))
        if s is None:
            s = self.series[(kind, name)] = NamedSeries(kind, name, granularity_of(name))
        s.add(p, redraw_check=redraw)

    # -- column tables ---------------------------------------------------------------------
    def _tables(self, text: str) -> None:
        for raw in re.split(r"\r\n|\r|\n", text):
            if not raw.strip():
                continue
            line = clean_line(raw)
            tokens = line.split()
            if tokens and tokens[0].lower() == "epoch" and len(tokens) >= 3:
                self._header(tokens)
                continue
            if self._table is None:
                continue
            head = line.split(":", 1)[0].split()
            if len(head) != len(self._table):
                continue
            m = _ROW_EPOCH_RE.fullmatch(head[0])
            if m is None:
                continue
            epoch = int(m[1])
            if self._row is not None and self._row[0] != epoch:
                self._emit_row()
            self._row = (epoch, head)

    def _header(self, tokens: list[str]) -> None:
        low = [t.lower() for t in tokens]
        yolo = "gpu_mem" in low
        columns = [i for i, t in enumerate(low) if i > 0 and ("loss" in t or (yolo and t in _YOLO_LOSS_COLUMNS))]
        if not columns:
            return
        if self._table != tokens:
            self._emit_row()
        self._table, self._loss_columns = tokens, columns

    def _emit_row(self) -> None:
        if self._row is None or self._table is None:
            return
        epoch, cells = self._row
        self._row = None
        for i in self._loss_columns:
            try:
                value = float(cells[i])
            except ValueError:
                continue
            name = self._table[i]
            self._add("train", name, ProgressPoint(time=None, value=value, kind="train", name=name,
                                                   step=None, epoch=float(epoch), total=None), redraw=False)
        # a table's series are per epoch whatever their names
        for i in self._loss_columns:
            s = self.series.get(("train", self._table[i]))
            if s is not None:
                s.granularity = "epoch"

    def finish(self) -> None:
        """The log ended: the last row's final refresh counts."""
        self._emit_row()


__all__ = ["EpochShape", "NamedLossReader", "series_granularity", "NamedSeries", "choose_primary", "granularity_of", "kind_of", "named_losses"]
