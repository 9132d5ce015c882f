"""Underutilization advice: "a cheaper card would have done this run, for this much less".

A run is *underutilized* when its peak GPU memory (any one GPU) stayed under
``[downsize] underutilized_memory_fraction`` of the card's memory and its mean GPU utilization
under ``underutilized_gpu_utilization`` percent. The advice names the fitting card with the
largest saving (:func:`costctl.lifecycle.sizing.rank_cards`: memory with headroom, speed scaled
by the measured utilization) and the money it would have saved over the run's duration; a
saving under ``[downsize] min_saving_per_hour`` is not worth the advice.
Shown at the end of a watch and under ``costctl bill``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..catalog import get_gpu
from ..config import DownsizeConfig
from ..money import Money, round_money
from .sizing import CardOption, PriceOption, best_fit, rank_cards



@dataclass(frozen=True)
class UnderuseAdvice:
    """The advice for one run.

    Attributes:
        run_id, gpu: the run and its card.
        peak_memory_bytes / card_memory_bytes: peak used on one GPU, and that GPU's memory.
        mean_utilization: percent.
        duration_s: the run's charged duration.
        card: the cheaper card (with its price, fit and speed factor).
        saved: money it would have saved over ``duration_s`` (Decimal, ``currency``).
    """

    run_id: str
    gpu: str | None
    peak_memory_bytes: int
    card_memory_bytes: int
    mean_utilization: float
    duration_s: float
    card: CardOption
    saved: Decimal
    currency: str

    @property
    def text(self) -> str:
        """One line for people."""
        c = self.card
        return (
            f"run {self.run_id[:8]} used at most {self.peak_memory_bytes / 2**30:.1f} GiB of "
            f"{self.card_memory_bytes / 2**30:.0f} GiB on {self.gpu or 'its GPU'} at {self.mean_utilization:.0f}% "
            f"mean utilization: {c.option.gpu} ({c.option.price_per_hour} {self.currency}/h at "
            f"{c.option.provider}) would have done it for about {round_money(self.saved, 2)} "
            f"{self.currency} less ({round_money(c.saving_per_hour, 4)} {self.currency} per hour)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (money as decimal strings)."""
        return {
            "run_id": self.run_id,
            "gpu": self.gpu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "card_memory_bytes": self.card_memory_bytes,
            "mean_utilization": round(self.mean_utilization, 3),
            "duration_s": self.duration_s,
            "cheaper_card": self.card.to_dict(),
            "would_have_saved": str(round_money(self.saved, 6)),
            "currency": self.currency,
            "advice": self.text,
        }


def underuse_advice(
    *,
    run_id: str,
    gpu: str | None,
    rate: Money,
    duration_s: float,
    peak_memory_bytes: int | None,
    card_memory_bytes: int | None,
    mean_utilization: float | None,
    options: Sequence[PriceOption],
    config: DownsizeConfig,
) -> UnderuseAdvice | None:
    """The advice for a run, or None when it was not underutilized, a reading is missing (no
    GPU telemetry: never guessed), or no cheaper card fits and saves at least
    ``min_saving_per_hour``.

    Args:
        rate: what the run's instance cost per hour.
        peak_memory_bytes / card_memory_bytes: from GPU telemetry; the card's memory falls back
            to the catalog's figure for ``gpu``.
        mean_utilization: percent (0-100).
        options: cards one could rent (same provider's offers or the price table).
    """
    if peak_memory_bytes is None or mean_utilization is None or duration_s <= 0:
        return None
    total = card_memory_bytes
    if not total and gpu:
        model = get_gpu(gpu)
        total = model.memory_bytes if model else None
    if not total:
        return None
    if peak_memory_bytes >= config.underutilized_memory_fraction * total:
        return None
    if mean_utilization >= config.underutilized_gpu_utilization:
        return None
    cards = rank_cards(current_gpu=gpu, current_rate=rate, peak_bytes=peak_memory_bytes, headroom=config.headroom,
                       options=options, utilization=mean_utilization / 100.0, compute_dtype=config.compute_dtype)
    card = best_fit(cards)
    if card is None or card.saving_per_hour < config.min_saving_per_hour:
        return None
    saved = card.saving_per_hour * Decimal(repr(duration_s)) / 3600
    return UnderuseAdvice(run_id=run_id, gpu=gpu, peak_memory_bytes=peak_memory_bytes, card_memory_bytes=total,
                          mean_utilization=mean_utilization, duration_s=duration_s, card=card, saved=saved,
                          currency=rate.currency)


__all__ = ["UnderuseAdvice", "underuse_advice"]
