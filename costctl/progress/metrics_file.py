"""Training progress read from a metrics file the job writes (``--metrics-file PATH``).

Three shapes, told apart by content (not by file name: Keras' CSVLogger writes ``training.log``):

* CSV with a header row: PyTorch Lightning ``CSVLogger`` ``metrics.csv`` (sparse rows: step
  rows fill ``train_loss_step``, validation rows ``val_loss``, epoch-end rows ``*_epoch``),
  Keras ``CSVLogger``, YOLO ``results.csv`` (space-padded cells are stripped);
* JSON lines, one object per line (detectron2 ``metrics.json``, MMEngine scalars, custom
  loggers);
* one JSON document with a ``log_history`` list (Hugging Face ``trainer_state.json``, which
  the Trainer rewrites at every save).

Which column is the train loss is chosen once per header (first present in
:data:`TRAIN_KEYS`, so ``train_loss_step`` beats ``train_loss_epoch`` and the two are never
mixed into one series); the eval loss likewise from :data:`EVAL_KEYS`. Either can be forced
with ``loss_key`` / ``eval_key``. Empty cells are "no value"; ``nan``/``inf`` are kept (a
divergence). Rows without a usable loss, and unreadable rows, are skipped.

Logged gradient norms (the first of :data:`~costctl.progress.grad_norms.GRAD_NORM_KEYS` a row
holds, that key kept from then on, as ``costctl analyze`` chooses it) are collected as
:data:`~costctl.progress.grad_norms.GradNormRecord` ``(value, loss, step, epoch)``, the loss
being the train loss of the same row (None when it has none), and taken with
:meth:`MetricsFileFollower.take_grad_norms`.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from costctl.jsonio import loads, loads_skipping_deep
from costctl.numbers import MAX_NUMBER_CHARS, as_count, as_float
from costctl.progress.grad_norms import GRAD_NORM_KEYS, GradNormRecord
from costctl.progress.lines import MAX_EPOCH
from costctl.records import ProgressPoint
from costctl.validation import special_file_kind

__all__ = ["EVAL_KEYS", "TRAIN_KEYS", "MetricsFileFollower", "read_metrics_file"]

#: Train-loss column/key names in order of preference (the first one present is used).
TRAIN_KEYS: tuple[str, ...] = (
    "train_loss_step", "train_loss", "loss", "train/loss", "training_loss", "total_loss",
    "train_loss_epoch", "loss_epoch",
)
#: Eval-loss column/key names in order of preference.
EVAL_KEYS: tuple[str, ...] = (
    "val_loss", "eval_loss", "validation_loss", "valid_loss", "val/loss", "eval/loss",
    "val_loss_epoch", "val_loss_step",
)
#: Step keys in order of preference (``current_steps``: LLaMA-Factory's ``trainer_log.jsonl``).
STEP_KEYS: tuple[str, ...] = ("step", "global_step", "iteration", "iter", "trainer/global_step", "current_steps")
EPOCH_KEYS: tuple[str, ...] = ("epoch",)

# A summary entry (HF's final {'train_runtime':..., 'train_loss':...}) is not progress.
_SUMMARY_KEYS = ("train_runtime",)


def number(value: Any) -> float | None:
    """A metric cell or JSON value as a float: numbers as they are, numeric text (incl. ``nan``,
    ``inf``) parsed as ``float()`` parses it; an integer or numeric text past the float range is
    no number (None), as on a console line (:func:`costctl.numbers.as_float`); None for booleans, empty
    cells, missing values, text over 64 Ki characters and anything else. Never raises."""
    return as_float(value)


def step_number(value: Any) -> float | None:
    """A step cell or JSON value as a float, like :func:`number`, except that a number literal
    past the float range (a 400-digit step, which :func:`number` reads as no number) is ``+/-inf``
    here: a step that is no count, so its row is skipped and counted as a bad step rather than
    read as a row without a step. Never raises."""
    read = number(value)
    if read is not None or isinstance(value, bool):
        return read
    if isinstance(value, (int, float)):
        return math.inf if value > 0 else -math.inf  # a huge int, or a jsonio.HugeNumber
    if isinstance(value, str) and len(value) <= MAX_NUMBER_CHARS:
        try:
            huge = float(value.strip())
        except ValueError:
            return None
        return huge if math.isinf(huge) else None
    return None


@dataclass
class _KeyChoice:
    """Which keys of the rows carry the train and eval loss (chosen once, then kept)."""

    loss_key: str | None = None
    eval_key: str | None = None
    fixed_loss: bool = False
    fixed_eval: bool = False
    #: the gradient-norm key (first of GRAD_NORM_KEYS present; chosen once)
    grad_key: str | None = None

    def choose(self, keys: Iterable[str]) -> None:
        present = set(keys)
        if self.grad_key is None:
            self.grad_key = next((k for k in GRAD_NORM_KEYS if k in present), None)
        if not self.fixed_loss and self.loss_key is None:
            self.loss_key = next((k for k in TRAIN_KEYS if k in present), None)
        if not self.fixed_eval and self.eval_key is None:
            self.eval_key = next((k for k in EVAL_KEYS if k in present), None)

    def reset(self) -> None:
        if not self.fixed_loss:
            self.loss_key = None
        if not self.fixed_eval:
            self.eval_key = None


def _points_from_row(
    row: Mapping[str, Any], keys: _KeyChoice, now: datetime | None, grads: list[GradNormRecord] | None = None,
    bad_steps: list[int] | None = None,
) -> list[ProgressPoint]:
    """The row's train/eval points; its gradient norm (``keys.grad_key``), if any, is appended
    to ``grads`` as ``(value, train loss of the row or None, step, epoch)``. ``bad_steps``
    (a one-item counter): a row whose step is no count (a 400-digit step, ``-5``, ``1.5``) is
    skipped and counted there, instead of giving points without a step."""
    if any(k in row for k in _SUMMARY_KEYS):
        return []
    step_value = next((v for k in STEP_KEYS if k in row and (v := step_number(row[k])) is not None), None)
    # a step is a count: 0 to 2**63 - 1 (what the ledger holds), else no step (the loss is kept)
    step = as_count(step_value) if step_value is not None else None
    if step is None and step_value is not None and bad_steps is not None:
        bad_steps[0] += 1
        return []
    epoch = next((v for k in EPOCH_KEYS if k in row and (v := number(row[k])) is not None), None)
    if epoch is not None and not (math.isfinite(epoch) and epoch <= MAX_EPOCH):
        epoch = None  # an epoch past MAX_EPOCH (2**64) is no epoch
    points = []
    for key, kind in ((keys.loss_key, "train"), (keys.eval_key, "eval")):
        if key is None or key not in row:
            continue
        value = number(row[key])
        if value is None:
            continue
        points.append(ProgressPoint(time=now, value=value, kind=kind, name=key, step=step, epoch=epoch))
    if grads is not None and keys.grad_key is not None and keys.grad_key in row:
        grad = number(row[keys.grad_key])
        if grad is not None:
            loss = next((p.value for p in points if p.kind == "train"), None)
            grads.append((grad, loss, step, epoch))
    return points


def _json_rows(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = loads(line)
        except ValueError:  # not JSON, or nested past the parser's limit (jsonio)
            continue
        if isinstance(row, dict):
            yield row


def _log_history(text: str) -> list[dict[str, Any]] | None:
    """The ``log_history`` entries of a whole-document JSON file, or None if it is not one."""
    try:
        doc, _skipped = loads_skipping_deep(text)  # a record nested too deep is left out
    except ValueError:  # half-written, or not JSON at all (jsonio)
        return None
    if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
        return [e for e in doc["log_history"] if isinstance(e, dict)]
    return None


class MetricsFileFollower:
    """Tail a metrics file that the training job keeps appending to.

    Call :meth:`poll` on every tick; it returns the points of the rows completed since the last
    call, stamped with ``now``. It tolerates the file not existing yet, a last line still being
    written (kept until its newline arrives), Lightning's CSVLogger rewriting the whole file
    with a wider header when a new metric appears (rows already returned are not returned
    again, even when a poll catches the rewrite half-done), a file atomically replaced by a
    longer copy, a file truncated or restarted with the same header (a new run: read again from
    the start), and a JSON document rewritten in place (``trainer_state.json``: only new
    ``log_history`` entries).

    Args:
        path: the metrics file.
        loss_key: force the train-loss column/key (default: first of :data:`TRAIN_KEYS` present).
        eval_key: force the eval-loss column/key (default: first of :data:`EVAL_KEYS` present).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, loss_key: str | None = None, eval_key: str | None = None,
        skip_bad_steps: bool = False,
    ) -> None:
        self.path = Path(path)
        #: with ``skip_bad_steps``: ``[rows skipped for a step that is no count]`` (else None: such a
        #: row's loss is kept without a step, as a live watch wants it)
        self._bad_steps: list[int] | None = [0] if skip_bad_steps else None
        self._keys = _KeyChoice(loss_key, eval_key, loss_key is not None, eval_key is not None)
        self._kind: str | None = None  # "csv" | "jsonl" | "document", decided on first content
        self._offset = 0  # bytes consumed (complete lines only)
        self._header: list[str] | None = None
        self._header_raw: bytes | None = None
        self._rows_done = 0  # CSV data rows / JSON entries already seen
        self._skip = 0  # CSV rows to pass over after a header rewrite (already returned)
        self._doc_stamp: tuple[int, int] | None = None  # (size, mtime_ns) of a JSON document
        self._grad_norms: list[GradNormRecord] = []  # read, not yet taken

    def take_grad_norms(self) -> list[GradNormRecord]:
        """The gradient-norm records ``(value, loss, step, epoch)`` of the rows read since the
        last call, in file order (see the module docstring)."""
        out, self._grad_norms = self._grad_norms, []
        return out

    def poll(self, now: datetime) -> list[ProgressPoint]:
        """Points from rows completed since the last poll (``[]`` if the file is missing).

        Args:
            now: when the poll happened (aware UTC); it becomes each point's ``time``.

        Never raises for a missing, unreadable or half-written file.
        """
        return self._read(now, final=False)

    def flush(self, now: datetime) -> list[ProgressPoint]:
        """Like :meth:`poll`, but also reads a last line that has no newline (job ended)."""
        return self._read(now, final=True)

    def _read(self, now: datetime | None, *, final: bool) -> list[ProgressPoint]:
        try:
            # O_NONBLOCK: opening a FIFO in the metrics file's place must never block the watch
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            if special_file_kind(self.path, fd) is not None:  # a FIFO or a device: nothing to read
                os.close(fd)
                return []
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if self._kind is None:
                    self._kind = _detect(fh.read(_DETECT_BYTES), final=final)
                    if self._kind is None:
                        return []
                if self._kind == "document":
                    return self._read_document(fh, now)
                if self._kind == "csv" and not self._check_header(fh, size):
                    return []
                if self._kind == "jsonl" and size < self._offset:
                    self._offset = 0  # truncated or replaced: a new file
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        end = len(data) if final else data.rfind(b"\n") + 1
        if end <= 0:
            return []
        self._offset += end
        text = data[:end].decode("utf-8", errors="replace")
        if self._kind == "jsonl":
            return self._from_json_rows(text.splitlines(), now)
        return self._from_csv(text, now)

    # -- CSV ----------------------------------------------------------------------------------
    def _check_header(self, fh: io.BufferedReader, size: int) -> bool:
        """Read the header line; handle a rewrite or truncation. False: no complete header."""
        fh.seek(0)
        raw = fh.readline(_DETECT_BYTES)
        if not raw.endswith(b"\n"):
            return False  # empty, or caught in the middle of a rewrite
        if self._header_raw is None:
            self._set_header(raw)
            self._offset = len(raw)
        elif raw != self._header_raw:
            # Lightning's CSVLogger rewrote the file with more columns: the rows we returned
            # come again first, under the new header.
            self._set_header(raw)
            self._offset = len(raw)
            self._skip = self._rows_done
            self._rows_done = 0
        elif size < self._offset:
            self._offset = len(raw)  # same header, shorter file: a new run from the start
            self._rows_done = self._skip = 0
        return True

    def _set_header(self, raw: bytes) -> None:
        self._header_raw = raw
        self._header = _split_header(raw)
        self._keys.reset()
        self._keys.choose(self._header)

    def _from_csv(self, text: str, now: datetime | None) -> list[ProgressPoint]:
        if self._header is None:
            return []
        points: list[ProgressPoint] = []
        width = len(self._header)
        try:
            for cells in csv_rows(text):
                if not cells or all(not c.strip() for c in cells):
                    continue
                if [c.strip() for c in cells] == self._header:
                    continue  # a repeated header line
                self._rows_done += 1
                if self._skip > 0:
                    self._skip -= 1
                    continue
                if len(cells) != width:
                    continue
                points.extend(_points_from_row(dict(zip(self._header, cells)), self._keys, now, self._grad_norms,
                                                self._bad_steps))
        except csv.Error:
            pass  # a NUL byte or broken quoting: keep what was read
        return points

    # -- JSON ---------------------------------------------------------------------------------
    def _from_json_rows(self, lines: Iterable[str], now: datetime | None) -> list[ProgressPoint]:
        points: list[ProgressPoint] = []
        for row in _json_rows(lines):
            self._keys.choose(row.keys())
            points.extend(_points_from_row(row, self._keys, now, self._grad_norms, self._bad_steps))
        return points

    def _read_document(self, fh: io.BufferedReader, now: datetime | None) -> list[ProgressPoint]:
        st = os.fstat(fh.fileno())
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp == self._doc_stamp:
            return []
        fh.seek(0)
        entries = _log_history(fh.read().decode("utf-8", errors="replace"))
        if entries is None:
            return []  # half-written: try again next poll
        self._doc_stamp = stamp
        if len(entries) < self._rows_done:
            self._rows_done = 0  # a different (shorter) history: a new run
        new = entries[self._rows_done :]
        self._rows_done = len(entries)
        keys = _KeyChoice(self._keys.loss_key or "loss", self._keys.eval_key or "eval_loss", True, True)
        keys.grad_key = self._keys.grad_key
        points: list[ProgressPoint] = []
        for entry in new:
            keys.choose(entry.keys())
            points.extend(_points_from_row(entry, keys, now, self._grad_norms, self._bad_steps))
        self._keys.grad_key = keys.grad_key
        return points


_DETECT_BYTES = 64 * 1024


def _detect(head: bytes, *, final: bool) -> str | None:
    """"csv", "jsonl" or "document" from the first bytes; None while that cannot be told yet."""
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        return None
    complete_line = "\n" in stripped or final or len(head) >= _DETECT_BYTES
    if not complete_line:
        return None  # the first line is still being written
    if stripped.startswith("{"):
        try:
            first = loads(stripped.split("\n", 1)[0])
        except ValueError:
            return "document"
        # a trainer_state.json written on one line (json.dumps without indent) is a document
        return "document" if isinstance(first, dict) and isinstance(first.get("log_history"), list) else "jsonl"
    return "csv"


def csv_rows(text: str) -> Iterator[list[str]]:
    """A ``csv.reader`` over ``text`` (in memory) that reads a cell of any length: the csv
    module's process-wide field limit (131,072 characters by default, which raised ``csv.Error``
    and dropped the rest of a read) is raised to ``len(text)``, never lowered — the text is in
    memory already, so the limit guards nothing here. Raises ``csv.Error`` for a NUL byte or
    broken quoting, as ``csv.reader`` does."""
    if len(text) >= csv.field_size_limit():
        csv.field_size_limit(len(text) + 1)
    return csv.reader(io.StringIO(text))


def _split_header(raw: bytes) -> list[str]:
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    cells = next(csv_rows(text), [])
    return [c.strip() for c in cells]


def read_metrics_file(
    path: str | os.PathLike[str], *, loss_key: str | None = None, eval_key: str | None = None,
    counts: dict[str, int] | None = None,
) -> list[ProgressPoint]:
    """All progress points in a finished metrics file, with ``time=None`` (no read time).

    Same shapes and column choice as :class:`MetricsFileFollower`; a missing or unreadable
    file gives ``[]``. With ``counts``, a row whose step is no count (a 400-digit step) is
    skipped, counted in ``counts["bad_steps"]`` (``costctl analyze``: the rest keep their
    steps), instead of giving points without a step.
    """
    follower = MetricsFileFollower(path, loss_key=loss_key, eval_key=eval_key, skip_bad_steps=counts is not None)
    points = follower._read(None, final=True)
    if counts is not None and follower._bad_steps is not None:
        counts["bad_steps"] = follower._bad_steps[0]
    return points
