"""The AutoDL adapter: official developer API for 容器实例 Pro, opt-in web console API for
ordinary instances, and the container's own ``shutdown`` as a last resort.

Developer API (https://www.autodl.com/docs/instance_pro_api/, https://www.autodl.com/docs/common_api/,
https://www.autodl.com/docs/esd_api_doc/), base ``https://api.autodl.com``:

=====================================  =====  ============================================
``/api/v1/dev/instance/pro/list``      POST   ``{page_index, page_size}`` -> ``{list, max_page}``
``/api/v1/dev/instance/pro/status``    GET    ``?instance_uuid=`` -> ``"running"`` ...
``/api/v1/dev/instance/pro/snapshot``  GET    ``?instance_uuid=`` -> details, ``payg_price`` 厘/h
``/api/v1/dev/instance/pro/power_on``  POST   ``{instance_uuid, payload: "gpu"}``
``/api/v1/dev/instance/pro/power_off`` POST   ``{instance_uuid}``
``/api/v1/dev/instance/pro/release``   POST   ``{instance_uuid}`` (power off first)
``/api/v1/dev/instance/pro/create``    POST   never retried; ``data`` is the new uuid
``/api/v1/dev/wallet/balance``         POST   ``{assets, accumulate, voucher_balance}`` in 厘
``/api/v1/dev/machine/region/gpu_stock`` POST ``{region_sign, gpu_name_set?}``
=====================================  =====  ============================================

GET parameters go in the query string (a JSON body on GET answers ``RequestParameterIsWrong``).

Web console API (unofficial, ``console_api = true``; the browser's JWT), base
``https://www.autodl.com``: ``POST /api/v1/instance`` (list, with ``charge_type`` and
``payg_price``), ``POST /api/v1/instance/power_on`` ``{instance_uuid, payload: "gpu" |
"non_gpu"}`` (``non_gpu`` = 无卡模式, ¥0.10/h), ``POST /api/v1/instance/power_off``. Pro
instance ids start with ``pro-``; any other id is an ordinary (console) instance.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from costctl.errors import ProviderError
from costctl.i18n import _
from costctl.money import Money

from costctl_providers._adapter import HttpProvider
from costctl_providers.errors import NotFoundError, ProviderResponseError
from costctl_providers.base import BillingMode, Capabilities, Instance, Status
from costctl_providers.capabilities import NO_MOVE, Storage, StoragePath, no, yes
from costctl_providers.preset import ConfigPreset

from . import container
from .api import EnvelopeClient
from .config import AutoDLConfig
from .preset import AUTODL_PRESET
from .normalize import (
    CURRENCY,
    PROVIDER,
    GpuStock,
    instance_from_payload,
    map_status,
    stock_from_payload,
    yuan_from_milli,
)

log = logging.getLogger("costctl_providers.autodl")

PRO_PREFIX = "pro-"
CONSOLE_TOKEN_ENV = "AUTODL_CONSOLE_TOKEN"

_PRO = "/api/v1/dev/instance/pro"
_CONSOLE = "/api/v1/instance"


class AutoDLProvider(HttpProvider):
    """AutoDL (CNY). Constructed as ``AutoDLProvider(config, data_dir=..., clock=..., env=...,
    sleep=...)`` (see :class:`~costctl_providers._adapter.HttpProvider`); ``config`` is the
    ``[providers.autodl]`` table (:class:`~.config.AutoDLConfig`).

    Args (besides ``HttpProvider``'s):
        hostname: returns this machine's hostname (tests inject one; default
            ``$AUTODL_CONTAINER_HOSTNAME`` of ``env``, else the kernel's).
        run_command: runs the shutdown command and returns its exit status (tests inject a
            recorder; the real one is never run in tests).

    The developer token (``AUTODL_TOKEN`` or the credentials file ``[autodl] token``) is read
    lazily and sent as the bare ``Authorization`` value: without one, only :meth:`detect_self`
    and stopping this very container work.
    """

    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[Capabilities] = Capabilities(
        stop=True, start=True, release=True,
        create=yes(),  # Pro instances: create_instance(gpu_spec_uuid=..., image_uuid=..., cuda_v_from=...)
        list_offers=no(_("AutoDL's API has no price list (gpu_stock gives free cards, no prices)")),
        move_job=no(NO_MOVE),
        self_stop=yes(),  # `shutdown` inside the container, no token needed
        spot=no(_("AutoDL has no interruptible instances")),
        change_gpu=no(_("AutoDL's API cannot change an instance's card")),
        balance=True,
        billing_records=no(_("AutoDL's developer API has no invoice list")),
        preemption_notice=no(_("AutoDL does not preempt")),
        gpu_utilization=no(_("AutoDL's instance list and snapshot report no GPU utilization")),
        cpu_utilization=no(_("this adapter does not read the Pro snapshot's usage_info")),
    )
    #: AutoDL releases an instance shut down for 15 days, with its data (DESIGN.md's AutoDL facts).
    stopped_release_after: ClassVar[timedelta | None] = timedelta(days=15)
    credential_env: ClassVar[tuple[str, ...]] = ("AUTODL_TOKEN",)
    #: AutoDL's WeChat push as ``autodl://TOKEN`` ([notify] urls; costctl_providers.autodl.push).
    notify_plugins: ClassVar[tuple[str, ...]] = ("costctl_providers.autodl.push:NotifyAutoDL",)
    storage: ClassVar[Storage] = Storage(
        paths=(
            StoragePath("/root/autodl-tmp", survives=True, note=_("data disk, kept across a shutdown")),
            StoragePath("/root/autodl-fs", survives=True, note=_("network file storage (no SQLite WAL)"),
                        network=True),
        ),
        hostnames=("autodl-container-*",),
        hostname_env=container.HOSTNAME_ENV,
        others_survive=False,
        others_note=_("only the data disk (/root/autodl-tmp) and /root/autodl-fs are meant to keep "
                      "checkpoints across a shutdown"),
    )
    config_model = AutoDLConfig
    config: AutoDLConfig
    config_preset: ClassVar[ConfigPreset] = AUTODL_PRESET
    credential_keys = ("token", "api_key")
    auth_scheme = ""
    extra_headers = {"Content-Type": "application/json"}

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        hostname: container.HostnameFn | None = None,
        run_command: container.CommandRunner | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self._hostname = hostname or (lambda: container.default_hostname(self._env))
        self._run_command = run_command or container.run_command
        self._pro_client: EnvelopeClient | None = None
        self._console_client: EnvelopeClient | None = None
        self._known: dict[str, Instance] = {}

    # -- clients ------------------------------------------------------------------------

    @property
    def pro(self) -> EnvelopeClient:
        """The developer-API client (raises ConfigError when no token is configured)."""
        if self._pro_client is None:
            cred = self.credential()
            assert cred is not None
            self._pro_client = EnvelopeClient(self.http, cred)
        return self._pro_client

    @property
    def console(self) -> EnvelopeClient:
        """The web-console client (``console_api = true`` and a console JWT required)."""
        if not self.config.console_api:
            raise ProviderError(_(
                "autodl: ordinary (non-Pro) instances need the unofficial web console API; "
                "set console_api = true in [providers.autodl] and provide AUTODL_CONSOLE_TOKEN"
            ))
        if self._console_client is None:
            cred = self.find_credential(("console_token",), env_var=CONSOLE_TOKEN_ENV)
            assert cred is not None
            self._console_client = EnvelopeClient(self.new_client(self.config.console_url, cred), cred)
        return self._console_client

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def is_pro(instance_id: str) -> bool:
        """Pro instance uuids start with ``pro-``; others are ordinary console instances."""
        return instance_id.startswith(PRO_PREFIX)

    def _pages(self, client: EnvelopeClient, path: str, extra: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        page = 1
        while True:
            data = client.call("POST", path, json={"page_index": page, "page_size": self.config.page_size, **extra},
                               idempotent=True)
            data = data if isinstance(data, Mapping) else {}
            batch = data.get("list") or []
            items.extend(i for i in batch if isinstance(i, Mapping))
            max_page = data.get("max_page")
            if not batch or not isinstance(max_page, int) or page >= max_page:
                return items
            page += 1

    def _snapshot(self, instance_id: str) -> dict[str, Any]:
        data = self.pro.call("GET", f"{_PRO}/snapshot", params={"instance_uuid": instance_id}, idempotent=True)
        return dict(data) if isinstance(data, Mapping) else {}

    def _remember(self, inst: Instance) -> Instance:
        self._known[inst.id] = inst
        return inst

    def _pro_instances(self) -> list[Instance]:
        result = []
        for item in self._pages(self.pro, f"{_PRO}/list", {}):
            uuid = str(item.get("uuid") or item.get("instance_uuid") or "")
            try:
                snapshot = self._snapshot(uuid) if uuid else {}
            except NotFoundError:
                snapshot = {}
            result.append(self._remember(instance_from_payload(item, snapshot)))
        return result

    def _console_instances(self) -> list[Instance]:
        return [self._remember(instance_from_payload(item)) for item in self._pages(self.console, _CONSOLE, {"status": []})]

    def listing_note(self) -> str | None:
        """Without ``console_api``, ordinary (non-Pro) instances are not listed: AutoDL's official
        developer API reads Pro instances only."""
        if self.config.console_api:
            return None
        return _("only Pro instances are listed: AutoDL's official API reads no other; ordinary instances are "
                 "listed with [providers.autodl] console_api = true (the web console's unofficial API)")

    def list_instances(self) -> list[Instance]:
        """Pro instances (each with its snapshot's ``payg_price``), plus ordinary instances when
        ``console_api`` is on. Prices are CNY per instance-hour.

        Raises:
            ConfigError: no developer token configured.
            ProviderError subclasses: see :class:`~.api.EnvelopeClient.call`.
        """
        instances = self._pro_instances()
        if self.config.console_api:
            instances.extend(self._console_instances())
        return instances

    def get_instance(self, instance_id: str) -> Instance:
        """One instance, found in the list (Pro, or console for other ids) with its current price.

        Raises:
            NotFoundError: the account has no such instance.
        """
        if self.is_pro(instance_id):
            for item in self._pages(self.pro, f"{_PRO}/list", {}):
                if str(item.get("uuid") or item.get("instance_uuid")) == instance_id:
                    return self._remember(instance_from_payload(item, self._snapshot(instance_id)))
        else:
            for inst in self._console_instances():
                if inst.id == instance_id:
                    return inst
        raise NotFoundError(_("autodl: no instance {id!r} in this account").format(id=instance_id))

    def _poll(self, instance_id: str) -> Instance:
        """A cheap status read: Pro ``GET .../status`` merged into the last full record."""
        if not self.is_pro(instance_id):
            return self.get_instance(instance_id)
        raw = self.pro.call("GET", f"{_PRO}/status", params={"instance_uuid": instance_id}, idempotent=True)
        known = self._known.get(instance_id)
        if known is None:
            return self.get_instance(instance_id)
        return self._remember(dataclasses.replace(
            known, status=map_status(raw), status_raw=raw if isinstance(raw, str) else None,
        ))

    # -- lifecycle -----------------------------------------------------------------------------

    def start_instance(self, instance_id: str) -> Instance:
        """Power on with the GPU (``payload: "gpu"``); a no-op on a starting or running instance.

        Returns the instance as read right after the call (usually STARTING).
        """
        return self._power_on(instance_id, "gpu")

    def start_without_gpu(self, instance_id: str) -> Instance:
        """Power an ordinary pay-as-you-go instance on in no-GPU mode (无卡模式, console
        ``payload: "non_gpu"``, ¥0.10/h). The developer API has no such mode for Pro instances.

        Raises:
            ProviderError: a Pro instance, or ``console_api`` is off.
        """
        if self.is_pro(instance_id):
            raise ProviderError(_("autodl: no-GPU mode is not available for Pro instances through the API"))
        return self._power_on(instance_id, "non_gpu")

    def _power_on(self, instance_id: str, payload: str) -> Instance:
        current = self._poll(instance_id)
        if current.status in (Status.RUNNING, Status.STARTING, Status.PROVISIONING):
            return current
        if current.status is Status.TERMINATED:
            raise ProviderError(_("autodl: instance {id} was released; it cannot be started").format(id=instance_id))
        client, path = (self.pro, f"{_PRO}/power_on") if self.is_pro(instance_id) else (self.console, f"{_CONSOLE}/power_on")
        client.call("POST", path, json={"instance_uuid": instance_id, "payload": payload}, idempotent=True)
        return self._poll(instance_id)

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """Power off; a no-op on a stopping or stopped instance. With ``wait``, polls the status
        every ``poll_interval`` s until ``shutdown`` (or ``stop_timeout`` passes).

        Without a developer token, and when ``instance_id`` is this very container
        (:meth:`detect_self`), runs the container's ``shutdown_command`` instead and returns the
        instance as STOPPING (nothing can be polled from a machine that is powering off).

        ``power_off`` is idempotent (stopping twice is harmless), so it and every status read are
        retried on transient failures (HTTP 429/5xx, timeouts, resets, a transient envelope code;
        see :mod:`~costctl_providers.autodl.api`); if a retry is answered with an error envelope
        because the first attempt already worked, the status is re-read and a stopping/stopped
        instance counts as success.

        Raises:
            StatusWaitError: the provider did not report ``shutdown`` in time.
        """
        if self.credential(required=False) is None and instance_id == self.detect_self():
            return self._shutdown_self(instance_id)
        current = self._poll(instance_id)
        if current.status in (Status.STOPPED, Status.TERMINATED):
            return current
        if current.status is not Status.STOPPING:
            client, path = (self.pro, f"{_PRO}/power_off") if self.is_pro(instance_id) else (self.console, f"{_CONSOLE}/power_off")
            try:
                client.call("POST", path, json={"instance_uuid": instance_id}, idempotent=True)
            except ProviderResponseError:
                after = self._poll(instance_id)
                if after.status not in (Status.STOPPING, Status.STOPPED):
                    raise
                log.info("autodl: power_off of %s answered an error, but it is %s", instance_id, after.status.value)
        if not wait:
            return self._poll(instance_id)
        return self._wait(instance_id, {Status.STOPPED, Status.TERMINATED})

    def _shutdown_self(self, instance_id: str) -> Instance:
        argv: Sequence[str] = self.config.shutdown_command
        try:
            code = self._run_command(argv)
        except Exception as exc:  # noqa: BLE001 - any failure is one user-facing line
            raise ProviderError(_("autodl: running {command!r} failed: {error}").format(
                command=" ".join(argv), error=exc)) from None
        if code != 0:
            raise ProviderError(_("autodl: {command!r} exited with status {code}").format(
                command=" ".join(argv), code=code))
        known = self._known.get(instance_id)
        if known is not None:
            return dataclasses.replace(known, status=Status.STOPPING, status_raw="shutdown command")
        return Instance(
            provider=PROVIDER, id=instance_id, gpu=None, gpu_raw=None, gpu_count=0,
            billing=BillingMode.ON_DEMAND, price_per_hour=None, currency=CURRENCY,
            status=Status.STOPPING, status_raw="shutdown command",
        )

    def release_instance(self, instance_id: str) -> Instance:
        """Release a Pro instance and its data (irreversible). It is powered off first (AutoDL
        releases only shut-down instances); an instance already gone counts as released.

        Raises:
            ProviderError: an ordinary instance (the console API here does not release).
        """
        if not self.is_pro(instance_id):
            raise ProviderError(_("autodl: releasing ordinary instances is only possible in the AutoDL console"))
        stopped = self.stop_instance(instance_id, wait=True)
        if stopped.status is Status.TERMINATED:
            return stopped
        try:
            self.pro.call("POST", f"{_PRO}/release", json={"instance_uuid": instance_id}, idempotent=True)
        except NotFoundError:
            pass
        self._known.pop(instance_id, None)
        return dataclasses.replace(stopped, status=Status.TERMINATED, status_raw="released")

    def create_instance(
        self,
        *,
        gpu_spec_uuid: str,
        image_uuid: str,
        cuda_v_from: int,
        req_gpu_amount: int = 1,
        expand_system_disk_by_gb: int = 0,
        instance_name: str | None = None,
        data_center_list: list[str] | None = None,
        start_command: str | None = None,
    ) -> Instance:
        """Create a pay-as-you-go Pro instance (it starts by itself). Sent exactly once: a
        create is never retried; a timeout says the instance may exist.

        Args:
            gpu_spec_uuid: e.g. ``"pro6000-p"``; image_uuid: ``"image-..."``; cuda_v_from: minimum
                CUDA as an integer (118 = 11.8); req_gpu_amount: 1..4; expand_system_disk_by_gb:
                0..500; instance_name, data_center_list, start_command: optional.

        Returns:
            the new instance as listed (PROVISIONING or STARTING).
        """
        body: dict[str, Any] = {
            "req_gpu_amount": req_gpu_amount,
            "expand_system_disk_by_gb": expand_system_disk_by_gb,
            "gpu_spec_uuid": gpu_spec_uuid,
            "image_uuid": image_uuid,
            "cuda_v_from": cuda_v_from,
        }
        if instance_name:
            body["instance_name"] = instance_name
        if data_center_list:
            body["data_center_list"] = list(data_center_list)
        if start_command:
            body["start_command"] = start_command
        data = self.pro.call("POST", f"{_PRO}/create", json=body, idempotent=False)
        uuid = data.get("instance_uuid") if isinstance(data, Mapping) else data
        if not isinstance(uuid, str) or not uuid:
            raise ProviderResponseError(_("autodl: create answered without an instance uuid"))
        return self.get_instance(uuid)

    # -- account ---------------------------------------------------------------------------------

    def balance(self) -> Money:
        """Wallet balance (``assets``, 厘) as CNY Money."""
        data = self.pro.call("POST", "/api/v1/dev/wallet/balance", json={}, idempotent=True)
        amount = yuan_from_milli((data or {}).get("assets") if isinstance(data, Mapping) else None)
        if amount is None:
            raise ProviderResponseError(_("autodl: wallet balance answered without assets"))
        return Money(amount, CURRENCY)

    def gpu_stock(self, region_sign: str, *, gpu_names: Sequence[str] | None = None) -> list[GpuStock]:
        """Free/total GPUs per model in ``region_sign`` (e.g. ``"westDC2"``), optionally only
        ``gpu_names`` (e.g. ``["RTX 4090"]``). No prices: AutoDL's API has no price list."""
        body: dict[str, Any] = {"region_sign": region_sign}
        if gpu_names:
            body["gpu_name_set"] = list(gpu_names)
        data = self.pro.call("POST", "/api/v1/dev/machine/region/gpu_stock", json=body, idempotent=True)
        return stock_from_payload(data, region=region_sign)

    @classmethod
    def config_from_instance(cls, instance: Mapping[str, Any]) -> dict[str, Any]:
        """``[instance] self_stop`` (a command line) seeds ``shutdown_command``."""
        if instance.get("self_stop"):
            return {"shutdown_command": shlex.split(instance["self_stop"])}
        return {}

    def self_stop_argv(self) -> Sequence[str]:
        """The container's ``shutdown_command`` (``[instance] self_stop``; default ``shutdown``)."""
        return self.config.shutdown_command

    def detect_self(self) -> str | None:
        """This container's instance uuid from its hostname ``autodl-container-<uuid>``
        (``$AUTODL_CONTAINER_HOSTNAME`` when set), else None."""
        try:
            return container.instance_id_from_hostname(self._hostname())
        except OSError:
            return None
