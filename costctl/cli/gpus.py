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
    format_amount,
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
from ..catalog.skypilot import import_skypilot_csv
from ..errors import ConfigError, UsageError
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

FormatOpt = Annotated[TableOrJson, typer.Option("--format", "-f", help="table or json.")]
ProviderOpt = Annotated[str | None, typer.Option("--provider", "-p", help="Only prices from this provider (runpod, vastai, autodl, aws...).")]


#: Columns of the ``gpus`` table hidden first on a narrow terminal (see :func:`print_table`).
GPUS_DROPPABLE = ("Seen", "TDP W", "CC", "FP32", "BW GB/s", "FP16 TF")

#: A prepaid row's period, as a price's unit (``1052 CNY/month``).
PERIOD_UNIT = {"daily": "day", "weekly": "week", "monthly": "month"}
#: Footnotes of the ``gpus`` table (whole sentences; named placeholders for translation).
NOTE_UNLISTED = "* not in costctl's GPU catalog: specs unknown"
NOTE_FROM = ("from: a marketplace's lowest listing seen (a floor, not a price a job can count on); "
             "listed after the on-demand and spot prices")
NOTE_PREPAID = ("prepaid: a rental paid ahead for a day, a week or a month, per card, with its price per GPU-hour "
                "beside it; listed after the on-demand and spot prices, never ranked as a job's price")
NOTE_ESTIMATED = ("est.: no public figure was seen for this price; it is an estimate, and the row's source says "
                  "from what (--format json: estimated)")
NOTE_DISPLAY_ONLY = ("{label}: converted for display only; every price is charged in its own currency, "
                     "and amounts in two currencies are never added")
NOTE_DISPLAY_RATES = "≈ {currency}: converted for display only at {rates}; amounts in two currencies are never added"
#: Columns of the ``recommend`` tables hidden first on a narrow terminal.
RECOMMEND_DROPPABLE = ("#", "Dtype", "GPUs", "Hours")


def _table(title: str | None = None) -> Table:
    """A compact table (rules under the header only, no outer edge) in the style of ``instances``."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def _finite(option: str, value: float | None) -> None:
    """Refuse nan and inf (typer's min/max checks let them through).

    Raises:
        UsageError: one line naming the option.
    """
    if value is not None and not math.isfinite(value):
        raise UsageError(f"{option} {value}: expected a finite number")


def _rank_currency(prices: PriceTable, option: str | None, configured: str | None) -> str | None:
    """The currency to rank in: ``--currency``, else ``[catalog] currency``, checked against the
    price table (:func:`check_rank_currency`): UsageError for the option, ConfigError for the config."""
    if option is not None:
        return check_rank_currency(prices, option, source="--currency", error=UsageError)
    return check_rank_currency(prices, configured, source="[catalog] currency", error=ConfigError)


OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use the dated price table only; do not ask providers' APIs for their live price lists.")]


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
        err_console.print(f"note: {line}", soft_wrap=True)
    return live


def _gib(n: int | float) -> str:
    return f"{n / GIB:,.2f}"


def _price_cell(e: PriceEntry) -> str:
    """A price for a table: ``1.98 CNY``, or for a prepaid row ``1.4411 CNY (1052/month)``."""
    cell = f"{e.price_per_gpu_hour} {e.currency}"
    if e.period_price is not None:
        cell += f" ({e.period_price}/{PERIOD_UNIT.get(e.tier, e.tier)})"
    return cell


def _billing_cell(e: PriceEntry) -> str:
    """Billing mode and tier, ``est.`` appended to an estimated price."""
    return f"{e.label} est." if e.estimated else e.label


def _conversion_heading(conversions: Sequence[DisplayConversion], currency: str | None) -> tuple[str, list[str]]:
    """The heading of a converted column and the footnotes it needs: the one rate used labels
    the column (``≈ USD at 7.12 CNY/USD, 2026-11-30``); several rates are named in a footnote."""
    labels = sorted({c.label for c in conversions})
    if len(labels) == 1:
        return labels[0], [NOTE_DISPLAY_ONLY.format(label=labels[0])]
    heading = f"≈ {currency}"
    rates = "; ".join(label.split(" at ", 1)[1] for label in labels)
    return heading, [NOTE_DISPLAY_RATES.format(currency=currency, rates=rates)]


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
    table = _table("GPU catalog (Mem: vendor's nominal GiB; TF: dense tensor TFLOPS, FP32 accumulate)")
    for col, just in (("GPU", "left"), ("Mem GiB", "right"), ("BW GB/s", "right"), ("FP32", "right"),
                      ("FP16 TF", "right"), ("BF16 TF", "right"), ("CC", "right"), ("TDP W", "right"),
                      ("Provider", "left"), ("Billing", "left"), ("Price/GPU-h", "right"), ("Seen", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    conversions = {id(e): c for _, rows in groups for _, e in rows if e is not None
                   for c in [display_conversion(e.currency, display, rates)] if c is not None}
    notes: list[str] = []
    if conversions:
        heading, notes = _conversion_heading(list(conversions.values()), display)
        table.add_column(heading, justify="right")
    if sort is GpuSort.value:
        table.add_column("TF per 1/h", justify="right")
    unlisted = False
    for _, rows in groups:
        for gpu, e in rows:
            cells = [gpu.name if gpu else f"{e.gpu} *" if e else "?"]
            unlisted = unlisted or gpu is None
            if gpu:
                cells += [f"{gpu.memory_gb:g}", f"{gpu.memory_bandwidth_gbs:,.0f}", f"{gpu.fp32_tflops:g}",
                          f"{gpu.fp16_tensor_tflops:g}",
                          f"{gpu.bf16_tensor_tflops:g}" if gpu.bf16 else "no BF16",
                          gpu.compute_capability, str(gpu.tdp_w)]
            else:
                cells += ["?"] * 7
            if e:
                cells += [e.provider, _billing_cell(e), _price_cell(e), e.seen.isoformat()]
            else:
                cells += ["-", "-", "-", "-"]
            if conversions:
                conv = conversions.get(id(e)) if e is not None else None
                cells.append(format_amount(conv.apply(e.price).amount) if conv and e else "-")
            if sort is GpuSort.value:
                cells.append(f"{Decimal(str(_tensor(gpu))) / e.price_per_gpu_hour:,.0f}"
                             if gpu and e and e.ranked and e.price_per_gpu_hour else "-")
            table.add_row(*cells)
    print_table(table, droppable=GPUS_DROPPABLE)
    entries = [e for _, rows in groups for _, e in rows if e is not None]
    if unlisted:
        print_line(NOTE_UNLISTED)
    if any(e.billing == "from" for e in entries):
        print_line(NOTE_FROM)
    if any(e.billing == "prepaid" for e in entries):
        print_line(NOTE_PREPAID)
    if any(e.estimated for e in entries):
        print_line(NOTE_ESTIMATED)
    for note in notes:
        print_line(note)
    for line in rates_used(groups, lambda r: r[1].currency if r[1] else None, rates):
        err_console.print(f"note: ranked converting at {line}")
    currencies = [c for c, _ in groups if c is not None]
    if len(currencies) > 1:
        err_console.print(f"note: prices in {', '.join(currencies)} are ranked separately; set "
                          "[[catalog.exchange_rates]] in costctl.toml to rank them together")


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
        raise UsageError(f"provider {name!r} publishes no prices through its API; "
                         "add them as [[catalog.prices]] in costctl.toml")
    entries = prices_from_offers(checked_offers(adapter.list_offers(), err_console.print), seen=seen)
    if not entries:
        raise UsageError(f"provider {name!r} listed no on-demand or spot offers")
    return entries


def gpus(
    provider: ProviderOpt = None,
    min_memory: Annotated[float | None, typer.Option("--min-memory", help="Only cards with at least this much memory: GiB, nominal as vendors print it (24 for an RTX 4090, 48 for an L40S).", min=0)] = None,
    sort: Annotated[GpuSort, typer.Option("--sort", help="price, memory, tflops (dense 16-bit tensor) or value (TFLOPS per price).")] = GpuSort.memory,
    billing: Annotated[BillingChoice, typer.Option("--billing", help="on-demand, spot or any (any also lists marketplaces' 'from' floors).")] = BillingChoice.any,
    currency: Annotated[str | None, typer.Option("--currency", help="Show prices in this currency too: a column of its own (JSON: converted), converted by [[catalog.exchange_rates]] and labelled with the rate and its date, for display only; with --sort price or value, also rank in it. Default: [catalog] currency.")] = None,
    offline: OfflineOpt = False,
    import_csv: Annotated[Path | None, typer.Option("--import", help="Import a SkyPilot catalog vms.csv into the price table (kept in the data dir).")] = None,
    refresh: Annotated[str | None, typer.Option("--refresh", help="Fetch current prices from this provider's adapter (one that lists offers) into the price table.")] = None,
    seen: Annotated[str | None, typer.Option("--seen", help="Date the imported prices were seen, YYYY-MM-DD (default today).")] = None,
    fmt: FormatOpt = TableOrJson.table,
    config: ConfigOption = None,
) -> None:
    """List the GPU catalog with prices per GPU-hour; import prices from a SkyPilot catalog CSV
    (--import) or a provider's offers (--refresh)."""
    _finite("--min-memory", min_memory)
    settings = settings_from(config)
    if import_csv is not None and refresh is not None:
        raise UsageError("give --import or --refresh, not both")
    if import_csv is not None or refresh is not None:
        try:
            when = date.fromisoformat(seen) if seen else date.today()
        except ValueError:
            raise UsageError(f"--seen {seen!r} is not a date like 2026-07-01") from None
        source = import_csv if import_csv is not None else f"provider {refresh}"
        if import_csv is not None:
            entries = import_skypilot_csv(import_csv, provider=provider, seen=when)
        else:
            entries = _refresh(settings, str(refresh), when)
        path = save_imported_prices(entries, settings.data_dir)
        unknown = sorted({e.gpu for e in entries if not e.known})
        if fmt is TableOrJson.json:
            print_json({"imported": [e.to_dict() for e in entries], "file": str(path), "unknown_gpus": unknown})
        else:
            err_console.print(f"imported {len(entries)} price(s) for {entries[0].provider} from {source} into {path}")
            if unknown:
                err_console.print(f"not in the catalog (kept, flagged): {', '.join(unknown)}")
        return
    if seen is not None:
        raise UsageError("--seen only applies with --import or --refresh")
    prices = load_price_table(settings, live=_live_prices(settings, offline))
    display = _rank_currency(prices, currency, settings.catalog.currency)
    rank_in = display if sort in (GpuSort.price, GpuSort.value) else None
    rows = _gpu_rows(list(prices.entries), provider, _billing(billing), min_memory)
    if provider and not rows:
        raise UsageError(f"no prices for provider {provider!r}; known: {', '.join(prices.providers()) or 'none'}")
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
    if len(given) != 1:
        raise UsageError("give exactly one of --params (e.g. 7e9), --model (a preset), --config-json "
                         f"(a Hugging Face config.json) or --torch-model FILE.py:FUNC; got {', '.join(given) or 'none'}")
    if params is not None:
        return shape_from_params(params)
    if model is not None:
        return preset(model)
    if config_json is not None:
        return shape_from_hf_config(config_json)
    assert torch_model is not None
    return measure_factory(torch_model)


def _breakdown_table(b: MemoryBreakdown) -> None:
    s = b.setup
    seq = f" x seq {b.seq_len}" if b.seq_len else ""
    extras = [x for x, on in (("activation checkpointing", s.grad_checkpointing), ("flash attention", s.flash_attention),
                              (f"ZeRO-{s.zero_stage}", s.zero_stage), ("offload", s.offload),
                              (f"LoRA r={s.lora_rank}", s.lora_rank), ("4-bit base", s.base_weight_bits == 4)) if on]
    title = (f"Memory per GPU: {b.model} ({b.params / 1e9:.3g} B params"
             f"{f', {b.trainable_params / 1e6:.3g} M trainable' if b.trainable_params != b.params else ''}), "
             f"batch {s.batch_size}{seq}, {s.precision}, {s.optimizer}, {s.gpus} GPU(s)"
             + (f", {', '.join(extras)}" if extras else ""))
    print_line(title)
    table = _table()
    table.add_column("Term")
    table.add_column("GiB", justify="right")
    table.add_column("Share", justify="right")
    total = b.total or 1
    for name, value in b.terms.items():
        table.add_row(name.replace("_", " "), _gib(value), f"{value / total:.0%}")
    table.add_row("total", _gib(b.total), "100%")
    print_table(table)
    if b.cpu_bytes:
        print_line(f"CPU RAM for offloaded state: {_gib(b.cpu_bytes)} GiB")


def _recommend_tables(rec: Recommendation) -> None:
    _breakdown_table(rec.breakdown)
    fits = rec.fits
    notes: list[str] = []
    if fits:
        for cur, opts in rec.groups:
            label = f"in {cur}" if cur else "without a price in the table"
            # The need is the same on every card (the estimate per GPU): in the title, not in each row.
            table = _table(f"Cards that fit {_gib(rec.breakdown.total)} GiB per GPU, cheapest job first ({label})")
            for col, just in (("#", "right"), ("GPU", "left"), ("GPUs", "right"), ("Usable GiB", "right"),
                              ("Dtype", "left"), ("Provider", "left"),
                              ("Price/GPU-h", "right"), ("Hours", "right"), ("Job cost", "right")):
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
                    (f"{p.price_per_gpu_hour} {p.currency}{' ' + p.label if p.label != 'on-demand' else ''}"
                     f"{' est.' if p.estimated else ''}") if p else "-",
                    f"{o.hours:,.3g}" if o.hours is not None else "-",
                    f"{o.cost.rounded(2 if o.cost.amount >= 1 else 4)} {o.cost.currency}" if o.cost else "-",
                ]
                if conversions:
                    shown = o.cost if o.cost is not None else o.hourly
                    cells.append(f"{format_amount(o.display.apply(shown).amount)}{'/h' if o.cost is None else ''}"
                                 if o.display is not None and shown is not None else "-")
                table.add_row(*cells)
            print_table(table, droppable=RECOMMEND_DROPPABLE)
        if any(o.price is not None and o.price.estimated for o in fits):
            notes.append(NOTE_ESTIMATED)
    elif not rec.fitting_gpus:
        biggest = max((a.gpu for a in rec.no_fit), key=lambda g: g.memory_gb, default=None)
        print_line(f"No single card fits {_gib(rec.breakdown.total)} GiB per GPU"
                   + (f" (largest in the catalog: {biggest.name}, {biggest.memory_gb:g} GiB nominal)."
                      if biggest else "."))
    for note in notes:
        print_line(note)
    if rec.no_fit:
        table = _table("Cards that do not fit, and what would make them fit")
        table.add_column("GPU")
        table.add_column("Need/usable GiB", justify="right")
        table.add_column("Would fit with")
        for a in rec.no_fit:
            advice = "; ".join(f"{s.change} ({_gib(s.required_bytes)} GiB)" for s in a.suggestions)
            table.add_row(a.gpu.name, f"{_gib(a.required_bytes)} / {_gib(a.usable_bytes)}", advice or "-")
        print_table(table)
    for gpu, reason in rec.excluded:
        print_line(f"{gpu}: skipped, {reason}")
    for note in rec.notes:
        print_line(f"note: {note}")


def recommend_cmd(
    params: Annotated[float | None, typer.Option("--params", help="Parameter count, e.g. 7e9 (GPT-3-family shape for activations).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Preset: bert-base, bert-large, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-2-7b, llama-2-13b, llama-3-8b, mistral-7b, vit-base, resnet50.")] = None,
    config_json: Annotated[Path | None, typer.Option("--config-json", help="A Hugging Face config.json.")] = None,
    torch_model: Annotated[str | None, typer.Option("--torch-model", help="FILE.py:FUNC returning (model, make_batch): measure activations on the CPU (needs torch).")] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", help="Micro-batch per GPU.", min=1)] = 8,
    seq_len: Annotated[int | None, typer.Option("--seq-len", "-s", help="Tokens per sample (default: the model's).", min=1)] = None,
    precision: Annotated[PrecisionChoice, typer.Option("--precision", help="fp32, fp16 or bf16 (pure 16-bit: weights, grads, optimizer), or mixed (autocast with fp32 master weights).")] = PrecisionChoice("mixed"),
    optimizer: Annotated[OptimizerChoice, typer.Option("--optimizer", help="none = inference (weights, KV cache).")] = OptimizerChoice("adamw"),
    gpus: Annotated[int, typer.Option("--gpus", help="Data-parallel GPUs.", min=1)] = 1,
    zero: Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3.", min=0, max=3)] = 0,
    offload: Annotated[bool, typer.Option("--offload", help="Optimizer state and fp32 master weights in CPU RAM.")] = False,
    grad_checkpointing: Annotated[bool, typer.Option("--grad-checkpointing", help="Full activation checkpointing.")] = False,
    flash_attention: Annotated[bool, typer.Option("--flash-attention", help="Flash attention (no s x s scores kept).")] = False,
    lora_rank: Annotated[int | None, typer.Option("--lora-rank", help="Train LoRA adapters of this rank (q,v).", min=1)] = None,
    qlora: Annotated[bool, typer.Option("--qlora", help="4-bit NF4 base (double quantization) under LoRA adapters; with --optimizer none, 4-bit inference.")] = False,
    tokens: Annotated[float | None, typer.Option("--tokens", help="Tokens (samples for CNNs) the job processes, e.g. 2e9.", min=1)] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Optimizer steps (batch x GPUs samples each).", min=1)] = None,
    mfu: Annotated[float | None, typer.Option("--mfu", help="Fraction of each card's dense peak for the time estimate (default: what published runs of the model, or the median published run, achieved on the nearest card).")] = DEFAULT_MFU,
    reference_gpu: Annotated[str | None, typer.Option("--reference-gpu", help="Card the job was timed on.")] = None,
    reference_hours: Annotated[float | None, typer.Option("--reference-hours", help="Hours the job took on --reference-gpu.")] = None,
    provider: ProviderOpt = None,
    billing: Annotated[BillingChoice, typer.Option("--billing", help="on-demand, spot or any.")] = BillingChoice.on_demand,
    headroom: Annotated[float, typer.Option("--headroom", help="Fraction of the card's nominal memory kept free, in [0, 1): covers what the driver reserves (NVML shows 46068 MiB of an L40S's 48 GiB).")] = DEFAULT_HEADROOM,
    currency: Annotated[str | None, typer.Option("--currency", help="Rank costs in this currency: its own prices, and others converted by [[catalog.exchange_rates]]; a converted price and cost are shown in a column of their own (JSON: converted), labelled with the rate and its date, for display only. Default: [catalog] currency.")] = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = TableOrJson.table,
    config: ConfigOption = None,
) -> None:
    """Estimate GPU memory for a training job and rank the cards that fit by estimated cost.

    A card fits when the estimate (bytes per GPU, CUDA context and fragmentation included) is
    at most its usable memory: the vendor's nominal capacity x (1 - --headroom). The driver
    reports less than nominal (an L40S's 48 GiB shows as 46068 MiB in NVML); the default
    headroom of 10 % covers that gap.
    """
    for option, value in (("--params", params), ("--tokens", tokens), ("--mfu", mfu),
                          ("--reference-hours", reference_hours), ("--headroom", headroom)):
        _finite(option, value)
    if tokens is not None and steps is not None:
        raise UsageError("give --tokens or --steps, not both")
    if (reference_gpu is None) != (reference_hours is None):
        raise UsageError("--reference-gpu and --reference-hours go together")
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
            raise UsageError(f"--reference-gpu {reference_gpu!r} is not in the catalog; see `costctl gpus`")
        if not reference_hours or reference_hours <= 0:
            raise UsageError("--reference-hours must be > 0")
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
    app.command("gpus")(gpus)
    app.command("recommend")(recommend_cmd)
