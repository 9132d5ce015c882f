"""The provider interface and the normalized records every adapter returns.

Money: ``price_per_hour`` is per instance-hour (all GPUs of the instance together), a Decimal
in ``currency`` (ISO 4217, e.g. ``"CNY"`` for AutoDL, ``"USD"`` for Vast.ai and RunPod).
Times are aware UTC. Each adapter maps its provider's states onto :class:`Status` in one table;
an unknown provider state maps to ``Status.UNKNOWN`` and never raises.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, ClassVar

from costctl.clock import ensure_utc
from costctl.i18n import N_, _, language

from .capabilities import (  # noqa: F401 - re-exported
    Capabilities, Capability, SelfStop, Storage, StoragePath, find_executable, no, yes,
)


class Status(str, Enum):
    """Normalized instance status."""

    PROVISIONING = "provisioning"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"
    ERROR = "error"
    UNKNOWN = "unknown"


class BillingMode(str, Enum):
    """How an instance is billed: on-demand (pay-as-you-go), spot/interruptible (bid), prepaid."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    PREPAID = "prepaid"


@dataclass(frozen=True)
class Instance:
    """One rented instance, normalized.

    Attributes:
        provider: adapter name (``"sim"``, ``"autodl"``, ``"vastai"``, ``"runpod"``).
        id: the provider's instance id.
        gpu: normalized GPU model name (catalog name when known, else as the provider names it).
        gpu_raw: the GPU name exactly as the provider reports it.
        gpu_count: GPUs in the instance.
        billing: billing mode.
        price_per_hour: Decimal per instance-hour in ``currency``; None if the provider did not say.
        currency: ISO 4217 code.
        bid_per_hour: for spot, the bid per instance-hour (RunPod bids per GPU: × gpu_count).
        status: normalized status; ``status_raw`` keeps the provider's word.
        created_at / started_at / stopped_at: aware UTC, when known.
        region: provider region or data centre.
        raw: the provider's payload (secrets never included).
        preempted: True when the provider stopped an interruptible instance itself (outbid or
            reclaimed), seen after the fact (e.g. Vast: intended running, actual stopped).
        gpu_utilization: percent (0..100) of the instance's GPUs, the provider's own instantaneous
            reading at the time of the listing, for a running instance (Vast.ai ``gpu_util``;
            RunPod the busiest GPU's ``gpuUtilPercent``: below a threshold means every GPU is);
            None when the provider did not report it (unreported never means idle).
        cpu_utilization: percent of the instance's CPU allocation as the provider reports it for
            a running instance (RunPod ``container.cpuPercent``); None when unreported.
        stopped_price_per_hour: what the instance still costs per hour while stopped (its disk),
            in ``currency``; None when the provider gives no way to know it (see each adapter).
        label: the name or label its owner gave it at the provider (Vast.ai ``label``, RunPod
            and AutoDL ``name``); None when it has none. A patrol may act on an instance its
            ledger never watched only when this matches one of ``[patrol] labels``.
        refused: one line per value the provider gave that the adapter dropped at the boundary
            as out of range (a price of ``"NaN"``, a utilization of 250), its field then None;
            a listing says each (:func:`costctl.cloud.checked_instance`). A null, or a
            provider's "not measured" marker, is no refusal.
    """

    provider: str
    id: str
    gpu: str | None
    gpu_raw: str | None
    gpu_count: int
    billing: BillingMode
    price_per_hour: Decimal | None
    currency: str
    status: Status
    status_raw: str | None = None
    bid_per_hour: Decimal | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    stopped_at: datetime | None = None
    region: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    preempted: bool = False
    gpu_utilization: float | None = None
    cpu_utilization: float | None = None
    stopped_price_per_hour: Decimal | None = None
    label: str | None = None
    refused: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        """Validate the record at the boundary (:func:`costctl_providers._normalize.check_instance`):
        a malformed field raises ProviderResponseError naming the provider, field and value."""
        from ._normalize import check_instance

        check_instance(self)

    def running_seconds(self, now: datetime) -> Decimal | None:
        """Seconds the instance has run since the provider last started it, by the provider's
        own times: until ``now`` (aware) while its GPU is billed (starting, running, stopping),
        until ``stopped_at`` otherwise; 0 for an instance never started and not billed; None
        when unknown (no start time while billed, or no stop time once stopped)."""
        billed = self.status in (Status.STARTING, Status.RUNNING, Status.STOPPING)
        if self.started_at is None:
            return None if billed else Decimal(0)
        if billed:
            end = now
        elif self.stopped_at is not None:
            end = self.stopped_at
        else:
            return None
        delta = ensure_utc(end) - ensure_utc(self.started_at)
        secs = Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)
        return max(Decimal(0), secs)


@dataclass(frozen=True)
class Offer:
    """A rentable configuration and its current price.

    Attributes:
        provider, id: where and what (offer / machine / GPU-type id).
        gpu, gpu_raw, gpu_count: as in :class:`Instance`.
        billing: on-demand or spot (for spot, ``price_per_hour`` is the minimum bid).
        price_per_hour: Decimal per instance-hour; ``price_per_gpu_hour`` = price / gpu_count.
        currency: ISO 4217.
        gpu_memory_bytes: per GPU, when known.
        region, reliability (0..1), available (count in stock), raw.
        tier: the provider's price tier when it has several for one GPU and billing mode
            (RunPod: ``"secure"`` or ``"community"`` cloud); None otherwise.
    """

    provider: str
    id: str
    gpu: str | None
    gpu_raw: str | None
    gpu_count: int
    billing: BillingMode
    price_per_hour: Decimal
    currency: str
    gpu_memory_bytes: int | None = None
    region: str | None = None
    reliability: float | None = None
    available: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    tier: str | None = None

    @property
    def price_per_gpu_hour(self) -> Decimal:
        """Price per GPU-hour (instance price / gpu_count)."""
        return self.price_per_hour / Decimal(self.gpu_count)


@dataclass(frozen=True)
class Account:
    """A named account of a provider (``[providers.<name>.accounts.<account>]``).

    Attributes:
        name: the account's name (``"team"``).
        credential_env: environment variables holding this account's credential, first set wins
            (the account table's ``credential_env``); the default account's variables are never
            used for a named account. The credentials file section is
            ``[<provider>.accounts.<name>]``.
    """

    name: str
    credential_env: tuple[str, ...] = ()


class Provider(ABC):
    """A GPU rental provider. Adapters subclass this and register under :attr:`name`.

    Constructed by :func:`costctl_providers.registry.get_provider` with the provider's config
    table (a dict; each adapter validates its own keys and raises
    :class:`costctl.errors.ConfigError` for a bad or unknown one) and costctl's data dir.

    An adapter describes itself in class attributes, so the core never tests its name:

    ======================  ===========================================================
    ``name``                the ``[providers.<name>]`` table and the registry name
    ``capabilities``        :class:`~costctl_providers.capabilities.Capabilities`, each with
                            the reason when absent
    ``credential_env``      environment variables holding its API credential, first set wins
    ``storage``             :class:`~costctl_providers.capabilities.Storage`: which paths on its
                            machines survive a stop (drives the checkpoint-storage warning)
    ``supports_accounts``   accepts ``account=`` (named ``[providers.<name>.accounts.<acct>]``)
    ======================  ===========================================================

    and :meth:`config_from_instance` says which ``[instance]`` settings seed its table;
    :meth:`self_stop_command` says whether this very instance can stop itself from inside (an
    adapter with ``capabilities.self_stop`` supplies :meth:`self_stop_argv`).

    Methods that the provider cannot do raise
    :class:`~costctl_providers.errors.CapabilityError` (a ``ProviderError``); check
    :attr:`capabilities` first.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    credential_env: ClassVar[tuple[str, ...]] = ()
    storage: ClassVar[Storage] = Storage()
    #: Apprise plugins the adapter brings for its provider's own push service, as
    #: ``"module:Class"`` (imported only by costctl's notification sender child).
    notify_plugins: ClassVar[tuple[str, ...]] = ()
    supports_accounts: ClassVar[bool] = False
    #: The provider releases an instance, and its data, once it has been stopped this long by
    #: its own rule (AutoDL: 15 days shut down); None when it keeps stopped instances. ``costctl
    #: patrol`` warns ``[patrol] release_warning`` ahead of it.
    stopped_release_after: ClassVar[timedelta | None] = None
    #: The instance's ``started_at`` and ``stopped_at`` bound its last session: a stopped
    #: instance ran from the one to the other. False where the provider does not say so (AutoDL's
    #: ``started_at`` of a shut-down instance can be months before its last start): the fleet then
    #: shows no uptime or spend for a stopped instance rather than a made-up one.
    stopped_session_times: ClassVar[bool] = False

    #: The named account this adapter acts for (None: the provider's default account).
    account: str | None = None

    @classmethod
    def config_from_instance(cls, instance: Mapping[str, Any]) -> dict[str, Any]:
        """Keys of this provider's config table seeded from ``[instance]`` when this is the
        configured provider (the table's own keys win). ``instance`` holds only the ``[instance]``
        keys the user set. Default: none."""
        return {}

    def listing_note(self) -> str | None:
        """What :meth:`list_instances` leaves out of the account, as one clause in the current
        language (``costctl patrol`` says it: it cannot see those instances), None when the
        listing is the whole account. Default: None."""
        return None

    def has_credential(self) -> bool:
        """Whether an API credential is configured (adapters without one: True)."""
        return True

    def _unsupported(self, capability: str, message: str) -> Exception:
        """The :class:`~costctl_providers.errors.CapabilityError` for ``capability``: ``message``
        (a sentence marked with :func:`~costctl.i18n.N_`, placeholders ``{provider}`` and
        ``{reason}``) in the current language, with the capability's reason."""
        from .errors import CapabilityError

        reason = self.capabilities.get(capability).reason or _("not supported")
        return CapabilityError(_(message).format(provider=self.name, reason=reason),
                               capability=capability, reason=reason)

    @abstractmethod
    def list_instances(self) -> list[Instance]:
        """All instances of the account."""

    @abstractmethod
    def get_instance(self, instance_id: str) -> Instance:
        """One instance. Raises ProviderError if it does not exist."""

    @abstractmethod
    def start_instance(self, instance_id: str) -> Instance:
        """Start (power on / resume) an instance; idempotent on a running one."""

    @abstractmethod
    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """Stop (power off) an instance; idempotent on a stopped one.

        With ``wait``, poll until the provider reports it stopped (or says it could not).
        """

    def release_instance(self, instance_id: str) -> Instance:
        """Release / terminate / destroy an instance and its data.

        Raises:
            CapabilityError: by default (``capabilities.release`` should then be absent).
        """
        raise self._unsupported("release", N_("{provider}: releasing instances is not supported: {reason}"))

    def list_offers(self, gpu: str | None = None) -> list[Offer]:
        """Current prices, optionally for one GPU type.

        Raises:
            CapabilityError: by default (``capabilities.list_offers`` absent).
        """
        raise self._unsupported("list_offers", N_("{provider}: listing offers is not supported: {reason}"))

    def create_instance(self, *args: Any, **kwargs: Any) -> Any:
        """Rent a new instance. Arguments are the adapter's own (a GPU or offer and its options);
        adapters that can (``capabilities.create``) document theirs.

        Raises:
            CapabilityError: by default (``capabilities.create`` absent).
        """
        raise self._unsupported("create", N_("{provider}: creating instances is not supported: {reason}"))

    def detect_self(self) -> str | None:
        """The id of the instance this process runs on, when the provider can tell; else None."""
        return None

    def self_stop_argv(self) -> Sequence[str] | None:
        """The command that stops the instance this process runs on from inside it (an adapter
        with ``capabilities.self_stop`` returns its configured one); None by default."""
        return None

    def self_stop_command(self, instance_id: str) -> SelfStop:
        """Whether instance ``instance_id`` can stop itself from here, with no API credential:
        the adapter declares ``capabilities.self_stop``, this process runs on that very
        instance (:meth:`detect_self`) and the command (:meth:`self_stop_argv`) is an executable
        on ``$PATH`` (or a path). Nothing is run.

        Returns:
            a :class:`~costctl_providers.capabilities.SelfStop`: the argv, or None and why not.
        """
        cap = self.capabilities.self_stop
        if not cap:
            return SelfStop(None, cap.reason or _("the instance cannot stop itself from inside"))
        argv = tuple(self.self_stop_argv() or ())
        if not argv:
            return SelfStop(None, _("no self-stop command is configured ([instance] self_stop)"))
        here = self.detect_self()
        if here is None:
            marks = [*self.storage.hostnames, *(f"${v}" for v in self.storage.env_markers)]
            if not marks:
                return SelfStop(None, _("this process is not running on an instance of {provider}").format(
                    provider=self.name))
            from babel.lists import format_list  # "a or b" / "a或b" by the language's rules (CLDR)

            return SelfStop(None, _("this process is not running on an instance of {provider} (no hostname "
                                    "{marks})").format(provider=self.name,
                                                       marks=format_list(marks, style="or", locale=language())))
        if here != instance_id:
            return SelfStop(None, _("this machine is {provider} instance {here}, not {instance}").format(
                provider=self.name, here=here, instance=instance_id))
        found = find_executable(argv[0])
        if found is None:
            return SelfStop(None, _("{command!r} is not an executable command here (not on PATH); set [instance] "
                                    "self_stop to the command that stops this instance").format(command=argv[0]))
        return SelfStop(argv, _("this is {provider} instance {here}; {command} is {path}").format(
            provider=self.name, here=here, command=argv[0], path=found))
