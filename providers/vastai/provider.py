"""The Vast.ai adapter (USD), REST API v0 with ``Authorization: Bearer <key>``.

Endpoints (docs.vast.ai API reference; base ``https://console.vast.ai/api/v0``):

===================================  ======  =======================================================
``/instances/?owner=me``             GET     ``{"instances_found": n, "instances": [...]}``
``/instances/{id}/``                 GET     ``{"instances": {...}}`` (one object)
``/instances/{id}/``                 PUT     ``{"state": "running" | "stopped"}`` -> ``{"success": true}``
``/instances/{id}/``                 DELETE  destroy (irreversible) -> ``{"success": true, "msg": ...}``
``/instances/bid_price/{id}/``       PUT     ``{"client_id": "me", "price": 0.17}`` ($/h per machine)
``/bundles/``                        POST    offer search -> ``{"offers": [...]}``
``/asks/{offer_id}/``                PUT     create; ``price`` = bid (omitted: on-demand); never retried
``/users/current/``                  GET     ``{"balance": ...}``
``/invoices``                        GET     charges ``[{"type", "description", "timestamp", ...}]``
===================================  ======  =======================================================

Vast's error body is ``{"success": false, "error": "...", "msg": "..."}``; a 200 with
``success: false`` becomes a :class:`ProviderResponseError` carrying ``msg``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar

from costctl.errors import ProviderError
from costctl.i18n import _
from costctl.money import Money

from costctl_providers._adapter import HttpProvider
from costctl_providers.errors import NotFoundError, ProviderResponseError
from costctl_providers.base import Capabilities, Instance, Offer, Status
from costctl_providers.preset import ConfigPreset
from costctl_providers.capabilities import NO_MOVE, no, yes

from .config import VastAIConfig
from .preset import VASTAI_PRESET
from .normalize import CURRENCY, PROVIDER, dollars, from_unix, instance_from_payload, offer_from_payload


@dataclass(frozen=True)
class Charge:
    """One Vast billing record (``GET /invoices``).

    Attributes:
        instance_id: the instance charged, when the record names one.
        kind: ``type`` (e.g. ``"charge"``); description: Vast's text.
        when: aware UTC time of the record.
        quantity: hours (or GB) billed, Decimal; rate: $ per unit, Decimal.
        amount: USD Money.
    """

    instance_id: str | None
    kind: str
    description: str
    when: datetime | None
    quantity: Decimal | None
    rate: Decimal | None
    amount: Money


class VastAIProvider(HttpProvider):
    """Vast.ai (USD). Constructed as ``VastAIProvider(config, data_dir=..., clock=..., env=...,
    sleep=...)`` (see :class:`~costctl_providers._adapter.HttpProvider`); ``config`` is the
    ``[providers.vastai]`` table (:class:`~.config.VastAIConfig`). The API key (``VAST_API_KEY``
    or the credentials file's ``[vastai] api_key``) is sent as ``Authorization: Bearer <key>``.
    """

    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[Capabilities] = Capabilities(
        stop=True, start=True, release=True, list_offers=True,
        create=yes(),  # create_instance(offer_id, image=..., bid_per_hour=...) -> the new id
        move_job=no(NO_MOVE),
        self_stop=no(_("a Vast instance is stopped through the API only")),
        spot=True, change_gpu=True, balance=True, billing_records=True,
        preemption_notice=no(_("Vast gives no warning inside the instance before an outbid stop")),
        gpu_utilization=yes(),  # gpu_util of a running instance
        cpu_utilization=no(_("Vast's cpu_util scale (one core or the whole instance) is not documented")),
    )
    credential_env: ClassVar[tuple[str, ...]] = ("VAST_API_KEY",)
    # A stopped Vast instance keeps its disk: no storage rules to warn about.
    config_model = VastAIConfig
    config: VastAIConfig
    config_preset: ClassVar[ConfigPreset] = VASTAI_PRESET

    def _call(self, method: str, path: str, *, idempotent: bool, operation: str | None = None, **kwargs: Any) -> Any:
        """One API call under the retry rule (:mod:`costctl_providers._retry`); a 200 with
        ``success: false`` is a permanent :class:`ProviderResponseError` carrying ``msg``."""

        def unwrap(body: Any) -> Any:
            if isinstance(body, dict) and body.get("success") is False:
                msg = body.get("msg") or body.get("error") or _("no message")
                raise self.http.response_error(f"{method} {path}: {msg}")
            return body

        return self.http.json(method, path, idempotent=idempotent, unwrap=unwrap, operation=operation, **kwargs)

    # -- reading --------------------------------------------------------------------------

    def list_instances(self) -> list[Instance]:
        """All instances of the account (``GET /instances/?owner=me``), USD per instance-hour."""
        body = self._call("GET", "/instances/", params={"owner": "me"}, idempotent=True)
        items = body.get("instances") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise ProviderResponseError(_("vastai: GET /instances/ answered without an instances list"))
        return [instance_from_payload(i) for i in items if isinstance(i, Mapping)]

    def get_instance(self, instance_id: str) -> Instance:
        """One instance (``GET /instances/{id}/``).

        Raises:
            NotFoundError: 404, or an empty answer (Vast returns ``{"instances": null}`` for an id
                the account does not own).
        """
        body = self._call("GET", f"/instances/{instance_id}/", idempotent=True)
        item = body.get("instances") if isinstance(body, dict) else None
        if isinstance(item, list):
            item = next((i for i in item if isinstance(i, Mapping) and str(i.get("id")) == str(instance_id)), None)
        if not isinstance(item, Mapping) or not item:
            raise NotFoundError(_("vastai: no instance {id!r} in this account").format(id=instance_id))
        return instance_from_payload(item)

    # -- lifecycle ---------------------------------------------------------------------------

    def _set_state(self, instance_id: str, state: str) -> None:
        # Setting the intended state twice is harmless, so the call is retried like a read.
        self._call("PUT", f"/instances/{instance_id}/", json={"state": state}, idempotent=True,
                   operation=f"PUT state={state}")

    def start_instance(self, instance_id: str) -> Instance:
        """``PUT /instances/{id}/ {"state": "running"}``; a no-op on a running or starting one.
        Starting is "subject to resource availability on the machine" (Vast docs)."""
        current = self.get_instance(instance_id)
        if current.status in (Status.RUNNING, Status.STARTING, Status.PROVISIONING) and not current.preempted:
            return current
        self._set_state(instance_id, "running")
        return self.get_instance(instance_id)

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """``PUT /instances/{id}/ {"state": "stopped"}``; a no-op on a stopped one. GPU billing
        ends; disk billing continues. With ``wait``, polls until ``actual_status`` is ``stopped``.

        A preempted (outbid) instance is already stopped, but Vast still intends it to run and
        restarts it when the bid wins again; stopping it sets its intended state to stopped.

        Raises:
            StatusWaitError: not stopped within ``stop_timeout``.
        """
        current = self.get_instance(instance_id)
        if current.status in (Status.STOPPED, Status.TERMINATED) and not current.preempted:
            return current
        if current.status is not Status.STOPPING or current.preempted:
            self._set_state(instance_id, "stopped")
        if not wait:
            return self.get_instance(instance_id)
        return self._wait(instance_id, {Status.STOPPED, Status.TERMINATED})

    def release_instance(self, instance_id: str) -> Instance:
        """Destroy the instance and its data (``DELETE /instances/{id}/``, irreversible). An
        instance already gone (404) counts as destroyed. Returns it as TERMINATED."""
        try:
            last = self.get_instance(instance_id)
        except NotFoundError:
            last = None
        try:
            self._call("DELETE", f"/instances/{instance_id}/", idempotent=True)
        except NotFoundError:
            pass
        if last is None:
            raise NotFoundError(_("vastai: no instance {id!r} in this account").format(id=instance_id))
        return replace(last, status=Status.TERMINATED, status_raw="destroyed", preempted=False)

    def change_bid(self, instance_id: str, price_per_hour: Decimal) -> Instance:
        """Set an interruptible instance's bid (``PUT /instances/bid_price/{id}/``), in USD per
        machine-hour (Vast: "per machine bid price in $/hour"), 0.001..32 per the docs.

        Raises:
            ProviderError: a bid outside 0.001..32 $/h.
        """
        if not (Decimal("0.001") <= price_per_hour <= Decimal(32)):
            raise ProviderError(_("vastai: bid {bid} $/h is outside 0.001..32 $/h").format(bid=price_per_hour))
        self._call("PUT", f"/instances/bid_price/{instance_id}/",
                   json={"client_id": "me", "price": float(price_per_hour)}, idempotent=True)
        return self.get_instance(instance_id)

    def create_instance(
        self,
        offer_id: str,
        *,
        image: str,
        disk_gb: float = 16,
        bid_per_hour: Decimal | None = None,
        label: str | None = None,
    ) -> str:
        """Rent offer ``offer_id`` (``PUT /asks/{offer_id}/``): on-demand, or interruptible with
        ``bid_per_hour`` (USD per machine-hour). Sent exactly once, never retried.

        Returns:
            the new instance id (``new_contract``).
        """
        body: dict[str, Any] = {"client_id": "me", "image": image, "disk": disk_gb}
        if bid_per_hour is not None:
            body["price"] = float(bid_per_hour)
        if label:
            body["label"] = label
        answer = self._call("PUT", f"/asks/{offer_id}/", json=body, idempotent=False)
        contract = answer.get("new_contract") if isinstance(answer, dict) else None
        if contract is None:
            raise ProviderResponseError(_("vastai: create answered without new_contract"))
        return str(contract)

    # -- prices and account ----------------------------------------------------------------------

    def list_offers(self, gpu: str | None = None) -> list[Offer]:
        """On-demand and bid offers (``POST /bundles/``), cheapest first within each kind.

        ``gpu`` is Vast's ``gpu_name`` (e.g. ``"RTX 4090"``). On-demand prices are ``dph_total``;
        bid offers are priced at ``min_bid``; both USD per instance-hour.
        """
        offers: list[Offer] = []
        for kind, order_key in (("on-demand", "dph_total"), ("bid", "min_bid")):
            query: dict[str, Any] = {
                "type": kind,
                "rentable": {"eq": True},
                "rented": {"eq": False},
                "limit": self.config.offer_limit,
                "order": [[order_key, "asc"]],
            }
            if self.config.verified_only:
                query["verified"] = {"eq": True}
            if gpu:
                query["gpu_name"] = {"eq": gpu}
            body = self._call("POST", "/bundles/", json=query, idempotent=True)
            items = body.get("offers") if isinstance(body, dict) else None
            if isinstance(items, Mapping):
                items = [items]
            for item in items or []:
                if isinstance(item, Mapping):
                    offer = offer_from_payload(item, bid=kind == "bid")
                    if offer is not None:
                        offers.append(offer)
        return offers

    def balance(self) -> Money:
        """Account balance (``GET /users/current/`` ``balance``) in USD."""
        body = self._call("GET", "/users/current/", idempotent=True)
        amount = dollars(body.get("balance")) if isinstance(body, dict) else None
        if amount is None:
            raise ProviderResponseError(_("vastai: GET /users/current/ answered without a balance"))
        return Money(amount, CURRENCY)

    def billing_records(self) -> list[Charge]:
        """Charges (``GET /invoices?type=charge``): per instance, hours × $/h = amount, USD."""
        body = self._call("GET", "/invoices", params={"type": "charge"}, idempotent=True)
        rows = body if isinstance(body, list) else (body.get("invoices") if isinstance(body, dict) else None) or []
        charges = []
        for row in rows:
            if not isinstance(row, Mapping):
                continue
            amount = dollars(row.get("amount"))
            if amount is None:
                continue
            iid = row.get("instance_id")
            charges.append(Charge(
                instance_id=str(iid) if iid is not None else None,
                kind=str(row.get("type") or ""),
                description=str(row.get("description") or ""),
                when=from_unix(row.get("timestamp")),
                quantity=dollars(row.get("quantity")),
                rate=dollars(row.get("rate")),
                amount=Money(amount, CURRENCY),
            ))
        return charges
