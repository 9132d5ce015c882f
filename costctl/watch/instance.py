"""Which instance a watch charges, at what price, and how it will be stopped: resolved
before the ledger is touched.

:func:`resolve_instance` asks the provider which instance this is and what it costs (falling
back to ``[instance]`` in the configuration), so that a bad configuration raises before anything
is recorded, and runs the **preflight**: a watch that may stop the instance proves first that a
stop route exists (:func:`stop_route`):

* the API: the provider can stop instances (``capabilities.stop``) and the read of this
  instance just made was answered, so the credential is accepted; or
* a self-stop: the instance can stop itself from inside and this process runs on it, with the
  command executable here (the adapter's :meth:`~costctl_providers.base.Provider.self_stop_command`).

Without either the watch refuses (:class:`~costctl.errors.ConfigError`, one line naming what is
missing, exit status 2, nothing started), unless the user asked for a watch that stops nothing
(``--advise-only``). A dry run refuses the same way: it rehearses the real watch.
:func:`bring_up` then starts the instance where the watch needs it running (after the ledger is
open), and returns the decisions to record once the ledger run exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from ..clock import Clock
from ..cloud import PriceRefused, checked_price
from ..config import Settings
from ..errors import ConfigError, CostctlError
from ..i18n import _
from ..money import Money
from ..records import Decision
from ..stopping import StopRoute, api_problem
from .options import WatchOptions

from costctl_providers.base import Instance, Provider, Status


@dataclass(frozen=True)
class ResolvedInstance:
    """The instance one watch runs on, as the provider (or the configuration) describes it.

    Attributes:
        provider: the provider adapter.
        instance_id: the provider's id of the instance (``[instance] id`` or detected).
        instance: what the provider reported; None when it could not be read and
            ``[instance] price_per_hour`` stands in.
        rate: the price per hour of the whole instance (all its GPUs), in the currency the
            provider bills in.
        settings: the settings, with ``[instance] currency`` set to ``rate``'s currency (budget
            caps are read in it); the same object when it already was.
        gpu_name: the GPU model (provider's, else ``[instance] gpu``; None when neither knows).
        billing: ``on-demand``, ``spot``... (the provider's, else ``[instance] billing``).
        gpu_count: GPUs on the instance.
        route: how the instance will be stopped (the preflight's finding).
    """

    provider: Provider
    instance_id: str
    instance: Instance | None
    rate: Money
    settings: Settings
    gpu_name: str | None
    billing: str
    gpu_count: int
    route: StopRoute


def stop_route(provider: Provider, instance_id: str, inst: Instance | None, error: CostctlError | None, *,
               advise_only: bool = False) -> StopRoute:
    """The preflight: prove that this watch can stop instance ``instance_id``.

    Args:
        provider: the adapter (its ``capabilities.stop`` and ``self_stop_command`` are asked;
            nothing is run).
        instance_id: the instance the watch charges.
        inst: the instance as just read from the provider (the one cheap read that proves the
            credential), or None when the read failed with ``error``.
        error: why the read failed (None when it succeeded).
        advise_only: the user asked for a watch that stops nothing.

    Returns:
        the API route when the provider can stop instances and the read succeeded; else the
        self-stop route when this very instance can stop itself; else, with ``advise_only``,
        the ``none`` route (its detail says what was missing). With ``advise_only`` the route
        is always ``none``.

    Raises:
        ConfigError: no route and not ``advise_only``: one line naming what is missing and how
            to fix it (exit status 2).
    """
    api = api_problem(provider, instance_id, inst, error)
    if advise_only:
        if api is None:
            return StopRoute("none", _("requested with --advise-only (the API could stop it)"))
        return StopRoute("none", _("requested with --advise-only (the API could not: {problem})").format(problem=api))
    if api is None:
        return StopRoute("api", _("credential accepted") if provider.credential_env else _("instance read"))
    finder = getattr(provider, "self_stop_command", None)
    self_stop = finder(instance_id) if callable(finder) else None
    if self_stop:
        return StopRoute("self-stop", self_stop.reason, tuple(self_stop.argv))
    why_not = self_stop.reason if self_stop is not None else _("the adapter declares no self-stop")
    raise ConfigError(
        _("refusing to watch {provider} instance {instance}: costctl could not stop it. API: {api}; self-stop: "
          "{self_stop}. Fix one of them, or pass --advise-only for a watch that stops nothing").format(
            provider=provider.name, instance=instance_id, api=api, self_stop=why_not)
    )


def resolve_instance(settings: Settings, provider: Provider, *, say: Callable[[str], None],
                     advise_only: bool = False) -> ResolvedInstance:
    """Resolve the instance this watch charges, its price per hour and currency, and how it will
    be stopped (:func:`stop_route`). Nothing is started and nothing is recorded.

    Args:
        settings: validated configuration (``[instance]``, ``[policies.budget]``).
        provider: the provider adapter (its ``detect_self`` and ``get_instance`` are called,
            ``get_instance`` once: the read that proves the credential).
        say: prints one of costctl's own lines (a fallback to the configured price, a currency
            other than ``[instance] currency``); nothing is said before a refusal.
        advise_only: a watch that stops nothing (``--advise-only``): no stop route is needed.

    Raises:
        ConfigError: no instance id (neither configured nor detected), no price (the provider
            reports none, or a price :func:`costctl.cloud.checked_price` refuses, and
            ``[instance] price_per_hour`` is not set), or no stop route (and not ``advise_only``).
        CostctlError: the provider could not be read and no price is configured to fall back on.
    """
    s = settings
    instance_id = s.instance.id or provider.detect_self()
    if not instance_id:
        raise ConfigError(
            _("instance.id is not set and provider '{provider}' cannot tell which instance this is: set "
              "[instance] id (or COSTCTL_INSTANCE__ID)").format(provider=provider.name)
        )
    error: CostctlError | None = None
    try:
        inst: Instance | None = provider.get_instance(instance_id)
    except CostctlError as exc:
        inst, error = None, exc
    route = stop_route(provider, instance_id, inst, error, advise_only=advise_only)
    if error is not None:
        if s.instance.price_per_hour is None:
            raise error
        say(_("costctl: cannot read instance {instance} from {provider} ({error}); using the configured "
              "price").format(instance=instance_id, provider=provider.name, error=error.message))
    reported: Decimal | None = None
    refused: PriceRefused | None = None
    if inst is not None:
        try:  # the boundary: a negative or absurd price is refused, never charged or stored
            reported = checked_price(provider.name, inst.price_per_hour, inst.currency, instance=instance_id)
        except PriceRefused as exc:
            refused = exc
    if inst is not None and reported is not None:
        rate = Money(reported, inst.currency)
    elif s.instance.price_per_hour is not None:
        rate = Money(s.instance.price_per_hour, s.instance.currency)
        if refused is not None:
            say(_("costctl: {problem}; refused, charging the configured price {price} per hour "
                  "([instance] price_per_hour) instead").format(problem=refused.message, price=rate.shown()))
    elif refused is not None:
        raise ConfigError(_("{problem}; refused: set [instance] price_per_hour and currency to charge that price "
                            "instead").format(problem=refused.message))
    else:
        raise ConfigError(
            _("no price for instance {instance}: {provider} did not report one; set [instance] price_per_hour "
              "and currency").format(instance=instance_id, provider=provider.name)
        )
    if rate.currency != s.instance.currency:
        # Budget caps are in the instance's currency: the one the provider bills in.
        budget = s.policies.budget
        if budget.total is not None or budget.daily is not None:
            say(
                _("costctl: {provider} bills in {currency}, not {configured}: budget caps are read as "
                  "{currency}").format(provider=provider.name, currency=rate.currency,
                                       configured=s.instance.currency)
            )
        s = s.model_copy(update={"instance": s.instance.model_copy(update={"currency": rate.currency})})
    return ResolvedInstance(
        provider=provider,
        instance_id=instance_id,
        instance=inst,
        rate=rate,
        settings=s,
        gpu_name=(inst.gpu if inst else None) or s.instance.gpu,
        billing=inst.billing.value if inst else s.instance.billing,
        gpu_count=inst.gpu_count if inst else s.instance.gpu_count,
        route=route,
    )


def bring_up(
    resolved: ResolvedInstance, options: WatchOptions, *, clock: Clock, say: Callable[[str], None]
) -> list[tuple[Decision, str]]:
    """Start the instance where the watch needs it running; returns ``(decision, outcome)``
    pairs to record once the ledger run exists (the run does not exist yet).

    * The provider reports the instance stopped although this watch detected it runs on it
      (no ``[instance] id``; not a dry run; the provider can start instances): start it, so the
      provider's view matches. Otherwise a stopped instance is only mentioned (and charged).
    * ``--resume`` on a stopped (e.g. preempted) instance: start it to resume the job.

    Raises:
        ProviderError: the provider refused or failed to start the instance.
    """
    provider, instance_id, inst = resolved.provider, resolved.instance_id, resolved.instance
    records: list[tuple[Decision, str]] = []
    detected_self = resolved.settings.instance.id is None
    if (inst is not None and not options.resume
            and inst.status in (Status.STOPPED, Status.STOPPING, Status.TERMINATED)):
        if (detected_self and inst.status is not Status.TERMINATED and provider.capabilities.start
                and not options.dry_run):
            # This watch runs on the instance, so it is on: bring the provider's view in line.
            started = provider.start_instance(instance_id)
            records.append((Decision(
                time=clock.now(), policy="start", action="start",
                reason=_("{provider} reported this machine's instance {instance} as {status}; started it, since "
                         "this watch runs on it").format(provider=provider.name, instance=instance_id,
                                                         status=inst.status.value),
                evidence={"status_before": inst.status.value}, key="start-self"),
                _("instance {instance} is {status}").format(instance=instance_id, status=started.status.value)))
        else:
            say(_("costctl: {provider} reports instance {instance} as {status}; charging it while this watch "
                  "runs").format(provider=provider.name, instance=instance_id, status=inst.status.value))
    if options.resume and inst is not None and inst.status in (Status.STOPPED, Status.STOPPING) \
            and provider.capabilities.start:
        started = provider.start_instance(instance_id)
        records.append((Decision(
            time=clock.now(), policy="resume", action="start",
            reason=(_("--resume: instance {instance} was {status} (preempted); started it to resume the job")
                    if inst.preempted else
                    _("--resume: instance {instance} was {status}; started it to resume the job")).format(
                instance=instance_id, status=inst.status.value),
            evidence={"status_before": inst.status.value, "preempted": inst.preempted},
            key="resume-start"), _("instance {instance} is {status}").format(instance=instance_id,
                                                                             status=started.status.value)))
    return records
