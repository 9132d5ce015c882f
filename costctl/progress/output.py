"""A job's printed output as the live policies read it: :class:`OutputProgress`.

One :class:`~costctl.progress.LineParser` per stream (stdout, stderr), each with a
:class:`~costctl.progress.console.ConsoleSeries` hook (named losses, column tables, gradient
norms: what ``costctl analyze`` reads), and one
:class:`~costctl.progress.series.PrimarySeries` over both: the batches handed on hold the
primary train series and the first eval series only, and the gradient norms wait in
:meth:`OutputProgress.take_grad_norms`. ``costctl watch`` feeds it from its parse pump; a test
feeds it the same way to compare with ``costctl analyze`` on the same bytes.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from .batch import PointBatch
from .console import ConsoleSeries
from ..user_regex import UserRegex
from .lines import LineParser, compile_loss_regex
from .named import NamedLossReader
from .series import PrimarySeries

STREAMS = ("stdout", "stderr")


class OutputProgress:
    """The live reader of a job's output (see the module docstring).

    Args:
        loss_regex: ``--loss-regex`` (then no named losses nor tables are read, as in analyze).
        loss: ``--loss NAME``: the train series the policies watch (None: by the rule).
        engine: the line parser's engine (``native``/``python``; None: costctl's choice,
            :data:`costctl.progress.lines.ENGINE`).

    Raises:
        UsageError: ``loss_regex`` is invalid, or ``engine`` unknown or not built.
    """

    def __init__(self, loss_regex: str | None = None, loss: str | None = None, *, engine: str | None = None) -> None:
        #: gradient-norm records ``(value, loss, step, epoch)`` read and not yet taken
        self._grad_norms: deque = deque()
        self.primary = PrimarySeries(loss)
        #: the compiled ``--loss-regex``, one for both streams (its timeouts counted together)
        self.user_regex: UserRegex | None = compile_loss_regex(loss_regex) if loss_regex is not None else None
        self.parsers = {
            stream: LineParser(self.user_regex, engine=engine, hook=ConsoleSeries(
                NamedLossReader() if loss_regex is None else None, self._grad_norms, emit=True))
            for stream in STREAMS
        }

    def parse(self, stream: str, data: bytes, now: datetime | float | None) -> PointBatch:
        """``stream``'s next output bytes -> the primary series' points of the lines they end."""
        return self.primary.cut(self.parsers[stream].feed_batch(data, now))

    def flush(self, now: datetime | float | None) -> PointBatch:
        """The streams ended: their last unfinished lines and table rows, as primary points."""
        out = PointBatch()
        for parser in self.parsers.values():
            out.extend(parser.flush_batch(now))
        return self.primary.cut(out)

    def gap(self, stream: str, *, at_line_start: bool = False) -> None:
        """``stream``'s output was lost before its next bytes (:meth:`LineParser.gap`;
        ``at_line_start``: what was lost ended at a line end)."""
        self.parsers[stream].gap(at_line_start=at_line_start)

    def take_grad_norms(self) -> list[tuple]:
        """The gradient norms read since the last call, in log order (thread-safe: the parser
        thread appends, one taker)."""
        q = self._grad_norms
        out = []
        while q:
            out.append(q.popleft())
        return out

    @property
    def lines_seen(self) -> int:
        """Line ends parsed so far, all streams."""
        return sum(p.lines_seen for p in self.parsers.values())

    @property
    def split_numbers(self) -> int:
        """Lines skipped for a control character inside a number so far, all streams."""
        return sum(p.split_numbers for p in self.parsers.values())

    @property
    def long_lines(self) -> int:
        """Lines skipped for their length so far, all streams."""
        return sum(p.long_lines for p in self.parsers.values())


__all__ = ["OutputProgress", "STREAMS"]
