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
from ..i18n import N_, _, display_word, format_amount
from ..money import cost_of
from ..report import money_text
from .common import (ConfigOption, FormatOption, OutputFormat, err_console, out_console, print_json, print_table,
                     settings_from, unprefixed)

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
    typer.Option("--provider", "-p", help=_("Provider name (default: [instance] provider; for listings, all configured).")),
]

AccountOption = Annotated[
    str | None,
    typer.Option("--account", help=_("Named account ([providers.<name>.accounts.<account>]); default: "
                                     "[instance] account, else the provider's default account "
                                     "(instances: every configured account).")),
]


# ----------------------------------------------------------------------------- helpers


def configured_providers(settings: Settings) -> list[str]:
    """``[instance] provider`` first, then each ``[providers.*]`` table, without repeats
    (:func:`costctl.cloud.configured_providers`)."""
    from ..cloud import configured_providers as configured

    return configured(settings)


def listed_accounts(settings: Settings, name: str) -> list[str | None]:
    """The accounts ``instances`` lists for provider ``name``: :data:`~costctl.cloud.DEFAULT_ACCOUNT`
    (the default account) and each named account; the default one is dropped later when named
    accounts exist and it has no credential."""
    from ..cloud import DEFAULT_ACCOUNT, account_names

    return [DEFAULT_ACCOUNT, *account_names(settings, name)]


def running_seconds(inst: Instance, now: datetime) -> Decimal | None:
    """Seconds the instance has run since it was last started: until ``now`` while it is
    billed (starting, running, stopping), until ``stopped_at`` otherwise. None when unknown
    (:meth:`~costctl_providers.base.Instance.running_seconds`)."""
    return inst.running_seconds(now)


def spend_so_far(inst: Instance, now: datetime) -> Decimal | None:
    """price_per_hour × running time (unrounded, in ``inst.currency``), or None when unknown."""
    secs = running_seconds(inst, now)
    if secs is None or inst.price_per_hour is None:
        return None
    return cost_of(inst.price_per_hour, secs)


def fmt_money(amount: Decimal | None, currency: str) -> str:
    """``amount`` in ``currency`` for a table or a sentence, as the current language writes money
    (:func:`costctl.i18n.format_amount`: ``$0.0123``, ``¥1,008.00``); ``-`` for None."""
    return "-" if amount is None else format_amount(amount, currency)


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
    """``sim-local on sim (1× RTX 4090, running, CN¥0.50/h)``, in the current language (the
    account is named when given; the price is left out when unknown)."""
    from ..cloud import checked_instance

    inst = checked_instance(inst, _say)
    shape = {"id": inst.id, "provider": inst.provider, "account": account, "count": inst.gpu_count,
             "gpu": inst.gpu or "?", "status": display_word(inst.status),
             "price": fmt_money(inst.price_per_hour, inst.currency)}
    if inst.price_per_hour is not None:
        if account:
            text = _("{id} on {provider} account {account} ({count}× {gpu}, {status}, {price}/h)")
        else:
            text = _("{id} on {provider} ({count}× {gpu}, {status}, {price}/h)")
    elif account:
        text = _("{id} on {provider} account {account} ({count}× {gpu}, {status})")
    else:
        text = _("{id} on {provider} ({count}× {gpu}, {status})")
    return text.format(**shape)


def _require(prov: Provider, capability: str, cannot: str) -> None:
    """UsageError naming the adapter's reason when it lacks ``capability``; ``cannot`` is the
    sentence (:func:`~costctl.i18n.N_`, placeholders ``{name}`` and ``{reason}``)."""
    cap = prov.capabilities.get(capability)
    if not cap:
        raise UsageError(_(cannot).format(name=prov.name, reason=cap.reason or _("not supported")))


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
            err_console.print(_("costctl: {provider}: {message}").format(provider=name,
                                                                          message=unprefixed(exc.message, name)),
                              soft_wrap=True)
        for acct in accounts:
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
                if acct:
                    failed = _("costctl: {provider} account {account}: {message}")
                else:
                    failed = _("costctl: {provider}: {message}")
                err_console.print(failed.format(provider=name, account=acct, message=unprefixed(exc.message, name)),
                                  soft_wrap=True)
                continue
            rows.extend(_instance_row(checked_instance(i, _say), now, acct or None) for i in found)
    if failures and not rows and len(failures) == asked:
        raise ProviderError(_("no provider could be read ({count} failed; see above)").format(count=len(failures)))
    if fmt == OutputFormat.json:
        print_json(rows)
    elif fmt == OutputFormat.csv:
        _write_csv(rows)
    else:
        table = _table(((_("PROVIDER"), "left"), (_("ACCOUNT"), "left"), (_("ID"), "left"), (_("GPU"), "left"),
                        (_("STATUS"), "left"), (_("BILLING"), "left"), (_("PRICE/H"), "right"),
                        (_("RUNNING"), "right"), (_("SPEND"), "right")))
        for r in rows:
            shown = display_word(r["status"])
            status = _("{status} (preempted)").format(status=shown) if r["preempted"] else shown
            price = Decimal(r["price_per_hour"]) if r["price_per_hour"] else None
            spend = Decimal(r["spend"]) if r["spend"] else None
            running = Decimal(r["running_s"]) if r["running_s"] else None
            table.add_row(
                r["provider"], r["account"] or _("default"), r["id"], f"{r['gpu_count']}× {r['gpu'] or '?'}", status,
                display_word(r["billing"]),
                fmt_money(price, r["currency"]),
                fmt_duration(running),
                fmt_money(spend, r["currency"]),
            )
        if rows:
            print_table(table)
        else:
            out_console.print(_("no instances"), soft_wrap=True)
    if failures:
        raise typer.Exit(1)


def start(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_("Instance id."))],
    provider: ProviderOption = None,
    account: AccountOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Show what would happen; change nothing."))] = False,
    config: ConfigOption = None,
) -> None:
    """Start (power on / resume) an instance; nothing happens if it is already running.
    Starting makes the GPU billed again."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "start", N_("provider {name} cannot start instances: {reason}"))
    if dry_run:
        before = prov.get_instance(instance_id)
        described = _describe(before, prov.account)
        if before.status in (Status.STARTING, Status.RUNNING):
            said = _("dry run: {instance} is already {status}; nothing to start")
        elif before.status == Status.TERMINATED:
            said = _("dry run: {instance} is released; it cannot be started")
        else:
            said = _("dry run: would start {instance}; nothing changed")
        out_console.print(said.format(instance=described, status=display_word(before.status)), soft_wrap=True)
        return
    inst = prov.start_instance(instance_id)
    log.info("start %s on %s: requested on the command line; now %s", instance_id, prov.name, inst.status.value)
    out_console.print(f"{_describe(inst, prov.account)}", soft_wrap=True)


def stop(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_("Instance id."))],
    provider: ProviderOption = None,
    account: AccountOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Show what would happen; change nothing."))] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help=_("Wait until the provider reports it stopped."))] = True,
    config: ConfigOption = None,
) -> None:
    """Stop (power off) an instance; nothing happens if it is already stopped."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "stop", N_("provider {name} cannot stop instances: {reason}"))
    before = prov.get_instance(instance_id)
    if dry_run:
        if before.status in (Status.STOPPED, Status.STOPPING, Status.TERMINATED):
            said = _("dry run: {instance} is already {status}; nothing to stop")
        else:
            said = _("dry run: would stop {instance}; nothing changed")
        out_console.print(said.format(instance=_describe(before, prov.account), status=before.status.value),
                          soft_wrap=True)
        return
    log.info("stop %s on %s: requested on the command line; was %s", instance_id, prov.name, before.status.value)
    inst = prov.stop_instance(instance_id, wait=wait)
    if before.status in (Status.STOPPED, Status.TERMINATED):
        out_console.print(_("{instance}: already {status}, nothing done").format(
            instance=_describe(inst, prov.account), status=before.status.value), soft_wrap=True)
    else:
        out_console.print(_("stopped {instance}").format(instance=_describe(inst, prov.account)), soft_wrap=True)


def release(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_("Instance id."))],
    provider: ProviderOption = None,
    account: AccountOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help=_("Do not ask for confirmation."))] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_("Show what would happen; change nothing."))] = False,
    config: ConfigOption = None,
) -> None:
    """Release (terminate / destroy) an instance AND ITS DATA. Asks for confirmation unless --yes."""
    from costctl_providers.base import Status

    from ..cloud import open_provider

    settings = settings_from(config)
    prov = open_provider(settings, provider, account=account)
    _require(prov, "release", N_("provider {name} cannot release instances: {reason}"))
    before = prov.get_instance(instance_id)
    described = _describe(before, prov.account)
    if before.status == Status.TERMINATED:
        out_console.print(_("{instance}: already released, nothing done").format(instance=described), soft_wrap=True)
        return
    if dry_run:
        out_console.print(_("dry run: would release {instance} and delete its data; nothing changed").format(
            instance=described), soft_wrap=True)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(
                _("release deletes instance {id} and its data; pass --yes to confirm "
                  "(there is no terminal to ask on)").format(id=instance_id)
            )
        if not typer.confirm(_("Release {instance}? Its data will be deleted").format(instance=described),
                             default=False):
            err_console.print(_("costctl: not released"))
            raise typer.Exit(1)
    log.info("release %s on %s: requested on the command line; was %s", instance_id, prov.name, before.status.value)
    inst = prov.release_instance(instance_id)
    out_console.print(_("released {instance}").format(instance=_describe(inst, prov.account)), soft_wrap=True)


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
    shape = {"gpu": gpu, "billing": billing, "providers": ", ".join(providers)}
    if catalog.normalize(gpu)[1]:
        if billing:
            return _("no {billing} offers for {gpu!r} from {providers}").format(**shape)
        return _("no offers for {gpu!r} from {providers}").format(**shape)
    like = catalog.names_like(gpu)
    if not like:
        return _("no offers for {gpu!r}: not a GPU model costctl knows; `costctl gpus` lists them").format(**shape)
    shape["like"] = ", ".join(like)
    if billing:
        return _("no {billing} offers for {gpu!r} from {providers}; GPU models like it: {like} "
                 "(see `costctl gpus`)").format(**shape)
    return _("no offers for {gpu!r} from {providers}; GPU models like it: {like} (see `costctl gpus`)").format(**shape)


def offers(
    gpu: Annotated[str, typer.Argument(help=_("GPU model, e.g. 4090, A100, \"RTX 3090\"."))],
    provider: ProviderOption = None,
    billing: Annotated[str | None, typer.Option("--billing", help=_("on-demand or spot (default: both)."))] = None,
    sort: Annotated[SortBy, typer.Option("--sort", help=_("gpu-hour or instance-hour."))] = SortBy.gpu_hour,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help=_("At most this many rows per currency."))] = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
) -> None:
    """Current prices for a GPU type: cheapest first within each currency, per instance-hour and per GPU-hour.

    No offer at all is an error (exit status 1), with catalog names when the GPU name is unknown."""
    from ..cloud import checked_offers, open_provider

    if billing is not None and billing not in ("on-demand", "spot"):
        raise UsageError(_("--billing {value!r}: expected on-demand or spot").format(value=billing))
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
                    _require(prov, "list_offers", N_("provider {name} cannot list offers: {reason}"))
                continue
            asked.append(name)
            found.extend(checked_offers(prov.list_offers(gpu), _say))
        except UsageError:
            raise
        except CostctlError as exc:
            if provider:
                raise
            failures += 1
            err_console.print(_("costctl: {provider}: {message}").format(provider=name,
                                                                          message=unprefixed(exc.message, name)),
                              soft_wrap=True)
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
            out_console.print(_("no offers for {gpu!r}").format(gpu=gpu), soft_wrap=True)
        else:
            table = _table(((_("PROVIDER"), "left"), (_("GPU"), "left"), (_("BILLING"), "left"),
                            (_("PRICE/H"), "right"), (_("PER GPU-H"), "right"), (_("REGION"), "left"),
                            (_("ID"), "left")))
            for o in ordered:
                table.add_row(
                    o.provider, f"{o.gpu_count}× {o.gpu or o.gpu_raw or '?'}", o.billing.value,
                    fmt_money(o.price_per_hour, o.currency), fmt_money(o.price_per_gpu_hour, o.currency),
                    o.region or "-", o.id,
                )
            print_table(table)
    if failures:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``instances``, ``start``, ``stop``, ``release`` and ``offers`` to ``app``."""
    app.command("instances", help=_(
        "List instances of every configured provider and account: account, id, GPU, status, "
        "billing mode, price per hour, running time, spend so far."))(instances)
    app.command("start", help=_(
        "Start (power on / resume) an instance; nothing happens if it is already running. "
        "Starting makes the GPU billed again."))(start)
    app.command("stop", help=_("Stop (power off) an instance; nothing happens if it is already stopped."))(stop)
    app.command("release", help=_(
        "Release (terminate / destroy) an instance AND ITS DATA. Asks for confirmation unless --yes."))(release)
    app.command("offers", help=_(
        "Current prices for a GPU type: cheapest first within each currency, per instance-hour and per "
        "GPU-hour.\n\nNo offer at all is an error (exit status 1), with catalog names when the GPU name "
        "is unknown."))(offers)
