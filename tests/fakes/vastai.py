"""A fake Vast.ai REST API (v0) on :class:`tests.fakes.http.FakeHTTPServer`.

Responses are quoted from docs.vast.ai:

* show instances, https://docs.vast.ai/api-reference/instances/show-instances — ``GET
  /api/v0/instances/`` with ``Authorization: Bearer <token>`` answers ``{"instances_found": 11,
  "instances": [{"id": 312, "actual_status": "running", "cur_state": "running",
  "intended_status": "running", "label": ..., "jupyter_token": ..., "gpu_name": "GTX 1070",
  "start_date": 1668804745.1223178, "geolocation": ..., ...}]}``; show instance
  (``GET /instances/{id}/``) answers ``{"instances": {...}}`` (one object).
* show instances (CLI), https://docs.vast.ai/cli/reference/show-instances — the
  ``actual_status`` table (null, loading, running, stopped, frozen, exited, rebooting, unknown,
  offline) and "intended_status, user's desired target state: running, stopped, or frozen".
  The OpenAPI (github.com/vast-ai/docs ``api-reference/openapi/yaml/show_instance.yaml``) adds
  ``gpu_util`` ("GPU utilization as a fraction"), ``instance: {"gpuCostPerHour", "diskHour",
  "totalHour", ...}`` and ``storage_total_cost`` (the disk's dollars per hour), which
  :func:`instance` adds when asked (``gpu_util=``, ``disk_hour=``).
* manage instance, https://docs.vast.ai/api-reference/instances/manage-instance — ``PUT
  /api/v0/instances/{id}/`` ``{"state": "stopped"}`` (``stopped``, ``running``) answers
  ``{"success": true}``.
* destroy instance, https://docs.vast.ai/api-reference/instances/destroy-instance — ``DELETE
  /api/v0/instances/{id}/`` answers ``{"success": true, "msg": "Instance destroyed successfully"}``.
* change bid, https://docs.vast.ai/api-reference/instances/change-bid — ``PUT
  /api/v0/instances/bid_price/{id}/`` ``{"client_id": "me", "price": 0.17}`` ("Bid price in
  $/hour", "Required range: 0.001 <= x <= 32") answers ``{"success": true}``.
* search offers, ``POST /api/v0/bundles/`` (Vast's API reference, e.g.
  https://vastai-80aa3a82-improve-linking.mintlify.app/api-reference/search/search-offers) —
  body ``{"limit": ..., "type": "on-demand" | "bid" | "reserved", "verified": {"eq": true},
  "rentable": {"eq": true}, "rented": {"eq": false}, "gpu_name": {...}, "order": [[...]]}``;
  offers carry ``dph_base``, ``dph_total`` ("Total $/hour rental cost"), ``min_bid``,
  ``gpu_ram`` ("GPU memory in MB"), ``num_gpus``, ``reliability``, ``geolocation``, ``is_bid``.
* show user, https://docs.vast.ai/api-reference/accounts/show-user — ``GET
  /api/v0/users/current/`` answers ``{"id", "email", "balance", "ssh_key", "sid"}``.
* search invoices, https://docs.vast.ai/api-reference/billing/search-invoices — ``GET
  /api/v0/invoices`` answers ``[{"type": "charge", "description": "Instance 123 GPU charge:
  hours * $/hr", "timestamp": 1633036800, "quantity": "10.000", "rate": "0.1000", "amount":
  "1.000", "instance_id": 123}]``.
* Errors: ``{"success": false, "error": "", "msg": ""}`` for 400/401/403, and for 429
  ``{"detail": "API requests too frequent endpoint threshold=3.0"}`` (search invoices page).

State: ``PUT {"state": "stopped"}`` sets ``intended_status`` at once and ``actual_status``
after ``transition_reads`` reads of the instance; :meth:`FakeVast.outbid` makes an
interruptible instance lose its machine (intended running, actual stopped).
:attr:`FakeVast.transitions` counts real state changes.

Accounts: ``FakeVast(api_keys=(KEY_A, KEY_B))`` accepts several keys; ``add(iid, owner=KEY_B)``
files an instance under one account, and listing with a key shows only that account's
instances (default: every instance belongs to :data:`API_KEY`).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.fakes.http import FakeHTTPServer, RecordedRequest, Reply

API_KEY = "vast-key-0123456789abcdef"


def instance(iid: int, *, actual: str | None = "running", intended: str = "running", is_bid: bool = False,
             dph_total: float = 0.4215, num_gpus: int = 1, gpu_name: str = "RTX 4090", disk_hour: float | None = None,
             **extra: Any) -> dict[str, Any]:
    """An instance object shaped like the show-instances example; ``disk_hour`` adds the
    instance's disk price (``instance.diskHour`` and ``storage_total_cost``, $/h)."""
    item = {
        "id": iid,
        "actual_status": actual,
        "cur_state": "running" if actual == "running" else "stopped",
        "next_state": "running",
        "intended_status": intended,
        "label": "ML Training Job 2025",
        "image_uuid": "pytorch/pytorch:latest",
        "jupyter_token": "df77e27085bd4b3bd5d9024bdefb9e6df614b27adb0689e9d8f066fce5e01f0c",
        "extra_env": [["HF_TOKEN", "hf_supersecret"]],
        "onstart": "echo 'hello'",
        "status_msg": "success, running pytorch/pytorch_latest/ssh",
        "ssh_host": "ssh123.vast.ai",
        "ssh_port": 10600,
        "machine_id": 12,
        "start_date": 1668804745.1223178,
        "gpu_name": gpu_name,
        "num_gpus": num_gpus,
        "gpu_ram": 24564,
        "dph_base": 0.4,
        "dph_total": dph_total,
        "is_bid": is_bid,
        "min_bid": 0.25,
        "geolocation": "Sweden, SE",
        "disk_space": 16.0,
    }
    if disk_hour is not None:
        item["instance"] = {"gpuCostPerHour": 0 if actual == "stopped" else dph_total, "diskHour": disk_hour,
                            "totalHour": dph_total, "discountTotalHour": 0, "discountedTotalPerHour": dph_total}
        item["storage_total_cost"] = disk_hour
        item["storage_cost"] = 0.15
    item.update(extra)
    return item


def offer(oid: int, *, dph_total: float, min_bid: float, gpu_name: str = "RTX 4090", num_gpus: int = 1,
          gpu_ram: int = 24564, reliability: float = 0.995, geolocation: str = "Sweden, SE") -> dict[str, Any]:
    """An offer shaped like the search-offers example (subset of fields)."""
    return {
        "id": oid, "ask_contract_id": oid, "bundle_id": oid * 10, "gpu_name": gpu_name, "num_gpus": num_gpus,
        "gpu_ram": gpu_ram, "gpu_total_ram": gpu_ram * num_gpus, "dph_base": round(dph_total * 0.9, 6),
        "dph_total": dph_total, "min_bid": min_bid, "is_bid": False, "reliability": reliability,
        "geolocation": geolocation, "rentable": True, "rented": False, "verified": True,
        "cuda_max_good": 12.4, "machine_id": oid + 1000, "storage_cost": 0.1,
    }


class FakeVast:
    """Stateful fake Vast.ai API.

    Args:
        transition_reads: instance reads before a requested stop/start shows in ``actual_status``.

    Attributes:
        server: the :class:`FakeHTTPServer`; :attr:`url` is the API root (``.../api/v0``).
        instances: id -> instance dict; offers: the offers searched.
        transitions: ``(id, field, old, new)`` for each real change of intended/actual state.
        pending: id -> [actual status to reach, reads left].
    """

    def __init__(self, *, transition_reads: int = 1, api_keys: tuple[str, ...] = (API_KEY,)) -> None:
        self.server = FakeHTTPServer()
        self.api_keys = tuple(api_keys)
        self.owners: dict[str, str] = {}
        self.transition_reads = transition_reads
        self.instances: dict[str, dict[str, Any]] = {}
        self.offers: list[dict[str, Any]] = [
            offer(5001, dph_total=0.52, min_bid=0.31),
            offer(5002, dph_total=0.38, min_bid=0.22),
            offer(5003, dph_total=1.61, min_bid=0.9, gpu_name="H100 SXM", gpu_ram=81559),
        ]
        self.pending: dict[str, list[Any]] = {}
        self.transitions: list[tuple[str, str, Any, Any]] = []
        self.balance = 27.36
        self.created = 0
        self._lock = threading.RLock()
        #: A lying provider: a stop is answered success and nothing changes.
        self.ignore_stops = False
        s = self.server
        s.route("GET", "/api/v0/instances/", self._list)
        s.route("GET", "/api/v0/instances/{id}/", self._show)
        s.route("PUT", "/api/v0/instances/{id}/", self._manage)
        s.route("DELETE", "/api/v0/instances/{id}/", self._destroy)
        s.route("PUT", "/api/v0/instances/bid_price/{id}/", self._bid)
        s.route("POST", "/api/v0/bundles/", self._search)
        s.route("PUT", "/api/v0/asks/{id}/", self._create)
        s.route("GET", "/api/v0/users/current/", self._user)
        s.route("GET", "/api/v0/invoices", self._invoices)

    def __enter__(self) -> "FakeVast":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        """The API root to configure as ``base_url``."""
        return self.server.url + "/api/v0"

    def add(self, iid: int, *, owner: str = API_KEY, **kw: Any) -> None:
        """Add an instance (see :func:`instance`) of the account whose key is ``owner``."""
        self.instances[str(iid)] = instance(iid, **kw)
        self.owners[str(iid)] = owner

    def outbid(self, iid: int) -> None:
        """An interruptible instance loses its machine to a higher bid: actual stopped, intended
        still running (it restarts when the bid wins again)."""
        with self._lock:
            inst = self.instances[str(iid)]
            self._change(str(iid), "actual_status", "stopped")
            inst["cur_state"] = "stopped"

    # -- helpers --------------------------------------------------------------------------

    def _auth(self, req: RecordedRequest) -> Reply | None:
        if req.header("Authorization") not in {f"Bearer {k}" for k in self.api_keys}:
            return Reply.json({"success": False, "error": "invalid_user_key", "msg": "Invalid user key"}, status=401)
        return None

    def _change(self, iid: str, field: str, new: Any) -> None:
        inst = self.instances[iid]
        if inst.get(field) != new:
            self.transitions.append((iid, field, inst.get(field), new))
            inst[field] = new

    def _tick(self, iid: str) -> None:
        pend = self.pending.get(iid)
        if not pend:
            return
        pend[1] -= 1
        if pend[1] <= 0:
            self._change(iid, "actual_status", pend[0])
            self.instances[iid]["cur_state"] = pend[0]
            del self.pending[iid]

    # -- routes -------------------------------------------------------------------------------

    def _list(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        with self._lock:
            for iid in list(self.instances):
                self._tick(iid)
            key = (req.header("Authorization") or "").removeprefix("Bearer ")
            items = [copy.deepcopy(i) for iid, i in self.instances.items() if self.owners.get(iid, API_KEY) == key]
        return Reply.json({"instances_found": len(items), "instances": items})

    def _show(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        iid = req.path_params["id"]
        with self._lock:
            if iid not in self.instances:
                return Reply.json({"instances": None})
            self._tick(iid)
            return Reply.json({"instances": copy.deepcopy(self.instances[iid])})

    def _manage(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        iid = req.path_params["id"]
        body = req.json() or {}
        state = body.get("state")
        if state not in ("stopped", "running") and "label" not in body:
            return Reply.json({"success": False, "error": "invalid_args", "msg": "state must be stopped or running"},
                              status=400)
        with self._lock:
            if iid not in self.instances:
                return Reply.json({"success": False, "error": "no_such_instance", "msg": "Instance not found"},
                                  status=404)
            if state == "stopped" and self.ignore_stops:
                return Reply.json({"success": True})
            if state:
                self._change(iid, "intended_status", state)
                if self.instances[iid]["actual_status"] != state:
                    if self.transition_reads <= 0:
                        self._change(iid, "actual_status", state)
                    else:
                        self.pending[iid] = [state, self.transition_reads]
        return Reply.json({"success": True})

    def _destroy(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        iid = req.path_params["id"]
        with self._lock:
            if iid not in self.instances:
                return Reply.json({"success": False, "error": "no_such_instance", "msg": "Instance not found"},
                                  status=404)
            self.transitions.append((iid, "destroyed", False, True))
            del self.instances[iid]
        return Reply.json({"success": True, "msg": "Instance destroyed successfully"})

    def _bid(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        iid = req.path_params["id"]
        body = req.json() or {}
        price = body.get("price")
        if body.get("client_id") != "me" or not isinstance(price, (int, float)) or not 0.001 <= price <= 32:
            return Reply.json({"success": False, "error": "invalid_args", "msg": "price must be 0.001..32"}, status=400)
        with self._lock:
            if iid not in self.instances:
                return Reply.json({"success": False, "error": "no_such_instance", "msg": "Instance not found"},
                                  status=404)
            self._change(iid, "dph_total", price)
        return Reply.json({"success": True})

    def _search(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        q = req.json() or {}
        if q.get("type") not in ("on-demand", "bid", "reserved"):
            return Reply.json({"success": False, "error": "invalid_args", "msg": "bad type"}, status=400)
        found = list(self.offers)
        want = (q.get("gpu_name") or {}).get("eq")
        if want:
            found = [o for o in found if o["gpu_name"] == want]
        key = (q.get("order") or [["dph_total", "asc"]])[0][0]
        found.sort(key=lambda o: o.get(key, 0))
        found = [dict(o, is_bid=q["type"] == "bid") for o in found][: int(q.get("limit") or 64)]
        return Reply.json({"offers": found})

    def _create(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        body = req.json() or {}
        with self._lock:
            self.created += 1
            new_id = 9000 + self.created
            is_bid = "price" in body
            self.instances[str(new_id)] = instance(new_id, actual=None, is_bid=is_bid,
                                                   dph_total=body.get("price", 0.52))
        return Reply.json({"success": True, "new_contract": new_id})

    def _user(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        return Reply.json({"id": 123, "email": "user@example.com", "balance": self.balance,
                           "ssh_key": "ssh-ed25519 AAAA...", "sid": "abc"})

    def _invoices(self, req: RecordedRequest) -> Reply:
        if (err := self._auth(req)) is not None:
            return err
        return Reply.json([
            {"type": "charge", "description": "Instance 123 GPU charge: hours * $/hr", "timestamp": 1633036800,
             "quantity": "10.000", "rate": "0.1000", "amount": "1.000", "instance_id": 123},
        ])
