"""A fake RunPod GraphQL API on :class:`tests.fakes.http.FakeHTTPServer`.

Responses are quoted from RunPod's documentation:

* GraphQL Spec, https://graphql-spec.runpod.io/ (1.1.0) — "API Endpoints
  https://api.runpod.io/graphql", "Headers Authorization: Bearer <RUNPOD_API_KEY>";
  ``gpuTypes`` answers ``{"data": {"gpuTypes": [{"lowestPrice": LowestPrice, "id": ...,
  "displayName": ..., "memoryInGb": ..., "securePrice": 123.45, "communityPrice": 987.65,
  "communitySpotPrice": ..., "secureSpotPrice": ...}]}}``; ``myself`` has ``pods``,
  ``clientBalance``, ``currentSpendPerHr``; a ``Pod``'s ``runtime`` holds ``gpus { id
  gpuUtilPercent memoryUtilPercent }`` and ``container { cpuPercent memoryPercent }``, and the
  pod ``volumeInGb`` / ``containerDiskInGb``.
* Manage Pods, https://docs.runpod.io/sdks/graphql/manage-pods — ``podFindAndDeployOnDemand``
  answers ``{"data": {"podFindAndDeployOnDemand": {"id": "50qynxzilsxoey", "imageName":
  "runpod/tensorflow", "env": [...], "machineId": "hpvdausak8xb", "machine": {"podHostId":
  "50qynxzilsxoey-64410065"}}}}``; ``podRentInterruptable(input: {bidPerGpu: 0.2, cloudType:
  SECURE, gpuCount: 1, ...})``; ``podResume(input: {podId, gpuCount: 1})`` and ``podStop(input:
  {podId})`` answer ``{id desiredStatus}``; ``podBidResume`` starts a spot pod; ``podTerminate``.
* runpod-python (``runpod/api/graphql.py``): a 401 is "Unauthorized request, please check your
  API key."; a body with ``"errors"`` is a query error whose text is ``errors[0]["message"]``.

State: ``podStop`` sets ``desiredStatus`` to ``EXITED`` at once; the pod's ``runtime`` goes
null after ``transition_reads`` pod reads (the container stopping). ``podResume`` /
``podBidResume`` set ``RUNNING`` and bring ``runtime`` back the same way.
:attr:`FakeRunPod.transitions` counts real changes of ``desiredStatus``. The adapter must send
its key in the header: a request carrying ``?api_key=`` is answered 400.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.fakes.http import FakeHTTPServer, RecordedRequest, Reply

API_KEY = "rp_0123456789ABCDEFGHIJ"


def pod(pid: str, *, desired: str = "RUNNING", cost: float = 0.44, gpus: int = 1, pod_type: str = "RESERVED",
        gpu: str = "RTX A6000", running: bool | None = None, volume_gb: int = 20,
        gpu_util: list[Any] | None = None, cpu_percent: Any = None) -> dict[str, Any]:
    """A Pod object with the fields the adapter asks for (plus ``env``, which holds a secret).

    ``gpu_util``: each GPU's ``gpuUtilPercent`` in the runtime's ``gpus`` (None: no ``gpus``
    list, as for a pod whose metrics are not in yet); ``cpu_percent``: the runtime's
    ``container.cpuPercent`` (None: no ``container``)."""
    live = (desired == "RUNNING") if running is None else running
    runtime: dict[str, Any] | None = {"uptimeInSeconds": 3600} if live else None
    if runtime is not None and gpu_util is not None:
        runtime["gpus"] = [{"id": f"GPU-{i}", "gpuUtilPercent": u, "memoryUtilPercent": 10}
                           for i, u in enumerate(gpu_util)]
    if runtime is not None and cpu_percent is not None:
        runtime["container"] = {"cpuPercent": cpu_percent, "memoryPercent": 12}
    return {
        "id": pid, "name": "Runpod Pytorch", "desiredStatus": desired, "costPerHr": cost, "gpuCount": gpus,
        "podType": pod_type, "uptimeSeconds": 3600 if live else 0,
        "lastStatusChange": "Rented by User: Fri Jan 19 2024 10:14:03 GMT+0000 (Coordinated Universal Time)",
        "machineId": "hpvdausak8xb", "machine": {"gpuDisplayName": gpu},
        "volumeInGb": volume_gb, "containerDiskInGb": 20,
        "runtime": runtime,
        "env": ["JUPYTER_PASSWORD=rn51hunbpgtltcpac3ol"],
    }


GPU_TYPES = [
    {"id": "NVIDIA RTX A6000", "displayName": "RTX A6000", "memoryInGb": 48, "securePrice": 0.79,
     "communityPrice": 0.49, "secureSpotPrice": 0.39, "communitySpotPrice": 0.25,
     "lowestPrice": {"minimumBidPrice": 0.25, "uninterruptablePrice": 0.49}},
    {"id": "NVIDIA GeForce RTX 4090", "displayName": "RTX 4090", "memoryInGb": 24, "securePrice": 0.69,
     "communityPrice": 0.34, "secureSpotPrice": None, "communitySpotPrice": None,
     "lowestPrice": {"minimumBidPrice": 0.2, "uninterruptablePrice": 0.34}},
]


def gql_error(message: str, path: str, *, code: str | None = None) -> Reply:
    """A GraphQL error answer (HTTP 200, ``errors`` array, ``data`` null); ``code`` goes in the
    error's ``extensions.code`` (e.g. ``"INTERNAL_SERVER_ERROR"``)."""
    error: dict[str, Any] = {"message": message, "locations": [{"line": 1, "column": 1}], "path": [path]}
    if code:
        error["extensions"] = {"code": code}
    return Reply.json({"errors": [error], "data": None})


class FakeRunPod:
    """Stateful fake RunPod GraphQL endpoint at ``<url>/graphql``.

    Attributes:
        server: the :class:`FakeHTTPServer`; pods: id -> Pod dict; transitions: ``(id, old, new)``
        desiredStatus changes; operations: the operation names received, in order.
    """

    def __init__(self, *, transition_reads: int = 1) -> None:
        self.server = FakeHTTPServer()
        self.transition_reads = transition_reads
        self.pods: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, list[Any]] = {}
        self.transitions: list[tuple[str, str, str]] = []
        self.operations: list[str] = []
        self.balance = 41.2
        self.created = 0
        self._lock = threading.RLock()
        self._op_faults: dict[str, list[Reply]] = {}
        self._op_delays: dict[str, float] = {}
        #: A lying provider: podStop is answered success and the pod keeps running.
        self.ignore_stops = False
        self.server.route("POST", "/graphql", self._graphql)

    def __enter__(self) -> "FakeRunPod":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def add(self, pid: str, **kw: Any) -> None:
        self.pods[pid] = pod(pid, **kw)

    def inject_graphql_error(self, op: str, message: str = "Internal server error", *, code: str | None = None,
                             times: int = 1) -> None:
        """The next ``times`` requests running ``op`` (e.g. ``"podStop"``) are answered with a
        GraphQL ``errors[]`` in a 200, without touching the state; other operations are served
        normally."""
        with self._lock:
            self._op_faults.setdefault(op, []).extend([gql_error(message, op, code=code)] * times)

    def inject_for(self, op: str, reply: Reply, *, times: int = 1) -> None:
        """The next ``times`` requests running ``op`` get ``reply`` (e.g. ``Reply.empty(500)``,
        ``Reply(reset=True)``) instead of being served."""
        with self._lock:
            self._op_faults.setdefault(op, []).extend([reply] * times)

    def delay_op(self, op: str, seconds: float) -> None:
        """The next request running ``op`` is carried out at once but answered ``seconds`` late
        (a client timeout on a call that did happen)."""
        with self._lock:
            self._op_delays[op] = seconds

    def requests_for(self, op: str) -> list[RecordedRequest]:
        """Requests whose query runs ``op`` (e.g. ``"podStop"``)."""
        return [r for r in self.server.calls("POST", "/graphql") if _operation(r.json().get("query", "")) == op]

    # -- state -----------------------------------------------------------------------------

    def _desire(self, pid: str, status: str, runtime_after: bool) -> None:
        p = self.pods[pid]
        if p["desiredStatus"] != status:
            self.transitions.append((pid, p["desiredStatus"], status))
            p["desiredStatus"] = status
        live = p["runtime"] is not None
        if live != runtime_after:
            if self.transition_reads <= 0:
                self._set_runtime(pid, runtime_after)
            else:
                self.pending[pid] = [runtime_after, self.transition_reads]

    def _set_runtime(self, pid: str, live: bool) -> None:
        self.pods[pid]["runtime"] = {"uptimeInSeconds": 1} if live else None
        self.pods[pid]["uptimeSeconds"] = 1 if live else 0

    def _tick(self, pid: str) -> None:
        pend = self.pending.get(pid)
        if pend:
            pend[1] -= 1
            if pend[1] <= 0:
                self._set_runtime(pid, pend[0])
                del self.pending[pid]

    # -- endpoint ----------------------------------------------------------------------------

    def _graphql(self, req: RecordedRequest) -> Reply:
        reply = self._serve(req)
        with self._lock:
            late = self._op_delays.pop(self.operations[-1], 0.0) if self.operations else 0.0
        if late:
            reply.delay = late
        return reply

    def _serve(self, req: RecordedRequest) -> Reply:
        if "api_key" in req.query:
            return Reply.json({"error": "send the key in the Authorization header"}, status=400)
        if req.header("Authorization") != f"Bearer {API_KEY}":
            return Reply.json({"error": "Unauthorized request, please check your API key."}, status=401)
        body = req.json() or {}
        query = body.get("query") or ""
        v = body.get("variables") or {}
        op = _operation(query)
        self.operations.append(op)
        with self._lock:
            faults = self._op_faults.get(op)
            if faults:
                return faults.pop(0)
            if op == "pods":
                for pid in list(self.pods):
                    self._tick(pid)
                return Reply.json({"data": {"myself": {"pods": [_public(p) for p in self.pods.values()]}}})
            if op == "pod":
                pid = v.get("podId")
                if pid not in self.pods:
                    return Reply.json({"data": {"pod": None}})
                self._tick(pid)
                return Reply.json({"data": {"pod": _public(self.pods[pid])}})
            if op in ("podStop", "podResume", "podBidResume", "podTerminate"):
                pid = v.get("podId")
                if pid not in self.pods:
                    return gql_error("Pod not found", op)
                if op == "podStop" and self.ignore_stops:
                    return Reply.json({"data": {"podStop": {"id": pid, "desiredStatus": "EXITED"}}})
                if op == "podStop":
                    self._desire(pid, "EXITED", False)
                    return Reply.json({"data": {"podStop": {"id": pid, "desiredStatus": "EXITED"}}})
                if op == "podTerminate":
                    self.transitions.append((pid, self.pods[pid]["desiredStatus"], "TERMINATED"))
                    del self.pods[pid]
                    return Reply.json({"data": {"podTerminate": None}})
                if not isinstance(v.get("gpuCount"), int):
                    return gql_error('Variable "$gpuCount" of required type "Int!" was not provided.', op)
                if op == "podBidResume":
                    if not isinstance(v.get("bidPerGpu"), (int, float)):
                        return gql_error('Variable "$bidPerGpu" of required type "Float!" was not provided.', op)
                    self.pods[pid]["costPerHr"] = round(v["bidPerGpu"] * v["gpuCount"], 6)
                self._desire(pid, "RUNNING", True)
                p = self.pods[pid]
                return Reply.json({"data": {op: {"id": pid, "desiredStatus": "RUNNING", "costPerHr": p["costPerHr"]}}})
            if op in ("podRentInterruptable", "podFindAndDeployOnDemand"):
                self.created += 1
                pid = f"50qynxzilsxo{self.created:02d}"
                spot = op == "podRentInterruptable"
                cost = round(v["bidPerGpu"] * v["gpuCount"], 6) if spot else 0.49 * v["gpuCount"]
                self.pods[pid] = pod(pid, desired="RUNNING", cost=cost, gpus=v["gpuCount"],
                                     pod_type="INTERRUPTABLE" if spot else "RESERVED", running=False)
                return Reply.json({"data": {op: _public(self.pods[pid])}})
            if op == "gpuTypes":
                return Reply.json({"data": {"gpuTypes": copy.deepcopy(GPU_TYPES)}})
            if op == "balance":
                return Reply.json({"data": {"myself": {"clientBalance": self.balance, "currentSpendPerHr": 0.44}}})
        return gql_error(f"Cannot query field in {query[:40]!r}", "unknown")


def _public(p: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(p)


def _operation(query: str) -> str:
    for op in ("podBidResume", "podResume", "podStop", "podTerminate", "podRentInterruptable",
               "podFindAndDeployOnDemand", "gpuTypes", "clientBalance"):
        if op + "(" in query or op + " " in query or op + "{" in query:
            return "balance" if op == "clientBalance" else op
    if "pod(input" in query:
        return "pod"
    if "pods" in query:
        return "pods"
    return "unknown"
