"""Logged gradient norms on console lines: what :mod:`costctl.policies.grad_norm` reads.

One extraction for ``costctl analyze`` and the live ``costctl watch``: Hugging Face dicts
(``'grad_norm': 1.2`` or ``'1.2'``), Megatron's ``| grad norm: nan |``, ``grad_norm=...``
postfixes. Each logged value is a :data:`GradNormRecord` ``(grad_norm, loss, step, epoch)``:
for a non-finite value, ``loss`` is the train loss :func:`~costctl.progress.parse_line` reads on
the same line (None when the line has none: Megatron prints none for a skipped iteration),
``step``/``epoch`` where it was logged (None when unknown). A finite value is recorded as
``(value, None, None, None)``: the rule (:class:`costctl.policies.grad_norm.GradNormStreak`)
reads nothing else of it, so its line is not parsed again (most logged values are finite).

:class:`GradNormLog` keeps a whole log's records in memory bounded by its non-finite values,
not by its length (``costctl analyze`` on a log of millions of HF lines).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from .named import line_bounds

#: ``(grad_norm, loss on the same record or None, step or None, epoch or None)``.
GradNormRecord = tuple[float, "float | None", "int | None", "float | None"]
#: the names a gradient norm is logged under (HF, Lightning/W&B style, Megatron's console).
GRAD_NORM_KEYS = ("grad_norm", "train/grad_norm", "grad norm", "gradient_norm")
#: literals one of which every line :func:`console_grad_norms` reads holds (a cheap prefilter).
GRAD_NORM_WORDS = ("rad_norm", "rad norm", "RAD_NORM", "RAD NORM")
# A logged gradient norm on a console line. Run only over blocks holding the literal. The same
# on an ASCII block's lower-case copy, case-sensitive: starts with a literal the regex engine
# finds fast (the word boundary before it is checked per match).
_GRAD_NORM_LOW_RE = re.compile(
    r"""grad[_ ]norm['"]?\s*[:=]\s*['"]?(?:tensor\(\s*)?"""
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![a-z0-9_])"
)
_GRAD_NORM_RE = re.compile(
    r"""(?<![A-Za-z0-9_])grad[_ ]norm['"]?\s*[:=]\s*['"]?(?:tensor\(\s*)?"""
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z0-9_])",
    re.IGNORECASE,
)


def console_grad_norms(text: str, out) -> None:
    """Append the gradient norms logged on the complete lines ``text`` to ``out`` (anything
    with ``append``: a list, a deque), one :data:`GradNormRecord` per line holding one (the
    first on the line), with the loss, step and epoch :func:`~costctl.progress.parse_line`
    reads on its line.

    Cheap: a block without ``rad_norm``/``rad norm`` (either case) costs four substring scans; the regex runs over
    blocks that hold it and each line with a match is parsed once.
    """
    if not any(w in text for w in GRAD_NORM_WORDS):
        return
    from .lines import _held, _step_epoch_total, clean_line, parse_line

    prev_end = -1  # the end of the last value taken: a match before the next line end is on its line
    ascii_text = text.isascii()
    low = text.lower() if ascii_text else text
    find = low.find
    for m in (_GRAD_NORM_LOW_RE if ascii_text else _GRAD_NORM_RE).finditer(low):
        s = m.start()
        if s and (low[s - 1].isalnum() or low[s - 1] == "_"):
            continue  # "xgrad_norm": not the key
        if prev_end >= 0 and find("\n", prev_end, s) < 0 and find("\r", prev_end, s) < 0:
            continue  # one gradient norm per line (the first)
        prev_end = m.end()
        value = float(m.group(1))
        if value - value == 0.0:  # finite: the rule reads nothing else of it (the module docstring)
            out.append((value, None, None, None))
            continue
        start, end = line_bounds(text, s, m.end())
        line = text[start:end]
        train = [p for p in parse_line(line) if p.kind == "train"]
        if train:
            out.append((value, train[0].value, train[0].step, train[0].epoch))
        else:  # no loss on the line (Megatron prints none for a skipped iteration): where it is
            step, epoch, _ = _step_epoch_total(clean_line(line))
            out.append((value, None, _held(step), epoch))


class GradNormLog:
    """A log's gradient-norm records in order, compacted: each run of finite values is kept as
    its length, each non-finite record whole, so the memory grows with the non-finite values
    and the runs between them, not with the log (a 1 GB log of HF lines holds millions).

    Takes :data:`GradNormRecord` tuples through :meth:`append` (as a list would: the sink of
    :func:`console_grad_norms`); :meth:`feed` replays them through the rule.
    """

    __slots__ = ("_items", "_count")

    def __init__(self, records: Any = ()) -> None:
        self._items: list[Any] = []  # an int: that many finite values; a tuple: a non-finite record
        self._count = 0
        for record in records:
            self.append(record)

    def append(self, record: GradNormRecord) -> None:
        """Add the next record (log order)."""
        self._count += 1
        items = self._items
        if math.isfinite(record[0]):
            if items and type(items[-1]) is int:
                items[-1] += 1
            else:
                items.append(1)
        else:
            items.append(tuple(record))

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def nonfinite(self) -> list[GradNormRecord]:
        """The non-finite records, in order."""
        return [item for item in self._items if type(item) is not int]

    def runs(self) -> Iterator[int | GradNormRecord]:
        """The compacted items in order: an int for that many finite values in a row, else one
        non-finite record."""
        return iter(self._items)

    def feed(self, rule: Any, now: Any) -> list[Any]:
        """Replay every record through ``rule`` (a :class:`~costctl.policies.grad_norm.GradNormStreak`:
        ``add_finite(n)`` for a run, ``add(...)`` for a record) at time ``now``; its decisions."""
        found = []
        for item in self._items:
            if type(item) is int:
                rule.add_finite(item)
                continue
            value, loss, step, epoch = item
            d = rule.add(value, now, loss=loss, step=step, epoch=epoch)
            if d is not None:
                found.append(d)
        return found


__all__ = ["GRAD_NORM_KEYS", "GRAD_NORM_WORDS", "GradNormLog", "GradNormRecord", "console_grad_norms"]
