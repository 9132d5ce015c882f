"""FROZEN COPY of costctl/progress/lines.py before the block reader (issue 13): the parity oracle.

Do not edit: tests/test_progress_block_parity.py requires the block reader to give exactly
the points this per-line parser gives. Original docstring follows.

Training progress (the loss) parsed from a child's text output, line by line.

:func:`parse_line` is pure: one line in, the losses it reports out (``ProgressPoint`` with
``time=None``). :class:`LineParser` sits on the live pipe: it takes arbitrary decoded chunks,
re-assembles lines (``\\n``, ``\\r`` and ``\\r\\n`` all end a line, CRLF once; tqdm's ``\\r``
updates are lines of their own), strips ANSI escape codes, keeps the epoch from Keras-style
``Epoch 3/10`` header lines, and stamps each point with the time it was seen.

Recognised shapes (case-insensitive names; values may be ``nan``, ``inf``, ``-inf``)::

    loss: 0.123        loss=0.123        Loss 0.123        train/loss: 0.1
    {'loss': 0.12, 'grad_norm': 1.1, 'learning_rate': 2e-05, 'epoch': 0.91}     (HF Trainer)
    {'eval_loss': 0.66, ..., 'epoch': 1.0}                                       (eval)
    9595/9595 [=====] - 1s - loss: 0.62 - acc: 0.63 - val_loss: 0.53             (Keras)
    iter 100: loss 2.3456, time 1440.31ms, mfu 0.01%                             (nanoGPT)
    step 500: train loss 2.3, val loss 2.4                                       (nanoGPT eval)
    Iteration 5, loss = 0.42                                                     (scikit-learn)
    epoch 3/80 loss: 0.1234                                                      (epoch, total)
    Epoch [3/80], Step [100/600], Loss: 0.25        (per-epoch step made global: 1300 of 48000)
    Epoch 4 | running_loss: 0.41 | kl_loss: 0.02           (avg/mean/running/epoch/batch_loss)
      5%|▌    | 50/1000 [00:10<03:10, 5.0it/s, loss=2.31]                       (tqdm postfix)

Not progress: the HF summary ``{'train_runtime': ..., 'train_loss': ...}`` and HF's
``***** train metrics *****`` block (``  train_loss   =   0.4479``), test/predict losses,
``loss_scale: 65536``, ``lr=0.001``, ``train_runtime``. nanoGPT's eval line reports
``train loss`` from ``estimate_loss()`` beside ``val loss``; only the val loss is kept (as
``kind="eval"``) so that the train series stays the per-iteration one.

Garbage (binary junk, ``loss: abc``, lines over :data:`MAX_LINE_CHARS`) is skipped, never
raised. The per-line cost is one substring test for lines that cannot hold a loss.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import datetime

from costctl.errors import UsageError
from costctl.records import ProgressPoint

__all__ = [
    "MAX_LINE_CHARS",
    "LineParser",
    "compile_loss_regex",
    "parse_epoch_header",
    "parse_line",
    "parse_value",
]

#: Lines longer than this (characters) are skipped unparsed; a partial line that grows past it
#: is dropped up to its next line end, so a child writing megabytes without a newline costs
#: bounded memory and time.
MAX_LINE_CHARS = 64 * 1024

# A number (atomic, so "0.12abc" cannot shrink to "0.1") or nan/inf, not followed by a letter.
_NUMBER = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z0-9_])"
_VALUE = rf"(?:tensor\(\s*)?(?P<value>{_NUMBER})"

_TRAIN_PREFIXES = {"", "train", "training", "total", "avg", "average", "mean", "running", "epoch", "batch"}
_EVAL_PREFIXES = {"val", "valid", "validation", "eval", "evaluation", "dev"}
# test/predict losses are end-of-run reports, not progress: matched so they are not misread
# as a bare "loss", then dropped.
_LOSS_RE = re.compile(
    r"(?<![A-Za-z0-9_])"
    r"(?P<name>(?:(?P<prefix>training|train|total|average|avg|mean|running|epoch|batch"
    r"|validation|valid|val|evaluation|eval|dev|test|predict)"
    r"[ _/.-]?)?loss)"
    r"(?![A-Za-z0-9_])"
    rf"\s*(?:[:=]\s*|\s+){_VALUE}",
    re.IGNORECASE,
)
_STEP_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:global_step|step|iteration|iter)\s*(?:[:=#]\s*|\s+)?\[?\s*"
    r"(?P<n>\d+)(?:\s*/\s*(?P<total>\d+))?(?![\d.])",
    re.IGNORECASE,
)
_EPOCH_RE = re.compile(
    r"(?<![A-Za-z0-9_])epoch\s*(?:[:=#]\s*|\s+)?\[?\s*"
    r"(?P<n>\d+(?:\.\d+)?)(?:\s*/\s*(?P<total>\d+))?(?![\d.])",
    re.IGNORECASE,
)
_EPOCH_HEADER_RE = re.compile(
    r"\s*epoch\s*\[?\s*(?P<n>\d+)\s*(?:/\s*(?P<total>\d+)\s*)?\]?\s*:?\s*", re.IGNORECASE
)
# tqdm: "{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}{postfix}]".
_TQDM_RE = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[[\d?]")
# A Python-repr or JSON dict entry: 'key': value.
_DICT_ITEM_RE = re.compile(
    rf"""['"](?P<key>[^'"]{{1,80}})['"]\s*:\s*(?P<q>['"]?){_VALUE}(?P=q)""", re.IGNORECASE
)
# Hugging Face Trainer.log_metrics block: "  train_loss               =      0.4479".
_HF_METRICS_BLOCK_RE = re.compile(
    r" {2}(?:train|eval|test|predict)_\w+\s* = \s*\S+\s*", re.IGNORECASE
)
# nanoGPT's eval line; its "train loss" is estimate_loss() on eval batches.
_NANOGPT_EVAL_RE = re.compile(r"\s*step \d+: train loss \S+, val loss ", re.IGNORECASE)

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase line
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL / ST
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
)
# C0 controls other than tab (Keras writes \b runs; junk bytes decode to them).
_CONTROL_TABLE = {c: None for c in range(32) if c != 9} | {127: None}
# A run of those controls inside a number (after the ANSI escapes are removed): a digit before it
# and a digit, "." or an exponent ("e5", "e-5") after it; or ".", a sign or a digit's exponent
# letter before it and a digit after it ("0.\x0025", "1\x002", "1e\x005", "-\x001"). A number
# written across one is not a number (a NUL or junk byte in the output), never the two halves
# spliced. (_scan.c hands every line with a control run after one of 0-9 . + - e E back here.)
_SPLIT_NUMBER_RE = re.compile(
    r"(?<=[0-9])[\x00-\x08\x0a-\x1f\x7f]+(?=[0-9.]|[eE][+-]?[0-9])"
    r"|(?<=[.+-])[\x00-\x08\x0a-\x1f\x7f]+(?=[0-9])|(?<=[0-9.][eE])[\x00-\x08\x0a-\x1f\x7f]+(?=[+-]?[0-9])"
)

_HF_TRAIN_KEYS = ("loss", "train_loss", "total_loss")
_HF_EVAL_KEYS = ("eval_loss", "val_loss", "validation_loss", "valid_loss", "eval/loss", "val/loss")
_HF_STEP_KEYS = ("step", "global_step", "iteration", "iter")
_LINE_END_RE = re.compile(r"\r\n|\r|\n")


#: The largest epoch kept (costctl.progress.lines.MAX_EPOCH, issue 17): a larger one is no epoch.
MAX_EPOCH = 1_000_000.0


def _epoch_bounded(point: ProgressPoint) -> ProgressPoint:
    return replace(point, epoch=None) if point.epoch is not None and point.epoch > MAX_EPOCH else point


def parse_value(text: str) -> float | None:
    """Parse a loss value as printed: decimal, scientific, ``nan``/``inf``/``-inf`` (any case).

    Returns None (never raises) for anything else, e.g. ``"abc"``, and for a decimal literal
    past the float range (``1e400``, 400 digits): a huge number is no number (issue 17), only a
    literal ``inf``/``nan`` printed by the job is the divergence signal.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    if math.isinf(value) and "inf" not in text.lower():
        return None  # an overflowing literal, not the word inf
    return value


def clean_line(line: str) -> str:
    """Remove ANSI escape sequences and C0 control characters (except tab) from ``line``.

    A line where a control character sits inside a number (``loss: 0.\\x0025``, see
    :data:`_SPLIT_NUMBER_RE`) reads as ``""``: that number is no number, and the two halves are
    never spliced into another (0.25).
    """
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    if not line.isprintable():
        if _SPLIT_NUMBER_RE.search(line):
            return ""
        line = line.translate(_CONTROL_TABLE)
    return line


def _maybe_loss(line: str) -> bool:
    return "oss" in line or "OSS" in line


def _step_epoch_total(line: str) -> tuple[int | None, float | None, int | None]:
    """Step, epoch and run length (total) written on the same line, when present.

    * ``Epoch [3/80], Step [100/600]`` counts steps within an epoch: the global step is
      ``(3 - 1) * 600 + 100`` and the total ``80 * 600``.
    * ``epoch 3/80`` with no step: ``total`` is 80, in epochs.
    * a tqdm bar gives step and total only when the line names no epoch; with one (Lightning's
      ``Epoch 0: 50%|...| 25/50``) the bar counts batches within the epoch, not the run.
    """
    step = step_total = epoch_total = None
    epoch = None
    m = _STEP_RE.search(line)
    if m:
        step = int(m["n"])
        step_total = int(m["total"]) if m["total"] else None
    m = _EPOCH_RE.search(line)
    if m:
        epoch = float(m["n"])
        epoch_total = int(m["total"]) if m["total"] else None
    if step is None:
        if epoch is None:
            m = _TQDM_RE.search(line)
            if m:
                return int(m["n"]), None, int(m["total"])
        return None, epoch, epoch_total
    if epoch is not None and epoch_total and step_total and epoch >= 1 and step <= step_total:
        return int(epoch - 1) * step_total + step, epoch, epoch_total * step_total
    return step, epoch, step_total


def _parse_dict(line: str) -> list[ProgressPoint] | None:
    """Points from a Hugging Face style dict line; None when the line holds no such dict."""
    start = line.find("{")
    items: dict[str, float] = {}
    for m in _DICT_ITEM_RE.finditer(line, start):
        value = parse_value(m["value"])
        if value is not None:
            items.setdefault(m["key"].lower(), value)
    if not items:
        return None
    if any(key.endswith("_runtime") and key.startswith("train") for key in items):
        return []  # the end-of-training summary (train_runtime, train_loss): not progress
    step_value = next((items[k] for k in _HF_STEP_KEYS if k in items), None)
    step = int(step_value) if step_value is not None and math.isfinite(step_value) else None
    epoch = items.get("epoch")
    if epoch is not None and not math.isfinite(epoch):
        epoch = None
    points = []
    for keys, kind in ((_HF_TRAIN_KEYS, "train"), (_HF_EVAL_KEYS, "eval")):
        for key in keys:
            if key in items:
                points.append(
                    ProgressPoint(
                        time=None, value=items[key], kind=kind, name=key, step=step, epoch=epoch
                    )
                )
                break
    return points if points else None


def parse_line(line: str) -> list[ProgressPoint]:
    """Losses reported on one line of training output (see the module docstring for shapes).

    Args:
        line: one line without its line end; ANSI codes are tolerated (stripped here).

    Returns:
        0-2 points with ``time=None``: at most one ``kind="train"`` and one ``kind="eval"``,
        with ``step``, ``epoch`` and ``total`` filled from the same line when it gives them
        (``total`` is in steps, or in epochs when the line gives an epoch count but no step).
        Never raises; a line it cannot read gives ``[]``.
    """
    if not _maybe_loss(line) or len(line) > MAX_LINE_CHARS:
        return []
    line = clean_line(line)
    if "{" in line and ("{'" in line or '{"' in line):
        points = _parse_dict(line)
        if points is not None:
            return points
    if _HF_METRICS_BLOCK_RE.fullmatch(line):
        return []
    train = evaluation = None
    for m in _LOSS_RE.finditer(line):
        prefix = (m["prefix"] or "").lower()
        value = parse_value(m["value"])
        if value is None:
            continue
        if prefix in _TRAIN_PREFIXES and train is None:
            train = (m["name"], value)
        elif prefix in _EVAL_PREFIXES and evaluation is None:
            evaluation = (m["name"], value)
    if train is None and evaluation is None:
        return []
    if train is not None and evaluation is not None and _NANOGPT_EVAL_RE.match(line):
        train = None
    step, epoch, total = _step_epoch_total(line)
    points = []
    for found, kind in ((train, "train"), (evaluation, "eval")):
        if found is not None:
            points.append(
                ProgressPoint(
                    time=None, value=found[1], kind=kind, name=found[0],
                    step=step, epoch=epoch, total=total,
                )
            )
    return points


def parse_epoch_header(line: str) -> tuple[int, int | None] | None:
    """``(epoch, total_epochs)`` for a line that is only an epoch header (Keras ``Epoch 2/10``).

    Returns None for any other line. ``total_epochs`` is None for ``Epoch 2`` alone.
    """
    if "poch" not in line and "POCH" not in line:
        return None
    m = _EPOCH_HEADER_RE.fullmatch(clean_line(line))
    if not m:
        return None
    return int(m["n"]), (int(m["total"]) if m["total"] else None)


def compile_loss_regex(pattern: str) -> re.Pattern[str]:
    """Compile a user's ``--loss-regex``.

    The pattern needs a named group ``loss`` (optionally ``step``, ``epoch`` and
    ``eval_loss``), or exactly one unnamed group holding the loss.

    Raises:
        UsageError: the pattern does not compile or has no usable group; the message names
            the pattern and what is allowed.
    """
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise UsageError(
            f"--loss-regex '{pattern}' is not a valid regular expression ({exc}); "
            "give one with a named group (?P<loss>...) or exactly one group"
        ) from None
    if "loss" not in compiled.groupindex and compiled.groups != 1:
        raise UsageError(
            f"--loss-regex '{pattern}' has {compiled.groups} groups and no group named 'loss'; "
            "give a named group (?P<loss>...) (optionally step, epoch, eval_loss) or exactly one group"
        )
    return compiled


def _parse_custom(regex: re.Pattern[str], line: str) -> list[ProgressPoint]:
    if len(line) > MAX_LINE_CHARS:
        return []
    m = regex.search(clean_line(line))
    if not m:
        return []
    groups = m.groupdict()
    points = []
    step_text, epoch_text = groups.get("step"), groups.get("epoch")
    step_f = parse_value(step_text) if step_text else None
    step = int(step_f) if step_f is not None and math.isfinite(step_f) else None
    epoch = parse_value(epoch_text) if epoch_text else None
    loss_text = groups["loss"] if "loss" in regex.groupindex else m.group(1)
    for text, kind, name in ((loss_text, "train", "loss"), (groups.get("eval_loss"), "eval", "eval_loss")):
        value = parse_value(text) if text else None
        if value is not None:
            points.append(ProgressPoint(time=None, value=value, kind=kind, name=name, step=step, epoch=epoch))
    return points


class LineParser:
    """Incremental parser for a child's decoded output (one instance per stream).

    Args:
        loss_regex: a user's ``--loss-regex`` that replaces the built-in shapes
            (see :func:`compile_loss_regex`).

    Raises:
        UsageError: ``loss_regex`` is invalid.

    Example::

        parser = LineParser()
        parser.feed("iter 5: loss 2.1", now)      # [] - the line is not finished yet
        parser.feed("0\\n", now)                    # [ProgressPoint(value=2.10, step=5, ...)]
    """

    def __init__(self, loss_regex: str | None = None) -> None:
        self._regex = compile_loss_regex(loss_regex) if loss_regex is not None else None
        self._pending: list[str] = []
        self._pending_len = 0
        self._discarding = False  # inside a line that grew past MAX_LINE_CHARS
        self._after_cr = False  # the previous chunk ended in "\r" (a "\n" next completes CRLF)
        self._epoch: int | None = None  # from the last "Epoch k/N" header line
        self._epochs_total: int | None = None
        #: Complete lines seen so far (every line end, CRLF once; empty lines included).
        self.lines_seen = 0

    def feed(self, chunk: str, now: datetime) -> list[ProgressPoint]:
        """Take the next piece of output; return the points of the lines it completed.

        Args:
            chunk: decoded text of any length (may split lines, CRLF pairs or escapes).
            now: when the chunk was read (aware UTC); it becomes each point's ``time``.
        """
        if not chunk:
            return []
        if self._after_cr and chunk[0] == "\n":
            chunk = chunk[1:]
        self._after_cr = chunk.endswith("\r")
        points: list[ProgressPoint] = []
        pos = 0
        for m in _LINE_END_RE.finditer(chunk):
            self._append(chunk[pos : m.start()])
            points.extend(self._finish_line(now))
            pos = m.end()
        self._append(chunk[pos:])
        return points

    def flush(self, now: datetime) -> list[ProgressPoint]:
        """Parse a final line that never got its line end (call when the stream closes)."""
        if not self._pending and not self._discarding:
            return []
        points = self._finish_line(now)
        self._after_cr = False
        return points

    def _append(self, piece: str) -> None:
        if not piece or self._discarding:
            return
        self._pending_len += len(piece)
        if self._pending_len > MAX_LINE_CHARS:
            self._pending.clear()
            self._pending_len = 0
            self._discarding = True
        else:
            self._pending.append(piece)

    def _finish_line(self, now: datetime) -> list[ProgressPoint]:
        self.lines_seen += 1
        line = "".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        if self._discarding:
            self._discarding = False
            return []
        if not line:
            return []
        return self.parse(line, now)

    def parse(self, line: str, now: datetime | None) -> list[ProgressPoint]:
        """Parse one complete line with this parser's state (epoch context, custom regex)."""
        if self._regex is not None:
            return [_epoch_bounded(replace(p, time=now)) for p in _parse_custom(self._regex, line)]
        header = parse_epoch_header(line)
        if header is not None:
            self._epoch, self._epochs_total = header
            return []
        points = parse_line(line)
        if not points:
            return []
        out = []
        for point in points:
            if point.epoch is None and self._epoch is not None:
                total = point.total
                if total is None and point.step is None:
                    total = self._epochs_total
                point = replace(point, epoch=float(self._epoch), total=total)
            out.append(_epoch_bounded(replace(point, time=now)))
        return out
