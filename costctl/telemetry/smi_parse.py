"""Parsing primitives for ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

Used by :mod:`costctl.telemetry.nvidia_smi` on live output and meant for readers of recorded
nvidia-smi CSV logs. Shapes handled (see the real files ``gpu_query_*.csv`` in the corpus):

* header with units: ``timestamp, index, name, utilization.gpu [%], memory.used [MiB]``;
  values then carry units too: ``95 %``, ``7650 MiB``, ``33.09 W``;
* ``nounits`` / ``noheader``: bare numbers (``95``, ``7650``); the unit is then nvidia-smi's
  fixed one for the field (``%`` for ``utilization.*``, ``MiB`` for ``memory.*``, ``W`` for
  ``power.*``);
* missing values ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ``[Insufficient
  Permissions]``, ``[GPU is lost]`` (any bracketed text), bare ``N/A`` → None;
* the header repeated before every row (a query run in a shell loop), several GPUs interleaved
  (split them by ``index``, never average them), UTF-16 with BOM and CRLF (Windows redirect).

Units: memory is returned in **bytes** (``MiB`` = 1,048,576 bytes, as nvidia-smi means it),
power in **watts**, utilization in **percent** (0-100). Timestamps (``2026/02/02 01:07:37.100``)
are the recording machine's local time with no zone; they are returned naive.

Ranges (a cell outside its range is not a reading: :class:`SmiParseError`, so a recorded log
skips the row and counts it, and the live source reads ERROR, i.e. busy — a value costctl
cannot read never counts as idle): utilization 0-100 %; memory 0 to 2**63 - 1 bytes (what the
ledger's INTEGER columns hold); power a finite number of watts, 0 or more; an index 0 to
2**63 - 1. ``inf``, ``nan``, ``1e400`` and integers of thousands of digits are out of range.
A cell quoted in a message is cut to 60 characters (:func:`costctl.validation.describe_value`).

Typical log reading::

    text = decode_text(path.read_bytes())
    for row in iter_rows(text.splitlines()):
        try:
            reading = reading_from_row(row)
            when = parse_timestamp(row.get("timestamp"))
        except SmiParseError:
            continue          # garbage or truncated line: skip it, count it
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from costctl.numbers import INT64_MAX, parse_count
from costctl.progress.encoding import decode_bytes
from costctl.records import GpuReading
from costctl.validation import describe_value

#: bytes per unit of memory as nvidia-smi prints it (binary units).
MEMORY_UNITS: dict[str, int] = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}

#: the fields the live source queries, in order (``--query-gpu=`` value).
LIVE_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
)

#: nvidia-smi's timestamp format (``nvidia-smi --query-gpu=timestamp``).
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"

_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_HEADER_CELL_RE = re.compile(r"^(?P<field>[A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[(?P<unit>[^\]]*)\])?$")
_QUANTITY_RE = re.compile(
    r"^(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?P<unit>%|[A-Za-z]+)?$"
)
_MISSING_BARE = {"", "n/a", "na", "none", "unknown"}

#: power fields in order of preference (newer drivers split ``power.draw`` in two).
_POWER_FIELDS = ("power.draw", "power.draw.instant", "power.draw.average")


class SmiParseError(ValueError):
    """A cell or row that is not valid nvidia-smi CSV; the message names the cell and line."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a query: the field name as passed to ``--query-gpu`` and its unit.

    Attributes:
        field: e.g. ``"utilization.gpu"`` (lower-cased).
        unit: from the header's ``[...]`` (``"%"``, ``"MiB"``, ``"W"``), or None when the header
            gave none (``nounits``, custom loggers).
    """

    field: str
    unit: str | None = None


@dataclass(frozen=True, slots=True)
class SmiRow:
    """One data row with the columns in force when it was read.

    Attributes:
        line_no: 1-based physical line number where the record starts (for error messages).
        columns: the header that applies (the latest one seen, or the one given).
        cells: the raw cells, stripped.
    """

    line_no: int
    columns: tuple[Column, ...]
    cells: tuple[str, ...]

    def get(self, field: str) -> str | None:
        """The raw cell of ``field`` (e.g. ``"memory.used"``), or None if there is no such column."""
        for column, cell in zip(self.columns, self.cells):
            if column.field == field:
                return cell
        return None

    def unit(self, field: str) -> str | None:
        """The header unit of ``field``, or None."""
        for column in self.columns:
            if column.field == field:
                return column.unit
        return None

    def as_dict(self) -> dict[str, str]:
        """``{field: raw cell}``; raises :class:`SmiParseError` if cell and column counts differ."""
        if len(self.cells) != len(self.columns):
            raise SmiParseError(
                f"line {self.line_no}: {len(self.cells)} values for {len(self.columns)} columns"
            )
        return {c.field: cell for c, cell in zip(self.columns, self.cells)}


# -- rows and headers ------------------------------------------------------------------------
def split_row(line: str) -> list[str]:
    """Split one CSV line into stripped cells (``"0, NVIDIA A100, 95 %"`` → 3 cells)."""
    try:
        return [cell.strip() for cell in next(csv.reader([line], skipinitialspace=True), [])]
    except csv.Error as exc:
        raise SmiParseError(f"not CSV: {exc}") from exc


def parse_column(cell: str) -> Column:
    """``"utilization.gpu [%]"`` → ``Column("utilization.gpu", "%")``; ``"index"`` → no unit.

    Raises:
        SmiParseError: the cell is not a field name with an optional ``[unit]``.
    """
    match = _HEADER_CELL_RE.match(cell.strip())
    if not match:
        raise SmiParseError(f"not a column name: {describe_value(cell)}")
    unit = match.group("unit")
    return Column(match.group("field").lower(), unit.strip() if unit and unit.strip() else None)


def is_header(cells: Sequence[str]) -> bool:
    """True when every cell is a field name (optionally with ``[unit]``), i.e. a header line.

    Data rows always hold a number, a bracketed ``[N/A]`` or a product name with spaces, so they
    never match. Custom logger headers (``elapsed_sec,gpu_util_pct``) match too.
    """
    return bool(cells) and all(_HEADER_CELL_RE.match(c.strip()) for c in cells)


def parse_header(cells: Sequence[str] | str) -> tuple[Column, ...]:
    """Parse a header line (or its cells) into columns.

    Raises:
        SmiParseError: a cell is not a column name.
    """
    if isinstance(cells, str):
        cells = split_row(cells)
    return tuple(parse_column(c) for c in cells)


def columns_for(fields: Iterable[str]) -> tuple[Column, ...]:
    """Columns for a ``noheader,nounits`` query of ``fields``, with nvidia-smi's fixed units.

    ``columns_for(["utilization.gpu", "memory.used"])`` → ``(Column("utilization.gpu", "%"),
    Column("memory.used", "MiB"))``.
    """
    return tuple(Column(f.lower(), default_unit(f)) for f in fields)


def default_unit(field: str) -> str | None:
    """nvidia-smi's unit for a query field: ``%`` for ``utilization.*``, ``MiB`` for
    ``memory.*``, ``W`` for ``power.*`` / ``enforced.power.limit``, None otherwise."""
    field = field.lower()
    if field.startswith("utilization."):
        return "%"
    if field.startswith("memory."):
        return "MiB"
    if field.startswith("power.") or field.endswith("power.limit"):
        return "W"
    return None


def iter_rows(
    lines: Iterable[str], columns: Sequence[Column] | None = None
) -> Iterator[SmiRow]:
    """Yield data rows, following header lines (a repeated header just renews the columns).

    Args:
        lines: text lines (CRLF or LF, with or without the line end); a quoted value may span
            lines (the csv module joins them).
        columns: columns for files without a header (``noheader``); a header line in the
            input replaces them.

    Blank lines are skipped. A data row before any header (and with no ``columns``) is yielded
    with empty columns; a row whose cell count does not match makes :meth:`SmiRow.as_dict` and
    :func:`reading_from_row` raise, so the caller decides to skip it. Never raises for bad rows;
    raises :class:`SmiParseError` only when the text is not CSV at all (e.g. UTF-16 read as UTF-8,
    which puts NUL bytes between characters: use :func:`decode_text`).
    """
    current: tuple[Column, ...] = tuple(columns or ())
    numbered = _numbered(lines)
    counter = numbered.counter
    reader = csv.reader(numbered, skipinitialspace=True)
    while True:
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise SmiParseError(f"line {counter.value}: not CSV: {exc}") from exc
        cells = tuple(c.strip() for c in raw)
        if not cells or all(not c for c in cells):
            continue
        if is_header(cells):
            current = parse_header(cells)
            continue
        yield SmiRow(counter.start, current, cells)


class _Counter:
    __slots__ = ("value", "start")

    def __init__(self) -> None:
        self.value = 0
        self.start = 0


class _numbered:
    """Line iterator that tracks where the current CSV record started (for messages)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._it = iter(lines)
        self.counter = _Counter()
        self._in_record = False

    def __iter__(self) -> _numbered:
        return self

    def __next__(self) -> str:
        line = next(self._it)
        self.counter.value += 1
        # A record starts on a line when the previous one closed every quote.
        if not self._in_record:
            self.counter.start = self.counter.value
        if line.count('"') % 2 == 1:
            self._in_record = not self._in_record
        # One "\n" per line, so a quoted value spanning lines keeps its line break.
        return line.rstrip("\r\n") + "\n"


def decode_text(data: bytes) -> str:
    """Decode a recorded log: UTF-16 (LE/BE, by BOM or NUL bytes) or UTF-8 (with or without BOM),
    as :func:`costctl.progress.encoding.detect_encoding` decides (a BOM is trusted only when the
    bytes really are UTF-16 text). Undecodable bytes become U+FFFD rather than raising (one bad
    line must not lose the file).
    """
    return decode_bytes(data)


# -- values ----------------------------------------------------------------------------------
def is_missing(cell: str | None) -> bool:
    """True for cells nvidia-smi uses for "no value": any ``[...]`` (``[N/A]``,
    ``[Not Supported]``, ``[Unknown Error]``...), ``N/A``, empty."""
    if cell is None:
        return True
    text = cell.strip()
    return (text.startswith("[") and text.endswith("]")) or text.lower() in _MISSING_BARE


def parse_quantity(cell: str | None, unit: str | None = None) -> tuple[float, str | None] | None:
    """``"7650 MiB"`` → ``(7650.0, "MiB")``; ``"95"`` with ``unit="%"`` → ``(95.0, "%")``.

    The unit written in the cell wins over ``unit`` (the header's or the field's default).

    Returns:
        None for a missing value (see :func:`is_missing`).

    Raises:
        SmiParseError: not a number with an optional unit.
    """
    if is_missing(cell):
        return None
    assert cell is not None
    match = _QUANTITY_RE.match(cell.strip())
    if not match:
        raise SmiParseError(f"not a number: {describe_value(cell)}")
    value = float(match.group("num"))
    if not math.isfinite(value):  # 1e400, or hundreds of digits: past the float range
        raise SmiParseError(f"not a finite number: {describe_value(cell)}")
    return value, match.group("unit") or unit


def parse_percent(cell: str | None, unit: str | None = "%") -> float | None:
    """``"95 %"`` or ``"95"`` → 95.0 (percent); None when missing.

    Raises:
        SmiParseError: not a number, or a unit other than ``%``.
    """
    quantity = parse_quantity(cell, unit)
    if quantity is None:
        return None
    value, got = quantity
    if got not in (None, "%"):
        raise SmiParseError(f"expected a percentage, got {describe_value(cell)}")
    if not 0.0 <= value <= 100.0:
        raise SmiParseError(f"expected a percentage from 0 to 100, got {describe_value(cell)}")
    return value


def parse_memory_bytes(cell: str | None, unit: str | None = "MiB") -> int | None:
    """``"7650 MiB"`` → 8,021,606,400 (bytes); a bare number is in ``unit`` (MiB by default,
    as nvidia-smi prints memory). None when missing.

    Raises:
        SmiParseError: not a number, or an unknown memory unit.
    """
    quantity = parse_quantity(cell, unit)
    if quantity is None:
        return None
    value, got = quantity
    factor = MEMORY_UNITS.get(got or "MiB")
    if factor is None:
        raise SmiParseError(f"unknown memory unit in {describe_value(cell)} (allowed: {', '.join(MEMORY_UNITS)})")
    size = value * factor
    if not 0.0 <= size < 2.0**63:
        raise SmiParseError(f"expected a memory size from 0 to {INT64_MAX} bytes, got {describe_value(cell)}")
    return int(round(size))


def parse_watts(cell: str | None, unit: str | None = "W") -> float | None:
    """``"33.09 W"`` or ``"33.09"`` → 33.09 (watts); ``mW`` is converted. None when missing.

    Raises:
        SmiParseError: not a number, or a unit other than W / mW.
    """
    quantity = parse_quantity(cell, unit)
    if quantity is None:
        return None
    value, got = quantity
    if got not in (None, "W", "mW"):
        raise SmiParseError(f"expected watts, got {describe_value(cell)}")
    if value < 0:
        raise SmiParseError(f"expected a power of 0 watts or more, got {describe_value(cell)}")
    return value / 1000.0 if got == "mW" else value


def parse_int(cell: str | None) -> int | None:
    """``"0"`` → 0 (e.g. ``index``); None when missing.

    Raises:
        SmiParseError: not an integer from 0 to 2**63 - 1 (a 5,000-digit index is out of range,
            never an ``int()`` error).
    """
    if is_missing(cell):
        return None
    assert cell is not None
    value = parse_count(cell)
    if value is None:
        raise SmiParseError(f"not an integer from 0 to {INT64_MAX}: {describe_value(cell)}")
    return value


def parse_text(cell: str | None) -> str | None:
    """A text cell (``name``, ``uuid``, ``pci.bus_id``) stripped; None when missing."""
    return None if is_missing(cell) else cell.strip()  # type: ignore[union-attr]


def parse_timestamp(cell: str | None) -> datetime | None:
    """``"2026/02/02 01:07:37.100"`` → naive ``datetime`` (the recorder's local time, no zone).

    Returns None when missing. Raises :class:`SmiParseError` on another format.
    """
    if is_missing(cell):
        return None
    assert cell is not None
    text = cell.strip()
    for fmt in (TIMESTAMP_FORMAT, "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise SmiParseError(f"not an nvidia-smi timestamp (YYYY/MM/DD HH:MM:SS.fff): {describe_value(cell)}")


# -- rows to readings ------------------------------------------------------------------------
def reading_from_row(row: SmiRow, *, index: int | None = None) -> GpuReading:
    """Turn one row into a :class:`GpuReading` (fields the query did not ask for are None).

    Reads ``index``, ``name``, ``uuid``, ``utilization.gpu`` (%), ``memory.used`` /
    ``memory.total`` (→ bytes), ``power.draw`` (or ``.instant`` / ``.average``, → W).
    ``index`` (argument) is used when the row has no index column (single-GPU logs); default 0.
    A missing utilization (``[N/A]``...) sets ``error`` so the reading counts as busy.

    Raises:
        SmiParseError: cell count differs from the columns, or a value does not parse.
    """
    values = row.as_dict()
    if not values:
        raise SmiParseError(f"line {row.line_no}: data row without a header")
    try:
        gpu_index = parse_int(values.get("index")) if "index" in values else None
        if gpu_index is None:
            gpu_index = index if index is not None else 0
        utilization: float | None = None
        error: str | None = None
        if "utilization.gpu" in values:
            cell = values["utilization.gpu"]
            utilization = parse_percent(cell, row.unit("utilization.gpu") or "%")
            if utilization is None:
                error = f"utilization.gpu reads {cell}"
        power: float | None = None
        for field in _POWER_FIELDS:
            if field in values:
                power = parse_watts(values[field], row.unit(field) or "W")
                if power is not None:
                    break
        return GpuReading(
            index=gpu_index,
            name=parse_text(values.get("name")),
            uuid=parse_text(values.get("uuid")),
            utilization=utilization,
            memory_used_bytes=_memory(values, row, "memory.used"),
            memory_total_bytes=_memory(values, row, "memory.total"),
            power_w=power,
            error=error,
        )
    except SmiParseError as exc:
        raise SmiParseError(f"line {row.line_no}: {exc}") from exc


def _memory(values: dict[str, str], row: SmiRow, field: str) -> int | None:
    if field not in values:
        return None
    return parse_memory_bytes(values[field], row.unit(field) or "MiB")
