"""The instance price an analysis uses, and where it came from.

Precedence: ``--price`` (per instance-hour, in ``--currency`` or ``[instance] currency``) >
``--gpu``/``--provider`` from the catalog's price table (per GPU-hour x number of GPUs) >
``[instance] price_per_hour`` > none (durations only).
"""

from __future__ import annotations

from decimal import Decimal

from ..config import Settings
from ..errors import UsageError
from ..i18n import N_, _
from ..money import AmountError, Money, bounded_amount

#: What ``--price`` allows (the text after the value in its error).
PRICE_ALLOWED = N_("expected a price per instance-hour above 0 and up to 1000000000, such as 2.5")


def resolve_price(
    settings: Settings,
    *,
    price: str | None = None,
    currency: str | None = None,
    gpu: str | None = None,
    provider: str | None = None,
    gpu_count: int | None = None,
) -> tuple[Money | None, str]:
    """``(rate per instance-hour or None, where it came from)``.

    Args:
        price: ``--price`` text (a decimal number, per instance-hour).
        currency: ``--currency`` (ISO 4217); default ``[instance] currency``.
        gpu / provider: look the price up in the catalog (``costctl gpus`` table); billing mode
            from ``[instance] billing`` (prepaid looks up on-demand).
        gpu_count: GPUs in the instance (default ``[instance] gpu_count``); catalog prices are per GPU-hour.

    Raises:
        UsageError: ``--price`` together with ``--gpu``/``--provider``, a price that is not a
            number above 0 and up to 10^9 (:data:`PRICE_ALLOWED`), a bad currency,
            only one of ``--gpu``/``--provider``, or no catalog price for them.
    """
    if price is not None and (gpu or provider):
        raise UsageError(_("give either --price or --gpu/--provider, not both"))
    cur = (currency or settings.instance.currency).upper()
    if currency is not None and (len(currency) != 3 or not currency.isalpha()):
        raise UsageError(_("--currency {currency!r}: expected an ISO 4217 code such as USD or CNY").format(
            currency=currency))
    if price is not None:
        try:
            amount = bounded_amount(price, what="--price")
        except AmountError:
            amount = None
        if amount is None or amount <= 0:
            shown = price if len(price) <= 40 else price[:37] + "..."
            raise UsageError(_("--price {price!r}: {allowed}").format(price=shown, allowed=_(PRICE_ALLOWED)))
        return Money(amount, cur), "--price"
    if gpu or provider:
        if not (gpu and provider):
            raise UsageError(_("--gpu and --provider go together (the catalog prices a GPU at a provider)"))
        return _catalog_price(settings, gpu, provider, cur if currency else None,
                              gpu_count or settings.instance.gpu_count)
    if settings.instance.price_per_hour is not None:
        return Money(settings.instance.price_per_hour, settings.instance.currency), "[instance] price_per_hour"
    return None, "none"


def _catalog_price(settings: Settings, gpu: str, provider: str, currency: str | None,
                   count: int) -> tuple[Money, str]:
    try:
        from ..catalog.prices import load_price_table
    except ImportError:  # pragma: no cover - the catalog ships with costctl
        raise UsageError(_("no price catalog in this build: pass --price")) from None
    billing = "spot" if settings.instance.billing == "spot" else "on-demand"
    table = load_price_table(settings)
    entry = table.cheapest(gpu, billing=billing, provider=provider, currency=currency)
    if entry is None:
        known = sorted({e.provider for e in table.lookup(gpu, billing=billing)})
        if known:
            message = _("no {billing} price for {gpu!r} at {provider!r} in the price table; it has {gpu} at: "
                        "{providers}; pass --price or add [[catalog.prices]] to the config")
        else:
            message = _("no {billing} price for {gpu!r} at {provider!r} in the price table; pass --price "
                        "or add [[catalog.prices]] to the config")
        raise UsageError(message.format(billing=billing, gpu=gpu, provider=provider, providers=", ".join(known)))
    per_gpu = entry.price
    if currency and per_gpu.currency != currency:
        converted = table.convert(per_gpu, currency)
        if converted is None:
            raise UsageError(_("the catalog prices {gpu} at {provider} in {have}, not {want}, and no "
                               "[[catalog.exchange_rates]] links them").format(
                gpu=gpu, provider=provider, have=per_gpu.currency, want=currency))
        per_gpu = converted
    rate = Money(per_gpu.amount * Decimal(count), per_gpu.currency)
    return rate, _("catalog: {provider} {gpu} {billing} {price} per GPU-hour x {count} GPU(s), seen {seen} "
                   "({source})").format(provider=entry.provider, gpu=entry.gpu, billing=entry.billing,
                                        price=entry.price.shown(), count=count, seen=entry.seen.isoformat(),
                                        source=entry.source)
