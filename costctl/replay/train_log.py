"""Recorded training progress as :class:`~costctl.records.ProgressPoint` lists, train and eval apart.

The loss itself is read by the same code ``costctl watch`` runs live:
:func:`costctl.progress.read_metrics_file` for metrics files (HF ``trainer_state.json``,
Lightning / Keras / YOLO CSV, detectron2 / MMEngine JSON lines) and
:class:`costctl.progress.LineParser` for console output (tqdm ``\\r``, ANSI colours, HF dict
lines, Keras, nanoGPT). This module adds what a replay needs on top: which format it was, the
x-axis the file uses (step / iteration or epoch), every other numeric column as a named series
(learning rate, ``eta_seconds``, ``coco/bbox_mAP``, ``train/obj_loss``...), the summary facts
(HF's final ``train_loss``, ``global_step``), and OOM errors found in console output.

A console log can be read *streamed* (``read_console(..., streamed=True)``, what ``costctl
analyze`` does): blocks of points flow through per-kind :class:`~.loss_stats.LossStream`
figures and a bounded plot series, and a replay reads the file again
(:meth:`TrainLog.iter_points`), so memory does not grow with the file.

Which value is "the loss" per format:

* HF / TRL ``trainer_state.json``: ``loss`` (train) and ``eval_loss`` (eval); ``predict_*``
  entries (no ``step``) are neither and stay in :attr:`TrainLog.series`; the final summary entry
  (``train_runtime``, ``train_loss``) is not a point but :attr:`TrainLog.summary`.
* Lightning ``metrics.csv``: ``train_loss_step`` > ``train_loss`` > ``loss`` (> ``*_epoch``),
  eval ``val_loss``.
* Keras ``CSVLogger``: ``loss`` / ``val_loss`` per epoch.
* YOLOv5 / Ultralytics ``results.csv``: ``train/box_loss`` / ``val/box_loss`` per epoch
  (the box-regression loss both versions log first; ``obj``/``cls``/``dfl`` losses are series).
* detectron2 ``metrics.json``: ``total_loss`` per ``iteration``.
* MMEngine scalars: ``loss`` per ``step`` (validation rows carry metrics, no loss).
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import UsageError
from ..i18n import _
from ..jsonio import JsonTooDeep, loads, loads_skipping_deep
from ..numbers import as_count
from ..progress import LineParser, read_metrics_file
from ..progress.lines import MAX_LINE_CHARS
from ..progress.batch import PointBatch, native
from ..progress.metrics_file import csv_rows, number, step_number
from ..records import ProgressPoint
from ..progress.console import ConsoleSeries
from ..progress.grad_norms import GRAD_NORM_KEYS, GradNormLog, GradNormRecord
from ..progress.series import EpochShape, choose_primary, granularity_of, series_granularity
from .console_named import NamedLossReader, NamedSeries
from .loss_stats import LossStream, LossSummary, summarize
from .oom import OomEvent, match_oom
from .textio import SNIFF_BYTES, detect_encoding, open_text, read_all

#: ``(x, value)``: x is the record's step (or epoch where the file has no step), None if neither.
SeriesPoint = tuple[float | None, float]
_LOSS_KEYS = {"yolo-csv": ("train/box_loss", "val/box_loss")}
_STEP_KEYS = ("step", "global_step", "iteration", "iter", "current_steps")
_READ_CHUNK = 1 << 20


@dataclass(slots=True)
class TrainLog:
    """The progress read from one training file.

    Attributes:
        format: one of :data:`costctl.replay.formats.TRAIN_FORMATS`.
        train: train-loss points in file order (``time`` None unless placed on a time axis).
        eval: eval-loss points in file order.
        x_axis: ``"step"`` when every train point has a step (iteration), else ``"epoch"``.
        series: every other numeric field by name -> ``(x, value)`` per record that has it.
        summary: end-of-run facts (HF's ``train_loss``, ``train_runtime``; ``global_step``,
            ``epoch``, ``best_metric``, ``max_steps`` from a trainer state).
        oom: out-of-memory errors found in console output.
        path: the file.
    """

    format: str
    train: list[ProgressPoint]
    eval: list[ProgressPoint]
    x_axis: str = "step"
    series: dict[str, list[SeriesPoint]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    oom: list[OomEvent] = field(default_factory=list)
    path: Path | None = None
    #: set for a streamed console log: the figures per kind; ``train``/``eval`` then hold only
    #: the bounded plot series (see :class:`~costctl.replay.loss_stats.LossStream`).
    streams: dict[str, LossStream] | None = None
    #: for a streamed log: a fresh pass over the file's points, block by block.
    source: Callable[[], Iterator[PointBatch]] | None = None
    _eval_kept: list[ProgressPoint] | None = None
    #: for a streamed log with more eval points than ``_EVAL_KEEP``: the eval points of each
    #: read block (:func:`_cut`), kept while they take at most ``_EVAL_CUTS_BYTES`` (else None:
    #: a replay reads the file again for them).
    _eval_cuts: list[PointBatch] | None = None
    #: a streamed console log read with ``replay=`` (:func:`read_console`): that loss replay
    #: (a :class:`~costctl.replay.engine.LossReplay`), already fed every train block in order
    #: during the read; the eval blocks are still to come (``iter_batches(kinds=("eval",))``).
    train_replay: Any = None
    #: console logs: lines skipped for holding more than ``MAX_LINE_CHARS`` characters (a loss
    #: on them is not read; reported, never silent).
    long_lines: int = 0
    #: console logs read with ``--loss-regex``: lines whose search ran past its time budget
    #: (:data:`costctl.user_regex.LINE_BUDGET_S`; skipped, reported), and whether the pattern
    #: was turned off for timing out too often (the built-in shapes read the rest).
    regex_timeouts: int = 0
    regex_disabled: bool = False
    #: console logs: lines skipped because a control character sits inside a number on them
    #: (``loss: 0.\\x0025`` is no loss, never 0.25; :func:`costctl.progress.lines.clean_line`).
    split_numbers: int = 0
    #: JSON metrics files: records that could not be read (not JSON, or nested past the
    #: parser's limit) and were skipped, the others read (reported, never silent).
    records_skipped: int = 0
    #: metrics files: records skipped because their step is no count (a 400-digit step, a
    #: negative one): the others keep their steps (reported, never silent).
    bad_steps: int = 0
    #: the logged gradient norms in log order, ``(value, loss, step, epoch)``: ``loss`` is the
    #: train loss logged on the same record (None when the record has none); read from HF dict
    #: lines, ``trainer_state.json``/``trainer_log.jsonl`` records, CSV ``grad_norm`` columns and
    #: Megatron's ``| grad norm: X |`` (compacted: :class:`~costctl.progress.grad_norms.GradNormLog`).
    #: For :mod:`costctl.policies.grad_norm`.
    grad_norms: GradNormLog = field(default_factory=GradNormLog)
    #: console logs: the loss series besides the primary ones, ``(kind, name, granularity,
    #: summary)`` (several named losses, column tables, an epoch-average phrasing kept apart:
    #: :mod:`.console_named`).
    extra: list[tuple[str, str, str, LossSummary]] = field(default_factory=list)
    #: kind -> the name of the primary series when the log has several of that kind.
    primary_names: dict[str, str] = field(default_factory=dict)
    #: (kind, name) -> "batch" / "epoch" for a console log's series, where told from the data.
    granularities: dict[tuple[str, str], str] = field(default_factory=dict)
    #: kind -> the primary series' points when they are kept here (not re-read from the file).
    _kept: dict[str, list[ProgressPoint]] = field(default_factory=dict)
    #: kind -> the one series name a re-read keeps of that kind.
    _only: dict[str, str] = field(default_factory=dict)

    @property
    def streamed(self) -> bool:
        """True when the points were streamed (not kept): see :attr:`streams`."""
        return self.streams is not None

    def count(self, kind: str) -> int:
        """How many points of ``kind`` (``"train"``/``"eval"``) the file holds."""
        if self.streams is not None:
            return self.streams[kind].count
        return len(self.train if kind == "train" else self.eval)

    def summary_of(self, kind: str) -> LossSummary:
        """:func:`~costctl.replay.loss_stats.summarize` of the ``kind`` series (streamed or kept)."""
        if self.streams is not None:
            return self.streams[kind].summary()
        return summarize(self.train if kind == "train" else self.eval)

    def iter_points(self) -> Iterator[ProgressPoint]:
        """Every point, train first then eval (as :attr:`points`), without keeping them all."""
        if self.source is None:
            yield from self.points
            return
        for kind in ("train", "eval"):
            if self.count(kind) == 0:
                continue
            if kind in self._kept:
                yield from self._kept[kind]
                continue
            if kind == "eval" and self._eval_kept is not None:
                yield from self._eval_kept
                continue
            if kind == "eval" and self._eval_cuts is not None:
                for cut in self._eval_cuts:
                    yield from cut.points()
                continue
            for batch in self.source():
                cut = _cut(batch, kind, self._only.get(kind))
                if cut:
                    yield from cut.points()

    def iter_batches(self, size: int = 4096, kinds: tuple[str, ...] = ("train", "eval")) -> Iterator[PointBatch]:
        """Every point as :meth:`iter_points` gives them (train first, then eval, file order),
        in :class:`~costctl.progress.batch.PointBatch` blocks: no object per point.

        Kept points come in blocks of ``size``; a streamed log's come as the reader's blocks,
        each cut to the points of one kind (its keys kept, columns copied). ``kinds``: only
        those kinds' points (in that order).
        """
        if self.source is None:
            for kind in kinds:
                kind_points = self.train if kind == "train" else self.eval
                for start in range(0, len(kind_points), size):
                    yield PointBatch.from_points(kind_points[start:start + size])
            return
        for kind in kinds:
            if self.count(kind) == 0:
                continue
            if kind in self._kept:
                for start in range(0, len(self._kept[kind]), size):
                    yield PointBatch.from_points(self._kept[kind][start:start + size])
                continue
            if kind == "eval" and self._eval_kept is not None:
                for start in range(0, len(self._eval_kept), size):
                    yield PointBatch.from_points(self._eval_kept[start:start + size])
                continue
            if kind == "eval" and self._eval_cuts is not None:
                yield from self._eval_cuts  # the blocks a second read would give, kept
                continue
            for batch in self.source():
                cut = _cut(batch, kind, self._only.get(kind))
                if cut:
                    yield cut

    def materialized(self) -> TrainLog:
        """This log with every point kept (for placing a streamed log on the time axis)."""
        if self.source is None:
            return self
        train, evals = _split(list(self.iter_points()))
        return TrainLog(self.format, train, evals, self.x_axis, self.series, self.summary, self.oom, self.path,
                        long_lines=self.long_lines, grad_norms=self.grad_norms, extra=self.extra,
                        primary_names=self.primary_names, regex_timeouts=self.regex_timeouts,
                        regex_disabled=self.regex_disabled, records_skipped=self.records_skipped,
                        split_numbers=self.split_numbers, bad_steps=self.bad_steps)

    def x(self, point: ProgressPoint) -> float | None:
        """The point's position on :attr:`x_axis`."""
        return float(point.step) if self.x_axis == "step" and point.step is not None else point.epoch

    @property
    def points(self) -> list[ProgressPoint]:
        """Train and eval points together, train first (for feeding a History)."""
        return self.train + self.eval


def _cut(batch: PointBatch, kind: str, name: str | None = None) -> PointBatch:
    """The points of ``kind`` (and series ``name`` when given) in ``batch`` (``batch`` itself
    when all are), keys kept."""
    if name is None:
        return batch.cut(batch.mask_of(batch.series_of_kind(kind)))
    return batch.cut(batch.mask_of({i for i, key in enumerate(batch.keys) if key == (kind, name)}))


def _record_x(record: dict[str, Any]) -> float | None:
    for key in _STEP_KEYS:
        value = step_number(record.get(key))  # a 400-digit step: inf, a bad step (skipped, counted)
        if value is not None:
            return value
    return number(record.get("epoch"))


def _add_series(series: dict[str, list[SeriesPoint]], record: dict[str, Any], skip: set[str]) -> None:
    x = _record_x(record)
    for key, raw in record.items():
        if key in skip:
            continue
        value = number(raw)
        if value is not None:
            series.setdefault(key, []).append((x, value))


def _split(points: list[ProgressPoint]) -> tuple[list[ProgressPoint], list[ProgressPoint]]:
    return [p for p in points if p.kind == "train"], [p for p in points if p.kind == "eval"]


def _x_axis(train: list[ProgressPoint]) -> str:
    return "step" if train and all(p.step is not None for p in train) else "epoch"


# -- metrics files -----------------------------------------------------------------------------
def too_deep(path: Path) -> str:
    """The one line for a JSON log nested past the parser's limit (about 1,000 levels)."""
    return _("{path}: its JSON nests deeper than costctl can read ({levels} levels); a training log's records "
             "are flat: is it the right file?").format(path=path, levels=sys.getrecursionlimit())


def _read_csv_series(text: str) -> dict[str, list[SeriesPoint]]:
    """The numeric columns of CSV ``text`` (a cell of any length read: :func:`csv_rows`)."""
    series: dict[str, list[SeriesPoint]] = {}
    reader = csv_rows(text)
    header: list[str] | None = None
    for cells in reader:
        if not cells or all(not c.strip() for c in cells):
            continue
        stripped = [c.strip() for c in cells]
        if header is None or stripped == header:
            header = stripped
            continue
        if len(stripped) == len(header):
            _add_series(series, dict(zip(header, stripped)), set())
    return series


def _read_jsonl_series(text: str) -> tuple[dict[str, list[SeriesPoint]], int]:
    """The numeric keys of JSON-lines ``text`` and the count of records skipped (a line
    starting with ``{`` that is not JSON, or nests past the parser's limit)."""
    series: dict[str, list[SeriesPoint]] = {}
    skipped = 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = loads(line)
        except ValueError:  # not JSON, or nested past the parser's limit (jsonio): skipped
            skipped += 1
            continue
        if isinstance(record, dict):
            _add_series(series, record, set())
    return series, skipped


def _read_trainer_state(path: Path, text: str) -> tuple[dict[str, list[SeriesPoint]], dict[str, Any], int]:
    """The numeric keys of a ``trainer_state.json``'s ``log_history``, its summary, and the
    count of records left out for nesting past the parser's limit
    (:func:`~costctl.jsonio.loads_skipping_deep`: the other records are read).

    Raises:
        UsageError: not JSON, the document itself too deep, or no ``log_history`` list.
    """
    try:
        doc, skipped = loads_skipping_deep(text)
    except JsonTooDeep:
        raise UsageError(too_deep(path)) from None
    except json.JSONDecodeError as exc:
        raise UsageError(_("{path}: not valid JSON ({error} at line {line}, column {column}); expected a "
                           "trainer_state.json").format(path=path, error=exc.msg, line=exc.lineno,
                                                        column=exc.colno)) from None
    except ValueError:  # pragma: no cover - jsonio reads every other failure as one of the above
        raise UsageError(_("{path}: not valid JSON; expected a trainer_state.json").format(path=path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("log_history"), list):
        raise UsageError(_("{path}: a JSON document without log_history (expected a trainer_state.json)").format(
            path=path))
    if skipped and not doc["log_history"]:  # every record nested too deep: the file, not a record, is wrong
        raise UsageError(too_deep(path))
    summary = {k: doc[k] for k in ("global_step", "epoch", "best_metric", "max_steps") if k in doc}
    series: dict[str, list[SeriesPoint]] = {}
    for entry in doc["log_history"]:
        if not isinstance(entry, dict):
            continue
        if "train_runtime" in entry:
            summary.update({k: v for k, v in entry.items() if k != "epoch"})
            continue
        _add_series(series, entry, set())
    return series, summary, skipped


def read_metrics(path: Path, fmt: str, *, loss_name: str | None = None) -> TrainLog:
    """Read a metrics file of format ``fmt`` (a file format of :mod:`.formats`, not ``console``).

    ``loss_name`` (``--loss``): the column/key read as the train loss instead of the format's
    default.

    Raises:
        UsageError: unreadable file, a JSON document that is not a trainer state, or a
            ``loss_name`` no record holds.
    """
    text = read_all(path)
    loss_key, eval_key = _LOSS_KEYS.get(fmt, (None, None))
    if loss_name is not None:
        loss_key = loss_name
    summary: dict[str, Any] = {}
    skipped = 0
    if fmt == "hf-trainer-state":
        series, summary, skipped = _read_trainer_state(path, text)
    elif fmt.endswith("-csv"):
        series = _read_csv_series(text)
    else:
        series, skipped = _read_jsonl_series(text)
    counts: dict[str, int] = {}
    points = _read_points(path, text, loss_key, eval_key, counts)  # a record whose step is no count: skipped
    train, evals = _split(points)
    if loss_name is not None and not train:
        losses = [repr(k) for k in series if "loss" in k.lower()]
        if not losses:
            raise UsageError(_("--loss {name!r}: no record of {path} holds it (it has no loss column)").format(
                name=loss_name, path=path))
        raise UsageError(_("--loss {name!r}: no record of {path} holds it (its loss columns: {losses})").format(
            name=loss_name, path=path, losses=_(", ").join(losses)))
    names = {p.name for p in points}
    for name in names:
        series.pop(name, None)
    return TrainLog(fmt, train, evals, _x_axis(train), series, summary, path=path,
                    grad_norms=GradNormLog(_metrics_grad_norms(series, train)),
                    records_skipped=skipped, bad_steps=counts.get("bad_steps", 0))


def _metrics_grad_norms(series: dict[str, list[SeriesPoint]], train: list[ProgressPoint]) -> list[GradNormRecord]:
    """The gradient-norm column of a metrics file with the train loss of the same record
    (matched on the record's step, or epoch where it has none)."""
    key = next((k for k in GRAD_NORM_KEYS if k in series), None)
    if key is None:
        return []
    loss_at: dict[float, float] = {}
    for p in train:
        x = p.step if p.step is not None else p.epoch
        if x is not None:
            loss_at.setdefault(float(x), p.value)
    by_step = any(p.step is not None for p in train)
    out: list[GradNormRecord] = []
    for x, value in series[key]:
        step = as_count(x) if x is not None and by_step else None  # 0 .. 2**63 - 1, else no step
        epoch = x if x is not None and not by_step else None
        out.append((value, loss_at.get(x) if x is not None else None, step, epoch))
    return out




def _read_points(path: Path, text: str, loss_key: str | None, eval_key: str | None,
                 counts: dict[str, int] | None = None) -> list[ProgressPoint]:
    """Points via the live metrics-file reader (UTF-8 only); other encodings go through a UTF-8
    copy. ``counts``: see :func:`~costctl.progress.metrics_file.read_metrics_file`."""
    with path.open("rb") as fh:
        encoding = detect_encoding(fh.read(SNIFF_BYTES))
    if encoding in ("utf-8", "utf-8-sig"):
        return read_metrics_file(path, loss_key=loss_key, eval_key=eval_key, counts=counts)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8", newline="")
        return read_metrics_file(copy, loss_key=loss_key, eval_key=eval_key, counts=counts)


# -- console output ----------------------------------------------------------------------------
_LINE_END = re.compile(r"\r\n|\r|\n")


def _summary_dict(line: str) -> dict[str, Any]:
    """The Hugging Face end-of-training dict printed on ``line`` (``{'train_runtime': ..., 'train_loss': ...}``),
    or {} when it does not parse."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        value = ast.literal_eval(line[start : end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


_OOM_WORDS = ("emory", "allocate", "OOM")
_OOM_NEEDLES = tuple(w.encode() for w in _OOM_WORDS)


def _may_hold_oom(text: str) -> bool:
    """Whether ``text`` holds one of the words every OOM message has (a cheap prefilter).

    With the C scanner built: one memmem per word over the UTF-8 bytes (ASCII words occur in
    the bytes exactly where they occur in the text), faster than ``str.__contains__``."""
    scan = native()
    if scan is not None:
        return scan.contains_any(text.encode("utf-8", "surrogatepass"), _OOM_NEEDLES)
    return any(w in text for w in _OOM_WORDS)


def iter_console_batches(
    path: Path,
    *,
    loss_regex: str | None = None,
    oom: list[OomEvent] | None = None,
    summary: dict[str, Any] | None = None,
    counts: dict[str, int] | None = None,
    grad_norms: list[GradNormRecord] | None = None,
    named: NamedLossReader | None = None,
) -> Iterator[PointBatch]:
    """Stream the progress points of a console log, one :class:`PointBatch` per read block.

    The blocks (:data:`_READ_CHUNK` characters) go through the live parser's block scan
    (:meth:`~costctl.progress.LineParser.parse_block`): lines end at ``\n``, ``\r\n`` or a
    lone ``\r`` (tqdm redraws); a line longer than
    :data:`~costctl.progress.lines.MAX_LINE_CHARS` is skipped; only lines holding a candidate
    literal reach Python code. Points have no time (NaN: a console log records none). Memory
    stays bounded by the block whatever the file size.

    Args:
        oom: when given, out-of-memory errors found are appended (numbered by ``\n`` lines).
        summary: when given, Hugging Face's end-of-training dict (``train_runtime``,
            ``train_loss``...) is merged into it.
        counts: when given, ``counts["long_lines"]`` is kept at the number of lines skipped so
            far for holding more than ``MAX_LINE_CHARS`` characters, ``counts["regex_timeouts"]``
            at the lines ``loss_regex`` timed out on (skipped) and ``counts["regex_disabled"]``
            at 1 once it was turned off for that (:mod:`costctl.user_regex`).
        grad_norms: when given, the logged gradient norms are appended
            (:func:`~costctl.progress.grad_norms.console_grad_norms`).
        named: when given, reads the lines with several named losses and column tables
            (:mod:`costctl.progress.named`); those lines are kept from the line parser. Both
            through :class:`~costctl.progress.console.ConsoleSeries`, as the live watch. Finished
            (:meth:`~.console_named.NamedLossReader.finish`) when the file ends.

    Raises:
        UsageError: unreadable file, or an invalid ``loss_regex``.
    """
    parser = LineParser(loss_regex, hook=ConsoleSeries(named, grad_norms))
    dropped = 0  # lines discarded here while still unfinished (longer lines reach the parser)
    if counts is not None:
        counts["long_lines"] = counts["split_numbers"] = 0
    line_no = 0

    def scan(complete: str) -> PointBatch:
        nonlocal line_no
        batch = PointBatch()
        parser.parse_block(complete, None, batch)  # named losses and grad norms first (the hook)
        if summary is not None and "train_runtime" in complete:
            for line in complete.split("\n"):
                if "train_runtime" in line:
                    summary.update(_summary_dict(line))
        if oom is not None and _may_hold_oom(complete):
            for line in complete.split("\n")[:-1]:
                line_no += 1
                event = match_oom(line, line_no)
                if event is not None:
                    oom.append(event)
        elif oom is not None:  # line numbers matter only for OOM events
            line_no += complete.count("\n")
        if counts is not None:
            _count(counts, parser, dropped)
        return batch

    tail = ""
    discarding = False  # inside a line longer than MAX_LINE_CHARS
    with open_text(path) as fh:
        while chunk := fh.read(_READ_CHUNK):
            text = tail + chunk
            if discarding:
                m = _LINE_END.search(text)
                if m is None:
                    tail = ""
                    continue
                line_no += text.count("\n", 0, m.end())
                text, discarding = text[m.end():], False
            stop = len(text) - 1 if text.endswith("\r") else len(text)  # "\r" may be half of "\r\n"
            cut = max(text.rfind("\n", 0, stop), text.rfind("\r", 0, stop)) + 1
            complete, tail = text[:cut], text[cut:]
            if len(tail) > MAX_LINE_CHARS:
                tail, discarding = "", True
                dropped += 1
            if complete:
                yield scan(complete)
    if tail:
        yield scan(tail + "\n")
    if named is not None:
        named.finish()
    if counts is not None:
        _count(counts, parser, dropped)


def _count(counts: dict[str, int], parser: LineParser, dropped: int) -> None:
    """``counts`` (see :func:`iter_console_batches`) from the parser's, as read so far."""
    counts["long_lines"] = parser.long_lines + dropped
    counts["split_numbers"] = parser.split_numbers
    user = parser.user_regex
    if user is not None:
        counts["regex_timeouts"] = user.timeouts
        counts["regex_disabled"] = int(user.disabled)


def iter_console(
    path: Path,
    *,
    loss_regex: str | None = None,
    oom: list[OomEvent] | None = None,
    summary: dict[str, Any] | None = None,
) -> Iterator[ProgressPoint]:
    """:func:`iter_console_batches` as :class:`ProgressPoint` records (``time=None``), in order."""
    for batch in iter_console_batches(path, loss_regex=loss_regex, oom=oom, summary=summary):
        yield from batch.points()


#: a streamed log keeps its eval points for the replay up to this many (else re-reads them).
_EVAL_KEEP = 100_000
#: ... and keeps the eval points of each read block (columns) while they take at most this
#: many bytes, so a replay need not read the file a third time for them.
_EVAL_CUTS_BYTES = 64 << 20
#: bytes per point in a batch's columns (series i, values d, steps q, epochs d, totals q, times d).
_POINT_BYTES = 44


def read_console(path: Path, *, loss_regex: str | None = None, streamed: bool = False,
                 max_plot: int = 4096, replay: Any = None, loss_name: str | None = None) -> TrainLog:
    """Read a whole console log (see :func:`iter_console`): points, OOM errors and HF summary.

    Several loss series of one kind (named losses on one line, a column table, an epoch
    average phrased apart from the per-batch loss: :mod:`.console_named`) are kept apart: the
    primary one (:func:`~.console_named.choose_primary`, or ``loss_name``) is the log's
    ``train`` series, the others are in :attr:`TrainLog.extra`.

    Args:
        streamed: keep no point list: per-kind figures (:class:`LossStream`) and a plot series
            of at most ``max_plot`` points per kind; :meth:`TrainLog.iter_points` reads the
            file again for a replay. Memory then does not grow with the file.
        replay: with ``streamed``, an object with ``add(batch)`` (a
            :class:`~costctl.replay.engine.LossReplay`) fed each block's train points, in
            order, during the read, as ``iter_batches()`` would give them; kept as
            :attr:`TrainLog.train_replay` (saves reading the file again for the replay) unless
            the log has several train series (then the replay reads the primary one again).
        loss_name: ``--loss NAME``: the train series to treat as primary.

    Raises:
        UsageError: unreadable file, an invalid ``loss_regex``, or a ``loss_name`` the log
            does not have.
    """
    oom: list[OomEvent] = []
    summary: dict[str, Any] = {}
    counts: dict[str, int] = {}
    grads = GradNormLog()
    named = NamedLossReader() if loss_regex is None else None
    fresh = (lambda: NamedLossReader()) if loss_regex is None else (lambda: None)
    if not streamed:
        points = [p for batch in iter_console_batches(path, loss_regex=loss_regex, oom=oom, summary=summary,
                                                      counts=counts, grad_norms=grads, named=named)
                  for p in batch.points()]
        train, evals = _split(points)
        log = TrainLog("console", train, evals, _x_axis(train), summary=summary, oom=oom, path=path,
                       long_lines=counts["long_lines"], grad_norms=grads,
                       regex_timeouts=counts.get("regex_timeouts", 0),
                       regex_disabled=bool(counts.get("regex_disabled")), split_numbers=counts["split_numbers"])
        _split_series(log, named, loss_name, {("train", p.name): None for p in train},
                      {("eval", p.name): None for p in evals})
        return log
    streams = {kind: LossStream(max_plot=max_plot) for kind in ("train", "eval")}
    by_name: dict[tuple[str, str], LossStream] = {}
    shapes: dict[tuple[str, str], EpochShape] = {}
    cuts: list[PointBatch] | None = []  # the eval points of each block, while small enough
    cut_bytes = 0
    for batch in iter_console_batches(path, loss_regex=loss_regex, oom=oom, summary=summary, counts=counts,
                                      grad_norms=grads, named=named):
        for kind, stream in streams.items():
            mask = batch.mask_of(batch.series_of_kind(kind))
            if mask is not None and not any(mask):
                continue
            cut = batch.cut(mask)
            stream.add_batch(cut)
            if kind == "train" and replay is not None and cut:
                replay.add(cut)
            if kind == "eval" and cuts is not None:
                cuts.append(cut)
                cut_bytes += len(cut) * _POINT_BYTES
                if cut_bytes > _EVAL_CUTS_BYTES:
                    cuts = None
        if batch:  # figures per series too (a kind may hold several: kept apart below)
            for i, key in enumerate(batch.keys):
                one = by_name.get(key)
                if one is None:
                    one = by_name[key] = LossStream(max_plot=max_plot)
                    shapes[key] = EpochShape()
                whole = len(batch.keys) == 1
                one.add_batch(batch, None if whole else {i})
                shape = shapes[key]
                if shape.ok:
                    mask = None if whole else batch.mask_of({i})
                    shape.add(batch.epochs if mask is None else compress(batch.epochs, mask),
                              batch.steps if mask is None else compress(batch.steps, mask))
    kept: list[ProgressPoint] | None = None
    if cuts is not None and streams["eval"].count <= _EVAL_KEEP:
        kept = [p for cut in cuts for p in cut.points()]
        cuts = None
    train_stream = streams["train"]
    x_axis = "step" if train_stream.count and train_stream.all_steps else "epoch"
    log = TrainLog(
        "console", train_stream.plot_points(), streams["eval"].plot_points(), x_axis,
        summary=summary, oom=oom, path=path, streams=streams,
        source=lambda: iter_console_batches(path, loss_regex=loss_regex, named=fresh()),
        _eval_kept=kept, _eval_cuts=cuts,
        train_replay=replay,
        long_lines=counts["long_lines"], grad_norms=grads,
        regex_timeouts=counts.get("regex_timeouts", 0), regex_disabled=bool(counts.get("regex_disabled")),
        split_numbers=counts["split_numbers"],
    )
    _split_series(log, named, loss_name, {k: v for k, v in by_name.items() if k[0] == "train"},
                  {k: v for k, v in by_name.items() if k[0] == "eval"}, shapes)
    return log


def _split_series(log: TrainLog, named: NamedLossReader | None, loss_name: str | None,
                  train_names: dict[tuple[str, str], LossStream | None],
                  eval_names: dict[tuple[str, str], LossStream | None],
                  shapes: dict[tuple[str, str], EpochShape] | None = None) -> None:
    """Pick the primary train (and eval) series of a console log and move the others to
    :attr:`TrainLog.extra`. ``*_names``: the line parser's series of that kind in first-seen
    order, each with its own figures (None when the kind has one series: the kind's figures)."""
    found = named.series if named is not None else {}
    if shapes is None:  # kept points: the shapes from them
        shapes = {}
        for p in log.train + log.eval:
            shapes.setdefault((p.kind, p.name), EpochShape()).add(
                (math.nan if p.epoch is None else p.epoch,), (p.step,))
    for key, series in found.items():
        log.granularities[key] = series.granularity if series.granularity == "epoch" else \
            series_granularity(series.name, series.shape)
    for key, shape in shapes.items():
        log.granularities.setdefault(key, series_granularity(key[1], shape))
    for kind, parsed in (("train", train_names), ("eval", eval_names)):
        mine = [n for (k, n) in found if k == kind]
        names = [n for (_, n) in parsed] + [n for n in mine if (kind, n) not in parsed]
        wanted = loss_name if kind == "train" else None
        if len(names) <= 1 and wanted is None:
            if names and not parsed:  # only this reader's series: it is the kind's series
                _use_named(log, kind, found[(kind, names[0])])
            continue
        primary = choose_primary(names, wanted) if kind == "train" else names[0]
        log.primary_names[kind] = primary
        for n in names:
            if n == primary:
                continue
            series = found.get((kind, n))
            if series is not None and (kind, n) not in parsed:
                log.extra.append((kind, n, log.granularities[(kind, n)], series.stream.summary()))
            else:
                stream = parsed.get((kind, n))
                figures = stream.summary() if stream is not None else summarize(
                    [p for p in (log.train if kind == "train" else log.eval) if p.name == n])
                log.extra.append((kind, n, log.granularities.get((kind, n), granularity_of(n)), figures))
        if (kind, primary) in parsed:
            if log.streams is None:
                points = [p for p in (log.train if kind == "train" else log.eval) if p.name == primary]
                setattr(log, kind, points)
            else:
                stream = parsed[(kind, primary)]
                if stream is not None:
                    log.streams[kind] = stream
                    setattr(log, kind, stream.plot_points())
                log._only[kind] = primary
                if kind == "train":
                    log.train_replay = None  # it was fed every train series: read the primary again
                else:
                    log._eval_kept = None if log._eval_kept is None else [p for p in log._eval_kept if p.name == primary]
                    log._eval_cuts = None
        else:
            _use_named(log, kind, found[(kind, primary)])
    if log.streams is not None and log.streams["train"].count:
        log.x_axis = "step" if log.streams["train"].all_steps else "epoch"
    elif log.streams is None:
        log.x_axis = _x_axis(log.train)


def _use_named(log: TrainLog, kind: str, series: NamedSeries) -> None:
    """Make this reader's ``series`` the log's ``kind`` series (its points kept)."""
    log._kept[kind] = series.points
    setattr(log, kind, list(series.points) if log.streams is None else series.stream.plot_points())
    if log.streams is not None:
        log.streams[kind] = series.stream
        if kind == "train":
            log.train_replay = None
        else:
            log._eval_kept = None
            log._eval_cuts = None


def finite(points: list[ProgressPoint]) -> list[ProgressPoint]:
    """The points whose value is finite (drops NaN / inf)."""
    return [p for p in points if math.isfinite(p.value)]
