"""The price table: what one GPU-hour costs, per provider and billing mode.

Sources, lowest precedence first (a later one replaces an earlier row with the same
provider, GPU and billing mode):

1. the seed table shipped in the package (``data/prices.csv``), each row with date and source;
2. prices imported with ``costctl gpus --import`` (SkyPilot CSV) or ``--refresh PROVIDER``
   (the adapter's offers), kept in a CSV file in the data dir (:func:`imported_prices_path`);
3. ``[[catalog.prices]]`` in ``costctl.toml``.

Every row has a billing mode: ``on-demand``, ``spot`` (interruptible; the going or minimum
bid), ``prepaid`` (a rental paid ahead for a day, week or month: AutoDL's 包日/包周/包月; its
``tier`` names the period and ``period_price`` holds the price per card for it), or ``from`` --
a marketplace's lowest listing seen, a floor rather than a price a job can count on
(third-party summaries of Vast.ai), shown but never ranked as a job's price -- and, where the
provider has several prices per GPU and mode, a ``tier`` (RunPod: ``secure`` and ``community``
cloud, four prices per GPU type). RunPod's prices come live from its API (``gpuTypes``, through
the adapter) when a key is configured (:func:`live_prices`). A row with no public figure behind
it says what it was ``estimated`` from. Prepaid and ``from`` rows are listed, never ranked.

Prices are Decimal per GPU-hour in the row's currency. Amounts in different currencies are
compared only through an :class:`~costctl.money.ExchangeRate` from ``[[catalog.exchange_rates]]``
(with its date); otherwise each currency is ranked on its own (:func:`rank_groups`). A rate also
converts a price for display (:func:`display_conversion`): a column or field of its own,
labelled with the rate and its date; the price keeps its currency and nothing is added.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence, TypeVar

from ..errors import ConfigError, CostctlError, CurrencyMismatchError, UsageError
from ..i18n import N_, _
from ..money import AmountError, ExchangeRate, Money, bounded_amount, parse_decimal
from ..paths import data_dir
from .gpus import normalize_gpu_name

if TYPE_CHECKING:
    from ..config import Settings

Billing = Literal["on-demand", "spot", "prepaid", "from"]
#: Billing modes a price row may have; ``from`` = a marketplace's lowest listing (a floor);
#: ``prepaid`` = a rental paid ahead for the period its tier names.
BILLING_MODES: tuple[str, ...] = ("on-demand", "spot", "prepaid", "from")
#: Billing modes a job's cost can be ranked by.
RANKED_BILLING_MODES: tuple[str, ...] = ("on-demand", "spot")
#: Billing modes a provider's offers (``list_offers``) may carry into the table.
OFFER_BILLING_MODES: tuple[str, ...] = ("on-demand", "spot", "from")
#: Hours in a prepaid period (the tier of a ``prepaid`` row), to state its price per GPU-hour:
#: a day, a week (7 days) and a month of 730 h (8,760 h a year / 12, the mean month; the
#: same figure the report behind AutoDL's monthly rows used: 1,052 CNY a month ~ 1.44 per hour).
PERIOD_HOURS: dict[str, int] = {"daily": 24, "weekly": 168, "monthly": 730}
PRICE_COLUMNS = ("provider", "gpu", "billing", "price_per_gpu_hour", "currency", "seen", "source")
#: Optional columns (empty when absent): the price tier, what an estimated price was estimated
#: from, and a prepaid row's price per card for its whole period.
OPTIONAL_PRICE_COLUMNS = ("tier", "estimated", "period_price")
IMPORTED_PRICES_FILE = "imported_prices.csv"

T = TypeVar("T")


@dataclass(frozen=True)
class PriceEntry:
    """One price: a GPU-hour of ``gpu`` at ``provider`` under ``billing``.

    Attributes:
        provider: provider name (``"runpod"``, ``"vastai"``, ``"autodl"``, ``"aws"``...), lower case.
        gpu: catalog name when known (see :func:`~costctl.catalog.gpus.normalize_gpu_name`), else the raw name.
        gpu_raw: the name as the source spelled it.
        known: whether ``gpu`` is a catalog model.
        billing: ``"on-demand"``, ``"spot"`` (interruptible; the going or minimum bid),
            ``"prepaid"`` (paid ahead for the period ``tier`` names) or ``"from"`` (a
            marketplace's lowest listing); only on-demand and spot are ranked as a job's price.
        price_per_gpu_hour: Decimal, currency units per GPU-hour (a prepaid row: its period
            price / :data:`PERIOD_HOURS` of the period).
        currency: ISO 4217 code.
        seen: the date the price was seen.
        source: URL, file, ``"config"`` or the provider's API.
        tier: the provider's price tier (RunPod ``secure`` / ``community``; a prepaid row's
            period: ``daily``, ``weekly``, ``monthly``); ``""`` when it has none.
        estimated: ``""`` for a price seen in public; else what it was estimated from.
        period_price: a prepaid row's price per card for its whole period; None otherwise.
    """

    provider: str
    gpu: str
    gpu_raw: str
    known: bool
    billing: Billing
    price_per_gpu_hour: Decimal
    currency: str
    seen: date
    source: str
    tier: str = ""
    estimated: str = ""
    period_price: Decimal | None = None

    @property
    def ranked(self) -> bool:
        """Whether a job's cost may be ranked by this price (on-demand or spot, not ``from``)."""
        return self.billing in RANKED_BILLING_MODES

    @property
    def label(self) -> str:
        """Billing mode and tier for tables: ``"on-demand"``, ``"spot community"``, ``"from"``."""
        return f"{self.billing} {self.tier}".strip()

    @property
    def price(self) -> Money:
        """The price per GPU-hour as :class:`~costctl.money.Money`."""
        return Money(self.price_per_gpu_hour, self.currency)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(provider, gpu, billing, tier): rows with the same key replace each other."""
        return (self.provider, self.gpu, self.billing, self.tier)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (price as a string, date ISO)."""
        return {
            "provider": self.provider,
            "gpu": self.gpu,
            "gpu_raw": self.gpu_raw,
            "known": self.known,
            "billing": self.billing,
            "price_per_gpu_hour": str(self.price_per_gpu_hour),
            "currency": self.currency,
            "seen": self.seen.isoformat(),
            "source": self.source,
            "tier": self.tier or None,
            "ranked": self.ranked,
            "estimated": self.estimated or None,
            "period_price": str(self.period_price) if self.period_price is not None else None,
        }


def make_entry(
    provider: str,
    gpu: str,
    billing: str,
    price_per_gpu_hour: object,
    currency: str,
    seen: date | str,
    source: str,
    *,
    memory_gb: float | None = None,
    tier: str | None = None,
    estimated: str | None = None,
    period_price: object = None,
) -> PriceEntry:
    """Validate and build a :class:`PriceEntry`, normalizing the GPU name.

    A ``prepaid`` row gives ``period_price`` (per card, for the period its ``tier`` names:
    daily, weekly or monthly) and may leave ``price_per_gpu_hour`` empty: it is then the period
    price / :data:`PERIOD_HOURS` of the period.

    Raises:
        ConfigError: empty provider or GPU, billing not on-demand|spot|prepaid|from, a price
            that is not a number from 0 to 10^9 (:func:`costctl.money.bounded_amount`), a currency
            that is not three letters, a date not ``YYYY-MM-DD``, or a prepaid row without a period
            tier or a period price.
    """
    provider = (provider or "").strip().lower()
    if not provider:
        raise ConfigError(_("price: provider is empty"))
    raw = (gpu or "").strip()
    if not raw:
        raise ConfigError(_("price for {provider}: gpu is empty").format(provider=provider))
    row = dict(provider=provider, gpu=raw)
    billing = (billing or "").strip().lower()
    if billing not in BILLING_MODES:
        raise ConfigError(_("price for {provider} {gpu}: billing {billing!r} is not one of {allowed}").format(
            billing=billing, allowed=", ".join(BILLING_MODES), **row))
    tier_name = (tier or "").strip().lower()
    per_period: Decimal | None = None
    if period_price not in (None, ""):
        per_period = parse_decimal(period_price, what=_("period price for {provider} {gpu}").format(**row))
        if per_period <= 0:
            raise ConfigError(_("period price for {provider} {gpu}: {amount} is not above 0").format(
                amount=per_period, **row))
    if billing == "prepaid":
        if tier_name not in PERIOD_HOURS or per_period is None:
            raise ConfigError(_("prepaid price for {provider} {gpu}: give tier {tiers} and the period_price per "
                                "card for that period").format(tiers=" | ".join(PERIOD_HOURS), **row))
        if price_per_gpu_hour in (None, ""):
            # a comparison figure, never charged: four places are plenty
            price_per_gpu_hour = (per_period / PERIOD_HOURS[tier_name]).quantize(Decimal("0.0001"))
    elif per_period is not None:
        raise ConfigError(_("price for {provider} {gpu}: period_price is for prepaid rows only").format(**row))
    try:
        amount = bounded_amount(price_per_gpu_hour, what=_("price for {provider} {gpu}").format(**row))
    except AmountError as exc:
        raise ConfigError(exc.message) from None
    cur = (currency or "").strip().upper()
    if len(cur) != 3 or not cur.isalpha():
        raise ConfigError(_("price for {provider} {gpu}: currency {currency!r} is not a 3-letter ISO code").format(
            currency=currency, **row))
    if isinstance(seen, str):
        try:
            seen = date.fromisoformat(seen.strip())
        except ValueError:
            raise ConfigError(_("price for {provider} {gpu}: date {date!r} is not YYYY-MM-DD").format(
                date=seen, **row)) from None
    name, known = normalize_gpu_name(raw, memory_gb=memory_gb)
    return PriceEntry(provider, name, raw, known, billing, amount, cur, seen, (source or "").strip(),  # type: ignore[arg-type]
                      tier_name, (estimated or "").strip(), per_period)


def parse_price_csv(text: str, *, origin: str) -> list[PriceEntry]:
    """Read a price CSV with the header ``provider,gpu,billing,price_per_gpu_hour,currency,seen,source``
    and optionally ``tier``, ``estimated`` and ``period_price`` (columns by name, any order;
    lines starting with ``#`` are comments).

    Raises:
        ConfigError: a missing column or a bad row (naming ``origin`` and the line).
    """
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    missing = [c for c in PRICE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(_("{origin}: missing column(s) {missing}; expected {expected}").format(
            origin=origin, missing=", ".join(missing), expected=",".join(PRICE_COLUMNS)))
    out = []
    for n, row in enumerate(reader, start=2):
        try:
            out.append(make_entry(*(row[c] or "" for c in PRICE_COLUMNS), tier=row.get("tier") or None,
                                  estimated=row.get("estimated") or None, period_price=row.get("period_price") or None))
        except ConfigError as exc:
            raise ConfigError(_("{origin} row {row}: {error}").format(origin=origin, row=n, error=exc)) from None
    return out


def shipped_prices() -> list[PriceEntry]:
    """The seed price table shipped in the package."""
    text = resources.files("costctl.catalog").joinpath("data/prices.csv").read_text(encoding="utf-8")
    return parse_price_csv(text, origin="costctl/catalog/data/prices.csv")


def imported_prices_path(configured_data_dir: Path | None = None) -> Path:
    """Where ``costctl gpus --import`` keeps imported prices: ``<data dir>/imported_prices.csv``."""
    return data_dir(configured_data_dir) / IMPORTED_PRICES_FILE


def load_imported_prices(configured_data_dir: Path | None = None) -> list[PriceEntry]:
    """Prices imported earlier (empty if none)."""
    path = imported_prices_path(configured_data_dir)
    if not path.is_file():
        return []
    return parse_price_csv(path.read_text(encoding="utf-8"), origin=str(path))


def save_imported_prices(entries: Sequence[PriceEntry], configured_data_dir: Path | None = None) -> Path:
    """Merge ``entries`` into the imported-prices file and write it atomically.

    Every earlier imported row of a provider present in ``entries`` is dropped first, so
    re-importing a provider's catalog replaces it (idempotent). Returns the file's path.
    """
    path = imported_prices_path(configured_data_dir)
    providers = {e.provider for e in entries}
    kept = [e for e in load_imported_prices(configured_data_dir) if e.provider not in providers]
    rows = merge_prices(kept, entries)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PRICE_COLUMNS + OPTIONAL_PRICE_COLUMNS)
    for e in rows:
        # The catalog name, not the raw one: a family name resolved by memory ("A100" with
        # 80 GB) must not fall back to its default variant when read back.
        writer.writerow([e.provider, e.gpu if e.known else e.gpu_raw, e.billing, e.price_per_gpu_hour, e.currency,
                         e.seen.isoformat(), e.source, e.tier, e.estimated,
                         "" if e.period_price is None else e.period_price])
    fd, tmp = tempfile.mkstemp(prefix=".imported_prices.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def prices_from_offers(offers: Iterable[Any], *, seen: date, source: str | None = None) -> list[PriceEntry]:
    """Price rows from a provider adapter's offers (``costctl_providers.base.Offer``): the
    cheapest per-GPU-hour price per (GPU, billing mode, tier); prepaid offers are skipped.

    Offers are read by attribute (provider, gpu_raw/gpu, gpu_count, billing, price_per_hour,
    currency, gpu_memory_bytes, region, tier), so this module does not import the providers package.
    """
    best: dict[tuple[str, str, str], PriceEntry] = {}
    for offer in offers:
        billing = str(getattr(offer.billing, "value", offer.billing))
        if billing not in OFFER_BILLING_MODES or not offer.gpu_count:
            continue
        raw = offer.gpu_raw or offer.gpu or ""
        memory = getattr(offer, "gpu_memory_bytes", None)
        entry = make_entry(
            offer.provider, raw, billing, Decimal(offer.price_per_hour) / Decimal(offer.gpu_count),
            offer.currency, seen, source or f"{offer.provider} offers{f' ({offer.region})' if offer.region else ''}",
            memory_gb=memory / 2**30 if memory else None, tier=getattr(offer, "tier", None),
        )
        current = best.get(entry.key)
        if current is None or entry.price_per_gpu_hour < current.price_per_gpu_hour:
            best[entry.key] = entry
    return list(best.values())


def merge_prices(*layers: Iterable[PriceEntry]) -> list[PriceEntry]:
    """Merge layers lowest precedence first: a later row replaces an earlier one with the
    same (provider, gpu, billing). Order of first appearance is kept."""
    merged: dict[tuple[str, str, str], PriceEntry] = {}
    for layer in layers:
        for entry in layer:
            merged[entry.key] = entry
    return list(merged.values())


@dataclass(frozen=True)
class PriceTable:
    """All known prices plus the exchange rates allowed for comparing currencies.

    Attributes:
        entries: merged price rows (see module docstring for precedence).
        rates: exchange rates from the config, each with its ``as_of`` date.
    """

    entries: tuple[PriceEntry, ...]
    rates: tuple[ExchangeRate, ...] = ()

    def lookup(
        self, gpu: str | None = None, *, provider: str | None = None, billing: str | None = None
    ) -> list[PriceEntry]:
        """Rows for a GPU (any spelling), provider and/or billing mode; None matches all.
        Sorted by provider, then billing, then price."""
        name = normalize_gpu_name(gpu)[0] if gpu is not None else None
        prov = provider.lower() if provider else None
        rows = [
            e for e in self.entries
            if (name is None or e.gpu == name)
            and (prov is None or e.provider == prov)
            and (billing is None or e.billing == billing)
        ]
        return sorted(rows, key=lambda e: (e.provider, e.billing, e.currency, e.price_per_gpu_hour))

    def providers(self) -> list[str]:
        """Provider names present, sorted."""
        return sorted({e.provider for e in self.entries})

    def convert(self, money: Money, currency: str) -> Money | None:
        """``money`` in ``currency`` through one configured rate (either direction); itself
        if already in it; None when no rate links the two."""
        return convert(money, currency, self.rates)

    def cheapest(
        self, gpu: str, *, billing: str = "on-demand", provider: str | None = None, currency: str | None = None
    ) -> PriceEntry | None:
        """The cheapest row for ``gpu``. With ``currency``, rows in other currencies count only
        through a configured rate; without it, only when all rows share one currency
        (otherwise :class:`~costctl.errors.CurrencyMismatchError`)."""
        rows = self.lookup(gpu, provider=provider, billing=billing)
        if not rows:
            return None
        if currency is None:
            currencies = {r.currency for r in rows}
            if len(currencies) > 1:
                raise CurrencyMismatchError(_(
                    "prices for {gpu} are in {currencies}; set [[catalog.exchange_rates]] and a currency to compare "
                    "them").format(gpu=gpu, currencies=", ".join(sorted(currencies))))
            return min(rows, key=lambda r: r.price_per_gpu_hour)
        scored = [(self.convert(r.price, currency), r) for r in rows]
        usable = [(m.amount, r) for m, r in scored if m is not None]
        return min(usable, key=lambda t: t[0])[1] if usable else None


def convert(money: Money, currency: str, rates: Sequence[ExchangeRate]) -> Money | None:
    """Convert through one rate that links ``money.currency`` and ``currency`` (either
    direction); ``money`` itself when the currencies match; None when no rate links them."""
    target = currency.upper()
    if money.currency == target:
        return money
    for rate in rates:
        pair = {rate.base.upper(), rate.quote.upper()}
        if pair == {money.currency, target}:
            return rate.convert(money)
    return None


#: A display conversion's label (a table column's heading): the rate as the quote currency per
#: unit of the base currency, with the date it was seen (translated where shown).
DISPLAY_LABEL = N_("≈ {currency} at {rate} {quote}/{base}, {as_of}")
#: The rate alone, as the label writes it (no words: the same in every language).
DISPLAY_RATE = "{rate} {quote}/{base}, {as_of}"


@dataclass(frozen=True)
class DisplayConversion:
    """A price shown in another currency, for display only: the price keeps its own currency
    (it is charged and ranked as it is), and a converted amount is never added to another.

    Attributes:
        currency: the currency shown (ISO 4217).
        rate: the configured ``[[catalog.exchange_rates]]`` row that converts, with its date.
    """

    currency: str
    rate: ExchangeRate

    @property
    def label(self) -> str:
        """``"≈ USD at 7.12 CNY/USD, 2026-11-30"``: what the converted column shows (in the
        current language)."""
        r = self.rate
        return _(DISPLAY_LABEL).format(currency=self.currency, rate=r.rate, quote=r.quote.upper(),
                                       base=r.base.upper(), as_of=r.as_of.isoformat())

    @property
    def rate_text(self) -> str:
        """``"7.12 CNY/USD, 2026-11-30"``: the rate and its date, as :attr:`label` writes them."""
        r = self.rate
        return DISPLAY_RATE.format(rate=r.rate, quote=r.quote.upper(), base=r.base.upper(),
                                   as_of=r.as_of.isoformat())

    def apply(self, money: Money) -> Money:
        """``money`` in :attr:`currency` (unrounded).

        Raises:
            CurrencyMismatchError: ``money`` is in neither currency of the rate.
        """
        return self.rate.convert(money)

    def to_dict(self, amounts: dict[str, Money | None]) -> dict[str, object]:
        """JSON-ready: each of ``amounts`` converted (a decimal string, 6 places; None stays
        None), the currency, the rate, its date, and ``display_only: true``."""
        r = self.rate
        out: dict[str, object] = {
            key: (None if m is None else str(self.apply(m).amount.quantize(Decimal("0.000001"))))
            for key, m in amounts.items()
        }
        out.update({"currency": self.currency, "rate": str(r.rate), "rate_unit": f"{r.quote.upper()}/{r.base.upper()}",
                    "rate_as_of": r.as_of.isoformat(), "display_only": True})
        return out


def display_conversion(from_currency: str, to_currency: str | None,
                       rates: Sequence[ExchangeRate]) -> DisplayConversion | None:
    """How to show an amount in ``from_currency`` in ``to_currency``: the first configured rate
    linking the two (either direction); None when ``to_currency`` is None or the same currency,
    or when no rate links them (the amount is then shown in its own currency only)."""
    if not to_currency:
        return None
    source, target = from_currency.upper(), to_currency.upper()
    if source == target:
        return None
    for rate in rates:
        if {rate.base.upper(), rate.quote.upper()} == {source, target}:
            return DisplayConversion(target, rate)
    return None


def rank_groups(
    items: Sequence[T],
    money_of: Callable[[T], Money | None],
    rates: Sequence[ExchangeRate] = (),
    currency: str | None = None,
) -> list[tuple[str | None, list[T]]]:
    """Rank items by money, never mixing currencies without a rate.

    Items whose amount converts to ``currency`` (directly, or by one configured rate) form one
    group ranked together; each remaining currency forms its own group; items without a price
    (``money_of`` returns None) come last in a group keyed None. With ``currency`` None, the
    target is the currency most items are in when ``rates`` can convert others into it.

    Returns:
        ``[(currency, items sorted cheapest first), ...]``, the target currency's group first.
    """
    priced = [(money_of(i), i) for i in items]
    unpriced = [i for m, i in priced if m is None]
    with_price = [(m, i) for m, i in priced if m is not None]
    if currency is None and rates and with_price:
        counts: dict[str, int] = {}
        for m, _item in with_price:
            counts[m.currency] = counts.get(m.currency, 0) + 1
        currency = max(sorted(counts), key=lambda c: counts[c])
    groups: dict[str, list[tuple[Decimal, T]]] = {}
    for m, i in with_price:
        conv = convert(m, currency, rates) if currency else None
        if conv is not None:
            groups.setdefault(conv.currency, []).append((conv.amount, i))
        else:
            groups.setdefault(m.currency, []).append((m.amount, i))
    order = sorted(groups, key=lambda c: (c != (currency or "").upper(), c))
    out: list[tuple[str | None, list[T]]] = [
        (c, [i for _amount, i in sorted(groups[c], key=lambda t: t[0])]) for c in order
    ]
    if unpriced:
        out.append((None, unpriced))
    return out


def check_rank_currency(
    table: PriceTable, currency: str | None, *, source: str = "--currency",
    error: type[CostctlError] = UsageError,
) -> str | None:
    """Validate the currency prices are to be ranked in; returns it upper-cased (None stays None).

    Ranking in ``currency`` is possible when some price in ``table`` is in that currency (those
    are ranked by their own amounts, others separately unless a rate converts them) or when a
    ``[[catalog.exchange_rates]]`` row links it to a currency the table has prices in.
    Anything else would silently rank in another currency, so it is an error.

    Args:
        source: how the user gave it, for the message (``"--currency"``, ``"[catalog] currency"``).
        error: the exception class to raise (UsageError for an option, ConfigError for the config).

    Raises:
        error: not a 3-letter code, or no price in it and no rate to it — one line naming the
            missing ``[[catalog.exchange_rates]]`` entry.
    """
    if currency is None:
        return None
    code = currency.strip().upper()
    if len(code) != 3 or not code.isalpha():
        raise error(_("{source} {currency!r} is not a 3-letter ISO 4217 code (USD, CNY, EUR...)").format(
            source=source, currency=currency))
    have = sorted({e.currency for e in table.entries})
    if not have or code in have:
        return code
    linked = {r.base.upper() for r in table.rates if r.quote.upper() == code} | {
        r.quote.upper() for r in table.rates if r.base.upper() == code}
    if linked & set(have):
        return code
    example = have[0]
    raise error(_(
        "{source} {code}: no price is in {code} (prices are in {have}) and no [[catalog.exchange_rates]] entry "
        "converts {example} to {code}; add one to costctl.toml, e.g. [[catalog.exchange_rates]] "
        "base = \"{example}\" quote = \"{code}\" rate = \"...\" as_of = \"YYYY-MM-DD\""
    ).format(source=source, code=code, have=", ".join(have), example=example))


def rates_used(groups: Sequence[tuple[str | None, Sequence[T]]], currency_of: Callable[[T], str | None],
               rates: Sequence[ExchangeRate]) -> list[str]:
    """Human lines for the rates a :func:`rank_groups` result relied on: ``"1 USD = 7.10 CNY
    (as of 2026-07-01)"`` for each rate linking a group's currency to an item's currency (in the
    current language)."""
    pairs = {(g, c) for g, items in groups if g for c in (currency_of(i) for i in items) if c and c != g}
    lines = []
    for rate in rates:
        if any({rate.base.upper(), rate.quote.upper()} == {a, b} for a, b in pairs):
            lines.append(_("1 {base} = {rate} {quote} (as of {date})").format(
                base=rate.base, rate=rate.rate, quote=rate.quote, date=rate.as_of.isoformat()))
    return lines


def rates_from_settings(settings: "Settings | None") -> tuple[ExchangeRate, ...]:
    """Exchange rates configured in ``[[catalog.exchange_rates]]``."""
    if settings is None:
        return ()
    return tuple(
        ExchangeRate(base=r.base, quote=r.quote, rate=r.rate, as_of=r.as_of) for r in settings.catalog.exchange_rates
    )


def config_prices(settings: "Settings | None") -> list[PriceEntry]:
    """Prices from ``[[catalog.prices]]`` (source ``"config"`` unless given)."""
    if settings is None:
        return []
    return [
        make_entry(p.provider, p.gpu, p.billing, p.price_per_gpu_hour, p.currency, p.seen, p.source or "config",
                   tier=p.tier)
        for p in settings.catalog.prices
    ]


@dataclass(frozen=True)
class LivePrices:
    """Prices fetched from providers' APIs: ``entries``, and one line per provider that was
    asked but failed (``problems``, sentences in the current language; the dated table stands in
    for it)."""

    entries: tuple[PriceEntry, ...] = ()
    problems: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()


def live_prices(settings: "Settings", *, seen: date | None = None) -> LivePrices:
    """Current list prices from every provider whose adapter declares a ``price_list``
    (RunPod's ``gpuTypes``: four prices per GPU type) and has its API credential configured,
    through the adapter (its HTTP client, timeouts and retries). A provider without a
    credential is skipped silently; one whose API fails is reported in ``problems``.

    The providers package is imported here only (start-up stays fast for other commands).
    """
    from costctl_providers.registry import available_providers, capabilities_of

    from ..cloud import checked_offers, open_provider

    entries: list[PriceEntry] = []
    problems: list[str] = []
    asked: list[str] = []
    when = seen or date.today()
    for name in available_providers():
        try:
            if not capabilities_of(name).get("price_list"):
                continue
            adapter = open_provider(settings, name)
            if not adapter.has_credential():
                continue
            asked.append(name)
            offers = checked_offers(adapter.list_offers(), problems.append)
            entries.extend(prices_from_offers(offers, seen=when, source=f"{name} API (live)"))
        except CostctlError as exc:
            problems.append(_("{provider}: live prices unavailable ({error}); using the dated table").format(
                provider=name, error=exc))
    return LivePrices(tuple(entries), tuple(problems), tuple(asked))


def load_price_table(settings: "Settings | None" = None, *, include_imported: bool = True,
                     live: LivePrices | None = None) -> PriceTable:
    """The merged price table: shipped seed < imported (data dir) < live API prices
    (``live``, see :func:`live_prices`) < config overrides. A provider with live prices
    replaces all its seed and imported rows (its own current list, not a mix of dates).

    Raises:
        ConfigError: a malformed shipped, imported or configured price.
    """
    configured_dir = settings.data_dir if settings is not None else None
    layers: list[list[PriceEntry]] = [shipped_prices()]
    if include_imported:
        layers.append(load_imported_prices(configured_dir))
    if live is not None and live.entries:
        fresh = {e.provider for e in live.entries}
        layers = [[e for e in layer if e.provider not in fresh] for layer in layers]
        layers.append(list(live.entries))
    layers.append(config_prices(settings))
    return PriceTable(entries=tuple(merge_prices(*layers)), rates=rates_from_settings(settings))


__all__ = [
    "BILLING_MODES",
    "DisplayConversion",
    "PERIOD_HOURS",
    "display_conversion",
    "LivePrices",
    "RANKED_BILLING_MODES",
    "live_prices",
    "check_rank_currency",
    "PriceEntry",
    "PriceTable",
    "convert",
    "imported_prices_path",
    "load_imported_prices",
    "load_price_table",
    "make_entry",
    "merge_prices",
    "parse_price_csv",
    "prices_from_offers",
    "rank_groups",
    "rates_used",
    "save_imported_prices",
    "shipped_prices",
]
