"""Which card to rent: every catalog card that fits the estimate with headroom, ranked by the
estimated cost of the job, and for the cards that do not fit, what would make them fit.

Time of a job on a card, in hours, comes from one of two models:

* FLOPs: training FLOPs / (GPUs x dense peak x fraction). Training FLOPs per token are
  ``6*N + 6*L*s*h`` with N the weights that go through matmuls (Kaplan et al. 2020, "Scaling
  Laws for Neural Language Models", sec. 2.1: forward ``2N + 2*n_layer*n_ctx*d_attn`` with N
  the non-embedding parameters -- plus the output head, a matmul too -- backward twice that);
  full activation checkpointing adds one forward (x 4/3); LoRA skips weight gradients (x 2/3).
  Measured profiles use 3 x forward FLOPs per sample. The peak is the card's dense tensor rate
  for 16-bit compute (BF16 where the card has it, else FP16) or its FP32 rate; the fraction is
  what published runs achieved (:mod:`costctl.catalog.throughput`), or ``--mfu``.
* Reference: a time the user measured on another card, scaled by
  ``share x peak_ref/peak_card + (1 - share) x bandwidth_ref/bandwidth_card`` (share of the
  step bound by compute, default 0.5: a two-term roofline blend).

Cost = price per GPU-hour x GPUs x hours, in the price's currency. Prices in different
currencies are ranked together only through a configured exchange rate. Only prices with a
billing mode (on-demand, spot) are ranked; a marketplace's "from" price is not a price a job
can be sure to pay, and a prepaid rental is paid for its whole period. With a ``currency`` that a
configured rate links to a price's currency, the price and the cost are also shown converted
(``CardOption.display``; display only: the cost stays in the price's currency).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Sequence

from ..errors import UsageError
from ..i18n import _
from ..money import Money
from .gpus import Catalog, GpuModel
from .memory import DEFAULT_LORA_RANK, MemoryBreakdown, Setup, estimate_memory
from .models import MeasuredProfile, ModelSpec, TransformerShape
from .prices import (
    RANKED_BILLING_MODES,
    DisplayConversion,
    PriceEntry,
    PriceTable,
    display_conversion,
    rank_groups,
    rates_used,
)
from .throughput import Efficiency, efficiency, samples_work

DEFAULT_HEADROOM = 0.10
#: Billing modes a job's cost is ranked by; a "from" price (a marketplace's lowest listing,
#: billing mode unknown) is shown by ``costctl gpus`` but never ranked as a job's price.
RANKED_BILLING = RANKED_BILLING_MODES
#: None: the fraction of the dense peak comes from published runs (costctl.catalog.throughput).
DEFAULT_MFU: float | None = None
DEFAULT_COMPUTE_SHARE = 0.5
ZERO_GPU_COUNTS = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Reference:
    """A measured run time on a reference card.

    Attributes:
        gpu: the reference card.
        hours: wall-clock hours the job took there (with the same GPU count).
        compute_share: fraction of the step bound by compute (rest by memory bandwidth).
    """

    gpu: GpuModel
    hours: float
    compute_share: float = DEFAULT_COMPUTE_SHARE


def compute_dtype(gpu: GpuModel, precision: str) -> str | None:
    """The dtype the card computes in for ``precision``: fp32 -> fp32; mixed -> bf16 where the
    card has BF16, else fp16; fp16/bf16 as given. None when the card cannot (bf16 on a T4)."""
    if precision == "fp32":
        return "fp32"
    if precision == "mixed":
        return "bf16" if gpu.bf16 else "fp16"
    if precision == "bf16" and not gpu.bf16:
        return None
    return precision


def training_flops(model: ModelSpec, setup: Setup, work: float, seq_len: int | None) -> float:
    """FLOPs to train on ``work`` tokens (transformers) or samples (measured profiles); see module docstring.

    Raises:
        UsageError: a measured profile without forward FLOPs.
    """
    if isinstance(model, TransformerShape):
        seq = seq_len or model.default_seq_len
        matmul = (model.n_layers * model.layer_matmul_params() + model.head_matmul_params()
                  if model.params is None else model.param_count())
        per_token = 6 * matmul + 6 * model.n_layers * seq * model.hidden_size
    else:
        if not model.forward_flops_per_sample:
            raise UsageError(_("{model}: no FLOPs per sample known; give --reference-gpu/--reference-hours").format(
                model=model.name))
        per_token = 3 * model.forward_flops_per_sample
    if setup.grad_checkpointing:
        per_token *= 4 / 3
    if setup.lora_rank:
        per_token *= 2 / 3
    return per_token * work


def card_efficiency(model: ModelSpec, setup: Setup, gpu: GpuModel, mfu: float | None = None) -> Efficiency:
    """The fraction of ``gpu``'s dense peak the job reaches: ``mfu`` when given, else from
    published runs (:func:`costctl.catalog.throughput.efficiency`)."""
    if mfu is not None:
        return Efficiency(mfu, "given")
    def per_sample(seq: int | None) -> float:
        return training_flops(model, setup, samples_work(model, seq or setup.seq_len), seq or setup.seq_len)

    return efficiency(getattr(model, "name", ""), gpu, setup.precision, per_sample)


def job_hours_from_flops(flops: float, gpu: GpuModel, dtype: str, gpus: int, mfu: float) -> float:
    """Hours for ``flops`` on ``gpus`` cards at ``mfu`` of the dense peak for ``dtype``."""
    peak = gpu.peak_tflops(dtype)
    if not peak:
        raise UsageError(_("{gpu} has no {dtype} rate").format(gpu=gpu.name, dtype=dtype))
    return flops / (gpus * peak * 1e12 * mfu) / 3600


def job_hours_from_reference(ref: Reference, gpu: GpuModel, dtype: str, ref_dtype: str) -> float:
    """Reference hours scaled by the compute-share blend of peak and bandwidth ratios."""
    ref_peak = ref.gpu.peak_tflops(ref_dtype) or ref.gpu.fp32_tflops
    peak = gpu.peak_tflops(dtype) or gpu.fp32_tflops
    scale = ref.compute_share * ref_peak / peak + (1 - ref.compute_share) * (
        ref.gpu.memory_bandwidth_gbs / gpu.memory_bandwidth_gbs
    )
    return ref.hours * scale


@dataclass(frozen=True)
class CardOption:
    """A card (and a price for it) that fits.

    Attributes:
        gpu: the catalog row; gpus: how many.
        required_bytes / usable_bytes: estimate vs memory x (1 - headroom), per GPU.
        dtype: compute dtype on this card.
        price: the price row used (None when the table has none for this card).
        hours: estimated job hours (None without --tokens/--steps or a reference).
        cost: price x gpus x hours (None when either is unknown).
        hourly: price x gpus.
        mfu: the fraction of the dense peak the time assumes (None without a FLOPs time).
        mfu_basis: where it comes from: published, transferred, median or given.
        display: how the price and the cost are shown in the currency asked for, when a
            configured rate converts (display only); None otherwise.
    """

    gpu: GpuModel
    gpus: int
    required_bytes: int
    usable_bytes: int
    dtype: str
    price: PriceEntry | None
    hours: float | None
    cost: Money | None
    hourly: Money | None
    mfu: float | None = None
    mfu_basis: str | None = None
    display: DisplayConversion | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict: the price and the cost in the price's own currency, and under
        ``converted`` (None when not converted) the same in the currency asked for, with the rate."""
        return {
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "memory_gb": self.gpu.memory_gb,
            "required_bytes": self.required_bytes,
            "usable_bytes": self.usable_bytes,
            "compute_dtype": self.dtype,
            "provider": self.price.provider if self.price else None,
            "billing": self.price.billing if self.price else None,
            "price_per_gpu_hour": str(self.price.price_per_gpu_hour) if self.price else None,
            "currency": self.price.currency if self.price else None,
            "price_seen": self.price.seen.isoformat() if self.price else None,
            "hours": self.hours,
            "cost": str(self.cost.amount.quantize(Decimal("0.01"))) if self.cost else None,
            "cost_per_hour": str(self.hourly.amount) if self.hourly else None,
            "mfu": self.mfu,
            "mfu_basis": self.mfu_basis,
            "price_source": self.price.source if self.price else None,
            "price_estimated": (self.price.estimated or None) if self.price else None,
            "converted": self.display.to_dict({
                "price_per_gpu_hour": self.price.price if self.price else None,
                "cost": self.cost, "cost_per_hour": self.hourly,
            }) if self.display is not None else None,
        }


@dataclass(frozen=True)
class Suggestion:
    """One change that would make a card fit (or a plan of several).

    Attributes:
        change: what to do, in words.
        setup: the changed setup; required_bytes: its per-GPU estimate; fits: whether it fits.
        gpus: cards needed with this change.
    """

    change: str
    setup: Setup
    required_bytes: int
    fits: bool
    gpus: int = 1

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {"change": self.change, "required_bytes": self.required_bytes, "fits": self.fits, "gpus": self.gpus}


@dataclass(frozen=True)
class CardAdvice:
    """A card that does not fit, and what would make it fit.

    Attributes:
        gpu: the catalog row; required_bytes / usable_bytes per GPU;
        suggestions: changes that fit, least intrusive first (a combined plan when no single change does).
    """

    gpu: GpuModel
    required_bytes: int
    usable_bytes: int
    suggestions: tuple[Suggestion, ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {
            "gpu": self.gpu.name,
            "memory_gb": self.gpu.memory_gb,
            "required_bytes": self.required_bytes,
            "usable_bytes": self.usable_bytes,
            "suggestions": [s.to_dict() for s in self.suggestions],
        }


@dataclass(frozen=True)
class Recommendation:
    """The answer of :func:`recommend`.

    Attributes:
        breakdown: the memory estimate for the setup asked.
        groups: fitting options ranked cheapest first, one group per currency (all in one
            group when exchange rates allow); a group keyed None holds cards without a price.
        no_fit: cards that do not fit, with suggestions.
        fitting_gpus: every card whose memory fits, priced or not (the provider filter may
            leave some of them out of ``groups``).
        excluded: ``(card, reason)`` for cards that cannot run the precision at all.
        notes: assumptions (MFU, time basis, currencies).
    """

    breakdown: MemoryBreakdown
    groups: tuple[tuple[str | None, tuple[CardOption, ...]], ...]
    no_fit: tuple[CardAdvice, ...]
    excluded: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    fitting_gpus: tuple[GpuModel, ...] = ()

    @property
    def fits(self) -> list[CardOption]:
        """All fitting options, group by group."""
        return [o for _, opts in self.groups for o in opts]

    @property
    def fits_single_card(self) -> bool:
        """Whether any card fits with the GPU count asked (priced or not)."""
        return bool(self.fitting_gpus)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict: the breakdown (total and every term, bytes), ranked options, advice."""
        return {
            "memory": self.breakdown.to_dict(),
            "fits": [
                {"currency": cur, "ranked": [o.to_dict() for o in opts]} for cur, opts in self.groups
            ],
            "does_not_fit": [a.to_dict() for a in self.no_fit],
            "fitting_gpus": [g.name for g in self.fitting_gpus],
            "excluded": [{"gpu": g, "reason": r} for g, r in self.excluded],
            "notes": list(self.notes),
        }


def usable_bytes(gpu: GpuModel, headroom: float) -> int:
    """Bytes a job may plan to use on ``gpu``: nominal memory (``memory_gb`` GiB, the vendor's
    figure) x (1 - headroom). The headroom covers what the driver reserves below nominal
    (NVML's total is 46068 MiB on a 48 GiB L40S, 81920 MiB on an 80 GiB A100); the estimate
    compared against it already holds the CUDA context and fragmentation."""
    return int(gpu.memory_bytes * (1 - headroom))


def _proper_divisors(n: int) -> list[int]:
    """The divisors of ``n`` below ``n``, ascending, found in O(sqrt(n)) steps (a batch of
    2**31 takes 46,341 steps, not two billion)."""
    small: list[int] = []
    large: list[int] = []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return [d for d in small + large[::-1] if d < n]


def _largest_fitting_micro_batch(model: ModelSpec, setup: Setup, limit: int) -> int | None:
    for b in reversed(_proper_divisors(setup.batch_size)):
        if estimate_memory(model, setup.but(batch_size=b)).total <= limit:
            return b
    return None


def suggestions_for(model: ModelSpec, setup: Setup, gpu: GpuModel, headroom: float) -> tuple[Suggestion, ...]:
    """Changes that make ``model`` fit ``gpu``: each single change that fits, least intrusive
    first (smaller micro-batch + gradient accumulation keeping the effective batch, mixed
    precision, activation checkpointing, flash attention, 8-bit optimizer, ZeRO-3 over more
    cards, offload, LoRA, QLoRA); when none fits alone, one cumulative plan."""
    limit = usable_bytes(gpu, headroom)
    is_transformer = isinstance(model, TransformerShape)
    out: list[Suggestion] = []

    def attempt(change: str, new: Setup, gpus: int | None = None) -> Suggestion:
        need = estimate_memory(model, new).total
        return Suggestion(change, new, need, need <= limit, gpus or new.gpus)

    b = _largest_fitting_micro_batch(model, setup, limit)
    if b is not None:
        steps = setup.batch_size // b
        out.append(attempt(_("micro-batch {batch} x {steps} gradient-accumulation steps (effective batch "
                             "{effective} kept)").format(batch=b, steps=steps, effective=setup.batch_size),
                           setup.but(batch_size=b)))
    singles: list[tuple[str, Setup]] = []
    if setup.precision == "fp32":
        singles.append((_("mixed precision ({dtype} autocast)").format(dtype="bf16" if gpu.bf16 else "fp16"),
                        setup.but(precision="mixed")))
    if setup.training and not setup.grad_checkpointing:
        singles.append((_("activation checkpointing"), setup.but(grad_checkpointing=True)))
    if is_transformer and not setup.flash_attention:
        singles.append((_("flash attention (no s x s scores kept)"), setup.but(flash_attention=True)))
    if setup.optimizer in ("adam", "adamw"):
        singles.append((_("8-bit AdamW (bitsandbytes)"), setup.but(optimizer="adam-8bit")))
    for change, new in singles:
        out.append(attempt(change, new))
    if setup.training:
        for n in ZERO_GPU_COUNTS:
            if n <= setup.gpus:
                continue
            s = attempt(_("ZeRO-3 / FSDP full sharding over {count} x {gpu}").format(count=n, gpu=gpu.name),
                        setup.but(gpus=n, zero_stage=3), n)
            if s.fits:
                out.append(s)
                break
        if not setup.offload:
            out.append(attempt(_("ZeRO-Offload: optimizer state and fp32 master weights in CPU RAM"),
                               setup.but(offload=True, zero_stage=max(setup.zero_stage, 2))))
        if setup.lora_rank is None:
            lora = setup.but(lora_rank=DEFAULT_LORA_RANK, precision="mixed" if setup.precision == "fp32" else setup.precision)
            out.append(attempt(_("LoRA r={rank} on q,v (16-bit frozen base)").format(rank=DEFAULT_LORA_RANK), lora))
            out.append(attempt(_("QLoRA r={rank} (4-bit NF4 base)").format(rank=DEFAULT_LORA_RANK),
                               lora.but(base_weight_bits=4)))
    fitting = [s for s in out if s.fits]
    if fitting:
        return tuple(fitting)
    # No single change is enough: try combined plans, least intrusive first.
    base: dict[str, object] = {"batch_size": 1}
    base_words = [_("micro-batch 1 with gradient accumulation")]
    if setup.training:
        base["grad_checkpointing"] = True
        base_words.append(_("activation checkpointing"))
    if is_transformer:
        base["flash_attention"] = True
        base_words.append(_("flash attention"))
    if setup.precision == "fp32":
        base["precision"] = "mixed"
        base_words.append(_("mixed precision"))
    plans: list[tuple[list[str], dict[str, object]]] = [(base_words, base)]
    if setup.training:
        eight = {"optimizer": "adam-8bit"} if setup.optimizer in ("adam", "adamw") else {}
        offload = {"offload": True, "zero_stage": max(setup.zero_stage, 2)}
        eight_bit = _("8-bit AdamW")
        if eight:
            plans.append((base_words + [eight_bit], {**base, **eight}))
        plans.append((base_words + ["ZeRO-Offload"], {**base, **offload}))
        if eight:
            plans.append((base_words + [eight_bit, "ZeRO-Offload"], {**base, **eight, **offload}))
        if setup.lora_rank is None:
            lora = {"lora_rank": DEFAULT_LORA_RANK}
            plans.append(([f"LoRA r={DEFAULT_LORA_RANK}"] + base_words, {**base, **lora}))
            plans.append(([_("QLoRA r={rank} (4-bit base)").format(rank=DEFAULT_LORA_RANK)] + base_words,
                          {**base, **lora, "base_weight_bits": 4}))
    last: Suggestion | None = None
    for words, delta in plans:
        last = attempt(" + ".join(words), setup.but(**delta))
        if last.fits:
            return (last,)
    assert last is not None
    return (Suggestion(_("{plan} (still too large)").format(plan=last.change), last.setup, last.required_bytes,
                       False, last.gpus),)


def recommend(
    model: ModelSpec,
    setup: Setup,
    catalog: Catalog,
    prices: PriceTable,
    *,
    headroom: float = DEFAULT_HEADROOM,
    provider: str | None = None,
    billing: str | None = "on-demand",
    work: float | None = None,
    mfu: float | None = DEFAULT_MFU,
    reference: Reference | None = None,
    currency: str | None = None,
    gpus: Sequence[GpuModel] | None = None,
) -> Recommendation:
    """Rank the cards that fit ``model`` under ``setup`` by estimated job cost.

    Args:
        model, setup: what to estimate (see :func:`~costctl.catalog.memory.estimate_memory`).
        catalog: GPU rows; prices: the price table (with exchange rates).
        headroom: fraction of card memory kept free (default 0.10).
        provider / billing: filter prices (billing None = both on-demand and spot).
        work: tokens (transformers) or samples (measured profiles) the job processes, for time and cost.
        mfu: model FLOPs utilization for the FLOPs time model; None = per card from published
            runs (:mod:`costctl.catalog.throughput`).
        reference: a measured time on another card (wins over the FLOPs model).
        currency: rank in this currency when exchange rates allow, and show prices and costs
            converted into it (``CardOption.display``, display only).
        gpus: restrict to these catalog rows.

    Raises:
        UsageError: headroom outside [0, 1), mfu outside (0, 1], or unknown billing.
    """
    if not 0 <= headroom < 1:
        raise UsageError(_("headroom {headroom} must be in [0, 1)").format(headroom=headroom))
    if mfu is not None and not 0 < mfu <= 1:
        raise UsageError(_("MFU {mfu} must be in (0, 1]").format(mfu=mfu))
    if billing not in (None, "on-demand", "spot"):
        raise UsageError(_("billing {billing!r} is not one of on-demand, spot, any").format(billing=billing))
    breakdown = estimate_memory(model, setup)
    need = breakdown.total
    notes = list(breakdown.notes)
    flops = training_flops(model, setup, work, breakdown.seq_len) if work and reference is None else None
    if reference is not None:
        notes.append(_("time scaled from {hours:g} h on {gpu} ({share:.0%} compute-bound, rest "
                       "bandwidth-bound)").format(hours=reference.hours, gpu=reference.gpu.name,
                                                  share=reference.compute_share))
    elif flops is not None:
        if mfu is not None:
            notes.append(_("time from {flops:.3g} training FLOPs at {mfu:.0%} of each card's dense peak "
                           "(--mfu)").format(flops=flops, mfu=mfu))
        else:
            notes.append(_("time from {flops:.3g} training FLOPs at the fraction of each card's dense peak that "
                           "published runs of this model (or, without any, the median published run) achieved: "
                           "see mfu and mfu_basis per card").format(flops=flops))
    else:
        notes.append(_("no --tokens/--steps or reference time: ranked by price per hour"))
    notes.append(_("usable memory = the vendor's nominal GiB x (1 - headroom {headroom:g}); the driver reports "
                   "less than nominal (NVML: 46068 MiB of an L40S's 48 GiB), which the headroom covers").format(
        headroom=headroom))
    ref_dtype = compute_dtype(reference.gpu, setup.precision) if reference else None

    options: list[CardOption] = []
    fitting: list[GpuModel] = []
    no_fit: list[CardAdvice] = []
    excluded: list[tuple[str, str]] = []
    for gpu in gpus if gpus is not None else catalog.models:
        dtype = compute_dtype(gpu, setup.precision)
        if dtype is None:
            excluded.append((gpu.name, _("no BF16 support (use --precision mixed or fp16)")))
            continue
        limit = usable_bytes(gpu, headroom)
        if need > limit:
            no_fit.append(CardAdvice(gpu, need, limit, suggestions_for(model, setup, gpu, headroom)))
            continue
        fitting.append(gpu)
        eff: Efficiency | None = None
        if reference is not None:
            hours: float | None = job_hours_from_reference(reference, gpu, dtype, ref_dtype or "fp32")
        elif flops is not None:
            eff = card_efficiency(model, setup, gpu, mfu)
            hours = job_hours_from_flops(flops, gpu, dtype, setup.gpus, eff.fraction)
        else:
            hours = None
        mfu_of = (eff.fraction if eff else None, eff.basis if eff else None)
        rows = [r for r in prices.lookup(gpu.name, provider=provider, billing=billing) if r.billing in RANKED_BILLING]
        if not rows and provider is None:
            options.append(CardOption(gpu, setup.gpus, need, limit, dtype, None, hours, None, None, *mfu_of))
        for row in rows:
            hourly = row.price * setup.gpus
            cost = Money(hourly.amount * Decimal(repr(hours)), hourly.currency) if hours is not None else None
            options.append(CardOption(gpu, setup.gpus, need, limit, dtype, row, hours, cost, hourly, *mfu_of,
                                      display=display_conversion(row.currency, currency, prices.rates)))

    if fitting and not options:
        if billing:
            line = _("{count} card(s) fit, but the price table has no {billing} price for them from {provider}: "
                     "{gpus}")
        else:
            line = _("{count} card(s) fit, but the price table has no on-demand or spot price for them from "
                     "{provider}: {gpus}")
        notes.append(line.format(count=len(fitting), billing=billing, provider=provider,
                                 gpus=", ".join(g.name for g in fitting)))
    if not fitting and no_fit and setup.training:
        by_memory: dict[float, GpuModel] = {}
        for a in no_fit:
            if a.gpu.memory_gb >= 80:
                by_memory.setdefault(a.gpu.memory_gb, a.gpu)
        big = [by_memory[m] for m in sorted(by_memory)]
        plans = []
        for gpu in big:
            n = min_cards(model, setup, gpu, headroom)
            if n:
                plans.append(f"{n} x {gpu.name}")
        if plans:
            notes.append(_("no single card fits; with ZeRO-3 data parallel it takes {plans} (see each card's "
                           "alternatives: offload, LoRA)").format(plans=_(", or ").join(plans)))
    groups = rank_groups(options, lambda o: o.cost if o.cost is not None else o.hourly, prices.rates, currency)
    for line in rates_used(groups, lambda o: o.price.currency if o.price else None, prices.rates):
        notes.append(_("prices converted at {rate}").format(rate=line))
    if len([c for c, _opts in groups if c is not None]) > 1:
        notes.append(_("prices in several currencies are ranked separately: set [[catalog.exchange_rates]] in "
                       "costctl.toml to rank them together"))
    return Recommendation(
        breakdown=breakdown,
        groups=tuple((c, tuple(opts)) for c, opts in groups),
        no_fit=tuple(no_fit),
        excluded=tuple(excluded),
        notes=tuple(notes),
        fitting_gpus=tuple(fitting),
    )


def work_from_steps(model: ModelSpec, setup: Setup, steps: int, seq_len: int | None) -> float:
    """Tokens (or samples for measured profiles) processed by ``steps`` optimizer steps of
    ``batch_size x gpus`` samples."""
    samples = steps * setup.batch_size * setup.gpus
    if isinstance(model, MeasuredProfile):
        return float(samples)
    return float(samples * (seq_len or model.default_seq_len))


def largest_card(catalog: Catalog) -> GpuModel:
    """The catalog row with the most memory."""
    return max(catalog.models, key=lambda g: g.memory_gb)


def min_cards(model: ModelSpec, setup: Setup, gpu: GpuModel, headroom: float) -> int | None:
    """Fewest cards of ``gpu`` that fit with ZeRO-3 (None if even 64 do not)."""
    for n in (1, *ZERO_GPU_COUNTS):
        s = setup.but(gpus=n, zero_stage=3 if n > 1 else setup.zero_stage)
        if estimate_memory(model, s).total <= usable_bytes(gpu, headroom):
            return n
    return None


__all__ = [
    "CardAdvice",
    "CardOption",
    "DEFAULT_HEADROOM",
    "DEFAULT_MFU",
    "Recommendation",
    "Reference",
    "Suggestion",
    "card_efficiency",
    "compute_dtype",
    "job_hours_from_flops",
    "job_hours_from_reference",
    "largest_card",
    "min_cards",
    "recommend",
    "suggestions_for",
    "training_flops",
    "usable_bytes",
    "work_from_steps",
]
