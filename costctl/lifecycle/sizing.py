"""Which cheaper card fits a run, and what the rest of the run would cost on it.

Used by the downsize action (a plateaued run moves to a cheaper card) and by the
underutilization advice (a cheaper card would have done a finished run).

A card *fits* when its memory per GPU is at least the run's peak GPU memory (the highest
reading of any one GPU, bytes) times ``1 + headroom``.

Speed: a slower card takes longer for the same work; a faster one is taken as no faster (the
factor is at least 1: peak ratios ignore memory bandwidth and occupancy, so a speed-up is never
counted on, and a card that costs more per hour never "saves"). The time on a candidate relative to the
current card follows Amdahl's law with the measured mean GPU utilization ``u`` (0..1) as the
GPU-bound share: ``factor = (1 - u) + u · peak_current / peak_candidate``, with ``peak`` the
catalog's dense peak for ``compute_dtype`` (:meth:`costctl.catalog.GpuModel.peak_tflops`).
Without a utilization reading the run is taken as fully GPU-bound (``u = 1``, the cautious
case); without catalog figures for both cards the factor is 1 and the evidence says so.

Money (Decimal, one currency, never mixed): ``effective_per_hour = price_per_hour · factor`` is
what an hour of the current card's work costs on the candidate; ``saving_per_hour = current
rate − effective_per_hour``; with the rest of the run known (``remaining_s`` on the current
card), ``rest_cost = effective_per_hour · remaining_s / 3600`` and ``rest_saving`` the
difference to staying.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..catalog import get_gpu, normalize_gpu_name
from ..catalog.prices import PriceTable
from ..i18n import N_, _
from ..money import Money, round_money



@dataclass(frozen=True)
class PriceOption:
    """A card one could rent, priced per instance-hour.

    Attributes:
        gpu: the model name as the source spells it.
        gpu_count: GPUs per instance.
        price_per_hour: Decimal per instance-hour in ``currency``.
        currency: ISO 4217.
        provider / billing: where and how (on-demand | spot).
        memory_bytes: memory per GPU in bytes when the source says; else from the catalog.
        source: ``"offers"`` (the provider's live offers) or ``"price table"``.
    """

    gpu: str
    gpu_count: int
    price_per_hour: Decimal
    currency: str
    provider: str
    billing: str
    memory_bytes: int | None = None
    source: str = "price table"


@dataclass(frozen=True)
class CardOption:
    """One candidate card, sized and priced against the current one.

    Attributes:
        option: the price row.
        catalog_name: the catalog's name for the card (None when unknown).
        memory_bytes: memory per GPU (None when neither the source nor the catalog knows).
        fits: memory >= peak × (1 + headroom).
        time_factor: time on this card / time on the current card (see module docstring).
        speed_source: how ``time_factor`` was obtained (English: the evidence).
        speed_text: the same in the language in force when it was sized (to show it; empty:
            use ``speed_source``).
        effective_per_hour: price_per_hour × time_factor.
        saving_per_hour: current rate − effective_per_hour (per hour of current-card work).
        rest_cost / rest_saving: for the rest of the run, when its length is known.
    """

    option: PriceOption
    catalog_name: str | None
    memory_bytes: int | None
    fits: bool
    time_factor: float
    speed_source: str
    effective_per_hour: Decimal
    saving_per_hour: Decimal
    rest_cost: Decimal | None = None
    rest_saving: Decimal | None = None
    speed_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (money as decimal strings, 6 places)."""
        def m(x: Decimal | None) -> str | None:
            return None if x is None else str(round_money(x, 6))

        return {
            "gpu": self.option.gpu,
            "catalog_name": self.catalog_name,
            "gpu_count": self.option.gpu_count,
            "provider": self.option.provider,
            "billing": self.option.billing,
            "price_per_hour": str(self.option.price_per_hour),
            "currency": self.option.currency,
            "price_source": self.option.source,
            "memory_bytes": self.memory_bytes,
            "fits": self.fits,
            "time_factor": round(self.time_factor, 4),
            "speed_source": self.speed_source,
            "effective_per_hour": m(self.effective_per_hour),
            "saving_per_hour": m(self.saving_per_hour),
            "rest_cost": m(self.rest_cost),
            "rest_saving": m(self.rest_saving),
        }


def options_from_offers(offers: Iterable[Any], *, gpu_count: int, billing: str, currency: str) -> list[PriceOption]:
    """The cheapest offer per GPU model with ``gpu_count`` GPUs, ``billing`` and ``currency``
    (offers are :class:`costctl_providers.base.Offer`, read by attribute)."""
    best: dict[str, PriceOption] = {}
    for o in offers:
        mode = str(getattr(o.billing, "value", o.billing))
        if o.gpu_count != gpu_count or mode != billing or o.currency.upper() != currency.upper() or not o.gpu:
            continue
        opt = PriceOption(gpu=o.gpu, gpu_count=o.gpu_count, price_per_hour=Decimal(o.price_per_hour),
                          currency=o.currency.upper(), provider=o.provider, billing=mode,
                          memory_bytes=o.gpu_memory_bytes, source="offers")
        key = normalize_gpu_name(o.gpu)[0]
        if key not in best or opt.price_per_hour < best[key].price_per_hour:
            best[key] = opt
    return list(best.values())


def options_from_price_table(table: PriceTable, *, provider: str, gpu_count: int, billing: str,
                             currency: str) -> list[PriceOption]:
    """Rows of the price table for ``provider`` (per GPU-hour × ``gpu_count``) in ``billing`` and
    ``currency``; when the table has none for that provider, the cheapest row per card from any
    provider (its name kept in :attr:`PriceOption.provider`)."""
    rows = [e for e in table.lookup(provider=provider, billing=billing) if e.currency == currency.upper()]
    if not rows:
        rows = [e for e in table.lookup(billing=billing) if e.currency == currency.upper()]
    best: dict[str, PriceOption] = {}
    for e in rows:
        opt = PriceOption(gpu=e.gpu, gpu_count=gpu_count, price_per_hour=e.price_per_gpu_hour * gpu_count,
                          currency=e.currency, provider=e.provider, billing=e.billing, source="price table")
        if e.gpu not in best or opt.price_per_hour < best[e.gpu].price_per_hour:
            best[e.gpu] = opt
    return list(best.values())


def time_factor(current_gpu: str | None, candidate_gpu: str, utilization: float | None,
                compute_dtype: str = "fp16", *, tr: Callable[[str], str] = N_) -> tuple[float, str]:
    """``(factor, how)``: time on ``candidate_gpu`` relative to ``current_gpu`` (see the module
    docstring). ``utilization`` is the mean GPU utilization as a fraction 0..1, or None.

    Args:
        tr: how ``how`` is worded: :func:`~costctl.i18n.N_` in English (the evidence; the
            default), :func:`~costctl.i18n._` in the current language (to show it).
    """
    cur = get_gpu(current_gpu) if current_gpu else None
    cand = get_gpu(candidate_gpu)
    if cur is None or cand is None:
        return 1.0, tr(N_("no catalog figures for both cards: same speed assumed"))
    p_cur, p_cand = cur.peak_tflops(compute_dtype), cand.peak_tflops(compute_dtype)
    if not p_cur or not p_cand:
        return 1.0, tr(N_("no dense {dtype} peak for both cards: same speed assumed")).format(dtype=compute_dtype)
    u = 1.0 if utilization is None else min(1.0, max(0.0, utilization))
    # a faster card is never credited with a speed-up (factor >= 1): a dense peak says nothing of
    # memory bandwidth or of how much of the card the kernels use (an L40S's peak is above an
    # A100's), so a move to a card that costs more per hour is never called a saving
    factor = max(1.0, (1.0 - u) + u * (p_cur / p_cand))
    if utilization is None:
        how = N_("dense {dtype} peak {current:g} vs {candidate:g} TFLOPS ({current_name} vs {candidate_name}), no GPU "
                 "utilization reading: fully GPU-bound assumed (Amdahl)")
    else:
        how = N_("dense {dtype} peak {current:g} vs {candidate:g} TFLOPS ({current_name} vs {candidate_name}), mean "
                 "GPU utilization {utilization:.0%} (Amdahl)")
    return factor, tr(how).format(dtype=compute_dtype, current=p_cur, candidate=p_cand, current_name=cur.name,
                                  candidate_name=cand.name, utilization=u)


def _dec(x: float) -> Decimal:
    return Decimal(repr(x))


def rank_cards(
    *,
    current_gpu: str | None,
    current_rate: Money,
    peak_bytes: int,
    headroom: float,
    options: Sequence[PriceOption],
    utilization: float | None,
    remaining_s: Decimal | None = None,
    compute_dtype: str = "fp16",
) -> list[CardOption]:
    """Every option other than the current card, sized and priced; best (lowest effective cost
    per hour of work, fitting first) first. Options in another currency than ``current_rate``
    are left out (never compared without an exchange rate)."""
    need = int(peak_bytes * (1 + headroom))
    current_name = normalize_gpu_name(current_gpu)[0] if current_gpu else None
    out = []
    for opt in options:
        if opt.currency != current_rate.currency:
            continue
        name, known = normalize_gpu_name(opt.gpu)
        if current_name is not None and name == current_name:
            continue
        model = get_gpu(opt.gpu) if known else None
        memory = opt.memory_bytes or (model.memory_bytes if model else None)
        factor, how = time_factor(current_gpu, opt.gpu, utilization, compute_dtype)
        shown = time_factor(current_gpu, opt.gpu, utilization, compute_dtype, tr=_)[1]
        effective = opt.price_per_hour * _dec(factor)
        saving = current_rate.amount - effective
        rest_cost = rest_saving = None
        if remaining_s is not None:
            rest_cost = effective * remaining_s / 3600
            rest_saving = current_rate.amount * remaining_s / 3600 - rest_cost
        out.append(CardOption(option=opt, catalog_name=model.name if model else None, memory_bytes=memory,
                              fits=memory is not None and memory >= need, time_factor=factor,
                              speed_source=how, effective_per_hour=effective, saving_per_hour=saving,
                              rest_cost=rest_cost, rest_saving=rest_saving, speed_text=shown))
    return sorted(out, key=lambda c: (not c.fits, c.effective_per_hour, c.option.gpu))


def best_fit(cards: Sequence[CardOption]) -> CardOption | None:
    """The fitting card with the largest saving per hour, if any saves at all."""
    fitting = [c for c in cards if c.fits and c.saving_per_hour > 0]
    return max(fitting, key=lambda c: (c.saving_per_hour, -c.option.price_per_hour)) if fitting else None


__all__ = ["CardOption", "PriceOption", "best_fit", "options_from_offers", "options_from_price_table",
           "rank_cards", "time_factor"]
