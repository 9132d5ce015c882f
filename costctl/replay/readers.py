"""Entry points: read any recorded GPU log or training file, picking the reader from the content.

>>> log = read_gpu_log(Path("gpu_usage.csv"))          # doctest: +SKIP
>>> run = read_train_log(Path("trainer_state.json"))    # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from datetime import datetime
from pathlib import Path

from ..errors import UsageError
from ..i18n import N_, _
from ..jsonio import JsonTooDeep
from ..progress.lines import parse_line
from ..validation import describe_value
from .formats import GPU_FORMATS, detect_file, detect_format
from ..records import TelemetrySample
from .gpu_log import GpuLog, recorded_fields
from .gpu_smi_csv import iter_custom_gpu_csv, iter_smi_lines
from .gpu_smi_table import iter_table_lines
from .gpu_wandb import iter_wandb_lines
from .textio import BLOCK_CHARS, iter_lines, read_head
from .train_log import TrainLog, read_console, read_metrics, too_deep


def read_gpu_log(
    path: Path, *, columns: Sequence[str] | None = None, start: datetime | None = None
) -> GpuLog:
    """Read a recorded GPU log of any supported format (see :mod:`costctl.replay.formats`).

    Args:
        path: the log.
        columns: ``--query-gpu`` field names, for a headerless nvidia-smi CSV without units.
        start: wall time of the first record, for logs that only record elapsed seconds.

    Raises:
        UsageError: unreadable file; a training file given as a GPU log; no usable sample.
    """
    fmt = _gpu_format(path, columns)
    counts: dict[str, Any] = {}
    with _named(path):
        samples = list(_gpu_records(path, fmt, iter_lines(path), columns, start, counts))
    log = GpuLog(fmt, samples, path=path, relative=bool(counts.get("relative")), fields=recorded_fields(samples),
                 skipped=counts.get("skipped", 0))
    if not log.samples:
        raise UsageError(_no_sample(path, log, counts))
    return log


def _gpu_format(path: Path, columns: Sequence[str] | None) -> str:
    """The GPU-log format of ``path`` (:mod:`.formats`; ``nvidia-smi-csv`` when ``columns``
    are given).

    Raises:
        UsageError: the file cannot be read, is empty, or is no GPU log: one line naming the
            file, what it looks like (a training log, or its first line) and the GPU logs read.
    """
    head = read_head(path)
    if not head.strip("\ufeff \t\r\n"):
        raise UsageError(_("{path} is empty: expected a GPU log ({formats})").format(
            path=path, formats=_(GPU_LOGS)))
    fmt = detect_format(head)
    if columns and fmt not in ("nvidia-smi-csv",):
        fmt = "nvidia-smi-csv"
    if fmt in GPU_FORMATS:
        return fmt
    if fmt != "console" or _shows_a_loss(head):
        raise UsageError(_("{path}: looks like a training log ({format}), not a GPU log; pass it with --train-log "
                           "(GPU logs: {formats})").format(path=path, format=fmt, formats=_(GPU_LOGS)))
    first = next((line for line in head.splitlines() if line.strip()), "")
    raise UsageError(_("{path}: not a GPU log costctl reads (its first line: {line}); expected {formats}").format(
        path=path, line=describe_value(first), formats=_(GPU_LOGS)))


#: The GPU logs ``--gpu-log`` reads, as messages name them.
GPU_LOGS = N_("an nvidia-smi --query-gpu CSV, the nvidia-smi table printed in a loop, or wandb system metrics "
              "(JSON lines)")


def _shows_a_loss(head: str) -> bool:
    """Whether a line of ``head`` (a console log's beginning) reports a loss, as a training
    log's would."""
    return any(parse_line(line) for line in head.splitlines()[:_SNIFF_LINES])


#: Lines of a file's beginning looked at for a loss (:func:`_shows_a_loss`).
_SNIFF_LINES = 200


def _gpu_records(path: Path, fmt: str, lines: Iterable[str], columns: Sequence[str] | None,
                 start: datetime | None, counts: dict[str, Any]) -> Iterator[TelemetrySample]:
    """The samples of a GPU log of format ``fmt`` from its lines (``counts``: see the readers)."""
    if fmt == "nvidia-smi-csv":
        return iter_smi_lines(lines, columns=columns, counts=counts)
    if fmt == "nvidia-smi-table":
        return iter_table_lines(lines, counts)
    if fmt == "wandb-system":
        return iter_wandb_lines(lines, counts)
    return iter_custom_gpu_csv(lines, start=start, counts=counts, path=path)


@contextmanager
def _named(path: Path) -> Iterator[None]:
    """A reader's UsageError (``line 3: ...``) as one line that names the file too."""
    try:
        yield
    except UsageError as exc:
        if exc.message.startswith(str(path)):
            raise
        raise UsageError(_("{path}: {problem}").format(path=path, problem=exc.message),
                         exit_code=exc.exit_code) from None


def _no_sample(path: Path, log: GpuLog, counts: dict[str, Any]) -> str:
    """The one line for a GPU log none of whose records could be read: the file, the count,
    and the first unreadable record with what was expected there."""
    first = counts.get("first_skip")
    if first:
        return _("{path}: no GPU sample could be read ({format}, {skipped} unreadable records; the first: "
                 "{first})").format(path=path, format=log.format, skipped=log.skipped, first=first)
    return _("{path}: no GPU sample could be read ({format}, {skipped} unreadable records)").format(
        path=path, format=log.format, skipped=log.skipped)


def open_gpu_log(
    path: Path, *, columns: Sequence[str] | None = None, start: datetime | None = None,
    block_chars: int = BLOCK_CHARS,
) -> GpuLog:
    """A streamed :func:`read_gpu_log`: the file is read once here for its figures
    (:attr:`GpuLog.scan`) and again on every :meth:`GpuLog.iter_samples`, in blocks of
    ``block_chars`` characters; no sample is kept, so memory does not grow with the file. The
    samples, figures and analysis equal :func:`read_gpu_log`'s whatever ``block_chars``.

    Raises:
        UsageError: as :func:`read_gpu_log`.
    """
    fmt = _gpu_format(path, columns)
    counts: dict[str, Any] = {}

    def source() -> Iterator[TelemetrySample]:
        with _named(path):
            yield from _gpu_records(path, fmt, iter_lines(path, block_chars), columns, start, counts)

    log = GpuLog(fmt, [], path=path, source=source)
    scan = log.scan  # the first pass
    log.fields, log.skipped, log.relative = scan.fields, counts.get("skipped", 0), bool(counts.get("relative"))
    if not scan.count:
        raise UsageError(_no_sample(path, log, counts))
    return log


def read_train_log(path: Path, *, loss_regex: str | None = None, streamed: bool = False,
                   replay: Any = None, loss_name: str | None = None) -> TrainLog:
    """Read a recorded training file or console log (format from content).

    Args:
        path: the file.
        loss_regex: the user's ``--loss-regex`` for console logs (see
            :func:`costctl.progress.compile_loss_regex`); forces the console reader.
        streamed: a console log keeps no point list (bounded memory, see
            :func:`~costctl.replay.train_log.read_console`); metrics files are read whole.
        loss_name: ``--loss NAME``: the train loss series (console) or column/key (metrics
            file) the policies watch.

    Raises:
        UsageError: unreadable file, a GPU log given as a training log, an invalid regex, a
            ``loss_name`` the log does not have, or a metrics document Python's JSON parser
            cannot hold (nested deeper than its recursion limit).
    """
    try:
        fmt = "console" if loss_regex else detect_file(path)
        if fmt in GPU_FORMATS:
            raise UsageError(_("{path}: looks like a GPU log ({format}), not a training log; pass it with "
                               "--gpu-log").format(path=path, format=fmt))
        if fmt == "console":
            return read_console(path, loss_regex=loss_regex, streamed=streamed, replay=replay if streamed else None,
                                loss_name=loss_name)
        return read_metrics(path, fmt, loss_name=loss_name)
    except (RecursionError, JsonTooDeep):
        raise UsageError(too_deep(path)) from None
