"""Named loss series in a console log that the line grammar reads as one (or not at all).

``costctl analyze`` and the live ``costctl watch`` run this beside
:class:`~costctl.progress.LineParser` on each block of a console log (through
:class:`~costctl.progress.console.ConsoleSeries`). Shapes:

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

Which series is the primary one: :func:`costctl.progress.series.choose_primary`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..records import ProgressPoint
from .batch import PointBatch
from .lines import _PAST_I64, _held, _int, _step_epoch_total, clean_line, parse_epoch_header
from .series import granularity_of, named_losses

# YOLOv5 console columns (no "loss" in the name) when the header also has gpu_mem.
_YOLO_LOSS_COLUMNS = {"box", "obj", "cls", "dfl", "seg", "kobj", "kpt", "total"}
_ROW_EPOCH_RE = re.compile(r"(\d+)/(\d+)")


@dataclass
class NamedSeries:
    """One series this reader found: its name, side and grain, and the state of its redraw check
    (its last point). :meth:`keep` stores nothing here (the live watch); costctl analyze's
    subclass keeps the points and their figures."""

    kind: str
    name: str
    granularity: str
    count: int = 0
    _last: tuple[float, int | None] | None = None

    def add(self, p: ProgressPoint, *, redraw_check: bool) -> bool:
        """Take point ``p``; False when it is a redraw of the previous one (counted once)."""
        if redraw_check and self._last is not None:
            value, step = self._last
            same = value == p.value or (math.isnan(value) and math.isnan(p.value))
            if same and (self.granularity == "epoch" or step == p.step):
                return False  # a redraw of the same state: counted once
        self._last = (p.value, p.step)
        self.count += 1
        self.keep(p)
        return True

    def keep(self, p: ProgressPoint) -> None:
        """Store ``p`` (nothing here: see the class docstring)."""


# A line worth reading here holds a loss joined by "_" (train_loss_step, Loss_D, kl_loss) or two
# "loss" words (D loss ... G loss); found by the regex engine over the whole block, on its
# lower-case copy (an ASCII block: same positions) with case-sensitive patterns that start with
# a literal, which the engine finds with its fast search (IGNORECASE would try every position).
# A "loss" that an eval-side (or test/predict) word names, as :func:`~.series.kind_of` reads it:
# such a name never makes a line worth reading here (named_losses wants train-side names), so
# Keras' "loss: x - val_loss: y" and nanoGPT's "train loss x, val loss y" (the single-loss
# grammar's lines) are not handed to it. Lookbehinds placed after the literal "loss" keep the
# literal-led fast search; "[^a-z0-9_]" before the word makes it a whole word ("interval_loss",
# "x_val_loss" stay hints: kind_of reads them train-side), so the lower-case copy is searched with a line end before its start.
_NOT_EVAL = "".join(rf"(?<![^a-z0-9_]{head}[ _/.-]loss)" for head in
                    ("v", "val", "valid", "validation", "eval", "evaluation", "dev", "test", "predict"))
_HINT_LOW = (re.compile(r"_loss" + _NOT_EVAL), re.compile(r"loss" + _NOT_EVAL + r"(?:_|[^\r\n]*?loss" + _NOT_EVAL + ")"))
_HINT_ANY = re.compile(r"loss_|_loss|loss[^\r\n]*?loss", re.IGNORECASE)


def _hints(text: str) -> list[int]:
    """Positions (in order, one or more per line) of the lines of ``text`` worth reading here:
    a loss name joined by ``_`` or two loss words on a line, eval-side names not counted."""
    if text.isascii():
        low = "\n" + text.lower()  # a line end before the first line (see _NOT_EVAL)
        found = [m.start() - 1 for m in _HINT_LOW[0].finditer(low)]
        found += [m.start() - 1 for m in _HINT_LOW[1].finditer(low)]
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
    """Reads the module's shapes from a console log's blocks (:meth:`take`), in order.

    Args:
        series_type: the class of the series kept (:class:`NamedSeries` or a subclass that
            keeps the points).
    """

    def __init__(self, series_type: type[NamedSeries] = NamedSeries) -> None:
        self.series_type = series_type
        self.series: dict[tuple[str, str], NamedSeries] = {}
        self._out: PointBatch | None = None  # where points also go (the live watch), and their time
        self._t = math.nan
        self._table: list[str] | None = None  # header columns
        self._loss_columns: list[int] = []
        self._row: tuple[int, list[str]] | None = None  # the newest refresh of the current row
        self._epoch: int | None = None  # from the last "epoch 3:" header line

    @property
    def in_table(self) -> bool:
        """A column table's header was seen: every block may hold its rows."""
        return self._table is not None

    def take(self, text: str, out: PointBatch | None = None, t: float = math.nan) -> str:
        """Read complete lines ``text``; return it with the multi-loss lines emptied (their line
        ends kept) for the line parser. ``out``: a batch the points are appended to as well
        (time ``t``, POSIX seconds or NaN), in the order read (a table row's points when its
        epoch ends: at a later call, or :meth:`finish`)."""
        self._out, self._t = out, t
        if self._table is not None or _has_table_header(text):
            self._tables(text)
        if "oss" not in text and "OSS" not in text:
            return text
        cut: list[tuple[int, int]] = []
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
            step, total = _held(step), _held(total)  # past int64: no step (as the line parser)
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
            s = self.series[(kind, name)] = self.series_type(kind, name, granularity_of(name))
        if s.add(p, redraw_check=redraw) and self._out is not None:
            self._out.append(p.value, kind=kind, name=name, step=p.step, epoch=p.epoch,  # type: ignore[arg-type]
                             total=p.total, time=self._t)

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
            epoch = _int(m[1])
            if epoch >= _PAST_I64:
                continue  # an epoch past int64 is no table row (its number is no epoch)
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

    def finish(self, out: PointBatch | None = None, t: float = math.nan) -> None:
        """The log ended: the last row's final refresh counts (appended to ``out`` as well)."""
        self._out, self._t = out, t
        self._emit_row()
        self._out = None


__all__ = ["NamedLossReader", "NamedSeries", "line_bounds"]
