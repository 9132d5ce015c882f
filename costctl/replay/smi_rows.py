"""Fast reading of nvidia-smi query CSV rows: cells split once, then a per-header *plan*.

:func:`costctl.telemetry.smi_parse.reading_from_row` looks every field up by name, builds a
dict per row and runs a regex per cell; on a recorded log of millions of rows that was most of
``costctl analyze --gpu-log``'s time (~2 MB/s). Here a header's columns are compiled once into
a :class:`RowPlan` (where ``timestamp``, ``index``, ``utilization.gpu``... sit, with their
units), and each row's cells are read through it with short paths for the cells nvidia-smi
writes (``97 %``, ``7650 MiB``, ``33.09 W``, ``0``, millisecond timestamps). Anything else
(``[N/A]``, signs, exponents, unknown units, a header naming a field twice) goes to the
:mod:`~costctl.telemetry.smi_parse` functions, so results and errors are the same cell for
cell as :func:`~costctl.telemetry.smi_parse.reading_from_row`.

:func:`iter_cells` splits lines into cells: a line with no quote (nor NUL, nor past the csv
module's field limit) by ``str.split(",")``, which gives what :mod:`csv` gives on it with
``skipinitialspace`` once the cells are stripped; other lines go through one persistent
``csv.reader``, which may take the following lines for a quoted value spanning lines.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone

from ..errors import UsageError
from ..i18n import _
from ..records import GpuReading
from ..telemetry import smi_parse
from ..telemetry.smi_parse import Column, SmiParseError, SmiRow
from ..validation import describe_value
from .times import TIME_MAX, TIME_MIN, in_range

__all__ = ["RowPlan", "iter_cells", "time_of"]

#: lines at least this long go through :mod:`csv` (which refuses fields past its limit).
_SPLIT_MAX = 100_000

_NUM_UNIT = re.compile(r"([0-9]+(?:\.[0-9]+)?)(?: ?(%|[A-Za-z]+))?")
_FAST_TIME = re.compile(r"\s*(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s*")
#: cells remembered per plan (all columns together): a few hundred KiB at most.
_CACHE_MAX = 8192
#: rows remembered per plan (~0.7 KiB each with their reading): about 1 MiB at most.
_ROWS_MAX = 1024
_POWER_FIELDS = ("power.draw", "power.draw.instant", "power.draw.average")
_INF = float("inf")
_IDENTITY_FIELDS = ("index", "uuid", "pci.bus_id")


def time_of(cell: str | None, line_no: int) -> datetime:
    """The aware-UTC time of a ``timestamp`` cell (the recorder's local time, read as UTC).

    Raises:
        SmiParseError: missing, not an nvidia-smi timestamp, or outside the years a replay
            computes with (:data:`~costctl.replay.times.TIME_MIN` .. :data:`~costctl.replay.times.TIME_MAX`).
    """
    m = _FAST_TIME.fullmatch(cell) if cell is not None else None
    when = None
    if m is not None:  # nvidia-smi's own shape, without strptime (same value: %f pads on the right)
        y, mo, d, h, mi, sec, frac = m.groups()
        try:
            when = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec),
                            int(frac.ljust(6, "0")) if frac else 0, tzinfo=timezone.utc)
        except ValueError:
            pass  # out-of-range fields: parse_timestamp says why
    if when is None:
        try:
            naive = smi_parse.parse_timestamp(cell)
        except SmiParseError as exc:
            raise SmiParseError(_("line {line}: {problem}").format(line=line_no, problem=exc)) from None
        if naive is None:
            raise SmiParseError(_("line {line}: timestamp is {value}").format(line=line_no, value=describe_value(cell)))
        when = naive.replace(tzinfo=timezone.utc)
    if not in_range(when):
        raise SmiParseError(_("line {line}: timestamp {value} is outside the years {first}-{last}").format(
            line=line_no, value=describe_value(cell), first=TIME_MIN.year, last=TIME_MAX.year - 1))
    return when


class _Feed:
    """The csv reader's line source: the line handed to it, then (for a quoted value that
    spans lines) the next lines of the shared iterator, normalised as ``iter_rows`` does."""

    __slots__ = ("lines", "pending", "count")

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines
        self.pending: str | None = None
        self.count = 0

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        line = self.pending
        if line is None:
            line = next(self.lines)
        self.pending = None
        self.count += 1
        return line.rstrip("\r\n") + "\n"


def iter_cells(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | None]]:
    """``(line number where the record starts, stripped cells)`` per CSV record of ``lines``,
    blank records skipped; the same records and cells as
    :func:`costctl.telemetry.smi_parse.iter_rows` reads.

    A cell as long as its line is read whatever its length (the csv module's process-wide field
    limit, 131,072 characters by default, is raised to the longest line seen, never lowered). A
    record the csv module refuses (a quote left open across lines past that limit) gives
    ``None`` for cells: the caller counts it as skipped, and the records after it are read.
    Never raises.
    """
    it = iter(lines)
    feed = _Feed(it)
    reader = csv.reader(feed, skipinitialspace=True)
    n = 0
    for line in it:
        n += 1
        if '"' in line or "\x00" in line or len(line) >= _SPLIT_MAX:
            if len(line) >= csv.field_size_limit():
                csv.field_size_limit(len(line) + 1)
            feed.pending, feed.count = line, n - 1
            start = n
            try:
                raw = next(reader)
            except StopIteration:
                return
            except csv.Error:
                n = feed.count
                yield start, None
                continue
            n = feed.count
            cells = [c.strip() for c in raw]
        else:
            start = n
            cells = [c.strip() for c in line.rstrip("\r\n").split(",")]
        if any(cells):
            yield start, cells


def _missing(cell: str) -> bool:
    return smi_parse.is_missing(cell)


class RowPlan:
    """The readers of one header's columns (see the module doc).

    Raises:
        UsageError: (construction) the columns have no ``timestamp``.
    """

    def __init__(self, columns: Sequence[Column]) -> None:
        if not any(c.field == "timestamp" for c in columns):
            raise UsageError(
                _("nvidia-smi CSV without a timestamp column: the log cannot be placed in time "
                  "(record it with --query-gpu=timestamp,...)")
            )
        self.columns = tuple(columns)
        fields = [c.field for c in self.columns]
        #: a field named twice: the general path (first cell for some lookups, last for others)
        self.general = len(set(fields)) != len(fields)
        pos = {c.field: i for i, c in enumerate(self.columns)}
        unit = {c.field: c.unit for c in self.columns}
        self.n = len(self.columns)
        self.t_pos = pos["timestamp"]
        self.i_pos = pos.get("index")
        self.name_pos, self.uuid_pos = pos.get("name"), pos.get("uuid")
        self.u_pos = pos.get("utilization.gpu")
        self.u_unit = unit.get("utilization.gpu") or "%"
        self.mu_pos, self.mu_unit = pos.get("memory.used"), unit.get("memory.used") or "MiB"
        self.mt_pos, self.mt_unit = pos.get("memory.total"), unit.get("memory.total") or "MiB"
        self.power = [(pos[f], unit[f] or "W") for f in _POWER_FIELDS if f in pos]
        self.ids = [(f, pos[f]) for f in _IDENTITY_FIELDS if f in pos]
        self._last_cell: str | None = None
        self._last_time: datetime | None = None
        self._text: dict[str, str | None] = {}
        #: per column, cell -> value for the cells seen (bounded): utilization, memory and power
        #: cells repeat (an idle GPU writes the same row every second)
        self._cache: dict[tuple[int, str], float | int | None] = {}
        #: the rest of a row (its cells but the time) -> (identity, reading): readings are frozen
        self._rows: dict[tuple[str, ...], tuple[str | None, GpuReading]] = {}

    def read(self, line_no: int, cells: Sequence[str]) -> tuple[datetime, str | None, GpuReading, bool]:
        """``(time, GPU identity or None, reading, whether the row has an index column)``.

        Raises:
            SmiParseError: the row cannot be read (wrong cell count, bad value): skip it.
        """
        if self.general:
            row = SmiRow(line_no, self.columns, tuple(cells))
            when = time_of(row.get("timestamp"), line_no)
            reading = smi_parse.reading_from_row(row)
            identity = None
            for field in _IDENTITY_FIELDS:
                cell = row.get(field)
                if cell is not None and not _missing(cell):
                    identity = f"{field}={cell}"
                    break
            return when, identity, reading, row.get("index") is not None
        if len(cells) != self.n:
            raise SmiParseError(_("line {line}: {values} values for {columns} columns").format(
                line=line_no, values=len(cells), columns=self.n))
        cell = cells[self.t_pos]
        if cell == self._last_cell:
            when = self._last_time
        else:
            when = time_of(cell, line_no)
            self._last_cell, self._last_time = cell, when
        # The rest of the row (all but its time) decides the reading: an idle GPU's rows repeat.
        key = tuple(cells[:self.t_pos] + cells[self.t_pos + 1:]) if self.t_pos else tuple(cells[1:])
        rows = self._rows
        hit = rows.get(key)
        if hit is None:
            try:
                hit = (self._identity(cells), self._reading(cells))
            except SmiParseError as exc:
                raise SmiParseError(_("line {line}: {problem}").format(line=line_no, problem=exc)) from exc
            if len(rows) >= _ROWS_MAX:
                rows.clear()  # the rows that repeat now come back in at once
            rows[key] = hit
        return when, hit[0], hit[1], self.i_pos is not None  # type: ignore[return-value]

    def _identity(self, cells: Sequence[str]) -> str | None:
        for field, pos in self.ids:
            cell = cells[pos]
            if not _missing(cell):
                return f"{field}={cell}"
        return None

    def _reading(self, cells: Sequence[str]) -> GpuReading:
        gpu_index = 0
        if self.i_pos is not None:
            cell = cells[self.i_pos]
            if cell.isdigit() and cell.isascii() and len(cell) <= 18:  # always an int64
                gpu_index = int(cell)
            else:
                parsed = smi_parse.parse_int(cell)
                gpu_index = 0 if parsed is None else parsed
        utilization = error = None
        if self.u_pos is not None:
            cell = cells[self.u_pos]
            utilization = self._value(_percent, self.u_pos, cell, self.u_unit)
            if utilization is None:
                error = f"utilization.gpu reads {cell}"
        power = None
        for pos, unit in self.power:
            power = self._value(_watts, pos, cells[pos], unit)
            if power is not None:
                break
        mu_pos, mt_pos = self.mu_pos, self.mt_pos
        return GpuReading(
            index=gpu_index,
            name=None if self.name_pos is None else self._text_of(cells[self.name_pos]),
            uuid=None if self.uuid_pos is None else self._text_of(cells[self.uuid_pos]),
            utilization=utilization,
            memory_used_bytes=None if mu_pos is None else self._value(_memory, mu_pos, cells[mu_pos], self.mu_unit),
            memory_total_bytes=None if mt_pos is None else self._value(_memory, mt_pos, cells[mt_pos], self.mt_unit),
            power_w=power,
            error=error,
        )

    def _value(self, parse, pos: int, cell: str, unit: str):  # noqa: ANN001, ANN202 - the cell readers below
        """``parse(cell, unit)`` through the bounded per-column cache (errors are not cached)."""
        key = (pos, cell)
        cache = self._cache
        try:
            return cache[key]
        except KeyError:
            pass
        value = parse(cell, unit)
        if len(cache) < _CACHE_MAX:
            cache[key] = value
        return value

    def _text_of(self, cell: str) -> str | None:
        text = self._text
        if cell in text:
            return text[cell]
        value = smi_parse.parse_text(cell)
        if len(text) < 4096:  # a few GPU names and UUIDs per log: a small, bounded cache
            text[cell] = value
        return value


# The short paths below return only values in the ranges of smi_parse (utilization 0-100 %,
# memory 0 to 2**63 - 1 bytes, finite watts, never negative: the regex has no sign); any other
# cell goes to smi_parse, which reads it or raises its SmiParseError.
def _percent(cell: str, unit: str) -> float | None:
    m = _NUM_UNIT.fullmatch(cell)
    if m is not None and (m.group(2) or unit) == "%":
        value = float(m.group(1))
        if value <= 100.0:
            return value
    return smi_parse.parse_percent(cell, unit)


def _memory(cell: str, unit: str) -> int | None:
    m = _NUM_UNIT.fullmatch(cell)
    if m is not None:
        factor = smi_parse.MEMORY_UNITS.get(m.group(2) or unit)
        if factor is not None:
            size = float(m.group(1)) * factor
            if size < 2.0**63:
                return int(round(size))
    return smi_parse.parse_memory_bytes(cell, unit)


def _watts(cell: str, unit: str) -> float | None:
    m = _NUM_UNIT.fullmatch(cell)
    if m is not None and (m.group(2) or unit) == "W":
        value = float(m.group(1))
        if value != _INF:
            return value
    return smi_parse.parse_watts(cell, unit)
