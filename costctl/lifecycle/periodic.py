"""Periodic checkpoints on spot/interruptible instances: the Young/Daly interval.

With checkpoints every ``T`` seconds, each costing ``C`` seconds, and preemptions arriving at
random with mean time between them ``M`` (MTBF), the expected waste per unit of time is about
``C/T`` (checkpoint overhead) plus ``T/(2M)`` (half an interval of work lost per preemption).
It is smallest at

    T = sqrt(2 · C · M)

J. W. Young, "A first order approximation to the optimum checkpoint interval", Communications
of the ACM 17(9), 530-531 (1974); J. T. Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", Future Generation Computer Systems 22(3), 303-312
(2006), who shows the first-order formula stays accurate while ``C`` is small next to ``M``
(:func:`daly_interval` gives his higher-order estimate for comparison).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..i18n import N_, _


def young_daly_interval(save_s: float, mtbf_s: float, *, min_s: float, max_s: float) -> float:
    """The checkpoint interval ``sqrt(2 · save_s · mtbf_s)`` in seconds, clamped to ``[min_s, max_s]``.

    Args:
        save_s: checkpoint cost ``C``, seconds (> 0).
        mtbf_s: mean time between preemptions ``M``, seconds (> 0).
        min_s / max_s: bounds, seconds (``0 < min_s <= max_s``).

    Raises:
        ValueError: a non-positive or non-finite argument, or ``min_s > max_s``.
    """
    for name, value in (("save_s", save_s), ("mtbf_s", mtbf_s), ("min_s", min_s), ("max_s", max_s)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(_("{name} must be a positive number of seconds, not {value!r}").format(
                name=name, value=value))
    if min_s > max_s:
        raise ValueError(_("min_s ({min:g}) must not exceed max_s ({max:g})").format(min=min_s, max=max_s))
    return min(max_s, max(min_s, math.sqrt(2.0 * save_s * mtbf_s)))


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum, seconds: for ``C < 2M``,
    ``sqrt(2CM)·[1 + (1/3)·sqrt(C/(2M)) + (1/9)·(C/(2M))] − C``; otherwise ``M``.

    Raises:
        ValueError: a non-positive argument.
    """
    if save_s <= 0 or mtbf_s <= 0:
        raise ValueError(_("save_s and mtbf_s must be positive"))
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    x = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - save_s


#: Where the save time comes from, by (saves measured in this run, in the chain's earlier runs).
_SAVE_SOURCES = {
    (False, False): N_("configured ([checkpoint] save_time)"),
    (True, False): N_("measured: median of {count} save(s), {here} in this run"),
    (False, True): N_("measured: median of {count} save(s), {before} in earlier runs of this chain ({source})"),
    (True, True): N_("measured: median of {count} save(s), {here} in this run and {before} in earlier runs of this "
                     "chain ({source})"),
}


@dataclass
class PeriodicSchedule:
    """When the next periodic checkpoint request is due.

    Args:
        save_time_s: the configured checkpoint cost, used until a save is measured.
        mtbf_s: mean time between preemptions (observed in the ledger, else configured).
        min_s / max_s: ``[checkpoint] min_interval`` / ``max_interval`` in seconds.
        mtbf_source: ``"observed"`` or ``"configured"`` (for the evidence).
        earlier: save durations (seconds) measured by the earlier runs of this run's chain (a
            resumed job), oldest first; the cost starts from them.
        earlier_source: where they came from (said with the interval; English, translated
            where said: give it as an :func:`~costctl.i18n.N_` message).

    The measured cost is the median of the saves seen so far, the chain's earlier runs' and
    this run's: each save's own duration (the acknowledgement record's start to end); for a
    save without a record, request to checkpoint (which includes the wait for the job's next
    safe point, so it errs towards longer intervals).
    """

    save_time_s: float
    mtbf_s: float
    min_s: float
    max_s: float
    mtbf_source: str = "configured"
    measured: list[float] = field(default_factory=list)
    earlier: list[float] = field(default_factory=list)
    earlier_source: str = "ledger"

    def _saves(self) -> list[float]:
        return [s for s in (*self.earlier, *self.measured) if s > 0]

    @property
    def save_s(self) -> float:
        """The checkpoint cost in use, seconds."""
        saves = self._saves()
        return statistics.median(saves) if saves else self.save_time_s

    def _save_source(self, tr: Callable[[str], str]) -> str:
        here = sum(1 for s in self.measured if s > 0)
        before = sum(1 for s in self.earlier if s > 0)
        return tr(_SAVE_SOURCES[(here > 0, before > 0)]).format(count=here + before, here=here, before=before,
                                                                source=tr(self.earlier_source))

    @property
    def save_source(self) -> str:
        """Where :attr:`save_s` comes from, in words (English, for the evidence): ``configured``,
        or the saves measured (this run's and the chain's earlier runs', with their source)."""
        return self._save_source(N_)

    @property
    def save_source_text(self) -> str:
        """:attr:`save_source` in the current language (:mod:`costctl.i18n`), as it is said."""
        return self._save_source(_)

    @property
    def interval_s(self) -> float:
        """The Young/Daly interval for the current figures, clamped, seconds."""
        return young_daly_interval(self.save_s, self.mtbf_s, min_s=self.min_s, max_s=self.max_s)

    def note_save(self, save_s: float | None) -> None:
        """Add a measured save duration (seconds)."""
        if save_s is not None and save_s > 0:
            self.measured.append(float(save_s))

    def due_at(self, last_checkpoint_at: datetime) -> datetime:
        """When the next request is due after a checkpoint (or the run's start) at ``last_checkpoint_at``."""
        return last_checkpoint_at + timedelta(seconds=self.interval_s)

    def evidence(self) -> dict[str, object]:
        """The figures behind the interval, for a decision."""
        return {
            "interval_s": round(self.interval_s, 3),
            "save_s": round(self.save_s, 3),
            "save_s_source": ("measured" if any(s > 0 for s in self.measured)
                              else "chain" if any(s > 0 for s in self.earlier) else "configured"),
            "save_s_detail": self.save_source,
            "earlier_saves_s": [round(s, 3) for s in self.earlier if s > 0],
            "mtbf_s": round(self.mtbf_s, 3),
            "mtbf_source": self.mtbf_source,
            "min_interval_s": self.min_s,
            "max_interval_s": self.max_s,
            "formula": "sqrt(2 * save_s * mtbf_s), clamped (Young 1974; Daly 2006)",
        }


__all__ = ["PeriodicSchedule", "daly_interval", "young_daly_interval"]
