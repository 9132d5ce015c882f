"""Readers for GPU logs written as CSV: ``nvidia-smi --query-gpu=... --format=csv`` logs and
custom loggers with their own column names (``elapsed_sec,gpu_util_pct,mem_used_mb,...``).

The nvidia-smi cells (units, ``[N/A]``, ``[Not Supported]``, repeated headers) are parsed by
:mod:`costctl.telemetry.smi_parse`, the same code the live nvidia-smi source uses.

Several GPUs interleaved (``0, 1, 0, 1`` rows at the same timestamp +/- 1 ms) are grouped into
one sample per snapshot: a new sample starts when a GPU already in the current group appears
again. The GPU is identified by ``index``, else ``uuid``, else ``pci.bus_id``; a log with none
of them is single-GPU, unless several rows share a timestamp (within :data:`SAME_SNAPSHOT_S`),
which are then numbered 0, 1, ... in file order. One sample holds at most
:data:`MAX_GPUS_PER_SAMPLE` GPUs: past it a new sample starts. Times are the recorder's local time without
a zone and are taken as UTC.

Headerless logs (``--format=csv,noheader``) keep their units in the cells, which identifies
``%`` (first = ``utilization.gpu``), ``MiB`` (a single one = ``memory.used``) and ``W``
(``power.draw``). A headerless log without units (``noheader,nounits``) cannot be read without
being told its columns (``columns=``, the CLI's ``--gpu-log-columns``).
"""

from __future__ import annotations

import math
import re
from typing import Any
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..i18n import N_, _
from ..records import GpuReading, TelemetrySample
from ..validation import describe_value
from ..telemetry import smi_parse
from ..telemetry.smi_parse import Column, SmiParseError, SmiRow
from ..numbers import INT64_MAX, as_count, finite
from .gpu_log import MIB, RELATIVE_EPOCH, GpuLog, make_sample, recorded_fields
from .times import TIME_MAX, TIME_MIN, in_range, offset
from .smi_rows import RowPlan, iter_cells, time_of
from .textio import iter_lines

#: why a record the csv module refuses is skipped (in the "no GPU sample" line).
NOT_CSV = N_("not CSV (a quote left open past the csv module's field limit)")

#: rows without a GPU identity whose timestamps are this close belong to one snapshot (seconds).
SAME_SNAPSHOT_S = 0.05

#: Most GPUs one sample (one machine's snapshot) holds. The largest single hosts carry 8-16 GPUs
#: (HGX/DGX boards, 16-GPU servers); 64 leaves room for any of them. A snapshot that would grow
#: past it (300,000 rows at one timestamp without a GPU column) is successive samples instead,
#: so a sample, the per-GPU report lines and the analysis stay bounded.
MAX_GPUS_PER_SAMPLE = 64

_SMI_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")

#: nvidia-smi query fields that mark a CSV header as nvidia-smi's.
SMI_FIELDS = frozenset(
    {
        "timestamp", "index", "name", "uuid", "pci.bus_id", "utilization.gpu", "utilization.memory",
        "memory.used", "memory.total", "memory.free", "memory.reserved", "power.draw",
        "power.draw.instant", "power.draw.average", "power.limit", "temperature.gpu", "fan.speed",
        "pstate", "clocks.sm", "clocks.mem", "clocks.gr", "driver_version", "compute_mode",
    }
)


def looks_like_smi_csv(first_line: str) -> bool:
    """True if ``first_line`` is an nvidia-smi query header or an nvidia-smi data row."""
    cells = [c.strip() for c in first_line.split(",")]
    if not cells:
        return False
    if smi_parse.is_header(cells):
        return any(smi_parse.parse_column(c).field in SMI_FIELDS for c in cells)
    return bool(_SMI_TIMESTAMP.match(cells[0]))


# -- headerless logs ---------------------------------------------------------------------------
def infer_columns(cells: Sequence[str]) -> tuple[Column, ...]:
    """Columns of a headerless nvidia-smi row, from the units in its cells.

    Raises:
        UsageError: a cell cannot be identified (``nounits``): name the columns instead.
    """
    out: list[Column] = []
    percents = mib = 0
    for i, cell in enumerate(cells):
        text = cell.strip()
        if _SMI_TIMESTAMP.match(text):
            out.append(Column("timestamp"))
        elif _BUS_ID.match(text):
            out.append(Column("pci.bus_id"))
        elif text.startswith("GPU-"):
            out.append(Column("uuid"))
        elif text.endswith("%"):
            out.append(Column("utilization.gpu" if percents == 0 else f"utilization.other{percents}", "%"))
            percents += 1
        elif text.endswith("MiB"):
            out.append(Column(f"memory.col{mib}", "MiB"))
            mib += 1
        elif text.endswith(" W"):
            out.append(Column("power.draw", "W"))
        elif text.isdigit() and i <= 2 and not any(c.field == "index" for c in out):
            out.append(Column("index"))
        elif smi_parse.is_missing(text):
            out.append(Column(f"unknown{i}"))
        elif any(ch.isalpha() for ch in text) and not any(c.field == "name" for c in out):
            out.append(Column("name"))
        else:
            raise UsageError(
                _("headerless nvidia-smi CSV: cannot tell what column {column} ({text}) is; "
                  "pass --gpu-log-columns with the --query-gpu fields in order "
                  "(e.g. timestamp,utilization.gpu,memory.used)").format(column=i + 1, text=describe_value(text))
            )
    if mib == 1:
        out = [Column("memory.used", "MiB") if c.field == "memory.col0" else c for c in out]
    if percents == 0:
        raise UsageError(
            _("headerless nvidia-smi CSV without a utilization.gpu [{percent}] column; pass --gpu-log-columns "
              "with the --query-gpu fields in order").format(percent="%")
        )
    return tuple(out)


# -- grouping rows into snapshots --------------------------------------------------------------
class _Grouper:
    """Collects rows into one sample per snapshot (see the module docstring)."""

    def __init__(self, source: str) -> None:
        self.samples: list[TelemetrySample] = []
        self.source = source
        self._time: datetime | None = None
        self._readings: list[GpuReading] = []
        self._seen: set[str] = set()
        self._index_by_id: dict[str, int] = {}

    def add(self, when: datetime, identity: str | None, reading: GpuReading, *, has_index: bool) -> None:
        """Add one GPU's row read at ``when``; ``identity`` names the GPU (None: not in the log)."""
        if len(self._readings) >= MAX_GPUS_PER_SAMPLE:
            self.flush()  # no machine has more GPUs: the rows are successive samples
        if identity is None:
            close = self._time is not None and abs((when - self._time).total_seconds()) <= SAME_SNAPSHOT_S
            if not close:
                self.flush()
            key = f"#{len(self._readings)}"
            reading = replace(reading, index=len(self._readings))
        else:
            key = identity
            if key in self._seen:
                self.flush()
            if not has_index:
                reading = replace(reading, index=self._index_by_id.setdefault(key, len(self._index_by_id)))
        if not self._readings:
            self._time = when
        self._seen.add(key)
        self._readings.append(reading)

    def drain(self) -> list[TelemetrySample]:
        """The samples closed so far, handed over (the grouper keeps none)."""
        out, self.samples = self.samples, []
        return out

    def flush(self) -> None:
        """Close the current snapshot (if any) into a sample."""
        if self._readings and self._time is not None:
            self.samples.append(make_sample(self._time, self._readings, self.source))
        self._readings, self._seen, self._time = [], set(), None


def parse_smi_lines(
    lines: Iterable[str], *, columns: Sequence[str] | None = None
) -> tuple[list[TelemetrySample], int]:
    """Samples from the lines of an nvidia-smi query CSV log, and the count of skipped rows.

    Args:
        lines: the decoded lines (line ends may be kept).
        columns: the ``--query-gpu`` field names in order, for a log without a header.

    Raises:
        UsageError: the log has no timestamp column, or its headerless columns cannot be told.
    """
    counts = {"skipped": 0}
    samples = list(iter_smi_lines(lines, columns=columns, counts=counts))
    return samples, counts["skipped"]


def iter_smi_lines(
    lines: Iterable[str], *, columns: Sequence[str] | None = None, counts: dict[str, Any] | None = None
) -> Iterator[TelemetrySample]:
    """:func:`parse_smi_lines`' samples one at a time (nothing kept); ``counts["skipped"]`` is
    set to the skipped rows as the lines are read.

    Raises:
        UsageError: as :func:`parse_smi_lines`.
    """
    given = smi_parse.columns_for(columns) if columns else None
    grouper = _Grouper("nvidia-smi-csv")
    counts = counts if counts is not None else {}
    counts["skipped"] = skipped = 0
    current: tuple[Column, ...] = tuple(given or ())
    inferred: tuple[Column, ...] | None = None
    plans: dict[tuple[Column, ...], RowPlan] = {}
    plan: RowPlan | None = None
    is_header, add = smi_parse.is_header, grouper.add
    for line_no, cells in iter_cells(lines):
        if cells is None:  # a record the csv module refuses
            skipped += 1
            counts["skipped"] = skipped
            if "first_skip" not in counts:
                counts["first_skip"] = _("line {line}: {problem}").format(line=line_no, problem=_(NOT_CSV))
            continue
        if not cells[0][:1].isdigit() and is_header(cells):  # a data row starts with its timestamp
            current, plan = smi_parse.parse_header(cells), None
            continue
        if plan is None:
            cols = current
            try:
                if not cols:
                    if inferred is None:
                        inferred = infer_columns(cells)
                    cols = inferred
                plan = plans.get(cols)
                if plan is None:
                    plan = plans[cols] = RowPlan(cols)  # UsageError: no timestamp column
            except UsageError as exc:
                raise UsageError(_("line {line}: {problem}").format(line=line_no, problem=exc.message)) from None
        try:
            when, identity, reading, has_index = plan.read(line_no, cells)
        except SmiParseError as exc:
            skipped += 1
            counts["skipped"] = skipped
            counts.setdefault("first_skip", str(exc))
            continue
        add(when, identity, reading, has_index=has_index)
        if grouper.samples:
            yield from grouper.drain()
    grouper.flush()
    yield from grouper.drain()


def read_smi_csv(path: Path, *, columns: Sequence[str] | None = None) -> GpuLog:
    """Read an ``nvidia-smi --query-gpu=... --format=csv`` log (any encoding, see :mod:`.textio`).

    Raises:
        UsageError: unreadable file, no timestamp column, or unidentifiable headerless columns.
    """
    samples, skipped = parse_smi_lines(iter_lines(path), columns=columns)
    return GpuLog("nvidia-smi-csv", samples, path=path, fields=recorded_fields(samples), skipped=skipped)


# -- custom CSV loggers --------------------------------------------------------------------------
_TIME_ABS = ("timestamp", "time", "datetime", "date")
_TIME_REL = re.compile(r"^(elapsed\w*|seconds|secs|t|t_s|runtime|_runtime|time_s|time_sec\w*|relative_time\w*)$")
_UTIL = re.compile(r"^(gpu_?util\w*|util\w*gpu\w*|gpu_utilization\w*|utilization\w*|gpu_?load\w*|gpu_?%|gpu_pct|gpu_percent)$")
_MEM_USED = re.compile(r"^(mem\w*used\w*|gpu_?mem\w*used\w*|used_?mem\w*|memory_?used\w*)$")
_MEM_TOTAL = re.compile(r"^(mem\w*total\w*|gpu_?mem\w*total\w*|total_?mem\w*|memory_?total\w*)$")
_POWER = re.compile(r"^(power\w*|pwr\w*)$")
_INDEX = re.compile(r"^(index|gpu|gpu_?id|gpu_?index|device)$")


def looks_like_custom_gpu_csv(header: Sequence[str]) -> bool:
    """True for a CSV header with a GPU-utilization column and no loss column."""
    names = [h.strip().lower() for h in header]
    return any(_UTIL.match(n) for n in names) and not any("loss" in n for n in names)


def _memory_factor(name: str) -> int:
    if name.endswith(("_gb", "_gib")):
        return 2**30
    if name.endswith(("_bytes", "_b")):
        return 1
    if name.endswith(("_kb", "_kib")):
        return 2**10
    return MIB  # "_mb"/"_mib"/none: scripts print nvidia-smi's / NVML's MiB


def _cell_float(cell: str | None, *, low: float = -math.inf, high: float = math.inf) -> float | None:
    """A custom logger's cell as a finite float within ``low .. high`` (units ``%``, ``W``,
    ``MiB`` after the number ignored), else None: ``inf``, ``nan``, ``1e400`` or a number out of
    range is no reading."""
    if cell is None:
        return None
    text = "".join(cell.split())  # a quoted value broken over two lines ("26.11\n0")
    if smi_parse.is_missing(text):
        return None
    return finite(text.rstrip("%WMiB"), low=low, high=high)


def read_custom_gpu_csv(path: Path, *, start: datetime | None = None) -> GpuLog:
    """Read a GPU log written by a custom script, by its column names.

    Recognized columns: time (``timestamp``/``time``: absolute; ``elapsed_sec``, ``seconds``,
    ``runtime``: offsets from ``start``), utilization (``gpu_util_pct``, ``utilization``...),
    memory used/total (``mem_used_mb``...; ``_mb`` means MiB as NVML and nvidia-smi report it,
    ``_gb`` GiB, ``_bytes`` bytes), power (``power_w``) and GPU index (``gpu``, ``gpu_id``,
    ``index``). Quoted values broken over two lines are joined.

    Raises:
        UsageError: unreadable file or no time column.
    """
    counts: dict[str, int] = {}
    samples = list(iter_custom_gpu_csv(iter_lines(path), start=start, counts=counts, path=path))
    return GpuLog("gpu-csv", samples, path=path, relative=bool(counts.get("relative")),
                  fields=recorded_fields(samples), skipped=counts.get("skipped", 0))


def iter_custom_gpu_csv(lines: Iterable[str], *, start: datetime | None = None,
                        counts: dict[str, Any] | None = None, path: Path | None = None) -> Iterator[TelemetrySample]:
    """:func:`read_custom_gpu_csv`'s samples one at a time from the file's lines; ``counts``
    gets ``skipped`` (unreadable rows) and ``relative`` (1 when times are offsets).

    Values keep to smi_parse's ranges: utilization 0-100 %, memory 0 to 2**63 - 1 bytes, watts
    finite and 0 or more, a GPU index 0 to 2**63 - 1 (a number out of that range skips the row:
    its reading cannot be told apart from the other GPUs'; no number reads as GPU 0, as a
    missing cell does); a time outside
    :data:`~costctl.replay.times.TIME_MIN` .. :data:`~costctl.replay.times.TIME_MAX` skips the row.

    Raises:
        UsageError: no time column.
    """
    counts = counts if counts is not None else {}
    counts["skipped"] = 0
    columns: tuple[Column, ...] = ()
    names: list[str] | None = None
    t_abs = t_rel = util = used = total = power = index = None
    grouper = _Grouper("gpu-csv")
    skipped = 0
    for line_no, cells in iter_cells(lines):
        if cells is None:  # a record the csv module refuses
            skipped += 1
            counts["skipped"] = skipped
            if "first_skip" not in counts:
                counts["first_skip"] = _("line {line}: {problem}").format(line=line_no, problem=_(NOT_CSV))
            continue
        if smi_parse.is_header(cells):
            columns = smi_parse.parse_header(cells)
            continue
        row = SmiRow(line_no, columns, tuple(cells))
        if names is None:  # the first data row: the columns are chosen once, by name
            names = [c.field for c in columns]

            def pick(pattern: re.Pattern[str] | tuple[str, ...]) -> str | None:
                for n in names:  # type: ignore[union-attr]
                    if (n in pattern) if isinstance(pattern, tuple) else pattern.match(n):
                        return n
                return None

            t_abs, t_rel = pick(_TIME_ABS), pick(_TIME_REL)
            if t_abs is None and t_rel is None:
                raise UsageError(_("{path}: GPU CSV without a time column (expected timestamp or elapsed_sec)").format(
                    path=path or "GPU CSV"))
            util, used, total = pick(_UTIL), pick(_MEM_USED), pick(_MEM_TOTAL)
            power, index = pick(_POWER), pick(_INDEX)
            counts["relative"] = int(t_abs is None)
        when: datetime | None
        if t_abs is not None:
            when = _parse_abs_time(row.get(t_abs))
        else:
            secs = _cell_float(row.get(t_rel))
            when = None if secs is None else offset(start or RELATIVE_EPOCH, secs)
        idx_cell = _cell_float(row.get(index)) if index else None
        gpu_index = as_count(idx_cell) if idx_cell is not None else 0
        if when is None or gpu_index is None:
            skipped += 1
            counts["skipped"] = skipped
            if "first_skip" not in counts:
                counts["first_skip"] = _skip_reason(line_no, t_abs, t_rel, index, when)
            continue
        u = _cell_float(row.get(util), low=0.0, high=100.0) if util else None
        mu = _bytes(row.get(used), used) if used else None
        mt = _bytes(row.get(total), total) if total else None
        reading = GpuReading(
            index=gpu_index,
            utilization=u,
            memory_used_bytes=mu,
            memory_total_bytes=mt,
            power_w=_cell_float(row.get(power), low=0.0) if power else None,
            error=None if u is not None or not util else f"{util} unreadable",
        )
        ident = f"index={gpu_index}" if idx_cell is not None else None
        grouper.add(when, ident, reading, has_index=True)
        if grouper.samples:
            yield from grouper.drain()
    grouper.flush()
    yield from grouper.drain()


def _skip_reason(line_no: int, t_abs: str | None, t_rel: str | None, index: str | None, when: datetime | None) -> str:
    """Why a custom GPU CSV's row was skipped: no time in its time column, or no GPU index."""
    if when is None and t_abs is not None:
        return _("line {line}: no time in {column} (expected a timestamp within the years {first}-{last})").format(
            line=line_no, column=t_abs, first=TIME_MIN.year, last=TIME_MAX.year - 1)
    if when is None:
        return _("line {line}: no time in {column} (expected seconds within the years {first}-{last})").format(
            line=line_no, column=t_rel, first=TIME_MIN.year, last=TIME_MAX.year - 1)
    return _("line {line}: {column} is not a GPU index (expected a whole number from 0 to {maximum})").format(
        line=line_no, column=index, maximum=INT64_MAX)


def _bytes(cell: str | None, name: str) -> int | None:
    """A custom logger's memory cell in bytes (unit from the column name, see
    :func:`_memory_factor`), 0 to 2**63 - 1; else None."""
    value = _cell_float(cell, low=0.0)
    if value is None:
        return None
    size = value * _memory_factor(name)
    return int(round(size)) if size < 2.0**63 else None


def _parse_abs_time(cell: str | None) -> datetime | None:
    """An absolute time cell (nvidia-smi's shape or ISO 8601; naive = UTC) within
    :data:`~costctl.replay.times.TIME_MIN` .. :data:`~costctl.replay.times.TIME_MAX`, else None."""
    if cell is None:
        return None
    text = cell.strip()
    try:
        naive = smi_parse.parse_timestamp(text)
        if naive is not None:
            when = naive.replace(tzinfo=timezone.utc)
            return when if in_range(when) else None
    except SmiParseError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
        when = parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None
    return when if in_range(when) else None
