"""Underutilization advice: "a cheaper card would have done this run, for this much less".

A run is *underutilized* when its peak GPU memory (any one GPU) stayed under
``[downsize] underutilized_memory_fraction`` of the card's memory and its mean GPU utilization
under ``underutilized_gpu_utilization`` percent. The advice names the fitting card with the
largest saving (:func:`costctl.lifecycle.sizing.rank_cards`: memory with headroom, speed scaled
by the measured utilization) and the money it would have saved over the run's duration; a
saving under ``[downsize] min_saving_per_hour`` is not worth the advice.
Shown at the end of a watch, under ``costctl bill`` and by ``costctl analyze`` (from a recorded
GPU log's figures: :func:`rightsizing_from_log`). All three go through :func:`underuse_advice`.

Speed model (:func:`costctl.lifecycle.sizing.time_factor`): Amdahl's law with the mean GPU
utilization ``u`` as the GPU-bound share of the run's wall time, the rest (data loading, Python,
I/O) unchanged on another card, and the GPU-bound share scaled by the ratio of the two cards'
dense peaks. NVML's utilization is the share of each sample period during which *any* kernel
ran, not a share of the card's compute (NVML ``nvmlDeviceGetUtilizationRates``: "percent of time
over the past sample period during which one or more kernels was executing"): a kernel that
occupies a few SMs counts as fully busy. The model therefore treats every busy moment as
compute-bound on the smaller card -- it over-states the slow-down (the advice errs toward the
bigger card, never toward a card that is too slow), and it cannot see memory-bandwidth limits.
Memory fits are exact: the peak of any one GPU times ``1 + headroom``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..catalog import get_gpu
from ..config import DownsizeConfig
from ..i18n import _, format_amount
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
        label: how :attr:`text` names the run (default ``"run <first 8 characters of run_id>"``).
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
    label: str | None = None

    @property
    def cost_there(self) -> Decimal:
        """What the run would have cost on :attr:`card` (``effective_per_hour x duration``), Decimal in :attr:`currency`."""
        return self.card.effective_per_hour * Decimal(repr(self.duration_s)) / 3600

    @property
    def text(self) -> str:
        """One line for people, money as the current language writes it
        (:func:`costctl.i18n.format_amount`)."""
        c = self.card
        return _(
            "{run} used at most {peak:.1f} GiB of {total:.0f} GiB on {gpu} at {utilization:.0f}% mean utilization: "
            "{card} ({price}/h at {provider}) would have done it for about {saved} less ({per_hour} per hour)"
        ).format(
            run=self.label or _("run {run}").format(run=self.run_id[:8]), peak=self.peak_memory_bytes / 2**30,
            total=self.card_memory_bytes / 2**30, gpu=self.gpu or _("its GPU"), utilization=self.mean_utilization,
            card=(_("{count} x {gpu}").format(count=c.option.gpu_count, gpu=c.option.gpu)
                  if c.option.gpu_count > 1 else c.option.gpu),
            price=format_amount(c.option.price_per_hour, self.currency), provider=c.option.provider,
            saved=format_amount(self.saved, self.currency), per_hour=format_amount(c.saving_per_hour, self.currency),
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
            "would_have_cost": str(round_money(self.cost_there, 6)),
            "would_have_saved": str(round_money(self.saved, 6)),
            "speed_model": SPEED_MODEL,
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
    label: str | None = None,
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
                          currency=rate.currency, label=label)


@dataclass(frozen=True)
class LogRightsizing:
    """Right-sizing of a recorded run (``costctl analyze``): the advice, or why there is none.

    Attributes:
        advice: the cheaper card and the money, or None.
        reason: one line for people when ``advice`` is None (what was missing, or that the card
            was used), else None.
    """

    advice: UnderuseAdvice | None
    reason: str | None


#: one line on what the speed model assumes (module docstring), carried in the advice's JSON.
SPEED_MODEL = ("Amdahl's law: mean GPU utilization (NVML: the share of time any kernel ran, not a compute "
               "share) is taken as the GPU-bound share, scaled by the ratio of dense peaks; the rest of the "
               "run is taken as unchanged")


def rightsizing_from_log(
    *,
    run_id: str,
    gpu: str | None,
    rate: Money | None,
    label: str | None = None,
    duration_s: float,
    peak_memory_bytes: int | None,
    card_memory_bytes: int | None,
    mean_utilization: float | None,
    options: Sequence[PriceOption],
    config: DownsizeConfig,
) -> LogRightsizing:
    """:func:`underuse_advice` for a recorded GPU log, with the reason when there is no advice.

    Args:
        gpu: the card's model (the log's name column or ``--gpu``); None when neither says.
        rate: what the instance cost per hour (``--price`` or the catalog), or None.
        duration_s: the log's span in seconds.
        peak_memory_bytes: the highest memory used on any one GPU (bytes), None when not recorded.
        card_memory_bytes: that card's memory (bytes; the log's total, else the catalog's).
        mean_utilization: percent (0-100) over the GPUs' known readings.
        options: cards one could rent, priced per instance with as many GPUs as the log's.
    """
    if rate is None:
        return LogRightsizing(None, _("right-sizing needs the instance's price: give --price (and --currency) or "
                                      "--gpu with --provider"))
    if peak_memory_bytes is None or mean_utilization is None:
        return LogRightsizing(None, _("right-sizing needs the GPU log's memory used and utilization; this log "
                                      "does not record both"))
    total = card_memory_bytes
    if not total and gpu:
        model = get_gpu(gpu)
        total = model.memory_bytes if model else None
    if not total:
        return LogRightsizing(None, _("right-sizing needs the card's memory: the log records no total and its "
                                      "model is unknown (give --gpu)"))
    if (peak_memory_bytes >= config.underutilized_memory_fraction * total
            or mean_utilization >= config.underutilized_gpu_utilization):
        return LogRightsizing(None, _(
            "right-sizing: the card was used (peak {peak:.1f} GiB of {total:.0f} GiB, mean utilization "
            "{utilization:.0f}%; advice below {memory_fraction:.0%} of memory and {gpu_utilization:g}% mean "
            "utilization, [downsize] underutilized_*)").format(
            peak=peak_memory_bytes / 2**30, total=total / 2**30, utilization=mean_utilization,
            memory_fraction=config.underutilized_memory_fraction,
            gpu_utilization=config.underutilized_gpu_utilization))
    advice = underuse_advice(run_id=run_id, gpu=gpu, rate=rate, duration_s=duration_s,
                             peak_memory_bytes=peak_memory_bytes, card_memory_bytes=total,
                             mean_utilization=mean_utilization, options=options, config=config, label=label)
    if advice is None:
        if not any(o.currency == rate.currency for o in options):
            return LogRightsizing(None, _("right-sizing: no {currency} price for any card to compare with "
                                          "(costctl never compares prices in two currencies)").format(
                currency=rate.currency))
        return LogRightsizing(None, _("right-sizing: no card in the price table fits with {headroom:.0%} headroom "
                                      "and saves at least {saving} per hour").format(
            headroom=config.headroom, saving=format_amount(config.min_saving_per_hour, rate.currency)))
    return LogRightsizing(advice, None)


__all__ = ["LogRightsizing", "SPEED_MODEL", "UnderuseAdvice", "rightsizing_from_log", "underuse_advice"]
