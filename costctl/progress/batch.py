"""Progress points in columns: :class:`PointBatch`, the shape a chunk of output parses into.

A chatty job prints millions of loss lines; one Python object per point costs about 3 KB and
a few microseconds each (issue "Fast at any volume"). A batch keeps the points of one chunk
(or of one file block) in typed arrays instead: the parser appends to it, the policies loop
over its ``values`` column, the ledger's progress store reads its columns, and nothing builds a
:class:`~costctl.records.ProgressPoint` unless a caller asks for one (:meth:`PointBatch.points`,
the compatibility path for small inputs).

Columns (all the same length, one entry per point, in arrival order):

* ``series``: index into :attr:`PointBatch.keys`, the ``(kind, name)`` pairs ("train", "loss");
* ``values``: the loss as float64 (NaN and +/-inf kept: a divergence, not a parse error);
* ``steps``: the step, or :data:`NO_INT` (-1) when the line gave none;
* ``epochs``: the epoch (may be fractional), or NaN when none;
* ``totals``: the run's length in the unit of ``step`` (or epochs when no step), or
  :data:`NO_INT`;
* ``times``: when costctl read the point, as POSIX seconds (float, UTC), or NaN for records
  with no time (file replays without timestamps).

Negative steps and totals never occur in a training log (a parser that reads "-3" as a step
drops the step), so -1 is a safe "absent".
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Container, Iterable, Iterator
from itertools import compress
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import UTC, datetime

from ..records import ProgressKind, ProgressPoint

#: "absent" in the integer columns (steps, totals).
NO_INT = -1
#: The largest step or total a column holds (``array('q')``: signed 64-bit).
INT64_MAX = 2**63 - 1


def column_int(value: int | None) -> int:
    """``value`` as an int column holds it: :data:`NO_INT` when absent, negative or past
    :data:`INT64_MAX` (a "step" of 1e30 is no step; Python's ints are unbounded, the column
    is not, and refusing the point would lose its loss)."""
    return NO_INT if value is None or value < 0 or value > INT64_MAX else value
_NAN = float("nan")


_NATIVE: list = []


def native():
    """The C helpers (``costctl.progress._scan``: ``select``, ``extremes``, ``first_beyond``,
    ``new_lows``, ``contains_any``), or None where the extension is not built or
    ``COSTCTL_PARSER=python`` picks the pure-Python engine (callers then compute the same in
    Python)."""
    if not _NATIVE:
        from . import lines

        scan = lines._scan if lines.ENGINE == "native" else None
        _NATIVE.append(scan if scan is not None and hasattr(scan, "new_lows") else None)
    return _NATIVE[0]


def _select():
    scan = native()
    return None if scan is None else scan.select


@lru_cache(maxsize=256)
def _mask_table(flags: tuple[bool, ...]) -> bytes:
    """``bytes.translate`` table: series index -> 1 if ``flags[index]`` else 0."""
    return bytes(1 if i < len(flags) and flags[i] else 0 for i in range(256))


def take(column: array, mask: bytes) -> array:
    """The entries of ``column`` whose ``mask`` byte is set (:meth:`PointBatch.mask_of`), as a
    new array of the same type (copied in C by ``_scan.select`` where built)."""
    select = _select()
    if select is None:
        return array(column.typecode, compress(column, mask))
    part = array(column.typecode)
    part.frombytes(select(mask, column, column.itemsize))
    return part


def _ts(time: datetime | None) -> float:
    """Aware datetime -> POSIX seconds; None -> NaN."""
    return _NAN if time is None else time.timestamp()


@dataclass(slots=True)
class PointBatch:
    """Progress points of one chunk in typed columns (see the module docstring).

    Attributes:
        keys: the distinct ``(kind, name)`` series, indexed by the ``series`` column.
        series: ``array('i')`` of indexes into ``keys``.
        values: ``array('d')`` of loss values.
        steps: ``array('q')`` of steps, :data:`NO_INT` when absent.
        epochs: ``array('d')`` of epochs, NaN when absent.
        totals: ``array('q')`` of run lengths, :data:`NO_INT` when absent.
        times: ``array('d')`` of POSIX seconds (UTC), NaN when absent.
    """

    keys: list[tuple[ProgressKind, str]] = field(default_factory=list)
    series: array = field(default_factory=lambda: array("i"))
    values: array = field(default_factory=lambda: array("d"))
    steps: array = field(default_factory=lambda: array("q"))
    epochs: array = field(default_factory=lambda: array("d"))
    totals: array = field(default_factory=lambda: array("q"))
    times: array = field(default_factory=lambda: array("d"))
    _index: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.values)

    def __bool__(self) -> bool:
        return len(self.values) > 0

    def key_index(self, kind: ProgressKind, name: str) -> int:
        """The ``series`` index of ``(kind, name)``, adding the key when new."""
        key = (kind, name)
        index = self._index.get(key)
        if index is None:
            index = len(self.keys)
            self.keys.append(key)
            self._index[key] = index
        return index

    def append(self, value: float, *, kind: ProgressKind = "train", name: str = "loss",
               step: int | None = None, epoch: float | None = None, total: int | None = None,
               time: float = _NAN) -> None:
        """Add one point. ``time`` is POSIX seconds (UTC) or NaN."""
        self.series.append(self.key_index(kind, name))
        self.values.append(value)
        self.steps.append(column_int(step))
        self.epochs.append(_NAN if epoch is None else epoch)
        self.totals.append(column_int(total))
        self.times.append(time)

    def append_point(self, point: ProgressPoint) -> None:
        """Add one :class:`ProgressPoint` (the compatibility path)."""
        self.append(point.value, kind=point.kind, name=point.name, step=point.step,
                    epoch=point.epoch, total=point.total, time=_ts(point.time))

    def extend(self, other: PointBatch) -> None:
        """Append every point of ``other`` (its keys are re-indexed into this batch's)."""
        if not other:
            return
        remap = array("i", (self.key_index(kind, name) for kind, name in other.keys))
        if list(remap) == list(range(len(other.keys))):
            self.series.extend(other.series)
        else:
            self.series.extend(array("i", (remap[i] for i in other.series)))
        self.values.extend(other.values)
        self.steps.extend(other.steps)
        self.epochs.extend(other.epochs)
        self.totals.extend(other.totals)
        self.times.extend(other.times)

    @classmethod
    def from_points(cls, points: Iterable[ProgressPoint]) -> PointBatch:
        """A batch holding ``points`` in order."""
        batch = cls()
        for point in points:
            batch.append_point(point)
        return batch

    def slice(self, start: int, stop: int | None = None) -> PointBatch:
        """Points ``start:stop`` as a new batch (the same keys; the columns copied)."""
        out = PointBatch(keys=list(self.keys), _index=dict(self._index))
        out.series = self.series[start:stop]
        out.values = self.values[start:stop]
        out.steps = self.steps[start:stop]
        out.epochs = self.epochs[start:stop]
        out.totals = self.totals[start:stop]
        out.times = self.times[start:stop]
        return out

    def series_of_kind(self, kind: str) -> set[int]:
        """The ``series`` indexes whose key has ``kind`` ("train" or "eval")."""
        return {i for i, (k, _) in enumerate(self.keys) if k == kind}

    def mask_of(self, wanted: Container[int]) -> bytes | None:
        """A byte per point, 1 where its ``series`` is in ``wanted`` else 0, for
        :func:`itertools.compress` over the columns (C speed: no Python code per point); None
        when every key is wanted (no cut needed). b"" when the batch is empty."""
        n = len(self.values)
        flags = [i in wanted for i in range(len(self.keys))]
        if all(flags):
            return None
        if not any(flags):
            return bytes(n)
        series = self.series
        if len(flags) <= 256 and series.itemsize == 4:
            # the low byte of each int32 entry is the whole index (< 256)
            raw = series.tobytes()
            low = raw[0::4] if sys.byteorder == "little" else raw[3::4]
            return low.translate(_mask_table(tuple(flags)))
        return bytes(1 if flags[k] else 0 for k in series)

    def cut(self, mask: bytes | None) -> PointBatch:
        """The points whose ``mask`` byte (:meth:`mask_of`) is set, as a new batch with the same
        keys (``self`` itself when ``mask`` is None)."""
        if mask is None:
            return self
        out = PointBatch(keys=list(self.keys), _index=dict(self._index))
        for name in ("series", "values", "steps", "epochs", "totals", "times"):
            setattr(out, name, take(getattr(self, name), mask))
        return out

    def latest_time(self) -> float:
        """The latest non-NaN ``times`` entry (POSIX seconds), NaN when there is none."""
        best = _NAN
        for t in self.times:
            if t == t and not best >= t:
                best = t
        return best

    def point(self, i: int) -> ProgressPoint:
        """Point ``i`` as a :class:`ProgressPoint` (aware UTC time, or None)."""
        kind, name = self.keys[self.series[i]]
        step, total, epoch, t = self.steps[i], self.totals[i], self.epochs[i], self.times[i]
        return ProgressPoint(
            time=None if math.isnan(t) else datetime.fromtimestamp(t, UTC),
            value=self.values[i], kind=kind, name=name,
            step=None if step == NO_INT else step,
            epoch=None if math.isnan(epoch) else epoch,
            total=None if total == NO_INT else total,
        )

    def row(self, i: int) -> tuple:
        """Point ``i`` as a plain tuple ``((kind, name), value, step, epoch, total, time)`` of
        its column entries (cheap; :meth:`point_of_row` makes the record later)."""
        return (self.keys[self.series[i]], self.values[i], self.steps[i], self.epochs[i], self.totals[i],
                self.times[i])

    @staticmethod
    def point_of_row(row: tuple) -> ProgressPoint:
        """The :class:`ProgressPoint` of a :meth:`row` (the same record :meth:`point` makes)."""
        (kind, name), value, step, epoch, total, t = row
        return ProgressPoint(
            time=None if math.isnan(t) else datetime.fromtimestamp(t, UTC),
            value=value, kind=kind, name=name,
            step=None if step == NO_INT else step,
            epoch=None if math.isnan(epoch) else epoch,
            total=None if total == NO_INT else total,
        )

    def points(self) -> Iterator[ProgressPoint]:
        """Every point as a :class:`ProgressPoint`, in order (slow: one object each)."""
        for i in range(len(self.values)):
            yield self.point(i)
