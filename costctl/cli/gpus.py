"""``costctl gpus`` (the catalog with prices; ``--import`` a SkyPilot catalog CSV) and
``costctl recommend`` (memory estimate, fitting cards ranked by job cost, advice for the rest).

Memory units: a card's memory is the vendor's nominal capacity, counted in GiB (2**30 bytes;
the "48 GB" of an L40S is 48 GiB of DRAM); JSON keeps the key ``memory_gb`` for it. The driver
reports a little less (NVML: 46068 MiB total on an L40S), so ``recommend`` plans against
``nominal x (1 - headroom)`` and its estimate in bytes already includes the CUDA context and
allocator fragmentation. Tables go through :func:`costctl.cli.common.print_table`: full width
into a pipe or file; on a narrow terminal, less important columns are hidden, cells never cut.
"""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Sequence

import typer
from rich import box
from rich.table import Table

from ..catalog.gpus import GpuModel, get_gpu, load_catalog
from ..catalog.measure import measure_factory
from ..catalog.memory import OPTIMIZERS, PRECISIONS, MemoryBreakdown, Setup
from ..catalog.models import ModelSpec, TransformerShape, preset, shape_from_hf_config, shape_from_params
from ..catalog.prices import (
    DisplayConversion,
    LivePrices,
    PriceEntry,
    PriceTable,
    check_rank_currency,
    display_conversion,
    live_prices,
    load_price_table,
    prices_from_offers,
    rank_groups,
    rates_used,
    save_imported_prices,
)
from ..catalog.recommend import (
    DEFAULT_HEADROOM,
    DEFAULT_MFU,
    Recommendation,
    Reference,
    recommend,
    work_from_steps,
)
from ..catalog.skypilot import MAX_CELL_CHARS, import_skypilot_csv
from ..errors import ConfigError, UsageError
from ..i18n import N_, _, display_word, format_amount
from ..money import Money
from .common import ConfigOption, err_console, print_json, print_line, print_table, settings_from

GIB = 1024**3


class TableOrJson(str, Enum):
    """Output formats of these commands."""

    table = "table"
    json = "json"


class GpuSort(str, Enum):
    """``costctl gpus --sort`` keys."""

    price = "price"
    memory = "memory"
    tflops = "tflops"
    value = "value"


class BillingChoice(str, Enum):
    """Billing filter: on-demand, spot (interruptible) or any."""

    on_demand = "on-demand"
    spot = "spot"
    any = "any"


PrecisionChoice = Enum("PrecisionChoice", {p.replace("-", "_"): p for p in PRECISIONS}, type=str)  # type: ignore[misc]
OptimizerChoice = Enum("OptimizerChoice", {o.replace("-", "_"): o for o in OPTIMIZERS}, type=str)  # type: ignore[misc]

FormatOpt = Annotated[TableOrJson, typer.Option("--format", "-f", help=_("table or json."))]
ProviderOpt = Annotated[str | None, typer.Option("--provider", "-p", help=_(
    "Only prices from this provider (runpod, vastai, autodl, aws...)."))]


#: Columns of the ``gpus`` table hidden first on a narrow terminal (see :func:`print_table`);
#: headings marked for translation, translated where the table is built.
GPUS_DROPPABLE = (N_("Seen"), N_("TDP W"), N_("CC"), N_("FP32"), N_("BW GB/s"), N_("FP16 TF"))

#: A prepaid row's price cell, per period (``CN¥1.44 (CN¥1,052.00/month)``): one pattern each.
PERIOD_PRICE = {
    "daily": N_("{price} ({period_price}/day)"),
    "weekly": N_("{price} ({period_price}/week)"),
    "monthly": N_("{price} ({period_price}/month)"),
}
#: Footnotes of the ``gpus`` table (whole sentences; named placeholders; translated where shown).
NOTE_UNLISTED = N_("* not in costctl's GPU catalog: specs unknown")
NOTE_FROM = N_("from: a marketplace's lowest listing seen (a floor, not a price a job can count on); "
               "listed after the on-demand and spot prices")
NOTE_PREPAID = N_("prepaid: a rental paid ahead for a day, a week or a month, per card, with its price per GPU-hour "
                  "beside it; listed after the on-demand and spot prices, never ranked as a job's price")
NOTE_ESTIMATED = N_("est.: no public figure was seen for this price; it is an estimate, and the row's source says "
                    "from what (--format json: estimated)")
NOTE_DISPLAY_ONLY = N_("{label}: converted for display only; every price is charged in its own currency, "
                       "and amounts in two currencies are never added")
NOTE_DISPLAY_RATES = N_("≈ {currency}: converted for display only at {rates}; amounts in two currencies are never "
                        "added")
#: Columns of the ``recommend`` tables hidden first on a narrow terminal (translated where used).
RECOMMEND_DROPPABLE = ("#", N_("Dtype"), N_("GPUs"), N_("Hours"))
#: The rows of the memory breakdown (keys of :attr:`MemoryBreakdown.terms`), as people read them.
TERM_LABELS = {
    "weights": N_("weights"),
    "weight_copies": N_("weight copies"),
    "gradients": N_("gradients"),
    "optimizer_state": N_("optimizer state"),
    "activations": N_("activations"),
    "logits": N_("logits"),
    "kv_cache": N_("kv cache"),
    "optimizer_step": N_("optimizer step"),
    "cuda_context": N_("cuda context"),
    "fragmentation": N_("fragmentation"),
}


def _translated(headings: Sequence[str]) -> tuple[str, ...]:
    """``headings`` (marked with :func:`N_`) in the current language."""
    return tuple(_(h) for h in headings)


def _table(title: str | None = None) -> Table:
    """A compact table (rules under the header only, no outer edge) in the style of ``instances``."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def _finite(option: str, value: float | None) -> None:
    """Refuse nan and inf (typer's min/max checks let them through).

    Raises:
        UsageError: one line naming the option.
    """
    if value is not None and not math.isfinite(value):
        raise UsageError(_("{option} {value}: expected a finite number").format(option=option, value=value))


def _rank_currency(prices: PriceTable, option: str | None, configured: str | None) -> str | None:
    """The currency to rank in: ``--currency``, else ``[catalog] currency``, checked against the
    price table (:func:`check_rank_currency`): UsageError for the option, ConfigError for the config."""
    if option is not None:
        return check_rank_currency(prices, option, source="--currency", error=UsageError)
    return check_rank_currency(prices, configured, source="[catalog] currency", error=ConfigError)


OfflineOpt = Annotated[bool, typer.Option("--offline", help=_(
    "Use the dated price table only; do not ask providers' APIs for their live price lists."))]


def _may_have_credentials(settings: Any) -> bool:
    """Cheap test before importing the providers package: a credential variable in the
    environment (``*_API_KEY``, ``*_TOKEN``), a credentials file in the data dir, or a
    ``[providers.*]`` table. Keeps ``gpus`` free of network imports for a user with no keys."""
    import os

    from ..paths import data_dir

    if any(v and k.endswith(("_API_KEY", "_TOKEN")) for k, v in os.environ.items()):
        return True
    return bool(settings.providers) or (data_dir(settings.data_dir) / "credentials.toml").is_file()


def _live_prices(settings: Any, offline: bool) -> LivePrices | None:
    """Live list prices (RunPod's ``gpuTypes``) when a key exists and not ``--offline``; each
    provider that failed is one note on stderr (the dated table stands in)."""
    if offline or not _may_have_credentials(settings):
        return None
    live = live_prices(settings)
    for line in live.problems:
        err_console.print(_("note: {problem}").format(problem=line), soft_wrap=True)
    return live


def _gib(n: int | float) -> str:
    return f"{n / GIB:,.2f}"


def _price_cell(e: PriceEntry) -> str:
    """A price for a table as the current language writes money (:func:`costctl.i18n.format_amount`):
    ``¥1.98`` (``CN¥1.98`` in English), ``$0.0123``; for a prepaid row with its period's price,
    ``¥1.44 (¥1,052.00/month)``."""
    price = format_amount(e.price_per_gpu_hour, e.currency)
    if e.period_price is None:
        return price
    shape = dict(price=price, period_price=format_amount(e.period_price, e.currency), period=e.tier)
    pattern = PERIOD_PRICE.get(e.tier)
    return (_(pattern) if pattern else _("{price} ({period_price}/{period})")).format(**shape)


def _billing_cell(e: PriceEntry) -> str:
    """Billing mode and tier (values, as ``--billing`` takes them), ``est.`` after an estimated price."""
    label = display_word(e.label)
    return _("{billing} est.").format(billing=label) if e.estimated else label


def _conversion_heading(conversions: Sequence[DisplayConversion], currency: str | None) -> tuple[str, list[str]]:
    """The heading of a converted column and the footnotes it needs: the one rate used labels
    the column (``≈ USD at 7.12 CNY/USD, 2026-11-30``); several rates are named in a footnote."""
    labels = sorted({c.label for c in conversions})
    if len(labels) == 1:
        return labels[0], [_(NOTE_DISPLAY_ONLY).format(label=labels[0])]
    heading = f"≈ {currency}"
    rates = "; ".join(sorted({c.rate_text for c in conversions}))
    return heading, [_(NOTE_DISPLAY_RATES).format(currency=currency, rates=rates)]


def _tensor(gpu: GpuModel) -> float:
    return gpu.bf16_tensor_tflops or gpu.fp16_tensor_tflops


def _billing(choice: BillingChoice) -> str | None:
    return None if choice is BillingChoice.any else choice.value


# --- costctl gpus -----------------------------------------------------------------------------------


def _gpu_rows(table_prices: list[PriceEntry], provider: str | None, billing: str | None,
              min_memory: float | None) -> list[tuple[GpuModel | None, PriceEntry | None]]:
    catalog = load_catalog()
    rows: list[tuple[GpuModel | None, PriceEntry | None]] = []
    by_gpu: dict[str, list[PriceEntry]] = {}
    for e in table_prices:
        if (provider is None or e.provider == provider.lower()) and (billing is None or e.billing == billing):
            by_gpu.setdefault(e.gpu, []).append(e)
    for gpu in catalog.models:
        if min_memory is not None and gpu.memory_gb < min_memory:
            continue
        entries = by_gpu.pop(gpu.name, [])
        if entries:
            rows.extend((gpu, e) for e in entries)
        elif provider is None:
            rows.append((gpu, None))
    if min_memory is None:  # GPUs the catalog does not know: shown, flagged, specs unknown
        for entries in by_gpu.values():
            rows.extend((None, e) for e in entries)
    return rows


def _sort_rows(rows: list[tuple[GpuModel | None, PriceEntry | None]], sort: GpuSort, rates: Any,
               currency: str | None) -> list[tuple[str | None, list[tuple[GpuModel | None, PriceEntry | None]]]]:
    def price_money(r: tuple[GpuModel | None, PriceEntry | None]) -> Money | None:
        # a "from" floor is listed after the prices a job can be sure of, never ranked among them
        return r[1].price if r[1] and r[1].ranked else None

    if sort is GpuSort.price:
        return rank_groups(rows, price_money, rates, currency)
    if sort is GpuSort.value:
        def per_tflops(r: tuple[GpuModel | None, PriceEntry | None]) -> Money | None:
            gpu, e = r
            if gpu is None or e is None or not e.ranked:
                return None
            return Money(e.price_per_gpu_hour / Decimal(str(_tensor(gpu))), e.currency)
        return rank_groups(rows, per_tflops, rates, currency)
    if sort is GpuSort.tflops:
        key = lambda r: (-(_tensor(r[0]) if r[0] else -1), r[1].price_per_gpu_hour if r[1] else Decimal(10**9))  # noqa: E731
    else:
        key = lambda r: (-(r[0].memory_gb if r[0] else -1), r[1].price_per_gpu_hour if r[1] else Decimal(10**9))  # noqa: E731
    return [(None, sorted(rows, key=key))]


def _gpus_table(groups: list[tuple[str | None, list[tuple[GpuModel | None, PriceEntry | None]]]], sort: GpuSort,
                rates: Any = (), display: str | None = None) -> None:
    table = _table(_("GPU catalog (Mem: vendor's nominal GiB; TF: dense tensor TFLOPS, FP32 accumulate)"))
    for col, just in ((_("GPU"), "left"), (_("Mem GiB"), "right"), (_("BW GB/s"), "right"), (_("FP32"), "right"),
                      (_("FP16 TF"), "right"), (_("BF16 TF"), "right"), (_("CC"), "right"), (_("TDP W"), "right"),
                      (_("Provider"), "left"), (_("Billing"), "left"), (_("Price/GPU-h"), "right"),
                      (_("Seen"), "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    conversions = {id(e): c for _group, rows in groups for _gpu, e in rows if e is not None
                   for c in [display_conversion(e.currency, display, rates)] if c is not None}
    notes: list[str] = []
    if conversions:
        heading, notes = _conversion_heading(list(conversions.values()), display)
        table.add_column(heading, justify="right")
    if sort is GpuSort.value:
        table.add_column(_("TF per 1/h"), justify="right")
    unlisted = False
    for _group, rows in groups:
        for gpu, e in rows:
            cells = [gpu.name if gpu else f"{display_word(e.gpu)} *" if e else "?"]
            unlisted = unlisted or gpu is None
            if gpu:
                cells += [f"{gpu.memory_gb:g}", f"{gpu.memory_bandwidth_gbs:,.0f}", f"{gpu.fp32_tflops:g}",
                          f"{gpu.fp16_tensor_tflops:g}",
                          f"{gpu.bf16_tensor_tflops:g}" if gpu.bf16 else _("no BF16"),
                          gpu.compute_capability, str(gpu.tdp_w)]
            else:
                cells += ["?"] * 7
            if e:
                cells += [e.provider, _billing_cell(e), _price_cell(e), e.seen.isoformat()]
            else:
                cells += ["-", "-", "-", "-"]
            if conversions:
                conv = conversions.get(id(e)) if e is not None else None
                cells.append(conv.apply(e.price).shown() if conv and e else "-")
            if sort is GpuSort.value:
                cells.append(f"{Decimal(str(_tensor(gpu))) / e.price_per_gpu_hour:,.0f}"
                             if gpu and e and e.ranked and e.price_per_gpu_hour else "-")
            table.add_row(*cells)
    print_table(table, droppable=_translated(GPUS_DROPPABLE))
    entries = [e for _group, rows in groups for _gpu, e in rows if e is not None]
    if unlisted:
        print_line(_(NOTE_UNLISTED))
    if any(e.billing == "from" for e in entries):
        print_line(_(NOTE_FROM))
    if any(e.billing == "prepaid" for e in entries):
        print_line(_(NOTE_PREPAID))
    if any(e.estimated for e in entries):
        print_line(_(NOTE_ESTIMATED))
    for note in notes:
        print_line(note)
    for line in rates_used(groups, lambda r: r[1].currency if r[1] else None, rates):
        err_console.print(_("note: ranked converting at {rate}").format(rate=line))
    currencies = [c for c, _rows in groups if c is not None]
    if len(currencies) > 1:
        err_console.print(_("note: prices in {currencies} are ranked separately; set [[catalog.exchange_rates]] in "
                            "costctl.toml to rank them together").format(currencies=", ".join(currencies)))


def _converted_price(e: PriceEntry | None, display: str | None, rates: Any) -> dict[str, object] | None:
    """The JSON ``converted`` field of a price row: its price per GPU-hour (and a prepaid row's
    period price) in the display currency, with the rate and its date; None when not converted."""
    conv = display_conversion(e.currency, display, rates) if e is not None else None
    if conv is None or e is None:
        return None
    amounts = {"price_per_gpu_hour": e.price}
    if e.period_price is not None:
        amounts["period_price"] = Money(e.period_price, e.currency)
    return conv.to_dict(amounts)


def _refresh(settings: Any, name: str, seen: date) -> list[PriceEntry]:
    """Current offers of provider ``name`` as price rows (through the provider registry)."""
    from ..cloud import checked_offers, open_provider  # imports the providers package only when asked

    adapter = open_provider(settings, name)
    if not adapter.capabilities.offers:
        raise UsageError(_("provider {name!r} publishes no prices through its API; add them as [[catalog.prices]] "
                           "in costctl.toml").format(name=name))
    entries = prices_from_offers(checked_offers(adapter.list_offers(), err_console.print), seen=seen)
    if not entries:
        raise UsageError(_("provider {name!r} listed no on-demand or spot offers").format(name=name))
    return entries


def gpus(
    provider: ProviderOpt = None,
    min_memory: Annotated[float | None, typer.Option("--min-memory", help=_("Only cards with at least this much memory: GiB, nominal as vendors print it (24 for an RTX 4090, 48 for an L40S)."), min=0)] = None,
    sort: Annotated[GpuSort, typer.Option("--sort", help=_("price, memory, tflops (dense 16-bit tensor) or value (TFLOPS per price)."))] = GpuSort.memory,
    billing: Annotated[BillingChoice, typer.Option("--billing", help=_("on-demand, spot or any (any also lists marketplaces' 'from' floors)."))] = BillingChoice.any,
    currency: Annotated[str | None, typer.Option("--currency", help=_("Show prices in this currency too: a column of its own (JSON: converted), converted by [[catalog.exchange_rates]] and labelled with the rate and its date, for display only; with --sort price or value, also rank in it. Default: [catalog] currency."))] = None,
    offline: OfflineOpt = False,
    import_csv: Annotated[Path | None, typer.Option("--import", help=_("Import a SkyPilot catalog vms.csv into the price table (kept in the data dir)."))] = None,
    refresh: Annotated[str | None, typer.Option("--refresh", help=_("Fetch current prices from this provider's adapter (one that lists offers) into the price table."))] = None,
    seen: Annotated[str | None, typer.Option("--seen", help=_("Date the imported prices were seen, YYYY-MM-DD (default today)."))] = None,
    fmt: FormatOpt = TableOrJson.table,
    config: ConfigOption = None,
) -> None:
    """List the GPU catalog with prices per GPU-hour; import prices from a SkyPilot catalog CSV
    (--import) or a provider's offers (--refresh). (``--help`` shows the translated text given in
    :func:`register`.)"""
    _finite("--min-memory", min_memory)
    settings = settings_from(config)
    if import_csv is not None and refresh is not None:
        raise UsageError(_("give --import or --refresh, not both"))
    if import_csv is not None or refresh is not None:
        try:
            when = date.fromisoformat(seen) if seen else date.today()
        except ValueError:
            raise UsageError(_("--seen {value!r} is not a date like 2026-07-01").format(value=seen)) from None
        import_counts: dict[str, int] = {}
        if import_csv is not None:
            entries = import_skypilot_csv(import_csv, provider=provider, seen=when, counts=import_counts)
            if import_counts.get("long_cells"):
                err_console.print(_("{path}: skipped {count} row(s) with a cell over {limit} characters").format(
                    path=import_csv, count=import_counts["long_cells"], limit=MAX_CELL_CHARS))
        else:
            entries = _refresh(settings, str(refresh), when)
        path = save_imported_prices(entries, settings.data_dir)
        unknown = sorted({e.gpu for e in entries if not e.known})
        if fmt is TableOrJson.json:
            print_json({"imported": [e.to_dict() for e in entries], "file": str(path), "unknown_gpus": unknown})
        else:
            if import_csv is not None:
                said = _("imported {count} price(s) for {provider} from {source} into {path}")
            else:
                said = _("imported {count} price(s) for {provider} from provider {name} into {path}")
            err_console.print(said.format(count=len(entries), provider=entries[0].provider, source=import_csv,
                                          name=refresh, path=path))
            if unknown:
                err_console.print(_("not in the catalog (kept, flagged): {gpus}").format(gpus=", ".join(unknown)))
        return
    if seen is not None:
        raise UsageError(_("--seen only applies with --import or --refresh"))
    prices = load_price_table(settings, live=_live_prices(settings, offline))
    display = _rank_currency(prices, currency, settings.catalog.currency)
    rank_in = display if sort in (GpuSort.price, GpuSort.value) else None
    rows = _gpu_rows(list(prices.entries), provider, _billing(billing), min_memory)
    if provider and not rows:
        known = prices.providers()
        if known:
            raise UsageError(_("no prices for provider {provider!r}; known: {known}").format(
                provider=provider, known=", ".join(known)))
        raise UsageError(_("no prices for provider {provider!r}; known: none").format(provider=provider))
    groups = _sort_rows(rows, sort, prices.rates, rank_in)
    if fmt is TableOrJson.json:
        print_json([
            {
                "gpu": gpu.to_dict() if gpu else {"name": e.gpu if e else None, "known": False},
                "price": e.to_dict() if e else None,
                "rank_currency": cur,
                "converted": _converted_price(e, display, prices.rates),
            }
            for cur, group in groups for gpu, e in group
        ])
        return
    _gpus_table(groups, sort, prices.rates, display)


# --- costctl recommend ------------------------------------------------------------------------------


def _model_from_options(params: float | None, model: str | None, config_json: Path | None,
                        torch_model: str | None) -> ModelSpec:
    given = [n for n, v in (("--params", params), ("--model", model), ("--config-json", config_json),
                            ("--torch-model", torch_model)) if v is not None]
    if len(given) > 1:
        raise UsageError(_("give exactly one of --params (e.g. 7e9), --model (a preset), --config-json (a Hugging "
                           "Face config.json) or --torch-model FILE.py:FUNC; got {given}").format(
                               given=", ".join(given)))
    if not given:
        raise UsageError(_("give exactly one of --params (e.g. 7e9), --model (a preset), --config-json (a Hugging "
                           "Face config.json) or --torch-model FILE.py:FUNC; got none"))
    if params is not None:
        return shape_from_params(params)
    if model is not None:
        return preset(model)
    if config_json is not None:
        return shape_from_hf_config(config_json)
    assert torch_model is not None
    return measure_factory(torch_model)


def _breakdown_title(b: MemoryBreakdown) -> str:
    """The breakdown's heading: model, parameters, batch, precision, optimizer, GPUs and the
    memory-saving options in use, in the current language (one pattern per optional part)."""
    s = b.setup
    if b.trainable_params != b.params:
        params = _("{params:.3g} B params, {trainable:.3g} M trainable").format(
            params=b.params / 1e9, trainable=b.trainable_params / 1e6)
    else:
        params = _("{params:.3g} B params").format(params=b.params / 1e9)
    if b.seq_len:
        batch = _("batch {batch} x seq {seq}").format(batch=s.batch_size, seq=b.seq_len)
    else:
        batch = _("batch {batch}").format(batch=s.batch_size)
    extras = [text for text, on in (
        (_("activation checkpointing"), s.grad_checkpointing), (_("flash attention"), s.flash_attention),
        (_("ZeRO-{stage}").format(stage=s.zero_stage), s.zero_stage), (_("offload"), s.offload),
        (_("LoRA r={rank}").format(rank=s.lora_rank), s.lora_rank), (_("4-bit base"), s.base_weight_bits == 4),
    ) if on]
    shape = dict(model=b.model, params=params, batch=batch, precision=s.precision, optimizer=s.optimizer,
                 gpus=s.gpus, extras=", ".join(extras))
    if extras:
        return _("Memory per GPU: {model} ({params}), {batch}, {precision}, {optimizer}, {gpus} GPU(s), "
                 "{extras}").format(**shape)
    return _("Memory per GPU: {model} ({params}), {batch}, {precision}, {optimizer}, {gpus} GPU(s)").format(**shape)


def _breakdown_table(b: MemoryBreakdown) -> None:
    print_line(_breakdown_title(b))
    table = _table()
    table.add_column(_("Term"))
    table.add_column(_("GiB"), justify="right")
    table.add_column(_("Share"), justify="right")
    total = b.total or 1
    for name, value in b.terms.items():
        label = TERM_LABELS.get(name)
        table.add_row(_(label) if label else name.replace("_", " "), _gib(value), f"{value / total:.0%}")
    table.add_row(_("total"), _gib(b.total), "100%")
    print_table(table)
    if b.cpu_bytes:
        print_line(_("CPU RAM for offloaded state: {size} GiB").format(size=_gib(b.cpu_bytes)))


def _hours(hours: float) -> str:
    """Hours of a job for the ``recommend`` table: 3 significant digits (``0.00776``, ``46.5``),
    whole hours with thousands separators from 100 up (``1,553``), never an exponent."""
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"


def _option_price(p: PriceEntry) -> str:
    """A card's price in the ``recommend`` table, as the current language writes money
    (:func:`costctl.i18n.format_amount`): ``¥1.98``, its billing mode and tier when not on-demand
    (``$0.69 spot community``), ``est.`` after an estimated one."""
    shape = dict(price=format_amount(p.price_per_gpu_hour, p.currency), billing=display_word(p.label))
    if p.label != "on-demand":
        said = _("{price} {billing} est.") if p.estimated else "{price} {billing}"
    else:
        said = _("{price} est.") if p.estimated else "{price}"
    return said.format(**shape)


def _recommend_tables(rec: Recommendation) -> None:
    _breakdown_table(rec.breakdown)
    fits = rec.fits
    notes: list[str] = []
    if fits:
        for cur, opts in rec.groups:
            # The need is the same on every card (the estimate per GPU): in the title, not in each row.
            if cur:
                title = _("Cards that fit {need} GiB per GPU, cheapest job first (in {currency})")
            else:
                title = _("Cards that fit {need} GiB per GPU, cheapest job first (without a price in the table)")
            table = _table(title.format(need=_gib(rec.breakdown.total), currency=cur))
            for col, just in (("#", "right"), (_("GPU"), "left"), (_("GPUs"), "right"), (_("Usable GiB"), "right"),
                              (_("Dtype"), "left"), (_("Provider"), "left"),
                              (_("Price/GPU-h"), "right"), (_("Hours"), "right"), (_("Job cost"), "right")):
                table.add_column(col, justify=just)  # type: ignore[arg-type]
            conversions = [o.display for o in opts if o.display is not None]
            if conversions:
                heading, group_notes = _conversion_heading(conversions, conversions[0].currency)
                notes.extend(n for n in group_notes if n not in notes)
                table.add_column(heading, justify="right")
            for i, o in enumerate(opts, 1):
                p = o.price
                cells = [
                    str(i), o.gpu.name, str(o.gpus), _gib(o.usable_bytes), o.dtype,
                    p.provider if p else "-",
                    _option_price(p) if p else "-",
                    _hours(o.hours) if o.hours is not None else "-",
                    o.cost.shown() if o.cost else "-",
                ]
                if conversions:
                    shown = o.cost if o.cost is not None else o.hourly
                    if o.display is None or shown is None:
                        cells.append("-")
                    else:
                        amount = o.display.apply(shown).shown()
                        cells.append(amount if o.cost is not None else _("{amount}/h").format(amount=amount))
                table.add_row(*cells)
            print_table(table, droppable=_translated(RECOMMEND_DROPPABLE))
        if any(o.price is not None and o.price.estimated for o in fits):
            notes.append(_(NOTE_ESTIMATED))
    elif not rec.fitting_gpus:
        biggest = max((a.gpu for a in rec.no_fit), key=lambda g: g.memory_gb, default=None)
        need = _gib(rec.breakdown.total)
        if biggest:
            print_line(_("No single card fits {need} GiB per GPU (largest in the catalog: {gpu}, {memory:g} GiB "
                         "nominal).").format(need=need, gpu=biggest.name, memory=biggest.memory_gb))
        else:
            print_line(_("No single card fits {need} GiB per GPU.").format(need=need))
    for note in notes:
        print_line(note)
    if rec.no_fit:
        table = _table(_("Cards that do not fit, and what would make them fit"))
        table.add_column(_("GPU"))
        table.add_column(_("Need/usable GiB"), justify="right")
        table.add_column(_("Would fit with"))
        for a in rec.no_fit:
            advice = "; ".join(_("{change} ({need} GiB)").format(change=s.change, need=_gib(s.required_bytes))
                               for s in a.suggestions)
            table.add_row(a.gpu.name, f"{_gib(a.required_bytes)} / {_gib(a.usable_bytes)}", advice or "-")
        print_table(table)
    for gpu, reason in rec.excluded:
        print_line(_("{gpu}: skipped, {reason}").format(gpu=gpu, reason=reason))
    for note in rec.notes:
        print_line(_("note: {note}").format(note=note))


# Bounds of recommend's numeric options (click shows them as the allowed range). Far past any
# real job (the largest published runs use micro-batches in the thousands, contexts of ~1M
# tokens, tens of thousands of GPUs, LoRA ranks in the hundreds, ~1e14 tokens) and small
# enough that every product in the memory and time estimates stays an exact machine number.
MAX_MICRO_BATCH = 1 << 24
MAX_SEQ_LEN = 1 << 24
MAX_GPUS = 1 << 20
MAX_LORA_RANK = 1 << 16
MAX_TOKENS = 1e18
MAX_STEPS = 1 << 40

def recommend_cmd(
    params: Annotated[float | None, typer.Option("--params", help=_("Parameter count, e.g. 7e9 (GPT-3-family shape for activations)."))] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help=_("Preset: bert-base, bert-large, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-2-7b, llama-2-13b, llama-3-8b, mistral-7b, vit-base, resnet50."))] = None,
    config_json: Annotated[Path | None, typer.Option("--config-json", help=_("A Hugging Face config.json."))] = None,
    torch_model: Annotated[str | None, typer.Option("--torch-model", help=_("FILE.py:FUNC returning (model, make_batch): measure activations on the CPU (needs torch)."))] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", help=_("Micro-batch per GPU."), min=1, max=MAX_MICRO_BATCH)] = 8,
    seq_len: Annotated[int | None, typer.Option("--seq-len", "-s", help=_("Tokens per sample (default: the model's)."), min=1, max=MAX_SEQ_LEN)] = None,
    precision: Annotated[PrecisionChoice, typer.Option("--precision", help=_("fp32, fp16 or bf16 (pure 16-bit: weights, grads, optimizer), or mixed (autocast with fp32 master weights)."))] = PrecisionChoice("mixed"),
    optimizer: Annotated[OptimizerChoice, typer.Option("--optimizer", help=_("none = inference (weights, KV cache)."))] = OptimizerChoice("adamw"),
    gpus: Annotated[int, typer.Option("--gpus", help=_("Data-parallel GPUs."), min=1, max=MAX_GPUS)] = 1,
    zero: Annotated[int, typer.Option("--zero", help=_("ZeRO stage 0-3."), min=0, max=3)] = 0,
    offload: Annotated[bool, typer.Option("--offload", help=_("Optimizer state and fp32 master weights in CPU RAM."))] = False,
    grad_checkpointing: Annotated[bool, typer.Option("--grad-checkpointing", help=_("Full activation checkpointing."))] = False,
    flash_attention: Annotated[bool, typer.Option("--flash-attention", help=_("Flash attention (no s x s scores kept)."))] = False,
    lora_rank: Annotated[int | None, typer.Option("--lora-rank", help=_("Train LoRA adapters of this rank (q,v)."), min=1, max=MAX_LORA_RANK)] = None,
    qlora: Annotated[bool, typer.Option("--qlora", help=_("4-bit NF4 base (double quantization) under LoRA adapters; with --optimizer none, 4-bit inference."))] = False,
    tokens: Annotated[float | None, typer.Option("--tokens", help=_("Tokens (samples for CNNs) the job processes, e.g. 2e9."), min=1, max=MAX_TOKENS)] = None,
    steps: Annotated[int | None, typer.Option("--steps", help=_("Optimizer steps (batch x GPUs samples each)."), min=1, max=MAX_STEPS)] = None,
    mfu: Annotated[float | None, typer.Option("--mfu", help=_("Fraction of each card's dense peak for the time estimate (default: what published runs of the model, or the median published run, achieved on the nearest card)."))] = DEFAULT_MFU,
    reference_gpu: Annotated[str | None, typer.Option("--reference-gpu", help=_("Card the job was timed on."))] = None,
    reference_hours: Annotated[float | None, typer.Option("--reference-hours", help=_("Hours the job took on --reference-gpu."))] = None,
    provider: ProviderOpt = None,
    billing: Annotated[BillingChoice, typer.Option("--billing", help=_("on-demand, spot or any."))] = BillingChoice.on_demand,
    headroom: Annotated[float, typer.Option("--headroom", help=_("Fraction of the card's nominal memory kept free, in [0, 1): covers what the driver reserves (NVML shows 46068 MiB of an L40S's 48 GiB)."))] = DEFAULT_HEADROOM,
    currency: Annotated[str | None, typer.Option("--currency", help=_("Rank costs in this currency: its own prices, and others converted by [[catalog.exchange_rates]]; a converted price and cost are shown in a column of their own (JSON: converted), labelled with the rate and its date, for display only. Default: [catalog] currency."))] = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = TableOrJson.table,
    config: ConfigOption = None,
) -> None:
    """Estimate GPU memory for a training job and rank the cards that fit by estimated cost
    (``--help`` shows the translated text given in :func:`register`: a docstring cannot be translated).

    A card fits when the estimate (bytes per GPU, CUDA context and fragmentation included) is
    at most its usable memory: the vendor's nominal capacity x (1 - --headroom). The driver
    reports less than nominal (an L40S's 48 GiB shows as 46068 MiB in NVML); the default
    headroom of 10 % covers that gap.
    """
    for option, value in (("--params", params), ("--tokens", tokens), ("--mfu", mfu),
                          ("--reference-hours", reference_hours), ("--headroom", headroom)):
        _finite(option, value)
    if tokens is not None and steps is not None:
        raise UsageError(_("give --tokens or --steps, not both"))
    if (reference_gpu is None) != (reference_hours is None):
        raise UsageError(_("--reference-gpu and --reference-hours go together"))
    settings = settings_from(config)
    spec = _model_from_options(params, model, config_json, torch_model)
    setup = Setup(
        batch_size=batch, seq_len=seq_len, precision=precision.value, optimizer=optimizer.value, gpus=gpus, zero_stage=zero,
        offload=offload, grad_checkpointing=grad_checkpointing, flash_attention=flash_attention,
        lora_rank=lora_rank if lora_rank or not qlora or optimizer.value == "none" else 16,
        base_weight_bits=4 if qlora else None,
    )
    reference = None
    if reference_gpu is not None:
        ref = get_gpu(reference_gpu)
        if ref is None:
            raise UsageError(_("--reference-gpu {gpu!r} is not in the catalog; see `costctl gpus`").format(
                gpu=reference_gpu))
        if not reference_hours or reference_hours <= 0:
            raise UsageError(_("--reference-hours must be > 0"))
        reference = Reference(ref, reference_hours)
    seq = (spec.fixed_seq_len or seq_len or spec.default_seq_len) if isinstance(spec, TransformerShape) else None
    work = tokens if tokens is not None else (work_from_steps(spec, setup, steps, seq) if steps else None)
    prices = load_price_table(settings, live=_live_prices(settings, offline))
    rec = recommend(
        spec, setup, load_catalog(), prices, headroom=headroom, provider=provider,
        billing=_billing(billing), work=work, mfu=mfu, reference=reference,
        currency=_rank_currency(prices, currency, settings.catalog.currency),
    )
    if fmt is TableOrJson.json:
        print_json(rec.to_dict())
        return
    _recommend_tables(rec)


def register(app: typer.Typer) -> None:
    """Add ``gpus`` and ``recommend`` to ``app``."""
    app.command("gpus", help=_(
        "List the GPU catalog with prices per GPU-hour; import prices from a SkyPilot catalog CSV (--import) or "
        "a provider's offers (--refresh)."))(gpus)
    app.command("recommend", help=_(
        "Estimate GPU memory for a training job and rank the cards that fit by estimated cost.\n\n"
        "A card fits when the estimate (bytes per GPU, CUDA context and fragmentation included) is at most its "
        "usable memory: the vendor's nominal capacity x (1 - --headroom). The driver reports less than nominal "
        "(an L40S's 48 GiB shows as 46068 MiB in NVML); the default headroom (10 %) covers that gap.",
    ))(recommend_cmd)
