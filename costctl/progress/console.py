"""What a console log's lines hold beyond the single-loss grammar, read the same way live and
after the fact: :class:`ConsoleSeries`.

:class:`~costctl.progress.LineParser` reads one loss per shape; a block of complete lines
first goes through :meth:`ConsoleSeries.take`, which

* reads the lines holding several named losses and the column tables
  (:class:`~costctl.progress.named.NamedLossReader`) and takes them away from the line parser
  (so no series mixes them), and
* collects the logged gradient norms (:func:`~costctl.progress.grad_norms.console_grad_norms`).

``costctl analyze`` (:func:`costctl.replay.train_log.iter_console_batches`) and the live
``costctl watch`` (one :class:`ConsoleSeries` per output stream, as each ``LineParser``'s
``hook``) both run it, so for the same bytes they read the same series and gradient norms;
:class:`~costctl.progress.series.PrimarySeries` then picks the series the live policies watch
by the rule ``costctl analyze`` applies.

Cheap on a flood: a raw-bytes block (the native engine) is first checked by the C scanner's
``series_hints`` (one pass over the bytes, no decoding); only a block that may hold such a
line (two ``loss`` words on a line, ``loss`` joined by ``_``, ``grad_norm``, a table header;
or any block once a column table began) is decoded and read in Python.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence
from typing import Any

from .batch import PointBatch
from .grad_norms import console_grad_norms
from .named import NamedLossReader

#: :func:`series_hints` flags.
HINT_NAMED, HINT_GRAD_NORM, HINT_TABLE = 1, 2, 4
_ALL = HINT_NAMED | HINT_GRAD_NORM | HINT_TABLE


def series_hints(block: bytes) -> int:
    """Bit flags (:data:`HINT_NAMED`, :data:`HINT_GRAD_NORM`, :data:`HINT_TABLE`) of what the
    complete lines ``block`` may hold (a set bit may be a false hint; a clear one is certain):
    the C scanner's ``series_hints`` where built, else all set (the Python readers then apply
    their own prefilters)."""
    from .batch import native

    scan = native()
    if scan is None or not hasattr(scan, "series_hints"):
        return _ALL
    return scan.series_hints(block)


class ConsoleSeries:
    """The block hook beside a :class:`~costctl.progress.LineParser` (see the module docstring).

    Args:
        named: the named-loss / column-table reader (None: not read, as with ``--loss-regex``).
        grad_norms: where the gradient-norm records go (``append``; None: not read).
        emit: also append the named points to the block's batch (the live watch); costctl
            analyze keeps them in the reader's series instead.
    """

    def __init__(self, named: NamedLossReader | None = None, grad_norms: MutableSequence[Any] | Any = None,
                 *, emit: bool = False) -> None:
        self.named = named
        self.grad_norms = grad_norms
        self.emit = emit

    def take(self, block: str | bytes, t: float, batch: PointBatch) -> str | bytes:
        """Read the complete lines ``block`` (text, or UTF-8 bytes); return what the line
        parser should read: ``block`` itself, or its text with the multi-loss lines emptied
        (line ends kept). ``t``: the points' time (POSIX seconds, NaN: none)."""
        named = self.named
        if isinstance(block, str):
            text, flags = block, _ALL
        else:
            flags = series_hints(block)
            if not flags and (named is None or not named.in_table):
                return block
            text = bytes(block).decode("utf-8", "replace")
        if self.grad_norms is not None and flags & HINT_GRAD_NORM:
            console_grad_norms(text, self.grad_norms)
        if named is None or not (flags & (HINT_NAMED | HINT_TABLE) or named.in_table):
            return block
        out = named.take(text, batch if self.emit else None, t)
        return block if out is text else out

    def finish(self, batch: PointBatch, t: float = math.nan) -> None:
        """The stream ended: the reader's last table row counts (appended to ``batch`` when
        emitting)."""
        if self.named is not None:
            self.named.finish(batch if self.emit else None, t)


__all__ = ["HINT_GRAD_NORM", "HINT_NAMED", "HINT_TABLE", "ConsoleSeries", "series_hints"]
