"""Training progress (the loss) parsed from a child's text output, a block at a time.

:func:`parse_line` is pure: one line in, the losses it reports out (``ProgressPoint`` with
``time=None``). :class:`LineParser` is the block reader that ``costctl watch`` runs on the
child's pipe and ``costctl analyze`` on a file: :meth:`LineParser.feed_batch` takes raw bytes
(incremental UTF-8 decoding, bad bytes replaced) or text of any size, re-assembles lines
(``\n``, ``\r`` and ``\r\n`` all end a line, CRLF once; tqdm's ``\r`` updates are lines
of their own), runs one compiled regex over the whole block (:data:`_BLOCK_RE`) that reads
the commonest strict line shapes in place (HF Trainer dicts, nanoGPT, tqdm loss postfixes,
Keras, bare ``loss: x``, ``Epoch k/N`` headers) and hands every other candidate line to the
per-line parser (lines without ``oss``/``OSS``/``poch``/``POCH`` never reach Python code), strips ANSI escape codes,
keeps the epoch from Keras-style ``Epoch 3/10`` header lines, and appends the points to a
:class:`~costctl.progress.batch.PointBatch` stamped with the time the chunk was read.

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
raised. Lines that cannot hold a loss cost only the regex engine's literal scan.

Engines (:data:`ENGINE`; both give the same batches, column for column, and the same
:attr:`LineParser.lines_seen`; tests/test_progress_native_parity.py holds them to the frozen
old parser):

* ``"native"``: the optional C extension ``costctl.progress._scan`` (``_scan.c``, built by
  ``pip install`` when a C compiler is there). It scans the raw bytes (no decoding; the
  unfinished line is kept as bytes), reads the strict shapes of :data:`_BLOCK_RE` straight into
  point records (numbers converted as ``float()``/``int()`` do), and reads every other ASCII
  candidate line with :func:`_parse_raw`'s general grammar, written in C (the same ANSI and
  control stripping, matches, prefixes, dict rules and step/epoch/total, series named as
  written). It hands back, decoded with ``errors="replace"``, to the per-line parser here only
  what it is not sure of: lines holding non-ASCII bytes (Unicode ``\\d``, ``\\s`` and case
  folding), numbers over 300 characters, integers over 18 digits or steps past int64, possible
  epoch headers; it stops after such a header line so that the points after it get the new
  epoch context. The GIL is released while a block is scanned.
  Text input is encoded to UTF-8 and scanned the same way (text UTF-8 cannot encode, i.e. lone
  surrogates, turns that parser to the Python engine for good, its state kept).
* ``"python"``: the block regex and per-line parser below, on decoded text. Used when the
  extension is not built, or when the environment variable ``COSTCTL_PARSER=python`` is set
  (read at import), or per parser with ``LineParser(engine="python")``.

A ``--loss-regex`` always runs in Python (each line decoded), whatever the engine, on the
:mod:`regex` engine with a time budget per line (:mod:`costctl.user_regex`: a line whose search
takes over 50 ms is skipped and counted; after 10 such lines the pattern is turned off and the
built-in shapes read the rest; :attr:`LineParser.user_regex` holds the counts).

Huge numbers (both engines: the native one hands them to the per-line parser): an integer past
int64 (a step, a total, an epoch header's total, of any length: never an ``int()`` of more than
19 significant digits) is no number: no step, no total, the loss kept; an epoch past the float
range (309+ digits) is no epoch, and an epoch header with one is no header. A loss value reads
as ``float()`` reads it (``1e400`` and 400 digits are ``inf``: a divergence).
"""

from __future__ import annotations

import codecs
import math
import os
import re
from array import array
from collections.abc import Iterator
from itertools import chain
from datetime import datetime
from typing import Any

from costctl.errors import UsageError
from costctl.i18n import _
from costctl.progress.batch import NO_INT, PointBatch, column_int
from costctl.records import ProgressPoint
from costctl.user_regex import UserRegex, compile_user_regex, shown_pattern

_NAN = float("nan")

__all__ = [
    "ENGINE",
    "MAX_LINE_CHARS",
    "count_long_lines",
    "LineParser",
    "candidate_lines",
    "compile_loss_regex",
    "parse_epoch_header",
    "parse_line",
    "parse_value",
]

#: Lines longer than this (characters) are skipped unparsed; a partial line that grows past it
#: is dropped up to its next line end, so a child writing megabytes without a newline costs
#: bounded memory and time.
MAX_LINE_CHARS = 64 * 1024
# The native engine works on bytes: a line of more than 4 bytes per character allowed cannot
# be MAX_LINE_CHARS characters or fewer (UTF-8 holds a character in at most 4 bytes, and a
# replaced bad byte is one character), so it is skipped, and a partial line is dropped past it.
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
_I64_MAX = (1 << 63) - 1
#: What :func:`_int` gives for a digit run past int64: one past :data:`_I64_MAX`, which the
#: columns (:func:`~costctl.progress.batch.column_int`) and :func:`_held` read as no step/total,
#: as they read any integer past int64; its arithmetic (a global step, a product of totals)
#: stays past int64 exactly when the true value's does.
_PAST_I64 = _I64_MAX + 1
#: The most significant digits of an epoch number kept (more: a float overflow, no epoch).
_MAX_EPOCH_DIGITS = 308


def _int(digits: str) -> int:
    """``int(digits)`` of a regex's ``\\d+`` (Unicode digits too, as ``int()`` reads them),
    without ``int()``'s 4,300-digit ``ValueError``: more than 19 significant digits (past any
    int64) gives :data:`_PAST_I64`, which reads as no step or total."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 19 else _PAST_I64


#: The largest epoch kept: a run of a million passes over its data is far past any real job
#: (long runs count tens to a few thousand epochs); a larger epoch (``Epoch 2**64``) is no epoch:
#: the point keeps its value and step, its epoch is absent (issue 17).
MAX_EPOCH = 1_000_000.0


def _drop_huge_epochs(batch: PointBatch, start: int) -> None:
    """Blank (NaN: no epoch) the epochs of ``batch`` from ``start`` on that exceed
    :data:`MAX_EPOCH`; both engines' points pass through here."""
    epochs = batch.epochs
    for i in range(start, len(epochs)):
        if epochs[i] > MAX_EPOCH:
            epochs[i] = _NAN


def _epoch_number(text: str) -> float | None:
    """An epoch as written (``\\d+(\\.\\d+)?``) as a float; None when it is not finite (a
    number past the float range is no epoch: the columns and the series never hold an
    infinite epoch)."""
    value = float(text)
    return value if math.isfinite(value) else None


def _select_engine() -> tuple[str, object]:
    """``("native", module)`` when the C scanner is built and not refused, else ``("python", None)``."""
    if os.environ.get("COSTCTL_PARSER", "").strip().lower() == "python":
        return "python", None
    try:
        from costctl.progress import _scan  # type: ignore[attr-defined]
    except ImportError:
        return "python", None
    return "native", _scan


#: The block reader in use: ``"native"`` (the C scanner ``costctl.progress._scan``, built by
#: ``pip install`` when a C compiler is there) or ``"python"`` (no extension, or the environment
#: variable ``COSTCTL_PARSER=python``, read at import). Both give the same points.
ENGINE, _scan = _select_engine()

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
# A Python-repr or JSON dict entry: 'key': value, the value bare or quoted ('key': '0.695':
# transformers 5 prints its log dicts' values as strings, f"{v:.4g}").
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


def _splits_number(line: str) -> bool:
    """Whether a control character sits inside a number of ``line`` once its ANSI escapes are
    removed (:data:`_SPLIT_NUMBER_RE`; :func:`clean_line` then reads the line as ``""``)."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    return _SPLIT_NUMBER_RE.search(line) is not None


def _maybe_loss(line: str) -> bool:
    return "oss" in line or "OSS" in line


# A point before it becomes a record: (kind, name, value, step, epoch, total).
_Raw = tuple[str, str, float, "int | None", "float | None", "int | None"]
# Longest text a _LOSS_RE match holds before its "loss": "validation" + one separator.
_LOSS_LEAD = 11
# _LOSS_RE up to its "loss": where a match may start, found in a window of _LOSS_LEAD + 4.
_LOSS_HEAD_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:(?:training|train|total|average|avg|mean|running|epoch|batch"
    r"|validation|valid|val|evaluation|eval|dev|test|predict)[ _/.-]?)?loss",
    re.IGNORECASE,
)


def _loss_matches(line: str, low: str | None) -> Iterator[re.Match[str]]:
    """``_LOSS_RE.finditer(line)``, the same matches, found without trying every position.

    Every match holds ``loss`` (any case) and starts at most :data:`_LOSS_LEAD` characters
    before it (no prefix word holds ``loss``), so on an ASCII line (``low`` = its lower case,
    same positions) only the windows before each ``loss`` are tried, in order, each start with
    the full regex, and matches never overlap, as finditer's.
    """
    if low is None:
        yield from _LOSS_RE.finditer(line)
        return
    find, head, full = low.find, _LOSS_HEAD_RE.search, _LOSS_RE.match
    done = 0  # where the last match ended
    q = find("loss")
    while q >= 0:
        start = max(q - _LOSS_LEAD, done)
        while start <= q:
            h = head(line, start, q + 4)
            if h is None:
                break
            m = full(line, h.start())
            if m is not None:
                yield m
                done = m.end()
                break
            start = h.start() + 1
        q = find("loss", max(q + 1, done))


def _step_epoch_total(line: str, low: str | None = None) -> tuple[int | None, float | None, int | None]:
    """Step, epoch and run length (total) written on the same line, when present.

    * ``Epoch [3/80], Step [100/600]`` counts steps within an epoch: the global step is
      ``(3 - 1) * 600 + 100`` and the total ``80 * 600``.
    * ``epoch 3/80`` with no step: ``total`` is 80, in epochs.
    * a tqdm bar gives step and total only when the line names no epoch; with one (Lightning's
      ``Epoch 0: 50%|...| 25/50``) the bar counts batches within the epoch, not the run.

    ``low`` is ``line.lower()`` for an ASCII line (the regexes are skipped when the literal
    they start with is absent), None to run them all.
    """
    step = step_total = epoch_total = None
    epoch = None
    if low is None:
        m = _STEP_RE.search(line)
    else:  # a match starts at "step"/"iter" or 7 before ("global_step")
        q_step, q_iter = low.find("step"), low.find("iter")
        starts = ([max(0, q_step - 7)] if q_step >= 0 else []) + ([q_iter] if q_iter >= 0 else [])
        m = _STEP_RE.search(line, min(starts)) if starts else None
    if m:
        step = _int(m["n"])
        step_total = _int(m["total"]) if m["total"] else None
    at = 0 if low is None else low.find("epoch")
    m = _EPOCH_RE.search(line, at) if at >= 0 else None
    if m:
        epoch = _epoch_number(m["n"])
        epoch_total = _int(m["total"]) if m["total"] else None
    if step is None:
        if epoch is None and "|" in line:
            m = _TQDM_RE.search(line)
            if m:
                return _int(m["n"]), None, _int(m["total"])
        return None, epoch, epoch_total
    if epoch is not None and epoch_total and step_total and epoch >= 1 and step <= step_total:
        return int(epoch - 1) * step_total + step, epoch, epoch_total * step_total
    return step, epoch, step_total


def _parse_dict(line: str) -> list[_Raw] | None:
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
    points: list[_Raw] = []
    for keys, kind in ((_HF_TRAIN_KEYS, "train"), (_HF_EVAL_KEYS, "eval")):
        for key in keys:
            if key in items:
                points.append((kind, key, items[key], step, epoch, None))
                break
    return points if points else None


def _parse_raw(line: str) -> list[_Raw]:
    """:func:`parse_line` without the records: ``(kind, name, value, step, epoch, total)`` each.

    The native engine reads the same rules in C (``_scan.c``, "The general loss-line grammar"):
    a change to them here (or to the regexes they use) must be made there too;
    tests/test_progress_native_parity.py fails on any difference.
    """
    if not _maybe_loss(line) or len(line) > MAX_LINE_CHARS:
        return []
    line = clean_line(line)
    if "{" in line and ("{'" in line or '{"' in line):
        points = _parse_dict(line)
        if points is not None:
            return points
    if line.startswith("  ") and _HF_METRICS_BLOCK_RE.fullmatch(line):
        return []
    # On an ASCII line lower() keeps positions: no match can start more than _LOSS_LEAD
    # characters before the first "loss" (any case), so the scan starts there.
    low = line.lower() if line.isascii() else None
    if low is not None and "loss" not in low:
        return []
    train = evaluation = None
    for m in _loss_matches(line, low):
        prefix = (m["prefix"] or "").lower()
        value = parse_value(m["value"])
        if value is None:
            continue
        if prefix in _TRAIN_PREFIXES and train is None:
            train = (m["name"], value)
        elif prefix in _EVAL_PREFIXES and evaluation is None:
            evaluation = (m["name"], value)
        if train is not None and evaluation is not None:
            break
    if train is None and evaluation is None:
        return []
    if train is not None and evaluation is not None and _NANOGPT_EVAL_RE.match(line):
        train = None
    step, epoch, total = _step_epoch_total(line, low)
    points: list[_Raw] = []
    if train is not None:
        points.append(("train", train[0], train[1], step, epoch, total))
    if evaluation is not None:
        points.append(("eval", evaluation[0], evaluation[1], step, epoch, total))
    return points


def _held(value: int | None) -> int | None:
    """A step or total as the columns and the ledger hold it: None past int64 (see
    :func:`costctl.progress.batch.column_int`)."""
    return None if value is None or column_int(value) == NO_INT else value


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
    return [
        ProgressPoint(time=None, value=value, kind=kind, name=name,  # type: ignore[arg-type]
                      step=_held(step), epoch=epoch, total=_held(total))
        for kind, name, value, step, epoch, total in _parse_raw(line)
    ]


def parse_epoch_header(line: str) -> tuple[int, int | None] | None:
    """``(epoch, total_epochs)`` for a line that is only an epoch header (Keras ``Epoch 2/10``).

    Returns None for any other line. ``total_epochs`` is None for ``Epoch 2`` alone.
    """
    if "poch" not in line and "POCH" not in line:
        return None
    m = _EPOCH_HEADER_RE.fullmatch(clean_line(line))
    if not m:
        return None
    if len(m["n"].lstrip("0")) > _MAX_EPOCH_DIGITS:
        return None  # past the float range: no epoch (see _epoch_number)
    return int(m["n"].lstrip("0") or "0"), (_int(m["total"]) if m["total"] else None)


def compile_loss_regex(pattern: str | UserRegex) -> UserRegex:
    """Compile a user's ``--loss-regex`` (:func:`costctl.user_regex.compile_user_regex`: the
    :mod:`regex` engine, each line's search bounded by
    :data:`~costctl.user_regex.LINE_BUDGET_S`).

    The pattern needs a named group ``loss`` (optionally ``step``, ``epoch`` and
    ``eval_loss``), or exactly one unnamed group holding the loss. An already compiled
    :class:`~costctl.user_regex.UserRegex` is returned as it is (one shared by two parsers).

    Raises:
        UsageError: the pattern does not compile or has no usable group; the message names
            the pattern and what is allowed.
    """
    if isinstance(pattern, UserRegex):
        return pattern
    compiled = compile_user_regex(pattern, option="--loss-regex")
    if "loss" not in compiled.groupindex and compiled.groups != 1:
        raise UsageError(_(
            "--loss-regex {pattern} has {count} groups and no group named 'loss'; give a named group "
            "(?P<loss>...) (optionally step, epoch, eval_loss) or exactly one group").format(
            pattern=shown_pattern(pattern), count=compiled.groups))
    return compiled


def _parse_custom(regex: UserRegex, line: str) -> list[_Raw]:
    if len(line) > MAX_LINE_CHARS:
        return []
    m = regex.search(clean_line(line))
    if not m:
        return []
    groups = m.groupdict()
    points: list[_Raw] = []
    step_text, epoch_text = groups.get("step"), groups.get("epoch")
    step_f = parse_value(step_text) if step_text else None
    step = int(step_f) if step_f is not None and math.isfinite(step_f) else None
    epoch = parse_value(epoch_text) if epoch_text else None
    if epoch is not None and not math.isfinite(epoch):
        epoch = None
    loss_text = groups["loss"] if "loss" in regex.groupindex else m.group(1)
    for text, kind, name in ((loss_text, "train", "loss"), (groups.get("eval_loss"), "eval", "eval_loss")):
        value = parse_value(text) if text else None
        if value is not None:
            points.append((kind, name, value, step, epoch, None))
    return points


# Every line parse() acts on holds one of these (tested on the raw line, as parse() does).
_CANDIDATES = (re.compile("oss"), re.compile("OSS"), re.compile("poch"), re.compile("POCH"))


def _line_spans(text: str, literal: re.Pattern[str], spans: list[tuple[int, int]]) -> None:
    """Append ``(start, end)`` of each line of ``text`` holding ``literal`` (once per line).

    Lines end at ``\n`` or ``\r``; ``text`` must end with a line end. Only the lines with a
    hit are looked at; the scan itself runs in the regex engine.
    """
    rfind, find = text.rfind, text.find
    end = -1
    for m in literal.finditer(text):
        p = m.start()
        if p < end:
            continue
        nl = rfind("\n", 0, p)
        cr = rfind("\r", nl + 1, p)
        start = (cr if cr > nl else nl) + 1
        nl = find("\n", p)
        if nl < 0:
            nl = len(text)
        cr = find("\r", p, nl)
        end = cr if cr >= 0 else nl
        spans.append((start, end))


def candidate_lines(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the lines of ``text`` that may hold a loss or an epoch header, in order.

    ``text`` ends with a line end (``\n``, ``\r`` or ``\r\n``). A line that holds none of
    ``oss``, ``OSS``, ``poch``, ``POCH`` cannot give a point nor set the epoch, so it never
    reaches Python code.
    """
    spans: list[tuple[int, int]] = []
    _line_spans(text, _CANDIDATES[0], spans)
    extra: list[tuple[int, int]] = []
    for literal in _CANDIDATES[1:]:
        if literal.pattern in text:
            _line_spans(text, literal, extra)
    if extra:
        spans = sorted(set(spans).union(extra))
    return spans


# Fast paths: lines that fully match one of these strict shapes give exactly what
# _parse_raw gives for them (printable ASCII, one loss, no prefix, the fields named here), so
# the general regexes are skipped. Any other line, however close, takes the general path.
_F = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_FAST_HF_RE = re.compile(rf"\{{'loss': ({_F}), 'grad_norm': {_F}, 'learning_rate': {_F}, 'epoch': ({_F})\}}")
_FAST_ITER_RE = re.compile(rf"iter (\d+): loss (\d+\.\d+), time \d+(?:\.\d+)?ms, mfu -?\d+(?:\.\d+)?%")


def _parse_fast(line: str) -> list[_Raw] | None:
    """:func:`_parse_raw`'s result for a line of a fast-path shape, else None."""
    if line.startswith("{'loss': "):
        m = _FAST_HF_RE.fullmatch(line)
        if m is not None:
            value, epoch = float(m[1]), float(m[2])
            if math.isinf(value) or math.isinf(epoch):
                return None  # an overflowing literal is no number: the general parse decides
            return [("train", "loss", value, None, epoch, None)]
    elif line.startswith("iter "):
        m = _FAST_ITER_RE.fullmatch(line)
        if m is not None:
            value = float(m[2])
            return None if math.isinf(value) else [("train", "loss", value, _int(m[1]), None, None)]
    return None


# Block fast path: one regex run over a whole block of complete lines, in line order. Each
# alternative but the last is a strict whole-line shape whose general parse (_parse_raw) is
# known exactly (printable ASCII only, no escape codes, bounded digits, so never over
# MAX_LINE_CHARS); the last alternative, "other", is any other line holding a candidate literal
# (oss/OSS/poch/POCH), handed to the per-line parser. Lines holding none of them match nothing:
# the engine skips them. Lines end at "\n" or "\r" (tqdm redraws each a line).
# The fast paths' number, bounded so that it never overflows a float (at most 30 + 30 digits and
# a two-digit exponent: below 1e130): an overflowing literal (1e400) is no number, which only
# the general parse decides (parse_value), so such lines take the "other" alternative.
_B = r"-?\d{1,30}+(?:\.\d{1,30}+)?+(?:e[-+]?\d{1,2}+)?+"
# Each match starts at the line end before its line (the leading character set lets the
# engine skip to line ends in its own loop): the block's first line is read on its own.
_BLOCK_RE = re.compile(
    r"[\r\n](?:"
    # 1-2: HF Trainer log dict -> train "loss", epoch
    rf"\{{'loss': ({_B}), 'grad_norm': {_B}, 'learning_rate': {_B}, 'epoch': ({_B})\}}"
    # 3-4: nanoGPT "iter N: loss X, time T ms, mfu M%" -> train "loss", step
    r"|iter (\d{1,18}+): loss (\d{1,30}+\.\d{1,30}+), time \d{1,18}+(?:\.\d{1,18}+)?+ms, mfu -?\d{1,18}+(?:\.\d{1,18}+)?+%"
    # 5-7: tqdm bar with a loss postfix -> train "loss", step n, total
    r"| {0,8}+\d{1,3}+%\|[# ]{0,100}+\| (\d{1,18}+)/(\d{1,18}+) \[\d{1,4}+(?::\d{1,4}+){0,2}+<[\d:?]{1,12}+, "
    rf"\d{{1,9}}+(?:\.\d{{1,9}}+)?+(?:it/s|s/it), loss=({_B})\]"
    # 8-9: Keras progress line -> train "loss" (and eval "val_loss")
    r"|\d{1,18}+/\d{1,18}+ \[[=>.]{0,200}+\] - \d{1,9}+s(?: \d{1,9}+[mu]?s/step)?"
    rf" - loss: ({_B})(?: - acc: {_B})?(?: - val_loss: ({_B})(?: - val_acc: {_B})?)?"
    # 10-11: nanoGPT eval "step N: train loss X, val loss Y" -> eval "val loss", step
    rf"|step (\d{{1,18}}+): train loss {_B}, val loss ({_B})"
    # 12: a bare "loss: X" / "loss=X" line -> train "loss"
    rf"|loss(?:: ?|=)({_B})"
    # 13-14: a Keras epoch header "Epoch k/N" -> the epoch context
    r"|Epoch (\d{1,18}+)/(\d{1,18}+)"
    # 15: any other line holding a candidate literal (possessive: one pass over a line)
    r"|([^\r\nopOP]*+(?:(?:o(?!ss)|O(?!SS)|p(?!och)|P(?!OCH))[^\r\nopOP]*+)*+(?:oss|OSS|poch|POCH)[^\r\n]*+)"
    r")(?=[\r\n])"
)
_FIRST_END_RE = re.compile(r"[\r\n]")
# The series of the native scanner's point codes 0, 1, 2.
_CODE_KEYS = (("train", "loss"), ("eval", "val_loss"), ("eval", "val loss"))
#: Characters per :data:`_BLOCK_RE` window: its rows for a window stay in the CPU's cache.
_WINDOW = 256 * 1024


def _block_rows(text: str, pos: int) -> Iterator[list[tuple[str, ...]]]:
    """``_BLOCK_RE.findall(text, pos)`` in pieces: the same rows, in order, window by window.

    Each window ends just after a line end (so its last line's lookahead sees it) and the
    next starts at that line end (where a match starts); ``text`` ends with a line end.
    """
    findall, n = _BLOCK_RE.findall, len(text)
    while n - pos > _WINDOW:
        end = max(text.rfind("\n", pos + 1, pos + _WINDOW), text.rfind("\r", pos + 1, pos + _WINDOW))
        if end < 0:
            break
        yield findall(text, pos, end + 1)
        pos = end
    yield findall(text, pos)


def count_long_lines(text: str | bytes, limit: int = MAX_LINE_CHARS) -> int:
    """How many lines of ``text`` (complete lines, ends ``\n``, ``\r\n`` or a lone ``\r``)
    hold more than ``limit`` characters, line end excluded; raw bytes are UTF-8 (a line of
    ``limit`` to ``4 * limit`` bytes is decoded, bad bytes replaced, to count its characters).

    Linear in ``len(text)``: one window of ``limit + 1`` characters looked at per line end
    found, never a Python step per short line.
    """
    n = len(text)
    if n <= limit:
        return 0
    raw = not isinstance(text, str)
    nl, cr = (b"\n", b"\r") if raw else ("\n", "\r")
    found = start = 0
    while n - start > limit:
        window = start + limit + 1
        end = max(text.rfind(nl, start, window), text.rfind(cr, start, window))  # type: ignore[arg-type]
        if end >= 0:
            start = end + 1
            continue
        ends = [e for e in (text.find(nl, window - 1), text.find(cr, window - 1)) if e >= 0]  # type: ignore[arg-type]
        end = min(ends) if ends else n
        if not raw or end - start > 4 * limit or len(bytes(text[start:end]).decode("utf-8", "replace")) > limit:
            found += 1
        start = end + 1
    return found


def _count_line_ends(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


class LineParser:
    """Incremental parser for a child's output (one instance per stream), block at a time.

    :meth:`feed_batch` takes raw bytes (decoded as UTF-8, bad bytes replaced, a sequence split
    across chunks kept for the next one) or decoded text of any size, splits it into lines
    (``\n``, ``\r`` and ``\r\n`` all end a line, CRLF once, also across chunks; each tqdm
    ``\r`` redraw is a line of its own), and parses only the candidate lines (see
    :func:`candidate_lines`) into a :class:`~costctl.progress.batch.PointBatch`. The partial
    last line waits for the next chunk; one that grows past :data:`MAX_LINE_CHARS` is dropped
    up to its line end.

    Args:
        loss_regex: a user's ``--loss-regex`` that replaces the built-in shapes
            (see :func:`compile_loss_regex`); every line is then tried.
        hook: reads each block of complete lines first (``hook.take(block, t, batch)``
            returns what this parser reads; ``hook.finish(batch, t)`` at :meth:`flush_batch`):
            a :class:`~costctl.progress.console.ConsoleSeries` (named losses, column tables,
            gradient norms).

    Raises:
        UsageError: ``loss_regex`` is invalid.

    Example::

        parser = LineParser()
        parser.feed_batch(b"iter 5: loss 2.1", now)      # empty: the line is not finished yet
        parser.feed_batch(b"0\\n", now)                   # one point: value 2.10, step 5
    """

    def __init__(self, loss_regex: str | UserRegex | None = None, *, engine: str | None = None,
                 hook: Any = None) -> None:
        self._regex = compile_loss_regex(loss_regex) if loss_regex is not None else None
        #: the user's pattern, kept for its counts after it is turned off (None: no --loss-regex)
        self.user_regex = self._regex
        self._hook = hook
        if engine not in (None, "native", "python"):
            raise UsageError(_("parser engine {engine!r}: expected 'native' or 'python'").format(engine=engine))
        if engine == "native" and _scan is None:
            raise UsageError(_("parser engine 'native': the C extension costctl.progress._scan is not built"))
        #: "native" or "python" (see :data:`ENGINE`); a native parser turns "python" for good
        #: when given text that UTF-8 cannot encode (lone surrogates).
        self.engine = engine or ENGINE
        self._native = self.engine == "native"
        self._pending: list[str] = []  # the unfinished last line, in pieces
        self._pending_len = 0
        self._discarding = False  # inside a line that grew past MAX_LINE_CHARS
        self._after_cr = False  # the previous chunk ended in "\r" (a "\n" next completes CRLF)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._epoch: int | None = None  # from the last "Epoch k/N" header line
        self._epochs_total: int | None = None
        #: Complete lines seen so far (every line end, CRLF once; empty lines included).
        self.lines_seen = 0
        #: Lines skipped because they hold more than :data:`MAX_LINE_CHARS` characters (their
        #: progress is not read): counted so that a reader can say so, never silently.
        self.long_lines = 0
        #: Lines that could report a loss (or match the user's pattern) skipped because a control
        #: character sits inside a number on them (``loss: 0.\x0025``: not 0.25; :func:`clean_line`).
        self.split_numbers = 0

    # -- columns ---------------------------------------------------------------------------
    def feed_batch(self, chunk: bytes | str, now: datetime | float | None) -> PointBatch:
        """Take the next piece of output; return the points of the lines it completed.

        Args:
            chunk: raw bytes (UTF-8, any split) or decoded text, of any length (may split
                lines, CRLF pairs, escapes or multi-byte characters).
            now: when the chunk was read: aware datetime or POSIX seconds; it becomes each
                point's ``times`` entry (None: NaN, no time).
        """
        batch = PointBatch()
        if self._native:
            if isinstance(chunk, str):
                try:
                    data = chunk.encode("utf-8")
                except UnicodeEncodeError:  # lone surrogates: the text path keeps them as they are
                    self._to_python()
                    return self.feed_batch(chunk, now)
            else:
                data = chunk if isinstance(chunk, bytes) else bytes(chunk)
            if data:
                complete = self._complete_bytes(data)
                if complete:
                    self.parse_block(complete, now, batch)
            return batch
        text = self._decoder.decode(chunk) if isinstance(chunk, (bytes, bytearray, memoryview)) else chunk
        if text:
            complete = self._complete(text)
            if complete:
                self.parse_block(complete, now, batch)
        return batch

    def gap(self, *, at_line_start: bool = False) -> None:
        """Output was lost between the text fed so far and the next (a parse queue that
        overflowed): the unfinished line is dropped and the next text is discarded up to its
        first line end, so the two sides of the gap are never read as one (false) line.

        ``at_line_start``: the next text starts a line (the output lost ended at a line end:
        a piece whose parse failed): the unfinished line is dropped, the next text is read whole.
        """
        self._pending.clear()
        self._pending_len = 0
        self._decoder.reset()
        if at_line_start:
            self._discarding = False
            return
        self._discarding = True
        self._after_cr = False

    def flush_batch(self, now: datetime | float | None) -> PointBatch:
        """Parse a final line that never got its line end (call when the stream closes)."""
        batch = PointBatch()
        if self._native:
            if self._pending or self._discarding:
                data = b"".join(self._pending)
                self._pending.clear()
                self._pending_len = 0
                discarded, self._discarding = self._discarding, False
                self.lines_seen += 1
                if data and not discarded:
                    self.parse_block(data + b"\n", now, batch, count=False)
            self._after_cr = False
            self._finish_hook(now, batch)
            return batch
        rest = self._decoder.decode(b"", final=True)
        if rest:
            complete = self._complete(rest)
            if complete:
                self.parse_block(complete, now, batch)
        if self._pending or self._discarding:
            line = "".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
            discarded, self._discarding = self._discarding, False
            self.lines_seen += 1
            if line and not discarded:
                self.parse_block(line + "\n", now, batch, count=False)
        self._after_cr = False
        self._finish_hook(now, batch)
        return batch

    def _finish_hook(self, now: datetime | float | None, batch: PointBatch) -> None:
        if self._hook is not None:
            self._hook.finish(batch, _NAN if now is None else (now if isinstance(now, float) else now.timestamp()))

    def _complete(self, text: str) -> str:
        """Take ``text`` into the line state; return the complete lines it ends (with their ends)."""
        if self._after_cr and text[0] == "\n":
            text = text[1:]
            if not text:
                self._after_cr = False
                return ""
        self._after_cr = text[-1] == "\r"
        pos = 0
        if self._discarding:
            nl = text.find("\n")
            cr = text.find("\r", 0, nl if nl >= 0 else len(text))
            end = cr if cr >= 0 else nl
            if end < 0:
                return ""
            self._discarding = False
            self.lines_seen += 1
            pos = end + 2 if text.startswith("\r\n", end) else end + 1
        cut = max(text.rfind("\n", pos), text.rfind("\r", pos)) + 1
        if cut <= pos:  # no line end: all of it belongs to the unfinished line
            self._keep(text[pos:] if pos else text)
            return ""
        if self._pending:
            self._pending.append(text[pos:cut])
            complete = "".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
        else:
            complete = text[pos:cut]
        if cut < len(text):
            self._keep(text[cut:])
        return complete

    def _to_python(self) -> None:
        """Turn this native parser into a pure-Python one, keeping its line state."""
        self._native = False
        self.engine = "python"
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        if data and not self._discarding:
            text = self._decoder.decode(data)  # a sequence cut at the end stays in the decoder
            if text:
                self._keep(text)

    def _complete_bytes(self, data: bytes) -> bytes:
        """:meth:`_complete` on raw bytes (native engine): the same line state, in bytes.

        Line ends are ASCII, which no UTF-8 sequence holds, so cutting the bytes at them and
        decoding each line later gives the text the incremental decoder would. The unfinished
        line is dropped past :data:`_MAX_LINE_BYTES` (it then holds more than
        :data:`MAX_LINE_CHARS` characters); a shorter one that is too long in characters is
        skipped when complete, so the points and :attr:`lines_seen` are the same.
        """
        if self._after_cr and data[0] == 10:
            data = data[1:]
            if not data:
                self._after_cr = False
                return b""
        self._after_cr = data[-1] == 13
        pos = 0
        if self._discarding:
            nl = data.find(b"\n")
            cr = data.find(b"\r", 0, nl if nl >= 0 else len(data))
            end = cr if cr >= 0 else nl
            if end < 0:
                return b""
            self._discarding = False
            self.lines_seen += 1
            pos = end + 2 if data.startswith(b"\r\n", end) else end + 1
        cut = max(data.rfind(b"\n", pos), data.rfind(b"\r", pos)) + 1
        if cut <= pos:
            self._keep_bytes(data[pos:] if pos else data)
            return b""
        if self._pending:
            self._pending.append(data[pos:cut])
            complete = b"".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
        else:
            complete = data[pos:cut] if pos or cut < len(data) else data
        if cut < len(data):
            self._keep_bytes(data[cut:])
        return complete

    def _keep_bytes(self, piece: bytes) -> None:
        """:meth:`_keep` in bytes, bounded by :data:`_MAX_LINE_BYTES`."""
        if not piece or self._discarding:
            return
        self._pending_len += len(piece)
        if self._pending_len > _MAX_LINE_BYTES:
            self._pending.clear()
            self._pending_len = 0
            self._discarding = True
            self.long_lines += 1
        else:
            self._pending.append(piece)

    def _keep(self, piece: str) -> None:
        """Hold ``piece`` of the unfinished line (pieces, not one string: no quadratic copies)."""
        if not piece or self._discarding:
            return
        self._pending_len += len(piece)
        if self._pending_len > MAX_LINE_CHARS:
            self._pending.clear()
            self._pending_len = 0
            self._discarding = True
            self.long_lines += 1
        else:
            self._pending.append(piece)

    def parse_block(self, text: str | bytes, now: datetime | float | None, batch: PointBatch, *,
                    count: bool = True) -> None:
        """Parse complete lines ``text`` (ending with a line end) into ``batch``.

        ``text`` is decoded text or raw UTF-8 bytes (bad bytes replaced). Lines longer than
        :data:`MAX_LINE_CHARS` are skipped; ``count`` adds the lines to :attr:`lines_seen`.
        The epoch context carries over from block to block.
        """
        start = len(batch.epochs)
        t = _NAN if now is None else (now if isinstance(now, float) else now.timestamp())
        if self._hook is not None:
            text = self._hook.take(text, t, batch)
        if len(text) > MAX_LINE_CHARS:
            self.long_lines += count_long_lines(text)
        if self._regex is not None:
            if not isinstance(text, str):
                text = bytes(text).decode("utf-8", "replace")
            if count:
                self.lines_seen += _count_line_ends(text)
            rest = self._parse_custom_block(text, t, batch)
            if rest:  # the user's pattern was turned off: the built-in shapes read the rest
                self._parse_builtin(rest, t, batch, count=False)
            _drop_huge_epochs(batch, start)
            return
        self._parse_builtin(text, t, batch, count=count)
        _drop_huge_epochs(batch, start)

    def _parse_custom_block(self, text: str, t: float, batch: PointBatch) -> str:
        """The user's pattern over the complete lines ``text``; returns the lines after the one
        on which the pattern was turned off (``user_regex.disabled``: it timed out on too many
        lines, :mod:`costctl.user_regex`), else ``""``."""
        regex = self._regex
        assert regex is not None
        pos = 0
        for end in _LINE_END_RE.finditer(text):
            line = text[pos:end.start()]
            pos = end.end()
            if line and len(line) <= MAX_LINE_CHARS:
                if not line.isprintable() and _splits_number(line):
                    self.split_numbers += 1  # read as nothing (clean_line)
                    continue
                self._add(batch, _parse_custom(regex, line), t, custom=True)
                if regex.disabled:
                    self._regex = None
                    return text[pos:]
        return ""

    def _parse_builtin(self, text: str | bytes, t: float, batch: PointBatch, *, count: bool) -> None:
        """The built-in shapes (native or Python engine) over complete lines ``text``."""
        if self._native:
            buf: bytes | None
            if isinstance(text, str):
                try:
                    buf = text.encode("utf-8")
                except UnicodeEncodeError:  # lone surrogates: the text path reads them as they are
                    buf = None
            else:
                buf = text
            if buf is not None:
                ends = self._parse_native(buf, t, batch)
                if count:
                    self.lines_seen += ends
                return
        if not isinstance(text, str):
            text = bytes(text).decode("utf-8", "replace")
        if count:
            self.lines_seen += _count_line_ends(text)
        self._parse_shapes(text, t, batch)

    def _parse_shapes(self, text: str, t: float, batch: PointBatch) -> None:
        """The built-in shapes over complete lines ``text``: :data:`_BLOCK_RE` over the whole
        block; strict shapes read here, other candidate lines by :meth:`_parse_other`.

        Every point of the block has the time ``t``: the fast shapes leave the ``times``
        column to be filled up at the end (the per-line path appends its own).
        """
        key_index = batch.key_index
        series, values, steps = batch.series.append, batch.values.append, batch.steps.append
        epochs, totals = batch.epochs.append, batch.totals.append
        isfinite = math.isfinite
        train = -1  # the ("train", "loss") series, added at its first point (keys in order)
        first = _FIRST_END_RE.search(text).start()  # type: ignore[union-attr]
        if first <= MAX_LINE_CHARS:
            self._parse_other(batch, text[:first], t)
        # The epoch context (from the last header): epoch for lines without one, and the
        # total for lines with neither step nor epoch.
        ctx = _NAN if self._epoch is None else float(self._epoch)
        ctx_total = NO_INT if self._epoch is None else column_int(self._epochs_total)
        for (hf, hfe, it, itl, tqn, tqt, tql, kl, kv, evs, evv, bl, hn, ht, other) in chain.from_iterable(
            _block_rows(text, first)
        ):
            if hf:
                e = float(hfe)
                if not isfinite(e):
                    self._add(batch, [("train", "loss", float(hf), None, None, None)], t)
                    continue
                value, step, epoch, total = float(hf), NO_INT, e, NO_INT
            elif tqn:
                value, step, epoch, total = float(tql), int(tqn), ctx, int(tqt)
            elif it:
                value, step, epoch, total = float(itl), int(it), ctx, NO_INT
            elif kl or bl:  # Keras or a bare loss: no step, no epoch on the line
                value, step, epoch, total = float(kl or bl), NO_INT, ctx, ctx_total
                if kv:
                    if train < 0:
                        train = key_index("train", "loss")
                    series(train)
                    values(value)
                    steps(step)
                    epochs(epoch)
                    totals(total)
                    series(key_index("eval", "val_loss"))
                    values(float(kv))
                    steps(step)
                    epochs(epoch)
                    totals(total)
                    continue
            elif evs:
                self._add(batch, [("eval", "val loss", float(evv), int(evs), None, None)], t)
                continue
            elif hn:  # an "Epoch k/N" header
                self._epoch, self._epochs_total = int(hn), int(ht)
                ctx, ctx_total = float(self._epoch), self._epochs_total
                continue
            else:
                if len(other) <= MAX_LINE_CHARS:
                    self._parse_other(batch, other, t)
                    if self._epoch is not None:
                        ctx = float(self._epoch)
                        ctx_total = column_int(self._epochs_total)
                continue
            if train < 0:
                train = key_index("train", "loss")
            series(train)
            values(value)
            steps(step)
            epochs(epoch)
            totals(total)
        missing = len(batch.values) - len(batch.times)
        if missing:
            batch.times.extend(array("d", (t,)) * missing)

    def _parse_native(self, buf: bytes, t: float, batch: PointBatch) -> int:
        """The built-in shapes over complete lines ``buf`` (bytes) with the C scanner.

        ``_scan.scan`` reads the strict shapes of :data:`_BLOCK_RE` and the general grammar
        of ASCII candidate lines into point records (codes 0-2 the series of
        :data:`_CODE_KEYS`, 3 on the ``names`` it returns, in the order they first appear) and
        hands back the lines it is not sure of (decoded), each with the epoch header state at
        it; they are read here by :meth:`_parse_other` into a side batch (sharing the batch's
        keys), and ``_scan.merge`` interleaves both in line order. The scan stops after a line
        that may be an epoch header the per-line parser reads, so the strict points after it
        get the new epoch context. Series keys are added in the order they first appear.
        Returns the number of line ends in ``buf`` (CRLF once).
        """
        scan, merge, key_index = _scan.scan, _scan.merge, batch.key_index  # type: ignore[attr-defined]
        pos, n, line_ends = 0, len(buf), 0
        while pos < n:
            epoch, epochs_total = self._epoch, self._epochs_total
            ctx = _NAN if epoch is None else float(epoch)
            ctx_total = NO_INT if epoch is None or epochs_total is None else epochs_total
            if ctx_total > _I64_MAX:  # a header's total past int64: the text path for the rest
                rest = bytes(buf[pos:]).decode("utf-8", "replace")
                self._parse_shapes(rest, t, batch)
                return line_ends + _count_line_ends(rest) - (pos > 0 and rest[:1] == "\n" and buf[pos - 1] == 13)
            pos, points, hands, first, header, stopped, ends, names = scan(
                buf, pos, ctx, ctx_total, _MAX_LINE_BYTES, MAX_LINE_CHARS)
            line_ends += ends
            code_keys = _CODE_KEYS + tuple(names) if names else _CODE_KEYS
            code_map = [0] * len(code_keys)
            order = sorted((f, c) for c, f in enumerate(first) if f >= 0)
            r = 0
            side = None
            if hands:
                side = PointBatch(keys=batch.keys, _index=batch._index)
                side_pos = array("q")
                last_k = hands[-1][0]
                for k, line, hn, ht in hands:
                    while r < len(order) and order[r][0] < k:
                        c = order[r][1]
                        code_map[c] = key_index(*code_keys[c])
                        r += 1
                    if hn >= 0:
                        self._epoch, self._epochs_total = hn, ht
                    if len(line) <= MAX_LINE_CHARS:
                        before = len(side.values)
                        # only the line a scan stopped after may be an epoch header
                        self._parse_other(side, line, t, header=stopped and k == last_k)
                        for _k in range(len(side.values) - before):
                            side_pos.append(k)
            for _f, c in order[r:]:
                code_map[c] = key_index(*code_keys[c])
            if header is not None and not stopped:
                self._epoch, self._epochs_total = header
            if side is not None and side.values:
                cols = merge(points, tuple(code_map), side.series, side.values, side.steps,
                             side.epochs, side.totals, side_pos)
            elif points:
                cols = merge(points, tuple(code_map), b"", b"", b"", b"", b"", b"")
            else:
                continue
            batch.series.frombytes(cols[0])
            batch.values.frombytes(cols[1])
            batch.steps.frombytes(cols[2])
            batch.epochs.frombytes(cols[3])
            batch.totals.frombytes(cols[4])
        missing = len(batch.values) - len(batch.times)
        if missing:
            batch.times.extend(array("d", (t,)) * missing)
        return line_ends

    def _parse_other(self, batch: PointBatch, line: str, t: float, *, header: bool = True) -> None:
        """One candidate line that no strict block shape explains: the per-line parser.

        ``header=False``: the caller knows the line is no epoch header (the native scan's
        check), so :func:`parse_epoch_header` is skipped (it would return None).
        """
        if not line.isprintable() and _splits_number(line):
            # a control character inside a number: the line reads as nothing (clean_line), counted
            if "oss" in line or "OSS" in line:
                self.split_numbers += 1
            return
        raw = _parse_fast(line)
        if raw is not None:
            self._add(batch, raw, t)
            return
        epoch_header = parse_epoch_header(line) if header else None
        if epoch_header is not None:
            self._epoch, self._epochs_total = epoch_header
            return
        if "oss" in line or "OSS" in line:
            raw = _parse_raw(line)
            if raw:
                self._add(batch, raw, t)

    def _add(self, batch: PointBatch, raw: list[_Raw], t: float, *, custom: bool = False) -> None:
        key_index = batch.key_index
        for kind, name, value, step, epoch, total in raw:
            if not custom and epoch is None and self._epoch is not None:
                if total is None and step is None:
                    total = self._epochs_total
                epoch = float(self._epoch)
            batch.series.append(key_index(kind, name))  # type: ignore[arg-type]
            batch.values.append(value)
            batch.steps.append(column_int(step))
            batch.epochs.append(_NAN if epoch is None else epoch)
            batch.totals.append(column_int(total))
            batch.times.append(t)

    # -- records (compatibility) -----------------------------------------------------------
    def feed(self, chunk: bytes | str, now: datetime) -> list[ProgressPoint]:
        """:meth:`feed_batch` as :class:`ProgressPoint` records stamped ``now`` (small inputs)."""
        return _records(self.feed_batch(chunk, None), now)

    def flush(self, now: datetime) -> list[ProgressPoint]:
        """:meth:`flush_batch` as records stamped ``now``."""
        return _records(self.flush_batch(None), now)

    def parse(self, line: str, now: datetime | None) -> list[ProgressPoint]:
        """Parse one complete line with this parser's state (epoch context, custom regex)."""
        batch = PointBatch()
        if len(line) <= MAX_LINE_CHARS:
            self.parse_block(line + "\n", None, batch, count=False)
        return _records(batch, now)


def _records(batch: PointBatch, now: datetime | None) -> list[ProgressPoint]:
    """The batch's points as records with ``time=now`` (its own times column ignored)."""
    out = []
    for i in range(len(batch)):
        kind, name = batch.keys[batch.series[i]]
        step, epoch, total = batch.steps[i], batch.epochs[i], batch.totals[i]
        out.append(ProgressPoint(
            time=now, value=batch.values[i], kind=kind, name=name,
            step=None if step == NO_INT else step,
            epoch=None if epoch != epoch else epoch,
            total=None if total == NO_INT else total,
        ))
    return out
