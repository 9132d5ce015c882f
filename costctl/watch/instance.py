"""Which instance a watch charges, at what price: resolved before the ledger is touched.

:func:`resolve_instance` asks the provider which instance this is and what it costs (falling
back to ``[instance]`` in the configuration), so that a bad configuration raises before anything
is recorded; a provider that cannot stop instances has its stop policies turned into advice
there (:func:`disarm_autostop`). :func:`bring_up` then starts the instance where the watch needs it running, and
returns the decisions to record once the ledger run exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from ..config import Settings
from ..errors import ConfigError, CostctlError
from ..money import Money
from ..records import Decision
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
    """

    provider: Provider
    instance_id: str
    instance: Instance | None
    rate: Money
    settings: Settings
    gpu_name: str | None
    billing: str
    gpu_count: int


def disarm_autostop(settings: Settings, provider: Provider, *, say: Callable[[str], None]) -> Settings:
    """Settings whose stop policies only advise when ``provider`` cannot stop instances (its
    ``capabilities.stop`` is absent), said in one line before the watch starts, instead of
    found out when a stop is due. The same object when the provider can stop, or when no policy
    would stop."""
    cap = provider.capabilities.stop
    if cap:
        return settings
    policies = settings.policies
    stopping = [name for name in type(policies).model_fields
                if getattr(getattr(policies, name), "action", None) == "stop"]
    if not stopping:
        return settings
    say(f"costctl: {provider.name} cannot stop instances ({cap.reason or 'not supported'}): autostop is not armed; "
        f"{', '.join(f'[policies.{n}]' for n in stopping)} will advise instead")
    update = {n: getattr(policies, n).model_copy(update={"action": "advise"}) for n in stopping}
    return settings.model_copy(update={"policies": policies.model_copy(update=update)})


def resolve_instance(settings: Settings, provider: Provider, *, say: Callable[[str], None]) -> ResolvedInstance:
    """Resolve the instance this watch charges, its price per hour and currency.

    Args:
        settings: validated configuration (``[instance]``, ``[policies.budget]``).
        provider: the provider adapter (its ``detect_self`` and ``get_instance`` are called).
        say: prints one of costctl's own lines (a fallback to the configured price, a currency
            other than ``[instance] currency``).

    Raises:
        ConfigError: no instance id (neither configured nor detected), or no price (the provider
            reports none and ``[instance] price_per_hour`` is not set).
        CostctlError: the provider could not be read and no price is configured to fall back on.
    """
    s = settings
    instance_id = s.instance.id or provider.detect_self()
    if not instance_id:
        raise ConfigError(
            f"instance.id is not set and provider '{provider.name}' cannot tell which instance "
            "this is: set [instance] id (or COSTCTL_INSTANCE__ID)"
        )
    try:
        inst: Instance | None = provider.get_instance(instance_id)
    except CostctlError as exc:
        if s.instance.price_per_hour is None:
            raise
        say(f"costctl: cannot read instance {instance_id} from {provider.name} ({exc.message}); "
            f"using the configured price")
        inst = None
    if inst is not None and inst.price_per_hour is not None:
        rate = Money(inst.price_per_hour, inst.currency)
    elif s.instance.price_per_hour is not None:
        rate = Money(s.instance.price_per_hour, s.instance.currency)
    else:
        raise ConfigError(
            f"no price for instance {instance_id}: {provider.name} did not report one; "
            "set [instance] price_per_hour and currency"
        )
    if rate.currency != s.instance.currency:
        # Budget caps are in the instance's currency: the one the provider bills in.
        budget = s.policies.budget
        if budget.total is not None or budget.daily is not None:
            say(
                f"costctl: {provider.name} bills in {rate.currency}, not {s.instance.currency}: "
                f"budget caps are read as {rate.currency}"
            )
        s = s.model_copy(update={"instance": s.instance.model_copy(update={"currency": rate.currency})})
    s = disarm_autostop(s, provider, say=say)
    return ResolvedInstance(
        provider=provider,
        instance_id=instance_id,
        instance=inst,
        rate=rate,
        settings=s,
        gpu_name=(inst.gpu if inst else None) or s.instance.gpu,
        billing=inst.billing.value if inst else s.instance.billing,
        gpu_count=inst.gpu_count if inst else s.instance.gpu_count,
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
                reason=f"{provider.name} reported this machine's instance {instance_id} as "
                       f"{inst.status.value}; started it, since this watch runs on it",
                evidence={"status_before": inst.status.value}, key="start-self"),
                f"instance {instance_id} is {started.status.value}"))
        else:
            say(f"costctl: {provider.name} reports instance {instance_id} as {inst.status.value}; "
                "charging it while this watch runs")
    if options.resume and inst is not None and inst.status in (Status.STOPPED, Status.STOPPING) \
            and provider.capabilities.start:
        started = provider.start_instance(instance_id)
        records.append((Decision(
            time=clock.now(), policy="resume", action="start",
            reason=f"--resume: instance {instance_id} was {inst.status.value}"
                   f"{' (preempted)' if inst.preempted else ''}; started it to resume the job",
            evidence={"status_before": inst.status.value, "preempted": inst.preempted},
            key="resume-start"), f"instance {instance_id} is {started.status.value}"))
    return records
