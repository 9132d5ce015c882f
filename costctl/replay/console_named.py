"""costctl analyze's side of the named-loss reader: series that keep their points and figures.

The reading itself (several named losses on one line, column tables, the redraw check) is
:mod:`costctl.progress.named`, the classification and the primary-series rule
:mod:`costctl.progress.series`: the live ``costctl watch`` runs the same code. This module
adds what a replay keeps per series: its points (such logs are small), its
:class:`~.loss_stats.LossStream` figures and its :class:`~costctl.progress.series.EpochShape`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..progress import named as _named
from ..progress.named import line_bounds
from ..progress.series import (EpochShape, choose_primary, granularity_of, kind_of, named_losses,
                               series_granularity)
from ..records import ProgressPoint
from .loss_stats import LossStream


@dataclass
class NamedSeries(_named.NamedSeries):
    """One series the reader found, with its points (kept) and figures."""

    points: list[ProgressPoint] = field(default_factory=list)
    stream: LossStream = field(default_factory=LossStream)
    shape: EpochShape = field(default_factory=EpochShape)

    def keep(self, p: ProgressPoint) -> None:
        """Keep ``p`` and add it to the figures."""
        self.points.append(p)
        self.stream.add(p)
        self.shape.add((math.nan if p.epoch is None else p.epoch,), (p.step,))


class NamedLossReader(_named.NamedLossReader):
    """:class:`costctl.progress.named.NamedLossReader` keeping :class:`NamedSeries`."""

    def __init__(self) -> None:
        super().__init__(NamedSeries)


__all__ = ["EpochShape", "NamedLossReader", "NamedSeries", "choose_primary", "granularity_of", "kind_of",
           "line_bounds", "named_losses", "series_granularity"]
