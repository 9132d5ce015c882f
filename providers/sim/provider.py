"""The simulated provider (``sim``): costctl's embedded default.

A small cloud kept in ``<data dir>/sim/state.json`` (see :mod:`.state`), so that successive CLI
calls and concurrent processes share it. Instances have a GPU model, GPU count, an hourly price
per instance-hour (Decimal) and currency, a billing mode, and a status that moves through

    STARTING --(transition_s)--> RUNNING --stop--> STOPPING --(transition_s)--> STOPPED
    any --release--> TERMINATED

Transitions are applied lazily whenever the state is read, at the provider's clock time (a
:class:`~costctl.clock.SimClock` in tests). A spot instance can be preempted on demand with
:meth:`SimProvider.inject_preemption`: a notice with a deadline first (readable through
:meth:`SimProvider.preemption_notice`), and at the deadline the instance goes STOPPED with
``status_raw == "preempted"`` (a preemption after the fact, as marketplaces report it).

The local instance (``detect_self``) is created on first use from the config table:

=================  =====================================  ==============================
key                meaning                                default
=================  =====================================  ==============================
``instance_id``    id of the local instance               ``"sim-local"``
``gpu``            GPU model                              ``"RTX 4090"``
``gpu_count``      GPUs in the instance (1..64)           1
``price_per_hour`` per instance-hour, in ``currency``     price table × gpu_count (0.69)
``currency``       ISO 4217                               ``"USD"``
``billing``        on-demand | spot | prepaid             ``"on-demand"``
``transition_s``   seconds STARTING/STOPPING last         0 (instant)
=================  =====================================  ==============================

Unknown keys raise :class:`~costctl.errors.ConfigError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from costctl.clock import Clock, RealClock, ensure_utc
from costctl.errors import ConfigError, ProviderError
from costctl.i18n import _
from costctl.money import MAX_AMOUNT

from .._normalize import datetime_field, decimal_field, enum_field, int_field, percent_from_json, text_field
from .._adapter import clock_sleep
from .._http import NotFoundError, wait_for_status
from ..base import BillingMode, Capabilities, Instance, Offer, Provider, Status
from ..capabilities import no, yes
from ..notices import Notice
from ..preset import ConfigPreset
from .preset import SIM_PRESET
from .prices import GPU_COUNTS, PRICE_TABLE, find_price, matches
from .state import SimStateStore

DEFAULT_INSTANCE_ID = "sim-local"
DEFAULT_GPU = "RTX 4090"
LOCAL_REGION = "sim-local"


class SimConfig(BaseModel):
    """The ``[providers.sim]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str = Field(default=DEFAULT_INSTANCE_ID, min_length=1, max_length=128)
    gpu: str = Field(default=DEFAULT_GPU, min_length=1)
    gpu_count: int = Field(default=1, ge=1, le=64)
    price_per_hour: Decimal | None = Field(default=None, ge=0, le=MAX_AMOUNT, allow_inf_nan=False)
    currency: str = Field(default="USD", pattern=r"^[A-Za-z]{3}$")
    billing: Literal["on-demand", "spot", "prepaid"] = "on-demand"
    transition_s: float = Field(default=0.0, ge=0, le=3600)

    @field_validator("currency")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.upper()

    @field_validator("price_per_hour", mode="before")
    @classmethod
    def _no_float_drift(cls, v: Any) -> Any:
        return Decimal(repr(v)) if isinstance(v, float) else v


def _parse_config(config: Mapping[str, Any]) -> SimConfig:
    try:
        return SimConfig(**dict(config))
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(SimConfig.model_fields)
            raise ConfigError(_("providers.sim: unknown key '{key}' (allowed: {allowed})").format(
                key=key, allowed=allowed)) from None
        msg = first["msg"].removeprefix("Value error, ")
        raise ConfigError(_("providers.sim.{key} = {value!r}: {reason}").format(
            key=key, value=first.get("input"), reason=msg)) from None


def _iso(dt: datetime | None) -> str | None:
    return ensure_utc(dt).isoformat() if dt is not None else None


def _dt(text: str | None) -> datetime | None:
    return ensure_utc(datetime.fromisoformat(text)) if text else None


class SimProvider(Provider):
    """The simulated provider. Constructed as ``SimProvider(config, data_dir=..., clock=...)``.

    With a clock that has ``advance(seconds)`` (a SimClock), waiting for a transition advances
    that clock instead of sleeping.
    """

    name: ClassVar[str] = "sim"
    config_preset: ClassVar[ConfigPreset] = SIM_PRESET
    #: the simulator clears ``started_at`` on each start and sets ``stopped_at`` at the stop it ends
    stopped_session_times: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities(
        stop=True, start=True, release=True, list_offers=True, create=True,
        move_job=yes(),  # the job runs on this machine whichever simulated instance is rented
        self_stop=no(_("simulated instances are stopped through the simulated API")),
        spot=True, change_gpu=True,
        balance=no(_("the simulation has no account balance")),
        billing_records=no(_("the simulation has no invoices")),
        preemption_notice=True,
        gpu_utilization=yes(), cpu_utilization=yes(),  # report_utilization()
    )

    @classmethod
    def config_from_instance(cls, instance: Mapping[str, Any]) -> dict[str, Any]:
        """``[instance]`` describes the simulated instance: gpu, gpu_count, price_per_hour (with
        its currency), billing and id seed the table where it does not set them."""
        seed: dict[str, Any] = {}
        for key, target in (("gpu", "gpu"), ("gpu_count", "gpu_count"), ("billing", "billing"),
                            ("id", "instance_id")):
            if instance.get(key) is not None:
                seed[target] = instance[key]
        if instance.get("price_per_hour") is not None:
            seed["price_per_hour"] = str(instance["price_per_hour"])
            if instance.get("currency") is not None:
                seed["currency"] = instance["currency"]
        return seed

    def __init__(self, config: Mapping[str, Any] | None = None, *, data_dir: Path, clock: Clock | None = None) -> None:
        self._explicit = set((config or {}).keys())
        self.config = _parse_config(config or {})
        self.clock = clock or RealClock()
        self.store = SimStateStore(Path(data_dir))
        self._sleep = clock_sleep(self.clock)

    # -- records -------------------------------------------------------------------------

    def _local_price(self) -> Decimal:
        cfg = self.config
        if cfg.price_per_hour is not None:
            return cfg.price_per_hour
        row = find_price(cfg.gpu, cfg.currency)
        if row is None:
            raise ConfigError(
                _("providers.sim: no simulated {currency} price for {gpu!r}; set price_per_hour").format(
                    currency=cfg.currency, gpu=cfg.gpu)
            )
        per_gpu = row.spot if cfg.billing == "spot" and row.spot is not None else row.on_demand
        return per_gpu * cfg.gpu_count

    def _new_record(self, iid: str, gpu: str, count: int, billing: str, price: Decimal, currency: str,
                    region: str, now: datetime, bid: Decimal | None = None) -> dict[str, Any]:
        return {
            "id": iid, "gpu": gpu, "gpu_count": count, "billing": billing,
            "price_per_hour": str(price), "currency": currency,
            "bid_per_hour": str(bid) if bid is not None else None,
            "status": Status.RUNNING.value, "status_raw": "running", "region": region,
            "created_at": _iso(now), "started_at": _iso(now), "stopped_at": None,
            "transition_at": None, "notice": None, "preempted_at": None,
        }

    def _ensure_local(self, state: dict[str, Any], now: datetime, *, revive: bool = False) -> dict[str, Any]:
        cfg = self.config
        instances = state["instances"]
        rec = instances.get(cfg.instance_id)
        if rec is None or (revive and rec["status"] == Status.TERMINATED.value):
            rec = self._new_record(cfg.instance_id, cfg.gpu, cfg.gpu_count, cfg.billing, self._local_price(),
                                   cfg.currency, LOCAL_REGION, now)
            instances[cfg.instance_id] = rec
            return rec
        # Keys set explicitly in the config are authoritative for the local instance.
        updates: dict[str, Any] = {}
        for key in ("gpu", "gpu_count", "currency", "billing"):
            if key in self._explicit:
                updates[key] = getattr(cfg, key)
        if self._explicit & {"price_per_hour", "gpu", "gpu_count", "currency", "billing"}:
            updates["price_per_hour"] = str(self._local_price())
        rec.update(updates)
        return rec

    def _advance(self, rec: dict[str, Any], now: datetime) -> None:
        """Apply the transitions due by ``now``: a STARTING/STOPPING transition at its time, then
        a preemption at the notice's deadline."""
        due = datetime_field(self.name, "transition_at", rec.get("transition_at"))
        notice = rec.get("notice")
        deadline = datetime_field(self.name, "notice.deadline", notice.get("deadline")) if isinstance(notice, dict) else None
        if due is not None and now >= due and (deadline is None or due <= deadline):
            if rec["status"] == Status.STARTING.value:
                rec.update(status=Status.RUNNING.value, status_raw="running", started_at=_iso(due), transition_at=None)
            elif rec["status"] == Status.STOPPING.value:
                rec.update(status=Status.STOPPED.value, status_raw="stopped", stopped_at=_iso(due), transition_at=None)
        if deadline is not None and now >= deadline and rec["status"] in (Status.STARTING.value, Status.RUNNING.value):
            rec.update(status=Status.STOPPED.value, status_raw="preempted", stopped_at=_iso(deadline),
                       preempted_at=_iso(deadline), transition_at=None, notice=None)

    def _to_instance(self, rec: dict[str, Any]) -> Instance:
        """A state-file record as an Instance, every field checked at the boundary (the file is
        hand-editable): a malformed one raises ProviderResponseError naming field and value."""
        n = self.name
        status = enum_field(n, "status", rec.get("status"), Status)
        running = status is Status.RUNNING
        return Instance(
            provider=n,
            id=text_field(n, "id", rec.get("id"), optional=False),
            gpu=text_field(n, "gpu", rec.get("gpu")),
            gpu_raw=text_field(n, "gpu", rec.get("gpu")),
            gpu_count=int_field(n, "gpu_count", rec.get("gpu_count")),
            billing=enum_field(n, "billing", rec.get("billing"), BillingMode),
            price_per_hour=decimal_field(n, "price_per_hour", rec.get("price_per_hour")),
            currency=text_field(n, "currency", rec.get("currency"), optional=False, pattern=r"[A-Za-z]{3}",
                                allowed=_("a three-letter ISO 4217 code, like USD")),
            status=status,
            status_raw=text_field(n, "status_raw", rec.get("status_raw")),
            bid_per_hour=decimal_field(n, "bid_per_hour", rec.get("bid_per_hour") or None, optional=True),
            created_at=datetime_field(n, "created_at", rec.get("created_at")),
            started_at=datetime_field(n, "started_at", rec.get("started_at")),
            stopped_at=datetime_field(n, "stopped_at", rec.get("stopped_at")),
            region=text_field(n, "region", rec.get("region")),
            raw=dict(rec),
            preempted=bool(rec.get("preempted_at")) and status is Status.STOPPED,
            gpu_utilization=percent_from_json(rec.get("gpu_utilization")) if running else None,
            cpu_utilization=percent_from_json(rec.get("cpu_utilization"), upper=None) if running else None,
            label=text_field(n, "label", rec.get("label")),
        )

    def _get(self, state: dict[str, Any], instance_id: str, now: datetime) -> dict[str, Any]:
        rec = state["instances"].get(instance_id)
        if rec is None:
            if not state["instances"]:
                raise NotFoundError(_("sim: no instance {id!r} (instances: none)").format(id=instance_id))
            raise NotFoundError(_("sim: no instance {id!r} (instances: {known})").format(
                id=instance_id, known=", ".join(sorted(state["instances"]))))
        self._advance(rec, now)
        return rec

    def _now(self) -> datetime:
        return ensure_utc(self.clock.now())

    # -- Provider interface ----------------------------------------------------------------

    def list_instances(self) -> list[Instance]:
        """All simulated instances (the local one is created on first use), terminated ones included."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            recs = list(state["instances"].values())
            for rec in recs:
                self._advance(rec, now)
            return [self._to_instance(r) for r in sorted(recs, key=lambda r: r["id"])]

    def get_instance(self, instance_id: str) -> Instance:
        """One instance. Raises NotFoundError for an unknown id."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            return self._to_instance(self._get(state, instance_id, now))

    def start_instance(self, instance_id: str) -> Instance:
        """STOPPED/STOPPING → STARTING (→ RUNNING after ``transition_s``); a no-op on a
        starting or running instance. Raises ProviderError for a terminated one."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            if rec["status"] == Status.TERMINATED.value:
                raise ProviderError(_("sim: instance {id} was released; it cannot be started").format(id=instance_id))
            if rec["status"] in (Status.STOPPED.value, Status.STOPPING.value):
                rec.update(status=Status.STARTING.value, status_raw="starting", stopped_at=None, started_at=None,
                           preempted_at=None, notice=None,
                           transition_at=_iso(now + timedelta(seconds=self.config.transition_s)))
                self._advance(rec, now)
            return self._to_instance(rec)

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """RUNNING/STARTING → STOPPING (→ STOPPED after ``transition_s``); a no-op on a stopping,
        stopped or terminated instance. With ``wait``, polls until STOPPED."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            if rec["status"] in (Status.RUNNING.value, Status.STARTING.value):
                rec.update(status=Status.STOPPING.value, status_raw="stopping", notice=None,
                           transition_at=_iso(now + timedelta(seconds=self.config.transition_s)))
                if rec.get("started_at") is None:  # stopped before it finished starting
                    rec["started_at"] = _iso(now)
                self._advance(rec, now)
            inst = self._to_instance(rec)
        if wait and inst.status == Status.STOPPING:
            inst = wait_for_status(
                lambda: self.get_instance(instance_id), {Status.STOPPED, Status.TERMINATED},
                timeout_s=max(60.0, 4 * self.config.transition_s), poll_s=max(0.05, min(1.0, self.config.transition_s / 4)),
                clock=self.clock, sleep=self._sleep,
            )
        return inst

    def release_instance(self, instance_id: str) -> Instance:
        """Any state → TERMINATED (idempotent). The instance stays listed as terminated."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            if rec["status"] != Status.TERMINATED.value:
                if rec["status"] in (Status.RUNNING.value, Status.STARTING.value, Status.STOPPING.value):
                    rec["stopped_at"] = _iso(now)
                rec.update(status=Status.TERMINATED.value, status_raw="terminated", transition_at=None, notice=None)
            return self._to_instance(rec)

    def list_offers(self, gpu: str | None = None) -> list[Offer]:
        """Offers from the built-in price table (:mod:`.prices`), on-demand and spot, for
        1, 2, 4 and 8 GPUs. ``gpu`` matches by normalized substring (``"4090"``)."""
        offers: list[Offer] = []
        for row in PRICE_TABLE:
            if gpu and not matches(gpu, row.gpu):
                continue
            modes = [(BillingMode.ON_DEMAND, row.on_demand)]
            if row.spot is not None:
                modes.append((BillingMode.SPOT, row.spot))
            for mode, per_gpu in modes:
                for n in GPU_COUNTS:
                    offers.append(Offer(
                        provider=self.name,
                        id=f"{row.region}/{row.gpu.replace(' ', '-').lower()}/{n}x/{mode.value}",
                        gpu=row.gpu, gpu_raw=row.gpu, gpu_count=n, billing=mode,
                        price_per_hour=per_gpu * n, currency=row.currency,
                        gpu_memory_bytes=row.memory_gib * 2**30, region=row.region,
                        reliability=1.0, available=8 // n,
                        raw={"per_gpu_hour": str(per_gpu)},
                    ))
        return offers

    def detect_self(self) -> str | None:
        """The local instance's id (``instance_id``, default ``"sim-local"``); created RUNNING on
        first use, and created anew if it was released."""
        now = self._now()
        with self.store.transaction() as state:
            return self._ensure_local(state, now, revive=True)["id"]

    # -- simulation extras ------------------------------------------------------------------

    def create_instance(
        self,
        gpu: str,
        *,
        gpu_count: int = 1,
        billing: BillingMode | str = BillingMode.ON_DEMAND,
        currency: str = "USD",
        bid_per_hour: Decimal | None = None,
        instance_id: str | None = None,
        label: str | None = None,
    ) -> Instance:
        """Rent a new simulated instance from the price table; it starts RUNNING (after
        ``transition_s`` in STARTING), with its owner's ``label`` (None: none). A spot instance's price is its bid when given (must be at
        least the table's spot price × gpu_count), else the table's spot price.

        Raises:
            ProviderError: no such GPU in ``currency``, no spot market, a bid below the minimum,
                or an id already taken.
        """
        billing = BillingMode(billing)
        row = find_price(gpu, currency)
        if row is None:
            raise ProviderError(_("sim: no simulated {currency} offer for {gpu!r}").format(currency=currency.upper(), gpu=gpu))
        if billing == BillingMode.SPOT:
            if row.spot is None:
                raise ProviderError(_("sim: {region} has no spot market").format(region=row.region))
            minimum = row.spot * gpu_count
            if bid_per_hour is not None and bid_per_hour < minimum:
                raise ProviderError(_("sim: bid {bid}/h is below the minimum {minimum}/h").format(bid=bid_per_hour,
                                                                                                     minimum=minimum))
            price = bid_per_hour if bid_per_hour is not None else minimum
        else:
            price = row.on_demand * gpu_count
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            if instance_id is None:
                while f"sim-{state['next_id']}" in state["instances"]:
                    state["next_id"] += 1
                instance_id = f"sim-{state['next_id']}"
                state["next_id"] += 1
            elif instance_id in state["instances"]:
                raise ProviderError(_("sim: instance id {id!r} is taken").format(id=instance_id))
            rec = self._new_record(instance_id, row.gpu, gpu_count, billing.value, price, row.currency, row.region,
                                   now, bid=price if billing == BillingMode.SPOT else None)
            if label is not None:
                rec["label"] = label
            if self.config.transition_s > 0:
                rec.update(status=Status.STARTING.value, status_raw="starting", started_at=None,
                           transition_at=_iso(now + timedelta(seconds=self.config.transition_s)))
            state["instances"][instance_id] = rec
            return self._to_instance(rec)

    def change_gpu(self, instance_id: str, gpu: str, *, gpu_count: int | None = None) -> Instance:
        """Move a STOPPED instance to another card (price from the table, same currency and
        billing mode). Raises ProviderError if it is not stopped or the card has no price."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            if rec["status"] != Status.STOPPED.value:
                raise ProviderError(_("sim: instance {id} is {status}; stop it before changing the GPU").format(
                    id=instance_id, status=rec["status"]))
            row = find_price(gpu, rec["currency"])
            if row is None:
                raise ProviderError(_("sim: no simulated {currency} price for {gpu!r}").format(currency=rec["currency"], gpu=gpu))
            count = gpu_count or int(rec["gpu_count"])
            per_gpu = row.spot if rec["billing"] == BillingMode.SPOT.value and row.spot is not None else row.on_demand
            rec.update(gpu=row.gpu, gpu_count=count, price_per_hour=str(per_gpu * count))
            return self._to_instance(rec)

    def report_utilization(self, instance_id: str, *, gpu: float | None = None, cpu: float | None = None) -> Instance:
        """Make the simulated provider report ``gpu`` (percent 0..100, all GPUs) and ``cpu``
        (percent) utilization for ``instance_id`` while it runs, as Vast.ai and RunPod report
        theirs; None: unreported (the default of every simulated instance).

        Raises:
            ValueError: a reading outside 0..100 (GPU) or below 0 (CPU), or not finite.
            NotFoundError: no such instance.
        """
        for name, value, top in (("gpu", gpu, 100.0), ("cpu", cpu, None)):
            if value is not None and not (math.isfinite(float(value)) and 0 <= float(value) <= (top or math.inf)):
                raise ValueError(f"{name} utilization {value!r}: expected a percentage from 0" + (" to 100" if top else ""))
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            rec.update(gpu_utilization=None if gpu is None else float(gpu),
                       cpu_utilization=None if cpu is None else float(cpu))
            return self._to_instance(rec)

    def inject_preemption(self, instance_id: str, notice_s: float = 120, *, action: str = "terminate") -> Instance:
        """Announce a preemption of spot instance ``instance_id`` ``notice_s`` seconds from now
        (0 = take it at once: a preemption after the fact). At the deadline it goes STOPPED with
        ``status_raw == "preempted"``.

        Raises:
            ProviderError: the instance is not spot billing, or is not running/starting.
        """
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            if rec["billing"] != BillingMode.SPOT.value:
                raise ProviderError(_("sim: instance {id} is {billing}; only spot instances are preempted").format(
                    id=instance_id, billing=rec["billing"]))
            if rec["status"] not in (Status.RUNNING.value, Status.STARTING.value):
                raise ProviderError(_("sim: instance {id} is {status}; nothing to preempt").format(
                    id=instance_id, status=rec["status"]))
            deadline = now + timedelta(seconds=max(0.0, notice_s))
            rec["notice"] = {"action": action, "deadline": _iso(deadline), "created_at": _iso(now)}
            self._advance(rec, now)
            return self._to_instance(rec)

    def preemption_target(self, instance_id: str | None = None) -> str:
        """The instance ``costctl sim preempt`` acts on: ``instance_id`` when given (it must be
        a simulated instance), else the only running spot instance, else (several) the
        configured local instance when it is one of them.

        Raises:
            NotFoundError: ``instance_id`` is not a simulated instance.
            ProviderError: no id given and no single running spot instance to choose.
        """
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            if instance_id is not None:
                if instance_id not in state["instances"]:
                    if not state["instances"]:
                        raise NotFoundError(_("sim: no simulated instance {id!r} (simulated instances: none); "
                                              "costctl sim acts on the simulated provider's instances only").format(
                                                  id=instance_id))
                    raise NotFoundError(_("sim: no simulated instance {id!r} (simulated instances: {known}); "
                                          "costctl sim acts on the simulated provider's instances only").format(
                                              id=instance_id, known=", ".join(sorted(state["instances"]))))
                return instance_id
            for rec in state["instances"].values():
                self._advance(rec, now)
            spot = sorted(r["id"] for r in state["instances"].values()
                          if r["billing"] == BillingMode.SPOT.value
                          and r["status"] in (Status.RUNNING.value, Status.STARTING.value))
        if len(spot) == 1:
            return spot[0]
        if self.config.instance_id in spot:
            return self.config.instance_id
        if not spot:
            raise ProviderError(_("sim: no running spot instance to preempt (set [instance] billing = \"spot\" "
                                  "for the local one, or name an instance)"))
        raise ProviderError(_("sim: several running spot instances ({instances}); name the one to preempt").format(
            instances=", ".join(spot)))

    def preemption_notice(self, instance_id: str) -> Notice | None:
        """The pending preemption notice of ``instance_id`` (None when there is none, or once
        the instance has been taken)."""
        now = self._now()
        with self.store.transaction() as state:
            self._ensure_local(state, now)
            rec = self._get(state, instance_id, now)
            notice = rec.get("notice")
            if not notice:
                return None
            return Notice(action=notice["action"], deadline=_dt(notice["deadline"]), source=self.name, raw=dict(notice))
