"""``costctl instances | start | stop | release | offers``: instances and prices through the providers.

The provider comes from ``--provider`` or ``[instance] provider``; its config table is
``[providers.<name>]``. ``costctl instances`` and ``costctl offers`` without ``--provider`` go
across every configured provider (``[instance] provider`` plus each ``[providers.*]`` table);
a provider that fails there is reported on stderr and the others are still shown.

``instances`` lists every configured account of each provider: the default account (when it
has a credential, or when no named account exists) and each ``[providers.<name>.accounts.*]``
(``--account NAME`` for one), with an ACCOUNT column (JSON/CSV: ``account``, null for the
default account). ``start``, ``stop`` and ``release`` act for ``--account`` (default: ``[instance]
account`` for the configured provider, else the default account).

Running time and spend shown by ``instances`` are those of the current (or last) session since
the provider last started the instance: spend = price per instance-hour × running time / 3600,
computed unrounded and rounded only for output (JSON/CSV: a decimal string with 6 places, as
``costctl bill`` writes money; prices exactly as the provider gives them). Stopped instances
may still bill storage, which is not included.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from ..clock import RealClock, ensure_utc
from ..errors import CostctlError, ProviderError, UsageError
from ..money import cost_of, round_money
from ..report import money_text
from .common import (ConfigOption, FormatOption, OutputFormat, err_console, out_console, print_json, print_table,
                     settings_from)

if TYPE_CHECKING:  # the providers (and config, through costctl.cloud) load in the commands, not for --help
    from costctl_providers.base import Instance, Offer, Provider, Status

    from ..config import Settings

log = logging.getLogger("costctl.cli.instances")

#: Names this module used to import from :mod:`costctl.cloud` at the top, still importable from
#: here; loaded on first use (:func:`__getattr__`).
_CLOUD_NAMES = ("DEFAULT_ACCOUNT", "account_names", "default_account", "open_provider", "provider_config")


def __getattr__(name: str) -> Any:
    if name in _CLOUD_NAMES:
        from .. import cloud

        return getattr(cloud, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

ProviderOption = Annotated[
    str | None,
    typer.Option("--provider", "-p", help="Provider name (default: [instance] provider; for listings, all configured)."),
]

AccountOption = Annotated[
    str | None,
    typer.Option("--account", help="Named account ([providers.<name>.accounts.<account>]); default: "
                                   "[instance] account, else the provider's default account "
                                   "(instances: every configured account)."),
]


def _billed(status: Status) -> bool:
    """Whether an instance in ``status`` is billed for its GPU (starting, running, stopping:
    running time keeps growing)."""
    from costctl_providers.base import Status

    return status in (Status.STARTING, Status.RUNNING, Status.STOPPING)


# ----------------------------------------------------------------------------- helpers


def configured_providers(settings: Settings) -> list[str]:
    """``[instance] provider`` first, then each ``[providers.*]`` table, without repeats."""
    names = [settings.instance.provider]
    for name in settings.providers:
        if name not in names:
            names.append(name)
    return names


def listed_accounts(settings: Settings, name: str) -> list[str | None]:
    """The accounts ``instances`` lists for provider ``name``: :data:`~costctl.cloud.DEFAULT_ACCOUNT`
    (the default account) and each named account; the default one is dropped later when named
    accounts exist and it has no credential."""
    from ..cloud import DEFAULT_ACCOUNT, account_names

    return [DEFAULT_ACCOUNT, *account_names(settings, name)]


def running_seconds(inst: Instance, now: datetime) -> Decimal | None:
    """Seconds the instance has run since it was last started: until ``now`` while it is
    billed (starting, running, stopping), until ``stopped_at`` otherwise. None when unknown."""
    if inst.started_at is None:
        return Decimal(0) if not _billed(inst.status) else None
    start = ensure_utc(inst.started_at)
    if _billed(inst.status):
        end = ensure_utc(now)
    elif inst.stopped_at is not None:
        end = ensure_utc(inst.stopped_at)
    else:
        return None
    delta = end - start
    secs = Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)
    return max(Decimal(0), secs)


def spend_so_far(inst: Instance, now: datetime) -> Decimal | None:
    """price_per_hour × running time (unrounded, in ``inst.currency``), or None when unknown."""
    secs = running_seconds(inst, now)
    if secs is None or inst.price_per_hour is None:
        return None
    return cost_of(inst.price_per_hour, secs)


def fmt_amount(amount: Decimal | None, places: int = 2) -> str:
    """Display rounding only: ``places`` decimals, up to 4 when the amount needs them (0.125)."""
    if amount is None:
        return "-"
    q = round_money(amount, 4)
    text = format(q.normalize(), "f")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(places, '0')}"


def fmt_duration(secs: Decimal | None) -> str:
    """``1h02m``, ``5m03s``, ``12s`` or ``-``."""
    if secs is None:
        return "-"
    s = int(secs)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def _instance_row(inst: Instance, now: datetime, account: str | None = None) -> dict[str, Any]:
    secs = running_seconds(inst, now)
    spend = spend_so_far(inst, now)
    return {
        "provider": inst.provider,
        "account": account,
        "id": inst.id,
        "gpu": inst.gpu,
        "gpu_count": inst.gpu_count,
        "status": inst.status.value,
        "status_raw": inst.status_raw,
        "preempted": inst.preempted,
        "billing": inst.billing.value,
        "price_per_hour": str(inst.price_per_hour) if inst.price_per_hour is not None else None,
        "bid_per_hour": str(inst.bid_per_hour) if inst.bid_per_hour is not None else None,
        "currency": inst.currency,
        "started_at": ensure_utc(inst.started_at).isoformat() if inst.started_at else None,
        "stopped_at": ensure_utc(inst.stopped_at).isoformat() if inst.stopped_at else None,
        "running_s": str(secs) if secs is not None else None,
        "spend": money_text(spend),  # computed money: 6 places, like `costctl bill`
        "region": inst.region,
    }


def _write_csv(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    sys.stdout.write(buf.getvalue())


def _table(columns: tuple[tuple[str, str], ...]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    return table


def _say(text: str) -> None:
    """One of costctl's own lines, on stderr."""
    err_console.print(text, soft_wrap=True)


def _describe(inst: Instance, account: str | None = None) -> str:
    from ..cloud import checked_instance

    inst = checked_instance(inst, _say)
    price = f", {fmt_amount(inst.price_per_hour)} {inst.currency}/h" if inst.price_per_hour is not None else ""
    where = f"{inst.provider} account {account}" if account else inst.provider
    return f"{inst.id} on {where} ({inst.gpu_count}× {inst.gpu or '?'}, {inst.status.value}{price})"


def _require(prov: Provider, capability: str, doing: str) -> None:
    """UsageError naming the adapter's reason when it lacks ``capability``."""
    cap = prov.capabilities.get(capability)
    if not cap:
        raise UsageError(f"provider {prov.name} cannot {doing}: {cap.reason or 'not supported'}")


# ----------------------------------------------------------------------------- commands


def instances(
    provider: ProviderOption = None,
    account: AccountOption = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
) -> None:
    """List instances of every configured provider and account: account, id, GPU, status,
    billing mode, price per hour, running time, spend so far."""
    from ..cloud import checked_instance, open_provider

    settings = settings_from(config)
    names = [provider] if provider else configured_providers(settings)
    now = RealClock().now()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    asked = 0
    for name in names:
        try:
            accounts: list[str | None] = [account] if account else listed_accounts(settings, name)
        except CostctlError as exc:
            accounts = []
            asked += 1
            failures.append(exc.message)
            err_console.print(f"costctl: {name}: {exc.message}", soft_wrap=True)
        for acct in accounts:
            label = f"{name} account {acct}" if acct else name
            try:
                asked += 1
                prov = open_provider(settings, name, account=acct)
                if not acct and len(accounts) > 1 and not prov.has_credential():
                    asked -= 1  # only the named accounts have credentials
                    continue
                found = prov.list_instances()
            except CostctlError as exc:
                if provider and (account or len(accounts) == 1):  # asked for this one: its error is the answer
                    raise
                failures.append(exc.message)
                err_console.print(f"costctl: {label}: {exc.message}", soft_wrap=True)
                continue
            rows.extend(_instance_row(checked_instance(i, _say), now, acct or None) for i in found)
    if failures and not rows and len(failures) == asked:
        raise ProviderError(f"no provider could be read ({len(failures)} failed; see above)")
    if fmt == OutputFormat.json:
        print_json(rows)
    elif fmt == OutputFormat.csv:
        _write_csv(rows)
    else:
        table = _table((("PROVIDER", "left"), ("ACCOUNT", "left"), ("ID", "left"), ("GPU", "left"), ("STATUS", "left"),
                        ("BILLING", "left"), ("PRICE/H", "right"), ("RUNNING", "right"), ("SPEND", "right")))
        for r in rows:
            status = r["status"] + (" (preempted)" if r["preempted"] else "")
            price = Decimal(r["price_per_hour"]) if r["price_per_hour"] else None
            spend = Decimal(r["spend"]) if r["spend"] else None
            running = Decimal(r["running_s"]) if r["running_s"] else None
            table.add_row(
                r["provider"], r["account"] or "default", r["id"], f"{r['gpu_count']}× {r['gpu'] or '?'}", status, r["billing"],
                f"{fmt_amount(price)} {r['currency']}" if price is not None else "-",
                fmt_duration(running),
                f"{fmt_amount(spend)} {r['currency']}" if spend is not None else "-",
            )
        if rows:
            print_table(table)
        else:
            out_console.print("no instances", soft_wrap=True)
    if failures:
        raise typer.Exit(1)


def start(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help="Instance id.")],
    provider: ProviderOption = None,
    account: AccountOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would happen; change nothing.")] = False,
    config: ConfigOption = None,
) -> None:
    """Start (power on / resume) an instance; nothing happens if it is already running.
    Starting makes the GPU billed again."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "start", "start instances")
    if dry_run:
        before = prov.get_instance(instance_id)
        if before.status in (Status.STARTING, Status.RUNNING):
            out_console.print(f"dry run: {_describe(before, prov.account)} is already {before.status.value}; nothing to start",
                              soft_wrap=True)
        elif before.status == Status.TERMINATED:
            out_console.print(f"dry run: {_describe(before, prov.account)} is released; it cannot be started", soft_wrap=True)
        else:
            out_console.print(f"dry run: would start {_describe(before, prov.account)}; nothing changed", soft_wrap=True)
        return
    inst = prov.start_instance(instance_id)
    log.info("start %s on %s: requested on the command line; now %s", instance_id, prov.name, inst.status.value)
    out_console.print(f"{_describe(inst, prov.account)}", soft_wrap=True)


def stop(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help="Instance id.")],
    provider: ProviderOption = None,
    account: AccountOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would happen; change nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the provider reports it stopped.")] = True,
    config: ConfigOption = None,
) -> None:
    """Stop (power off) an instance; nothing happens if it is already stopped."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "stop", "stop instances")
    before = prov.get_instance(instance_id)
    if dry_run:
        if before.status in (Status.STOPPED, Status.STOPPING, Status.TERMINATED):
            out_console.print(f"dry run: {_describe(before, prov.account)} is already {before.status.value}; nothing to stop", soft_wrap=True)
        else:
            out_console.print(f"dry run: would stop {_describe(before, prov.account)}; nothing changed", soft_wrap=True)
        return
    log.info("stop %s on %s: requested on the command line; was %s", instance_id, prov.name, before.status.value)
    inst = prov.stop_instance(instance_id, wait=wait)
    if before.status in (Status.STOPPED, Status.TERMINATED):
        out_console.print(f"{_describe(inst, prov.account)}: already {before.status.value}, nothing done", soft_wrap=True)
    else:
        out_console.print(f"stopped {_describe(inst, prov.account)}", soft_wrap=True)


def release(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help="Instance id.")],
    provider: ProviderOption = None,
    account: AccountOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would happen; change nothing.")] = False,
    config: ConfigOption = None,
) -> None:
    """Release (terminate / destroy) an instance AND ITS DATA. Asks for confirmation unless --yes."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "release", "release instances")
    before = prov.get_instance(instance_id)
    if before.status == Status.TERMINATED:
        out_console.print(f"{_describe(before, prov.account)}: already released, nothing done", soft_wrap=True)
        return
    if dry_run:
        out_console.print(f"dry run: would release {_describe(before, prov.account)} and delete its data; nothing changed", soft_wrap=True)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(
                f"release deletes instance {instance_id} and its data; pass --yes to confirm "
                "(there is no terminal to ask on)"
            )
        if not typer.confirm(f"Release {_describe(before, prov.account)}? Its data will be deleted", default=False):
            err_console.print("costctl: not released")
            raise typer.Exit(1)
    log.info("release %s on %s: requested on the command line; was %s", instance_id, prov.name, before.status.value)
    inst = prov.release_instance(instance_id)
    out_console.print(f"released {_describe(inst, prov.account)}", soft_wrap=True)


class SortBy(str, Enum):
    """Sort key of ``offers`` within each currency."""

    gpu_hour = "gpu-hour"
    instance_hour = "instance-hour"


def _offer_row(o: Offer) -> dict[str, Any]:
    return {
        "provider": o.provider,
        "id": o.id,
        "gpu": o.gpu,
        "gpu_count": o.gpu_count,
        "billing": o.billing.value,
        "price_per_hour": str(o.price_per_hour),
        "price_per_gpu_hour": str(o.price_per_gpu_hour),
        "currency": o.currency,
        "gpu_memory_bytes": o.gpu_memory_bytes,
        "region": o.region,
        "reliability": o.reliability,
        "available": o.available,
    }


def sort_offers(offers: list[Offer], by: SortBy = SortBy.gpu_hour) -> list[Offer]:
    """Group by currency (alphabetical; currencies are never compared), cheapest first within
    each by price per GPU-hour (or per instance-hour), ties by the other price then provider."""
    def key(o: Offer) -> tuple[Any, ...]:
        first, second = (o.price_per_gpu_hour, o.price_per_hour) if by == SortBy.gpu_hour else (
            o.price_per_hour, o.price_per_gpu_hour)
        return (o.currency, first, second, o.provider, o.id)

    return sorted(offers, key=key)


def _no_offers(gpu: str, billing: str | None, providers: list[str]) -> str:
    """One line for an empty ``offers`` result, naming the GPU and the providers asked; a name
    the GPU catalog does not know gets the catalog models it may mean, or a pointer to
    ``costctl gpus``."""
    from ..catalog.gpus import load_catalog

    catalog = load_catalog()
    mode = f"{billing} " if billing else ""
    where = ", ".join(providers)
    if catalog.normalize(gpu)[1]:
        return f"no {mode}offers for {gpu!r} from {where}"
    like = catalog.names_like(gpu)
    if not like:
        return f"no offers for {gpu!r}: not a GPU model costctl knows; `costctl gpus` lists them"
    return f"no {mode}offers for {gpu!r} from {where}; GPU models like it: {', '.join(like)} (see `costctl gpus`)"


def offers(
    gpu: Annotated[str, typer.Argument(help="GPU model, e.g. 4090, A100, \"RTX 3090\".")],
    provider: ProviderOption = None,
    billing: Annotated[str | None, typer.Option("--billing", help="on-demand or spot (default: both).")] = None,
    sort: Annotated[SortBy, typer.Option("--sort", help="gpu-hour or instance-hour.")] = SortBy.gpu_hour,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many rows per currency.")] = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
) -> None:
    """Current prices for a GPU type: cheapest first within each currency, per instance-hour and per GPU-hour.

    No offer at all is an error (exit status 1), with catalog names when the GPU name is unknown."""
    from ..cloud import checked_offers, open_provider

    if billing is not None and billing not in ("on-demand", "spot"):
        raise UsageError(f"--billing {billing!r}: expected on-demand or spot")
    settings = settings_from(config)
    names = [provider] if provider else configured_providers(settings)
    found: list[Offer] = []
    asked: list[str] = []
    failures = 0
    for name in names:
        try:
            prov = open_provider(settings, name)
            if not prov.capabilities.list_offers:
                if provider:
                    _require(prov, "list_offers", "list offers")
                continue
            asked.append(name)
            found.extend(checked_offers(prov.list_offers(gpu), _say))
        except UsageError:
            raise
        except CostctlError as exc:
            if provider:
                raise
            failures += 1
            err_console.print(f"costctl: {name}: {exc.message}", soft_wrap=True)
    if billing is not None:
        found = [o for o in found if o.billing.value == billing]
    ordered = sort_offers(found, sort)
    if limit is not None:
        kept: list[Offer] = []
        per: dict[str, int] = {}
        for o in ordered:
            per[o.currency] = per.get(o.currency, 0) + 1
            if per[o.currency] <= limit:
                kept.append(o)
        ordered = kept
    rows = [_offer_row(o) for o in ordered]
    if not rows and not failures:
        if fmt == OutputFormat.json:
            print_json(rows)
        raise CostctlError(_no_offers(gpu, billing, asked or names))
    if fmt == OutputFormat.json:
        print_json(rows)
    elif fmt == OutputFormat.csv:
        _write_csv(rows)
    else:
        if not rows:
            out_console.print(f"no offers for {gpu!r}", soft_wrap=True)
        else:
            table = _table((("PROVIDER", "left"), ("GPU", "left"), ("BILLING", "left"), ("PRICE/H", "right"),
                            ("PER GPU-H", "right"), ("REGION", "left"), ("ID", "left")))
            for o in ordered:
                table.add_row(
                    o.provider, f"{o.gpu_count}× {o.gpu or o.gpu_raw or '?'}", o.billing.value,
                    f"{fmt_amount(o.price_per_hour)} {o.currency}", f"{fmt_amount(o.price_per_gpu_hour)} {o.currency}",
                    o.region or "-", o.id,
                )
            print_table(table)
    if failures:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``instances``, ``start``, ``stop``, ``release`` and ``offers`` to ``app``."""
    app.command("instances")(instances)
    app.command("start")(start)
    app.command("stop")(stop)
    app.command("release")(release)
    app.command("offers")(offers)
